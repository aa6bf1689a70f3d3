import Foundation
import Testing

/// The module graph ARCHITECTURE.md draws is the one the sources follow: a module imports only modules below it
/// (its dependencies in Package.swift, and theirs), the core needs no Foundation, the tool imports no C shim, and
/// only the umbrella re-exports.
@Suite struct ModuleGraphTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Every target of Package.swift with the targets it declares as dependencies.
    static func declaredDependencies() throws -> [String: Set<String>] {
        let manifest = try String(contentsOf: root.appendingPathComponent("Package.swift"), encoding: .utf8)
        let target = try Regex(#"\.(?:target|executableTarget|systemLibrary)\(\s*name:\s*"(\w+)"([^)]*)"#)
        var graph: [String: Set<String>] = [:]
        for match in manifest.matches(of: target) {
            let name = String(match.output[1].substring!)
            let rest = String(match.output[2].substring!)
            var dependencies: Set<String> = []
            if let list = rest.firstMatch(of: try Regex(#"dependencies:\s*\[([^\]]*)\]"#)) {
                for quoted in String(list.output[1].substring!).matches(of: try Regex(#""(\w+)""#)) {
                    dependencies.insert(String(quoted.output[1].substring!))
                }
            }
            graph[name] = dependencies
        }
        return graph
    }

    /// `module` and everything it depends on, directly or not.
    static func closure(of module: String, in graph: [String: Set<String>]) -> Set<String> {
        var seen: Set<String> = [module]
        var stack = [module]
        while let next = stack.popLast() {
            for dependency in graph[next] ?? [] where seen.insert(dependency).inserted { stack.append(dependency) }
        }
        return seen
    }

    /// The modules each Swift file under `Sources/module` imports, with the file's name.
    static func imports(of module: String) throws -> [(file: String, module: String, exported: Bool)] {
        let folder = root.appendingPathComponent("Sources/\(module)")
        guard let files = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil) else { return [] }
        let line = try Regex(#"^\s*(@_exported |@testable |public |package |internal )?import (\w+)"#)
            .anchorsMatchLineEndings()
        var result: [(String, String, Bool)] = []
        for case let url as URL in files where url.pathExtension == "swift" {
            let text = try String(contentsOf: url, encoding: .utf8)
            for match in text.matches(of: line) {
                let attribute = match.output[1].substring.map(String.init) ?? ""
                result.append((url.lastPathComponent, String(match.output[2].substring!), attribute == "@_exported "))
            }
        }
        return result
    }

    @Test func everyModuleImportsOnlyWhatLiesBelowIt() throws {
        let graph = try Self.declaredDependencies()
        #expect(
            Set(graph.keys).isSuperset(of: ["RewindSystem", "RewindCore", "SegmentStore", "RewindKit", "rewind"]),
            "Package.swift was not read: \(graph.keys.sorted())")
        for module in graph.keys.sorted() where graph[module] != nil {
            let allowed = Self.closure(of: module, in: graph)
            for (file, imported, _) in try Self.imports(of: module) where graph[imported] != nil {
                #expect(allowed.contains(imported), "\(module)/\(file) imports \(imported), which is not below it")
            }
        }
    }

    @Test func theToolImportsNoCShimAndTheCoreNoFoundation() throws {
        let cModules: Set = ["CSQLite", "CLZ4", "CCRC32C", "CPlatform", "CTurboJPEG", "CZlib", "CMicroHTTPD"]
        let tool = try Self.imports(of: "rewind")
        #expect(!tool.isEmpty)
        for (file, imported, _) in tool { #expect(!cModules.contains(imported), "rewind/\(file) imports \(imported)") }
        for module in ["RewindSystem", "RewindCore"] {
            for (file, imported, _) in try Self.imports(of: module) {
                #expect(imported != "Foundation", "\(module)/\(file) imports Foundation")
            }
        }
    }

    @Test func onlyTheUmbrellaReExportsAndNothingImportsIt() throws {
        let graph = try Self.declaredDependencies()
        for module in graph.keys.sorted() {
            for (file, imported, exported) in try Self.imports(of: module) {
                #expect(!exported || module == "RewindKit", "\(module)/\(file) re-exports \(imported)")
                #expect(
                    imported != "RewindKit" || module == "rewind", "\(module)/\(file) imports the umbrella module")
            }
        }
        let reExported = Set(try Self.imports(of: "RewindKit").filter(\.exported).map(\.module))
        #expect(reExported.isDisjoint(with: ["RewindSQLite", "RewindTesting", "RewindSoak", "RewindBenchmarks"]))
        #expect(reExported.isSuperset(of: ["RewindCore", "RewindCapture", "RewindQuery", "RewindMedia"]))
    }
}

/// Rules the test sources keep.
@Suite struct TestSourceRulesTests {
    /// Swift Testing counts a test's time limit from when the test is scheduled, and synchronous tests wait for one
    /// of the cooperative threads while long ones run: a limit shorter than the whole run fails a quick unit test
    /// that never got a thread (on two cores the whole suite takes 16–17 minutes; with fifteen-minute limits eight
    /// quick tests failed so). Limits are 45 minutes or more; waits inside tests have their own deadlines, so a hang
    /// still fails at its wait.
    @Test func noTimeLimitIsShorterThanTheWholeRun() throws {
        let tests = ModuleGraphTests.root.appendingPathComponent("Tests")
        let limit = try Regex(#"\.timeLimit\(\.minutes\((\d+)\)\)"#)
        var checked = 0
        for case let url as URL in FileManager.default.enumerator(at: tests, includingPropertiesForKeys: nil)!
        where url.pathExtension == "swift" {
            let text = try String(contentsOf: url, encoding: .utf8)
            for match in text.matches(of: limit) {
                checked += 1
                let minutes = Int(match.output[1].substring!)!
                #expect(minutes >= 45, "\(url.lastPathComponent): .timeLimit(.minutes(\(minutes)))")
            }
        }
        #expect(checked > 10, "no time limits found under \(tests.path)")
    }
}

/// Rules the sources keep about locks.
@Suite struct LockRulesTests {
    /// `Mutex` (Synchronization) locks inside a library ThreadSanitizer does not instrument, so a sanitized build
    /// sees no order between its critical sections and reports their accesses as races, hiding the real ones among
    /// them. Every `Mutex` is locked through `withAnnotatedLock`, which tells ThreadSanitizer: a file that makes a
    /// `Mutex` calls no plain `withLock`.
    @Test func everyMutexIsLockedSoThreadSanitizerSeesIt() throws {
        let makesMutex = try Regex(#"Mutex[<(]"#)
        let plainLock = try Regex(#"[^A-Za-z0-9_]withLock(IfAvailable)?\s*[({]"#)
        var checked = 0
        for folder in ["Sources", "Tests"] {
            let root = ModuleGraphTests.root.appendingPathComponent(folder)
            for case let url as URL in FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil)!
            where url.pathExtension == "swift" && url.lastPathComponent != "ThreadSanitizer.swift" {
                let text = try String(contentsOf: url, encoding: .utf8)
                guard text.contains(makesMutex) else { continue }
                checked += 1
                for line in text.split(separator: "\n") where line.contains(plainLock) {
                    Issue.record("\(url.lastPathComponent): \(line.trimmingCharacters(in: .whitespaces))")
                }
            }
        }
        #expect(checked > 20, "no file making a Mutex found")
    }

    /// No `Mutex` holds a bare closure (or an optional one): taken out and put back through the lock's generic
    /// `inout`, it comes back wrapped in two more reabstraction thunks each time, a chain every call then runs
    /// through (the loss observer's overflowed the spill thread's stack). Such a closure goes in a struct.
    @Test func noMutexHoldsABareClosure() throws {
        // Spelled in two pieces, so that this file makes no `Mutex` for the rule above.
        let mutex = "Mu" + "tex<"
        let closureMutex = try Regex(mutex + #"\(*(@Sendable\s*)?\([^<>]*\)\s*(throws\s*)?->"#)
        #expect((mutex + "(@Sendable (LossChange) -> Void)?>(nil)").contains(closureMutex))
        #expect(!(mutex + "LossObserver?>(nil)").contains(closureMutex))
        for folder in ["Sources", "Tests"] {
            let root = ModuleGraphTests.root.appendingPathComponent(folder)
            for case let url as URL in FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil)!
            where url.pathExtension == "swift" {
                let text = try String(contentsOf: url, encoding: .utf8)
                for line in text.split(separator: "\n") where line.contains(closureMutex) {
                    Issue.record("\(url.lastPathComponent): \(line.trimmingCharacters(in: .whitespaces))")
                }
            }
        }
    }
}
