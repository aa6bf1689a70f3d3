import Foundation
import RewindTesting
import Testing

/// `make install PREFIX=…` installs a `rewind` that carries the Swift runtime inside it, and the systemd unit.
@Suite(.timeLimit(.minutes(45))) struct InstallTests {
    @Test func theInstalledBinaryNeedsNoSwiftRuntimeAndTheUnitVerifies() throws {
        let prefix = try Tool.temporaryDirectory("rewind-prefix")
        defer { try? FileManager.default.removeItem(at: prefix) }
        let make = try Tool.run(
            try Tool.path(of: "make"), ["-C", Tool.packageRoot, "install", "PREFIX=\(prefix.path)"],
            timeout: .seconds(900))
        #expect(make.status == 0, "make install failed: \(make.stderr.suffix(3000))")
        let binary = prefix.path + "/bin/rewind"
        let unit = prefix.path + "/lib/systemd/system/rewind@.service"
        #expect(FileManager.default.isExecutableFile(atPath: binary))

        // No Swift runtime library is linked dynamically: only the C libraries the store needs, and libc's family.
        let ldd = try Tool.run(try Tool.path(of: "ldd"), [binary])
        #expect(ldd.status == 0, "\(ldd.stderr)")
        let libraries = ldd.output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        let swiftRuntime = [
            "libswift", "libFoundation", "lib_Foundation", "libdispatch", "libBlocksRuntime", "libXCTest",
        ]
        let linked = libraries.filter { line in swiftRuntime.contains { line.hasPrefix($0) } }
        #expect(linked.isEmpty, "linked dynamically: \(linked)")
        #expect(libraries.contains { $0.hasPrefix("libsqlite3.so") }, "\(ldd.output)")
        #expect(libraries.contains { $0.hasPrefix("liblz4.so") }, "\(ldd.output)")
        #expect(!ldd.output.contains("/opt/swift") && !ldd.output.contains("not found"), "\(ldd.output)")

        // It runs with nothing of the toolchain on its library path: a short recording and the store's info.
        let store = prefix.path + "/store"
        let environment = ["PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": ""]
        let record = try Tool.run(
            binary, ["record", "--store", store, "--input", "synthetic:320x240@30", "--duration", "1s"],
            environment: environment)
        #expect(record.status == 0, "\(record.stderr)")
        let info = try Tool.run(binary, ["info", "--store", store, "--json"], environment: environment)
        let object = try JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
        #expect(object?["frames"] as? Int == 30, "\(info.output)")

        // The unit template names the installed binary and passes systemd's own check (an instance of it, as
        // `systemctl enable rewind@front` would load it).
        let text = try String(contentsOfFile: unit, encoding: .utf8)
        #expect(text.contains("ExecStart=\(binary) record --store /var/lib/rewind/%i"), "\(text)")
        #expect(text.contains("KillSignal=SIGTERM"))
        #expect(text.contains("KillMode=mixed"), "a running .mp4 save's ffmpeg is not stopped with the recorder")
        let instance = prefix.path + "/rewind@front.service"
        try FileManager.default.copyItem(atPath: unit, toPath: instance)
        let verify = try Tool.run(try Tool.path(of: "systemd-analyze"), ["verify", instance])
        #expect(verify.status == 0 && verify.stderr.isEmpty, "\(verify.stderr)")

        // The API's document beside them, for clients made without a recorder running.
        let document = prefix.path + "/share/rewind/openapi.json"
        #expect(
            FileManager.default.contents(atPath: document)
                == FileManager.default.contents(atPath: APIDocumentTests.documentPath))
    }
}
