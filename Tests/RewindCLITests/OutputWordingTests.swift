import Foundation
import RewindTesting
import Testing

/// What the commands print says what happened: counts that match the files, the store's totals, plural forms.
@Suite(.timeLimit(.minutes(45))) struct OutputWordingTests {
    /// A `.y4m` clip across a hole in the index says how many frames the file holds, of which how many repeat.
    @Test func aY4MClipAcrossAGapCountsTheFramesTheFileHolds() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind([
            "record", "--store", store, "--input", "synthetic:160x90@10", "--duration", "8s", "--segment", "2500ms",
        ])
        #expect(record.status == 0, "\(record.stderr)")
        // The second segment (frames 25…49) leaves the index, rows and all, as retention takes one: a clip of the
        // whole store then has a 2.5 s hole to fill.
        try runChecked(
            "sqlite3", ["\(store)/index.sqlite", "PRAGMA foreign_keys = ON; DELETE FROM segments WHERE id = 2;"])
        try FileManager.default.removeItem(atPath: "\(store)/segments/000002.seg")
        let output = directory.appendingPathComponent("gap.y4m").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "8s", "-o", output])
        #expect(clip.status == 0, "\(clip.stderr)")
        let inFile = try frameMD5s(output).count
        #expect(inFile == 80, "the file holds every frame time of the 8 s")
        #expect(clip.output.contains("wrote \(inFile) frames (55 stored + 25 repeated to fill gaps"), "\(clip.output)")
    }

    /// The exit line of `record` gives the store's totals, every stream and earlier run included; one segment is
    /// "1 segment".
    @Test func recordReportsTheWholeStoreAndCountsAreSingularWhenOne() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let first = try Tool.rewind(["record", "--store", store, "--input", "synthetic:160x90@10", "--duration", "1s"])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.output.contains("the store now holds 10 frames in "), "\(first.output)")
        let info = try Tool.rewind(["info", "--store", store])
        #expect(info.output.contains("frames: 10 in 1 segment "), "\(info.output)")
        let verify = try Tool.rewind(["verify", "--store", store])
        #expect(verify.output.contains("verified 1 segment, 10 frames"), "\(verify.output)")
        let second = try Tool.rewind([
            "record", "--store", store, "--stream", "second", "--input", "synthetic:160x90@10", "--duration", "1s",
        ])
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.output.contains("recorded 10 frames"), "\(second.output)")
        #expect(second.output.contains("the store now holds 20 frames in "), "\(second.output)")
    }

    /// A demo shorter than 5 s saves what it recorded, says so, and suggests a clip range the store holds (also
    /// for a demo of a frame or two).
    @Test(arguments: [("2s", "2s"), ("17ms", "0.017s")])
    func aShortDemoSavesWhatItRecordedAndSuggestsARangeTheStoreHolds(seconds: String, saved: String) throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("demo").path
        let demo = try Tool.rewind(["demo", "--seconds", seconds, "--store", store])
        #expect(demo.status == 0, "\(demo.stderr)")
        #expect(demo.output.contains("saved the last \(saved) from memory"), "\(demo.output)")
        #expect(!demo.output.contains("5 s"), "\(demo.output)")
        #expect(FileManager.default.fileExists(atPath: "\(store)/exports/last-\(saved).mkv"))
        let suggestion = try #require(demo.output.split(separator: "\n").first { $0.hasPrefix("clip:") })
        let words = suggestion.split(separator: " ").map(String.init)
        let from = try #require(words.firstIndex(of: "--from").map { words[$0 + 1] })
        let to = try #require(words.firstIndex(of: "--to").map { words[$0 + 1] })
        let clip = try Tool.rewind([
            "clip", "--store", store, "--from", from, "--to", to, "-o", directory.appendingPathComponent("c.mkv").path,
        ])
        #expect(clip.status == 0, "the suggested range \(from) … \(to) is in the store: \(clip.stderr)")
    }
}
