import Foundation
import RewindCapture
import RewindControl
import RewindCore
import RewindSystem
import RewindTesting
import SegmentStore
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension FuzzTarget {
    /// Whole requests to a live recorder's API: method, path, query, headers and body, through
    /// ``RecorderControl/handle(_:)``, the code every request reaches after the transport (libmicrohttpd) parsed it.
    ///
    /// Input: one byte choosing the method and how the request came (the Unix socket, or TCP with or without the
    /// token; from a program, or from a browser's page), then text: the path with its query up to the first line
    /// break, the body after it. The recorder (``APIFixture``) records two streams, `front` and `rear`, into a store
    /// with a disk budget, and gets a frame of `front` per input (and `rear`'s, at a third of the rate, to the same time), so saves wait, finish and are kept as they do live.
    /// Holds: no crash or trap; the answer's status is one the API gives for a request (2xx, 3xx, 4xx, 503), never
    /// 500 (a failure the request did not cause); JSON answers parse, errors carry a code and a message; the
    /// recorder still answers `/v1/health` after every input.
    ///
    /// Not sent: saves that name a `path` (the recorder writes where a client says: anywhere on this machine), and
    /// saves that wait for a post-roll (`wait` with `after`: an answer only once the post-roll is recorded).
    static let api = FuzzTarget(
        name: "api",
        summary: "whole API requests to a live recorder of two streams: paths, queries, headers, bodies",
        seeds: APISeeds.requests
    ) { input, scratch throws(FuzzFailure) in
        let fixture = try APIFixture.shared(in: scratch)
        guard let request = APIFixture.request(input.rest()) else { return }
        _ = try fixture.serve(request)
    }
}

/// The live recorder the `api` target sends its requests to: made on the first input, kept for the process, and
/// stopped at exit before the scratch directory goes.
final class APIFixture: Sendable {
    /// The TCP listener's token.
    static let token = "fuzz-token"

    let directory: String
    let recorder: Recorder
    let control: RecorderControl
    private let feeds: Mutex<[CameraFeed]>
    private let inputs = Atomic<Int>(0)

    private static let made = Mutex<Result<APIFixture, FuzzFailure>?>(nil)

    /// The process's fixture, made in `scratch` the first time.
    static func shared(in scratch: FuzzScratch) throws(FuzzFailure) -> APIFixture {
        try made.withAnnotatedLock { made throws(FuzzFailure) in
            if made == nil {
                made = Result { () throws(FuzzFailure) in try APIFixture(directory: try scratch.makeFolder()) }
                if case .success = made { atexit { APIFixture.stopShared() } }
            }
            return try made!.get()
        }
    }

    private static func stopShared() {
        guard case .success(let fixture) = made.withAnnotatedLock({ $0 }) else { return }
        fixture.stop()
    }

    /// Stops the recorder as `rewind record` does: its last seals, then the control.
    func stop() {
        _ = try? recorder.finish()
        control.stop()
    }

    /// Starts a recorder in `directory` (a new one) and records two seconds of each stream.
    init(directory: String) throws(FuzzFailure) {
        self.directory = directory
        do {
            let front = try CameraFeed(width: 64, height: 48, fps: 30)
            let rear = try CameraFeed(width: 64, height: 24, fps: 10)
            var options = StoreOptions()
            options.diskBudget = 4 << 20
            options.segmentMaxDuration = .milliseconds(500)
            recorder = try Recorder(
                streams: [
                    RecorderStreamSpec(name: "front", stream: front.stream),
                    RecorderStreamSpec(name: "rear", stream: rear.stream),
                ],
                store: try SegmentStore.open(directory: directory, options: options),
                configuration: RecorderConfiguration(window: .seconds(2), memoryBudget: 8 << 20))
            var limits = HTTPLimits()
            limits.finishedSavesKept = 50
            control = try RecorderControl(
                recorder: recorder, directory: directory, limits: limits,
                listen: RecorderControl.Listen(host: "127.0.0.1", port: 0, token: Self.token))
            feeds = Mutex([front, rear])
            // Two seconds of each stream, in memory and on disk.
            for _ in 0..<60 { try append() }
        } catch let failure as FuzzFailure {
            throw failure
        } catch {
            throw FuzzFailure("cannot start the recorder the api target needs: \(error)")
        }
    }

