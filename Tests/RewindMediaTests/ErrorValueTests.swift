import Foundation
import RewindCore
import RewindMedia
import RewindSystem
import RewindTesting
import Testing

/// Input and export errors carry the input, offset, frame and errno, and their descriptions carry no advice.
@Suite struct MediaErrorValueTests {
    static let adviceWords = ["rewind ", "--", "run '", "install", "instead", "ffmpeg -"]

    @Test func aMissingFileIsACannotOpenWithItsErrnoNotMalformedData() {
        let path = TemporaryDirectory.shared.file("does-not-exist.y4m")
        #expect {
            _ = try Y4MReader(path: path)
        } throws: { error in
            guard let error = error as? InputError else { return false }
            return error.input == path && error.problem == .cannotOpen(Errno(rawValue: ENOENT)) && !error.isMalformed
                && error.byteOffset == nil && "\(error)".contains(path)
        }
    }

    @Test func everyInputProblemStatesTheFactOnceWithoutAdvice() {
        let problems: [InputError.Problem] = [
            .cannotOpen(Errno(rawValue: ENOENT)), .readFailed(Errno(rawValue: EIO)), .empty,
            .truncated(expectedBytes: 8, gotBytes: 3), .unterminatedLine(lineStart: 12), .lineTooLong(maximumLength: 9),
            .badFrameMarker(found: "FRAMX"), .unsupportedColorSpace("C444"), .interlaced("It"), .malformed("bad W"),
        ]
        for problem in problems {
            let error = InputError(input: "in.y4m", byteOffset: 100_000, frame: 4, problem: problem)
            let text = "\(error)"
            #expect(text.hasPrefix("in.y4m: at byte 100000: "), "\(text)")
            #expect(text.components(separatedBy: "100000").count == 2, "the offset once: \(text)")
            for word in Self.adviceWords { #expect(!text.contains(word), "'\(word)' in: \(text)") }
        }
        let truncated = InputError(
            input: "in.y4m", byteOffset: 100_000, frame: 0,
            problem: .truncated(expectedBytes: 115_200, gotBytes: 99_990))
        #expect(
            "\(truncated)"
                == "in.y4m: at byte 100000: frame 0 is truncated: expected 115200 bytes of payload, got 99990")
    }

    @Test func everyExportReasonStatesTheFactWithoutAdvice() {
        let reasons: [ExportError.Reason] = [
            .missingTool("ffmpeg"), .cannotStartTool(path: "/usr/bin/ffmpeg", detail: "EACCES"),
            .toolFailed(tool: "ffmpeg", status: 1, log: "x", cause: nil),
            .system(action: "writing failed", Errno(rawValue: ENOSPC)), .unsupportedPixelFormat(.bgra, format: .y4m),
            .unsupportedPixelFormat(.bgra, format: .matroska), .negativePTS(-5),
            .noRoom(tool: "ffmpeg", directory: "/out", availableBytes: 12 << 10, log: "x"),
            .toolShortOfAddressSpace(tool: "ffmpeg", status: 127, log: "x", limit: 300_000 << 10),
        ]
        for reason in reasons {
            let error = ExportError(destination: "/out/clip.mkv", reason: reason)
            #expect("\(error)".hasPrefix("/out/clip.mkv: "))
            for word in Self.adviceWords { #expect(!"\(error)".contains(word), "'\(word)' in: \(error)") }
        }
        #expect(
            "\(ExportError(destination: "d", reason: .system(action: "writing failed", Errno(rawValue: ENOSPC))))"
                .contains("No space left on device"))
        #expect(
            "\(ExportError(destination: "d", reason: .noRoom(tool: "ffmpeg", directory: "/out", availableBytes: 12 << 10, log: "")))"
                == "d: ffmpeg could not finish the file: /out has no room left (12 KiB free; No space left on device)")
    }

    /// A gap too large to fill in a `.y4m` says what the export may use of its disk; on a disk with less free than
    /// an export leaves free, that it has less, not "63 MiB free, of which 256 MiB stay free".
    @Test func aGapTooLargeToFillSaysWhatTheDiskLeaves() {
        func text(available: Int64) -> String {
            "\(ExportError(destination: "c.y4m", reason: .gapTooLarge(frames: 900, bytes: 300 << 20, available: available)))"
        }
        #expect(
            text(available: 1 << 30).hasSuffix(
                "more than the 768 MiB this export may still use on its disk (1024 MiB free, of which 256 MiB stay "
                    + "free for recordings)"), "\(text(available: 1 << 30))")
        #expect(
            text(available: 63 << 20).hasSuffix(
                "and its disk has 63 MiB free, less than the 256 MiB an export leaves free for recordings"),
            "\(text(available: 63 << 20))")
        for available: Int64 in [0, 63 << 20, 1 << 30] {
            for word in Self.adviceWords { #expect(!text(available: available).contains(word)) }
        }
    }
}
