import Foundation
import RewindControl
import RewindTesting
import Testing

/// The API's OpenAPI document (`Sources/RewindControl/API/openapi.json`, served at `GET /v1/openapi.json`) against
/// the recorder that serves it: schemathesis (`Tests/API`, installed by `make test`) sends every operation requests
/// made from the document, valid ones and ones it says are invalid, and checks each answer by it.
@Suite(.timeLimit(.minutes(45))) struct APIDocumentTests {
    static let documentPath = Tool.packageRoot + "/Sources/RewindControl/API/openapi.json"

    /// Every answer of a live recorder of two streams, on TCP with its token, is one its document describes: a
    /// status listed for the operation (no 5xx), its media type, a body valid against the schema with every object
    /// closed (a field the document does not name fails: the document cannot fall behind the code), and a request
    /// without the token refused. Capture loses nothing meanwhile, and the recorder stops cleanly after.
    @Test func aLiveRecorderAnswersAsItsDocumentSays() throws {
        let tester = Tool.packageRoot + "/.build/venv/bin/st"
        #expect(FileManager.default.isExecutableFile(atPath: tester), "\(tester) is missing: run make test")
        let directory = try Tool.temporaryDirectory("openapi")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("store").path
        let recorder = try Tool.startRewind([
            "record", "--store", store, "--input", "front=synthetic:64x48@30", "--input", "rear=synthetic:64x24@10",
            "--realtime", "--window", "10s", "--memory", "64MiB", "--disk", "64MiB", "--segment", "500ms",
            "--listen", "127.0.0.1:0",
        ])
        defer { if recorder.process.isRunning { recorder.process.terminate() } }
        let base = "http://127.0.0.1:\(try Tool.listeningPort(of: recorder))"
        let token = try String(contentsOfFile: store + "/token", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let authorization = "Authorization: Bearer \(token)"

        // The document served is the package's, byte for byte.
        let served = try runChecked("curl", ["-sf", "-H", authorization, base + "/v1/openapi.json"]).stdout
        let document = try Data(contentsOf: URL(fileURLWithPath: Self.documentPath))
        #expect(served == document)

        // A second of frames first: saves, clips and frames have something to export.
        try waitUntil("the recorder holds a second of front", timeout: .seconds(60), interval: .milliseconds(100)) {
            try Self.streams(base, authorization).first { $0["stream"] as? String == "front" }?["memory_frames"]
                as? Int ?? 0 >= 30
        }
        let strict = directory.appendingPathComponent("strict.json")
        try Self.closingEveryObject(document).write(to: strict)
        let hooks = Tool.packageRoot + "/Tests/API/hooks.py"
        let environment = ProcessInfo.processInfo.environment.merging(["SCHEMATHESIS_HOOKS": hooks]) { $1 }
        // In the test's directory: schemathesis keeps a cache in the one it runs in.
        let run = try Tool.run(
            "/usr/bin/env",
            [
                "--chdir", directory.path, tester, "run", strict.path, "--url", base, "--header", authorization,
                "--checks", "all",
                // Valid by the schema is not always valid by the recorder (a stream it does not have, `to` before
                // `from`, a hold that does not fit the disk); a save cancelled stays readable (its state says so).
                "--exclude-checks", "positive_data_acceptance,use_after_free",
                "--max-examples", "40", "--workers", "1", "--request-timeout", "60", "--no-color",
                "--suppress-health-check", "all", "--generation-database", "none",
            ], environment: environment, timeout: .seconds(600))
        #expect(run.status == 0, "schemathesis found answers the document does not describe:\n\(run.output)")

        // Capture dropped nothing while the API was hammered; the recorder stops cleanly.
        for stream in try Self.streams(base, authorization) {
            #expect((stream["drops"] as? [String: Int])?.values.reduce(0, +) == 0, "\(stream)")
            #expect(stream["frames_durable"] as? Int ?? 0 > 0, "\(stream)")
        }
        recorder.process.interrupt()
        let finished = try recorder.finish()
        #expect(finished.status == 0, "\(finished.stderr)")
    }

    /// The request bodies the document describes take exactly the fields the recorder accepts.
    @Test func theDocumentsRequestBodiesNameTheFieldsTheRecorderTakes() throws {
        let document = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: Self.documentPath)))
                as? [String: Any])
        let schemas = try #require((document["components"] as? [String: Any])?["schemas"] as? [String: Any])
        func properties(_ name: String) -> Set<String> {
            Set(((schemas[name] as? [String: Any])?["properties"] as? [String: Any] ?? [:]).keys)
        }
        #expect(properties("SaveRequest") == Set(SaveRequest.fields))
        #expect(properties("ClipRequest") == Set(ClipRequest.fields))
        #expect(properties("ExtendRequest") == Set(ExtendRequest.fields))
        #expect(properties("MarkerRequest") == Set(MarkerRequest.fields))
    }

    /// The streams of `GET /v1/status`.
    static func streams(_ base: String, _ authorization: String) throws -> [[String: Any]] {
        let answer = try runChecked("curl", ["-sf", "-H", authorization, base + "/v1/status"]).stdout
        let status = try JSONSerialization.jsonObject(with: answer) as? [String: Any]
        return status?["streams"] as? [[String: Any]] ?? []
    }

    /// `document` with `additionalProperties: false` in every object schema that names its properties and says
    /// nothing of others, and the token required (the document lets the Unix socket go without: over TCP a request
    /// without it must be refused).
    static func closingEveryObject(_ document: Data) throws -> Data {
        func close(_ value: Any) -> Any {
            if var object = value as? [String: Any] {
                for (key, inner) in object { object[key] = close(inner) }
                if object["properties"] != nil, object["additionalProperties"] == nil {
                    object["additionalProperties"] = false
                }
                return object
            }
            if let array = value as? [Any] { return array.map(close) }
            return value
        }
        var closed = try #require(close(try JSONSerialization.jsonObject(with: document)) as? [String: Any])
        let security = try #require(closed["security"] as? [[String: Any]])
        closed["security"] = security.filter { !$0.isEmpty }
        #expect((closed["security"] as? [Any])?.count == security.count - 1, "no request without a token: \(security)")
        return try JSONSerialization.data(withJSONObject: closed)
    }
}