    /// The next frame of `front`, and the frames of `rear` (a third of its rate) up to its pts, as the cameras
    /// would deliver them between two requests.
    private func append() throws {
        try feeds.withAnnotatedLock { feeds in
            recorder.waitForSpillRoom()
            _ = try feeds[0].appendNext(to: recorder.streams[0])
            while feeds[1].pts(feeds[1].index) <= feeds[0].pts(feeds[0].index - 1) {
                _ = try feeds[1].appendNext(to: recorder.streams[1])
            }
        }
    }

    /// Handles `request` and checks the answer; then the recorder must still answer its health check, and every
    /// hundredth input the exports written so far go (the disk is the fuzzer's).
    ///
    /// - Returns: the answer.
    func serve(_ request: HTTPRequest) throws(FuzzFailure) -> HTTPResponse {
        let described = "\(request.method) \(request.path.prefix(200))"
        do { try append() } catch { throw FuzzFailure("the recorder refused a frame: \(error)") }
        let response = control.handle(request)
        try Self.check(response, of: request, described: described)
        let health = control.handle(HTTPRequest(method: "GET", path: "/v1/health"))
        guard health.status == 200 else {
            throw FuzzFailure("after \(described), the recorder answers its health check with \(health.status)")
        }
        if inputs.add(1, ordering: .relaxed).newValue % 100 == 0 {
            let exports = directory + "/exports"
            for name in (try? FileManager.default.contentsOfDirectory(atPath: exports)) ?? [] {
                unlink(exports + "/" + name)
            }
        }
        return response
    }

    /// What an answer must be, whatever the request.
    static func check(_ response: HTTPResponse, of request: HTTPRequest, described: String) throws(FuzzFailure) {
        let contentType = response.headers.first { $0.0.lowercased() == "content-type" }?.1 ?? ""
        switch response.body {
        case .stream(let stream):
            // An event stream: what the client would read is the recorder's to produce; the client leaves.
            stream.close()
            guard response.status == 200 else {
                throw FuzzFailure("\(described): a stream answered with status \(response.status)")
            }
            return
        case .bytes(let bytes):
            switch response.status {
            case 200..<400, 400..<500, 503: break
            default:
                throw FuzzFailure(
                    "\(described): answered \(response.status): \(String(decoding: bytes.prefix(300), as: UTF8.self))")
            }
            guard contentType.hasPrefix("application/json"), request.method != "HEAD" else { return }
            guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)) else {
                throw FuzzFailure("\(described): the JSON answer does not parse: \(bytes.prefix(300))")
            }
            if response.status >= 400 {
                guard let error = (object as? [String: Any])?["error"] as? [String: Any],
                    let code = error["code"] as? String, APIError.Code(rawValue: code)?.status == response.status,
                    let message = error["message"] as? String, !message.isEmpty
                else {
                    throw FuzzFailure("\(described): an error answer without its code and message: \(object)")
                }
            }
        }
    }

    /// The request `input` describes, or nil for one not sent to a recorder of the fuzzer's: a save or clip naming a
    /// path (the recorder would write the fuzzer's bytes wherever they say), or a save waiting for its post-roll (the
    /// answer comes only once it is recorded).
    static func request(_ input: [UInt8]) -> HTTPRequest? {
        let choice = input.first ?? 0
        let methods = ["GET", "POST", "DELETE", "HEAD", "PUT", "PATCH", "OPTIONS", "get"]
        let method = methods[Int(choice & 7)]
        let text = input.dropFirst()
        let lineBreak = text.firstIndex(of: UInt8(ascii: "\n")) ?? text.endIndex
        let target = String(decoding: text[..<lineBreak], as: UTF8.self)
        let body = lineBreak < text.endIndex ? Array(text[(lineBreak + 1)...]) : []
        if method != "GET" && method != "HEAD" && method != "get" {
            if let save = try? SaveRequest.decode(body) {
                guard save.path == nil, save.wait != true || save.after == nil else { return nil }
            } else if let clip = try? ClipRequest.decode(body) {
                guard clip.path == nil else { return nil }
            } else if String(decoding: body, as: UTF8.self).contains("path") {
                return nil
            }
        }
        var request = request(method: method, target: target, body: body)
        if choice & 0x10 != 0 {
            request.isTCP = true
            if choice & 0x20 != 0 { request.headers["authorization"] = "Bearer \(token)" }
        }
        if choice & 0x40 != 0 {
            request.headers["origin"] = "http://127.0.0.1:8080"
            request.headers["sec-fetch-site"] = "same-origin"
            request.headers["host"] = choice & 0x80 != 0 ? "camera.example.com" : "127.0.0.1:8080"
        }
        return request
    }

    /// The request the transport would hand over for `target` (`/path?name=value&…`): the query decoded as
    /// libmicrohttpd decodes it (`%XX` and `+`), names given twice listed.
    static func request(method: String, target: String, body: [UInt8]) -> HTTPRequest {
        let question = target.firstIndex(of: "?")
        let path = String(target[..<(question ?? target.endIndex)])
        var query: [String: String] = [:]
        var repeated: Set<String> = []
        if let question {
            for field in target[target.index(after: question)...].split(separator: "&") {
                let pair = field.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let name = decode(pair[0])
                if query[name] != nil { repeated.insert(name) }
                query[name] = pair.count > 1 ? decode(pair[1]) : ""
            }
        }
        return HTTPRequest(
            method: method, path: decode(Substring(path)), query: query, repeatedQueryNames: repeated.sorted(),
            body: body)
    }

    private static func decode(_ text: Substring) -> String {
        let spaced = text.replacingOccurrences(of: "+", with: " ")
        return spaced.removingPercentEncoding ?? spaced
    }
}

