import Foundation
import RewindControl
import RewindMedia
import RewindSystem
import RewindTesting
import Testing

/// The API's logic without a socket: `handle` takes a request and returns a response.
@Suite(.timeLimit(.minutes(45))) struct ControlAPITests {
    func body(_ response: HTTPResponse) -> String { String(decoding: response.bytes, as: UTF8.self) }

    @Test func handleAnswersWithoutASocket() throws {
        let live = try LiveRecorder()
        defer { try? live.finish() }
        let control = live.control
        let status = control.handle(HTTPRequest(method: "GET", path: "/v1/status"))
        #expect(status.status == 200)
        #expect(status.headers.contains { $0 == ("Content-Type", "application/json") })
        let decoded = try decode(StatusResponse.self, body(status))
        #expect(decoded.streams[0].framesAccepted == 180)
        // The process beside the streams: its budget in force is the streams' sum; its resident size, heap and the
        // index's share of the heap are measured (this test process's, shared with the other tests).
        #expect(decoded.memoryBudgetBytes == decoded.streams.reduce(0) { $0 + $1.memoryBudgetBytes })
        #expect((decoded.memoryBudgetBytes ?? 0) > 0 && (decoded.memoryBudgetBytes ?? 0) <= 64 << 20)
        #expect((decoded.residentBytes ?? 0) > 0, "\(body(status))")
        // `heap_bytes` is glibc's malloc's figure: absent only where malloc is a sanitizer's, as in this process.
        let index = try #require(decoded.indexMemoryBytes, "\(body(status))")
        #expect(index > 0, "\(body(status))")
        #expect((decoded.heapBytes != nil) == (ResidentMemory.heapInUse() != nil), "\(body(status))")
        if let heap = decoded.heapBytes { #expect(index < heap, "\(body(status))") }
        for key in ["\"memory_budget_bytes\":", "\"resident_bytes\":", "\"index_memory_bytes\":"] {
            #expect(body(status).contains(key), "\(key) \(body(status))")
        }
        #expect(body(status).contains("\"heap_bytes\":") == (decoded.heapBytes != nil), "\(body(status))")
        // A recorder without a store has no index to hold memory for.
        let memoryOnly = try LiveRecorder(spill: .off)
        defer { try? memoryOnly.finish() }
        let unstored = try decode(
            StatusResponse.self, body(memoryOnly.control.handle(HTTPRequest(method: "GET", path: "/v1/status"))))
        #expect(unstored.indexMemoryBytes == nil && unstored.residentBytes != nil && unstored.segments == nil)
        // Each stream's exact rate, as `/v1/streams` gives it (a 60 fps camera: 1 / 60 s a frame).
        let described = try decode(
            StreamList.self, body(control.handle(HTTPRequest(method: "GET", path: "/v1/streams"))))
        #expect(
            [decoded.streams[0].frameDurationValue, Int64(decoded.streams[0].frameDurationTimescale)] == [1, 60]
                && described.streams[0].frameDurationValue == decoded.streams[0].frameDurationValue
                && described.streams[0].frameDurationTimescale == decoded.streams[0].frameDurationTimescale,
            "\(body(status))")
        for key in ["\"frame_duration_value\":1,", "\"frame_duration_timescale\":60"] {
            #expect(body(status).contains(key), "\(key) \(body(status))")
        }

        let cases: [(HTTPRequest, Int, String)] = [
            (
                HTTPRequest(
                    method: "POST", path: "/v1/markers", body: Array(#"{"label":"x","hold":{"befor":"1s"}}"#.utf8)),
                400, "hold.befor"
            ),
            (HTTPRequest(method: "POST", path: "/v1/markers", body: Array(#"{"at":"1s"}"#.utf8)), 400, "label"),
            (HTTPRequest(method: "POST", path: "/v1/saves", body: Array(#"{"before":"0s"}"#.utf8)), 400, "empty"),
            (HTTPRequest(method: "POST", path: "/v1/saves", body: Array(#"{"after":"5"}"#.utf8)), 400, "after"),
            (HTTPRequest(method: "POST", path: "/v1/saves", body: Array(#"{"format":"gif"}"#.utf8)), 400, "gif"),
            (HTTPRequest(method: "DELETE", path: "/v1/markers/abc"), 404, "abc"),
            // A body that is not JSON says what the parser found (each was "not a JSON object"); JSON that is not
            // an object says that.
            (
                HTTPRequest(
                    method: "POST", path: "/v1/markers", body: Array(#"{"label":""#.utf8) + [0xFF, 0x22, 0x7D]),
                400, "the body is not valid JSON (Invalid UTF-8"
            ),
            (
                HTTPRequest(method: "POST", path: "/v1/markers", body: Array(#"{"label":"\ud800"}"#.utf8)), 400,
                "the body is not valid JSON (Unexpected end of file during string parse (expected low-surrogate"
            ),
            (
                HTTPRequest(
                    method: "POST", path: "/v1/markers",
                    body: Array((#"{"label":"# + String(repeating: "[", count: 10_000)).utf8)), 400,
                "the body is not valid JSON (Too many nested arrays or dictionaries"
            ),
            (HTTPRequest(method: "POST", path: "/v1/markers", body: Array("[1]".utf8)), 400, "is not a JSON object"),
            (HTTPRequest(method: "GET", path: "/v1/status", isTCP: true), 401, "token"),
            // An id is written one way: no sign, no leading zero (either read as another name of save 1 before).
            (HTTPRequest(method: "GET", path: "/v1/saves/+1"), 404, "no save '+1'"),
            (HTTPRequest(method: "GET", path: "/v1/saves/01"), 404, "no save '01'"),
            (HTTPRequest(method: "DELETE", path: "/v1/markers/+1"), 404, "no marker '+1'"),
        ]
        for (request, expected, word) in cases {
            let response = control.handle(request)
            #expect(response.status == expected, "\(request.method) \(request.path): \(body(response))")
            #expect(body(response).contains(word), "\(body(response))")
        }
        #expect(!FileManager.default.fileExists(atPath: live.directory + "/exports"), "nothing was written")

        // A 405 says which methods the path takes (RFC 9110 requires `Allow` there), HEAD wherever GET.
        for (method, path, allowed) in [
            ("PUT", "/v1/saves", "GET, POST, HEAD"), ("POST", "/v1/status", "GET, HEAD"),
            ("GET", "/v1/markers/1", "DELETE"), ("GET", "/v1/saves/1/extend", "POST"),
            ("DELETE", "/", "GET, POST, HEAD"),
            ("PUT", "/timeline.js", "GET, HEAD"),
            // Before the id is looked at (a save id that is no number was a 404 for every method).
            ("PUT", "/v1/saves/abc", "GET, DELETE, HEAD"), ("GET", "/v1/saves/x/extend", "POST"),
        ] {
            let response = control.handle(HTTPRequest(method: method, path: path))
            #expect(response.status == 405, "\(method) \(path): \(body(response))")
            #expect(response.headers.first { $0.0 == "Allow" }?.1 == allowed, "\(method) \(path): \(response.headers)")
        }
        #expect(!control.handle(HTTPRequest(method: "GET", path: "/v1/nothing")).headers.contains { $0.0 == "Allow" })
    }

    @Test func saveObjectsAndErrorsRoundTripWithTheirWireKeys() throws {
        var object = SaveObject(
            id: 7, state: .failed, stream: "camera", fromNanoseconds: 1, toNanoseconds: 2, format: "mkv", files: [],
            error: APIError(.empty, "nothing").detail)
        object.firstPTSNanoseconds = 3
        object.lastPTSNanoseconds = 4
        object.repeatedFrames = 5
        let encoded = String(decoding: try JSONEncoder().encode(object), as: UTF8.self)
        for key in [
            "\"from_ns\":1", "\"to_ns\":2", "\"first_pts_ns\":3", "\"last_pts_ns\":4", "\"repeated_frames\":5",
            "\"state\":\"failed\"",
            "\"code\":\"empty\"",
        ] {
            #expect(encoded.contains(key), "\(encoded)")
        }
        #expect(try JSONDecoder().decode(SaveObject.self, from: Data(encoded.utf8)) == object)
        #expect(SaveState.allCases.filter(\.isFinal) == [.done, .failed, .cancelled])
        let statuses = APIError.Code.allCases.map(\.status)
        #expect(statuses == [400, 401, 403, 404, 404, 405, 409, 413, 429, 503, 503, 503, 500])
    }

    /// An answer JSON cannot carry goes out as a 500 naming why, never as an error body under the success status.
    @Test func anAnswerThatCannotBeEncodedIsA500() throws {
        var object = SaveObject(
            id: 1, state: .exporting, stream: "camera", fromNanoseconds: 0, toNanoseconds: 1, format: "mkv", files: [])
        #expect(RecorderControl.jsonResponse(object, status: 202).status == 202)
        object.progress = .nan
        let response = RecorderControl.jsonResponse(object, status: 202)
        #expect(response.status == 500)
        let text = body(response)
        #expect(text.contains("\"code\":\"failed\"") && text.contains("could not be encoded"), "\(text)")
    }

    /// A save that met a full disk says what to do, as an export from the disk does.
    @Test func aFullDiskSaysToFreeSpaceOrWriteElsewhere() {
        let full = APIError(
            ExportError(destination: "/d/a.mkv", reason: .system(action: "writing failed", Errno(rawValue: ENOSPC))))
        #expect(full.code == .failed)
        #expect(
            full.message.hasSuffix(": free some space, or write elsewhere (give a path on another disk)"), "\(full)")
        let other = APIError(
            ExportError(destination: "/d/a.mkv", reason: .system(action: "writing failed", Errno(rawValue: EIO))))
        #expect(!other.message.contains("free some space"), "\(other)")
    }

    /// An address is shown as `--listen` takes it: an IPv6 one in brackets (it was printed as `::1:18441`).
    @Test func listenAddressesAreShownAsTheyAreGiven() throws {
        for text in ["127.0.0.1:8080", "[::1]:18441", "[fe80::1]:0"] {
            let (host, port) = try RecorderControl.Listen.parse(text)
            #expect(RecorderControl.Listen.address(host: host, port: port) == text)
        }
        let refused = ControlError.badListenAddress(
            RecorderControl.Listen.address(host: "::2", port: 80), reason: .notLoopback)
        #expect("\(refused)".contains("[::2]:80"), "\(refused)")
    }

    @Test func everyControlErrorStatesTheFactWithItsDataAndNoCommandLineWords() {
        let cases: [(ControlError, String)] = [
            (.socket(action: "connect to", path: "/s/rewind.sock", Errno(rawValue: 13)), "/s/rewind.sock"),
            (.socketPathTooLong(path: "/very/long", limit: 107), "107 bytes"),
            (.alreadyServed(path: "/s/rewind.sock"), "/s/rewind.sock"),
            (.serverFailed("libmicrohttpd.so.12: cannot open"), "libmicrohttpd.so.12"),
            (.badListenAddress("0.0.0.0:80", reason: .notLoopback), "not a loopback address"),
            (.tokenFile(path: "/s/token", .empty), "/s/token"),
            (.recorderStopped(request: "save 4"), "save 4"),
            (.badReply(excerpt: "HTTP 502: x"), "HTTP 502"),
            (.refused(APIError(.notFound, "no save 9")), "no save 9"),
        ]
        for (error, fact) in cases {
            #expect("\(error)".contains(fact), "'\(fact)' missing in: \(error)")
            for word in ["rewind ", "run '", "--"] { #expect(!"\(error)".contains(word), "'\(word)' in: \(error)") }
        }
    }
}
