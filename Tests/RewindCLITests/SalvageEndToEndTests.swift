import Foundation
import RewindKit
import Testing

@Suite(.timeLimit(.minutes(15))) struct SalvageEndToEndTests {
    /// A byte flipped inside frame 40 of a sealed segment (key frames every 30): `verify` names the frame,
    /// `verify --repair` salvages frames 60…119 into a new segment and says so, and a clip of everything holds
    /// exactly the source frames but 40…59.
    @Test func repairKeepsEveryFrameAfterTheDamageFromTheNextKeyFrameOn() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = try Source(size: "160x120", rate: "30", frames: 120, in: directory)
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(source.path)", "--segment", "10s"])
        #expect(record.status == 0, "\(record.stderr)")
        let path = "\(store)/segments/000001.seg"
        let reader = try SegmentFileReader(path: path, fileSystem: POSIXFileSystem())
        let entries = try reader.scan().entries
        reader.close()
        try #require(entries.count == 120)
        #expect(entries.indices.filter { entries[$0].isKey } == [0, 30, 60, 90])
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        bytes[Int(entries[40].offset) + 56 + 200] ^= 0x10
        try bytes.write(to: URL(fileURLWithPath: path))

        let verify = try Tool.rewind(["verify", "--store", store])
        #expect(verify.status == 1)
        #expect(verify.output.contains("damaged at byte \(entries[40].offset) (frame 40)"), "\(verify.output)")
        #expect(verify.output.contains("a repair would keep 40 frames of segment 000001.seg and salvage 60"))

        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        #expect(
            repair.output.contains(
                "salvaged 60 frames after the damage in segment 000001.seg (60 written into 000002.seg); "
                    + "lost 20 frames: frames 40…59 (pts \(source.pts(40))…\(source.pts(59)) ns)"),
            "\(repair.output)")
        let json = try Tool.rewind(["verify", "--store", store, "--json"])
        #expect(json.status == 0)
        let repairJSON = try Tool.rewind(["verify", "--store", store, "--repair", "--json"])
        let object = try JSONSerialization.jsonObject(with: repairJSON.stdout) as? [String: Any]
        #expect(object?["clean"] as? Bool == true)
        #expect((object?["salvage"] as? [Any])?.isEmpty == true, "a second repair has nothing to salvage")

        let gaps = try info(store)["gaps"] as? [[String: Any]] ?? []
        #expect(
            gaps.contains {
                $0["reason"] as? String == "damaged" && $0["start_ns"] as? Int64 == source.pts(39)
                    && $0["end_ns"] as? Int64 == source.pts(60)
            }, "\(gaps)")

        let output = directory.appendingPathComponent("all.mkv").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "10s", "-o", output])
        #expect(clip.status == 0, "\(clip.stderr)")
        let sourceMD5s = try frameMD5s(source.path)
        #expect(try frameMD5s(output) == Array(sourceMD5s[0..<40] + sourceMD5s[60..<120]))
    }

    /// An index whose damage shows only once it is read past the open (a page of the frames table overwritten):
    /// `verify --repair` keeps it aside and rebuilds it from the segment files, as for one that does not open,
    /// instead of advising the same repair again.
    @Test func repairRebuildsAnIndexWhoseDamageShowsAfterItOpens() throws {
        let directory = try Tool.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = try Source(size: "160x120", rate: "30", frames: 330, in: directory)
        let store = directory.appendingPathComponent("store").path
        let record = try Tool.rewind(["record", "--store", store, "--input", "y4m:\(source.path)", "--segment", "4s"])
        #expect(record.status == 0, "\(record.stderr)")
        let root = try runChecked(
            "sqlite3", ["\(store)/index.sqlite", "SELECT rootpage FROM sqlite_master WHERE name = 'frames'"])
        let page = try #require(Int(root.output.trimmingCharacters(in: .whitespacesAndNewlines)))
        let pageSize = try runChecked("sqlite3", ["\(store)/index.sqlite", "PRAGMA page_size"])
        let size = try #require(Int(pageSize.output.trimmingCharacters(in: .whitespacesAndNewlines)))
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: "\(store)/index.sqlite"))
        try handle.seek(toOffset: UInt64(size * (page - 1)))
        try handle.write(contentsOf: Data(repeating: 0xDE, count: 64))
        try handle.close()

        let repair = try Tool.rewind(["verify", "--store", store, "--repair"])
        #expect(repair.status == 0, "\(repair.output)\(repair.stderr)")
        #expect(repair.output.contains("moved the damaged index to \(store)/index.sqlite.damaged-"), "\(repair.output)")
        #expect(repair.output.contains("verified 3 segments, 330 frames"), "\(repair.output)")
        let output = directory.appendingPathComponent("all.mkv").path
        let clip = try Tool.rewind(["clip", "--store", store, "--from", "0s", "--to", "20s", "-o", output])
        #expect(clip.status == 0, "\(clip.stderr)")
        #expect(try frameMD5s(output) == frameMD5s(source.path))
    }
}