/// Valid requests for the `api` target: one of each endpoint and method, with their parameters.
enum APISeeds {
    @Sendable static func requests() -> [[UInt8]] {
        let requests: [(UInt8, String)] = [
            (1, #"/v1/saves"# + "\n" + #"{"last":"1s","format":"y4m","wait":true}"#),
            (1, #"/v1/saves"# + "\n" + #"{"stream":"all","before":"1s","after":"1s","format":"mkv"}"#),
            (1, #"/v1/saves/2/extend"# + "\n" + #"{"after":"2s"}"#), (2, "/v1/saves/2"),
            (1, #"/v1/saves"# + "\n" + #"{"stream":"front","last":"500ms","format":"mp4","quality":"fast"}"#),
            (1, #"/v1/saves"# + "\n" + #"{"stream":"rear","since_last_save":true,"format":"y4m"}"#),
            (1, #"/v1/clips"# + "\n" + #"{"stream":"front","from":"0s","to":"1s","format":"y4m","wait":true}"#),
            (
                1,
                #"/v1/markers"# + "\n"
                    + #"{"label":"goal","stream":"front","at":"1s","hold":{"before":"1s","after":"1s"}}"#
            ),
            (2, "/v1/markers/1"), (0, "/v1/health"), (0, "/v1/status"), (0, "/v1/streams"), (0, "/v1/saves"),
            (0, "/v1/openapi.json"), (0, "/v1/saves/1"), (0, "/v1/files/1"), (0, "/v1/markers?from=0s&to=60s"),
            (0, "/v1/streams/front/timeline?from=0s&to=10s&buckets=50"),
            (0, "/v1/streams/rear/timeline?from=1970-01-01T00:00:00Z&to=1970-01-01T00:01:00Z"),
            (0, "/v1/streams/front/frame?at=1.5s&width=32"), (0, "/v1/streams/rear/frame?at=0s&step=after&format=png"),
            (0, "/v1/events"), (3, "/v1/events"), (0, "/"), (0, "/index.html"), (0x10, "/v1/status"),
            (0x30, "/v1/status?token=fuzz-token"), (0x50, "/"), (0x41, #"/v1/saves"# + "\n" + #"{"last":"1s"}"#),
            (0xC0, "/v1/status"),
        ]
        return requests.map { [$0.0] + Array($0.1.utf8) }
    }
}
