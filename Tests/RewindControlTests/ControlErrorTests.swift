import RewindControl
import RewindQuery
import RewindSystem
import Testing

@Suite struct ControlErrorTests {
    @Test func everyControlErrorStatesTheFactWithItsDataAndNoCommandLineWords() {
        let cases: [(ControlError, String)] = [
            (.socket(action: "connect to", path: "/s/rewind.sock", Errno(rawValue: 13)), "/s/rewind.sock"),
            (.socketPathTooLong(path: "/very/long", limit: 107), "107 bytes"),
            (.alreadyServed(path: "/s/rewind.sock"), "/s/rewind.sock"),
            (.messageTooLong(limit: 65536), "64 KiB"), (.emptyMessage, "empty message"),
            (.notJSON(excerpt: "hello"), "'hello'"), (.badReply(excerpt: "{\"ok\": 1}"), "'{\"ok\": 1}'"),
            (.badField("from", detail: "from: '3' has no unit"), "'3' has no unit"),
            (.unknownCommand("fly"), "'fly'"), (.wrongStream(recording: "camera", requested: "other"), "'other'"),
            (.refused(.badRange, message: "the range [2.000s, 1.000s) is empty"), "[2.000s, 1.000s)"),
        ]
        for (error, fact) in cases {
            #expect("\(error)".contains(fact), "'\(fact)' missing in: \(error)")
            for word in ["rewind ", "--", "run '"] { #expect(!"\(error)".contains(word), "'\(word)' in: \(error)") }
        }
        #expect(ControlError.socket(action: "read", path: nil, Errno(rawValue: 104)) != .emptyMessage)
    }
}
