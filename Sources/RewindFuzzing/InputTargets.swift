import RewindControl
import RewindCore
import RewindMedia
import RewindQuery

extension FuzzTarget {
    /// A YUV4MPEG2 input, as `rewind record --input` reads a file or a pipe.
    ///
    /// Input: the file. Holds: the header is read or refused with an ``InputError``; frames then read one after
    /// another (at most 64) at pts `index × frame duration`, until a clean end or an ``InputError``.
    static let y4m = FuzzTarget(
        name: "y4m",
        summary: "YUV4MPEG2 inputs: header, frame markers, frames",
        seeds: InputSeeds.y4m
    ) { input, scratch throws(FuzzFailure) in
        let path = try scratch.write(input.rest(), as: "input.y4m")
        var reader: Y4MReader
        do {
            reader = try Y4MReader(path: path, startWallNanoseconds: 0)
        } catch {
            return
        }
        let layout = reader.stream.layout
        guard layout.byteCount <= FuzzTarget.largestFrame else { return }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: layout.byteCount, alignment: 64)
        defer { buffer.deallocate() }
        for index in 0..<64 {
            let info: FrameInfo?
            do {
                info = try reader.readFrame(into: buffer)
            } catch is InputError {
                return
            } catch {
                throw FuzzFailure("frame \(index) failed with an error that is not an InputError: \(error)")
            }
            guard let info else { return }
            guard info.pts == FrameTime.frame(Int64(index), duration: reader.stream.frameDuration) else {
                throw FuzzFailure("frame \(index) has pts \(info.pts), not \(index) × \(reader.stream.frameDuration)")
            }
        }
    }

    /// The values people and programs type: durations, sizes, frame sizes and rates, times.
    ///
    /// Input: one byte choosing the parser, then the text. Holds: a value is parsed or refused with a
    /// ``ValueError``, never a trap (an overflow included); a duration is not negative; a frame rate's frame lasts at
    /// least a nanosecond.
    static let values = FuzzTarget(
        name: "values",
        summary: "durations, sizes, frame sizes, frame rates and times as typed",
        seeds: InputSeeds.values
    ) { input, _ throws(FuzzFailure) in
        let parser = input.byte() % 5
        let text = String(decoding: input.rest(), as: UTF8.self)
        switch parser {
        case 0:
            if let duration = try? Values.duration(text), duration < .zero {
                throw FuzzFailure("'\(text)' is a negative duration, \(duration)")
            }
        case 1:
            if let size = try? Values.size(text), size < 0 { throw FuzzFailure("'\(text)' is a negative size") }
        case 2:
            _ = try? Values.dimensions(text)
        case 3:
            if let frame = try? Values.frameRate(text),
                frame.value <= 0 || frame.timescale <= 0 || (frame.nanoseconds ?? 1) < 1
            {
                throw FuzzFailure("'\(text)' is a frame of \(frame)")
            }
        default:
            _ = try? TimeSpec(parsing: text)
        }
    }

    /// The bodies of the API's requests: saves, clips, extensions, markers.
    ///
    /// Input: one byte choosing the request, then the body. Holds: a body is decoded or refused with a 400
    /// ``APIError``.
    static let request = FuzzTarget(
        name: "request",
        summary: "API request bodies: saves, clips, extensions, markers",
        seeds: InputSeeds.requests
    ) { input, _ throws(FuzzFailure) in
        let kind = input.byte() % 4
        let body = input.rest()
        do throws(APIError) {
            switch kind {
            case 0: _ = try SaveRequest.decode(body)
            case 1: _ = try ClipRequest.decode(body)
            case 2: _ = try ExtendRequest.decode(body)
            default: _ = try MarkerRequest.decode(body)
            }
        } catch {
            guard error.code == .badRequest else {
                throw FuzzFailure("a body was refused as \(error.code), not a bad request: \(error)")
            }
        }
    }
}

/// Valid inputs for the input targets.
enum InputSeeds {
    /// Headers of every format and option the reader takes, each with two frames.
    @Sendable static func y4m() -> [[UInt8]] {
        let headers = [
            ("YUV4MPEG2 W8 H6 F30:1 Ip A1:1 C420jpeg", 8 * 6 * 3 / 2),
            ("YUV4MPEG2 W7 H5 F30000:1001 I? A4:3 C420mpeg2 XYSCSS=420MPEG2 XCOLORRANGE=FULL", 7 * 5 + 2 * 4 * 3),
            ("YUV4MPEG2 W4 H4 F25:1 Cmono", 16),
            ("YUV4MPEG2 W4 H2 F60:1 C420p10 XCOLORRANGE=LIMITED", (8 + 4) * 2),
            ("YUV4MPEG2 W6 H4 F1:1 C420paldv", 24 + 12),
        ]
        return headers.map { header, frameBytes in
            // Odd bytes below 4: the high bytes of valid 10-bit samples, in C420p10.
            let frame = (0..<frameBytes).map { $0 % 2 == 1 ? UInt8($0 % 4) : UInt8(truncatingIfNeeded: $0 &* 7) }
            return Array((header + "\n").utf8) + Array("FRAME\n".utf8) + frame + Array("FRAME Ixyz\n".utf8) + frame
        }
    }

    /// One example of each form each parser takes.
    @Sendable static func values() -> [[UInt8]] {
        let examples: [(UInt8, String)] = [
            (0, "12.5s"), (0, "1500ms"), (0, "250us"), (0, "7d"), (0, "106751d"), (1, "512MiB"), (1, "1.5GB"),
            (1, "4096"), (2, "1920x1080"), (3, "29.97"), (3, "30000/1001"), (4, "-2.5s"),
            (4, "2026-11-30T14:03:05.200Z"), (4, "2026-11-30T14:03:05+01:00"), (4, "14:03:05.200"),
            (4, "14:03:05.2-05:30"),
        ]
        return examples.map { [$0.0] + Array($0.1.utf8) }
    }

    /// A body of every request, with every field.
    @Sendable static func requests() -> [[UInt8]] {
        let bodies: [(UInt8, String)] = [
            (0, #"{"stream":"all","before":"10s","after":"5s","format":"mkv","path":"/tmp/a.mkv","wait":true}"#),
            (0, #"{"last":"5s","format":"mp4","quality":"fast"}"#),
            (1, #"{"from":"1s","to":"2026-11-30T14:03:05Z","stream":"front","format":"y4m","wait":false}"#),
            (2, #"{"after":"10s"}"#),
            (3, #"{"label":"goal \u00e9","at":"12.5s","stream":"front","hold":{"before":"30s","after":"30s"}}"#),
        ]
        return bodies.map { [$0.0] + Array($0.1.utf8) }
    }
}
