import CFuzzer
import Foundation
import RewindFuzzing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// rewind-fuzz: the fuzz targets of RewindFuzzing, fuzzed (in a `make fuzz` build, libFuzzer linked in) or replayed.

let usage = """
    usage: rewind-fuzz --list
           rewind-fuzz TARGET FILE|DIR ...       read each file (every file of a directory) as an input
           rewind-fuzz TARGET --seeds DIR        write the target's seeds into DIR
           rewind-fuzz TARGET --fuzz [libFuzzer options] [CORPUS_DIR ...]
                                                 fuzz (a build made by `make fuzz`)
    """

func fail(_ message: String, status: Int32 = 2) -> Never {
    FileHandle.standardError.write(Data("rewind-fuzz: \(message)\n".utf8))
    exit(status)
}

/// The target libFuzzer's callback runs: set once, before the driver starts.
nonisolated(unsafe) var fuzzed: FuzzTarget?

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == "--list" {
    for target in FuzzTarget.all {
        print("\(target.name.padding(toLength: 10, withPad: " ", startingAt: 0))\(target.summary)")
    }
    exit(0)
}
guard let name = arguments.first, arguments.count >= 2 else { fail("a target and what to do with it\n" + usage) }
guard let target = FuzzTarget.named(name) else {
    fail("no target '\(name)'; the targets are \(FuzzTarget.all.map(\.name).joined(separator: ", "))")
}

switch arguments[1] {
case "--fuzz":
    guard rewind_fuzzer_linked() != 0 else {
        fail("this build has no fuzzer linked in: build and run it with `make fuzz` (FUZZ_TARGETS=\(name))")
    }
    fuzzed = target
    var argc = Int32(arguments.count - 1)
    let strings = [CommandLine.arguments[0]] + arguments.dropFirst(2)
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) } + [nil]
    let status = pointers.withUnsafeMutableBufferPointer { buffer -> Int32 in
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = buffer.baseAddress
        return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
            do {
                try fuzzed!.run(UnsafeRawBufferPointer(start: data, count: size))
            } catch {
                FileHandle.standardError.write(Data("rewind-fuzz: \(fuzzed!.name): \(error)\n".utf8))
                abort()
            }
            return 0
        }
    }
    exit(status)
case "--seeds":
    guard arguments.count == 3 else { fail("--seeds takes one directory\n" + usage) }
    let directory = arguments[2]
    do {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        for (index, seed) in try target.seeds().enumerated() {
            try Data(seed).write(to: URL(fileURLWithPath: "\(directory)/seed-\(index)"))
        }
    } catch {
        fail("cannot write the seeds of \(name) into \(directory): \(error)", status: 1)
    }
default:
    var files: [String] = []
    for path in arguments.dropFirst() {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { fail("no file '\(path)'") }
        if isDirectory.boolValue {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
            files += names.sorted().map { "\(path)/\($0)" }
        } else {
            files.append(path)
        }
    }
    var failures = 0
    for file in files {
        guard let bytes = FileManager.default.contents(atPath: file) else { fail("cannot read '\(file)'", status: 1) }
        do {
            try target.run(Array(bytes))
        } catch {
            failures += 1
            print("FAIL \(file): \(error)")
        }
    }
    print("\(name): \(files.count - failures) of \(files.count) inputs passed")
    exit(failures == 0 ? 0 : 1)
}
