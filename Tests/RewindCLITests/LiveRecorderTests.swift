import Foundation
import Glibc
import Testing

/// `rewind record` serves saves while it records: `rewind save` through DIR/rewind.sock, and SIGUSR1.
@Suite struct LiveRecorderTests {
    /// Waits (polling, at most `seconds`) for `condition`; a liveness bound, not a performance limit.
    func eventually(_ seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return true }
            usleep(20_000)
        }
        return try condition()
    }

    func probe(_ path: String, _ entries: String) throws -> String {
        let result = try Tool.run(
            try Tool.path(of: "ffprobe"),
            ["-v", "error", "-count_frames", "-show_entries", entries, "-of", "csv=p=0", path])
        return result.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test func saveAndSignalFromALiveRecorderThenFallBackToDisk() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Tool.rewindPath)
        process.arguments = [
            "record", "--store", store, "--input", "synthetic:320x240@30", "--realtime", "--window", "3s",
        ]
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        let socket = store + "/rewind.sock"
        // Three seconds recorded: the socket is up and the window is full.
        #expect(eventually(30) { FileManager.default.fileExists(atPath: socket) })
        usleep(3_000_000)

        // A save through the socket comes from memory: the last 2 s, 60 frames at 30 fps, written by the recorder.
        let clip = directory.appendingPathComponent("live.mkv").path
        let save = try Tool.rewind(["save", "--store", store, "--last", "2s", "-o", clip])
        #expect(save.status == 0, "\(save.stderr)")
        #expect(save.output.contains("saved by the live recorder"), "\(save.output)")
        #expect(try probe(clip, "stream=nb_read_frames") == "60")

        // A clip of stream time goes through the recorder too: 1 s at 30 fps.
        let ranged = directory.appendingPathComponent("range.mkv").path
        let ranges = try Tool.rewind(["clip", "--store", store, "--from", "0.5s", "--to", "1.5s", "-o", ranged])
        #expect(ranges.status == 0, "\(ranges.stderr)")
        #expect(ranges.output.contains("exported by the live recorder"), "\(ranges.output)")
        #expect(try probe(ranged, "stream=nb_read_frames") == "30")

        // To stdout: the recorder writes into this process's standard output, passed along with the request.
        let piped = try Tool.rewind(["save", "--store", store, "--last", "1s", "-o", "-"])
        #expect(piped.status == 0, "\(piped.stderr)")
        #expect(piped.stderr.contains("saved by the live recorder"))
        let pipedPath = directory.appendingPathComponent("piped.y4m").path
        try piped.stdout.write(to: URL(fileURLWithPath: pipedPath))
        #expect(try probe(pipedPath, "stream=nb_read_frames") == "30")

        // `rewind info` shows what the live recorder holds in memory.
        let info = try Tool.rewind(["info", "--store", store, "--json"])
        let object = try JSONSerialization.jsonObject(with: info.stdout) as? [String: Any]
        let live = try #require(object?["live"] as? [String: Any], "\(info.output)")
        #expect(live["memory_frames"] as? Int == 91)
        #expect(live["stream"] as? String == "camera")
        #expect(try Tool.rewind(["info", "--store", store]).output.contains("live recorder: 91 frames in memory"))

        // SIGUSR1 saves the whole window (3 s) into DIR/exports/.
        kill(process.processIdentifier, SIGUSR1)
        let exports = store + "/exports"
        func exported() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: exports)) ?? []).filter { $0.hasSuffix(".mkv") }
        }
        #expect(eventually(30) { exported().count == 1 })
        let saved = exports + "/" + (exported().first ?? "missing")
        #expect(eventually(30) { (try? probe(saved, "stream=nb_read_frames")) == "90" })

        // SIGINT: the recorder finishes, removes its socket, and `rewind save` reads the disk instead.
        process.interrupt()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let log = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(log)")
        #expect(text.contains("recorded"))
        #expect(log.contains("saved: wrote 90 frames"), "\(log)")
        #expect(!FileManager.default.fileExists(atPath: socket))
        let fromDisk = directory.appendingPathComponent("disk.y4m").path
        let later = try Tool.rewind(["save", "--store", store, "--last", "1s", "-o", fromDisk])
        #expect(later.status == 0, "\(later.stderr)")
        #expect(!later.output.contains("live recorder"))
        let infoAfter = try Tool.rewind(["info", "--store", store, "--json"])
        #expect((try JSONSerialization.jsonObject(with: infoAfter.stdout) as? [String: Any])?["live"] is NSNull)
        #expect(try probe(fromDisk, "stream=nb_read_frames") == "30")
    }
}
