import Dispatch
import Foundation
import RewindCapture
import RewindControl
import RewindCore
import RewindMedia
import RewindQuery
import RewindTesting
import SegmentStore
import Synchronization
import Testing

/// Markers: durable in the index, chapters in Matroska exports, and holds that beat retention.
@Suite(.timeLimit(.minutes(45))) struct MarkerTests {
    @Test func markersAreDurableAndBecomeChapters() throws {
        let live = try LiveRecorder()
        let goal = try #require(try live.client.mark(MarkerRequest(label: "goal", at: "1s")))
        #expect(goal.markers.count == 1)
        #expect(goal.markers[0].atNanoseconds == 1_000_000_000 && goal.markers[0].stream == "camera")
        #expect(goal.markers[0].holdFromNanoseconds == nil)
        let now = try #require(try live.client.mark(MarkerRequest(label: "now, with \"quotes\"")))
        #expect(now.markers[0].atNanoseconds == live.feed.pts(179), "no time: the recorder clock")
        _ = try live.client.mark(MarkerRequest(label: "later", at: "2s"))
        let listed = try curl(live.control.socketPath, "GET", "/v1/markers?from=500ms&to=2500ms")
        #expect(try decode(MarkerList.self, listed.body).markers.map(\.label) == ["goal", "later"])

        // A clip across two markers carries them as chapters at their times.
        let path = "\(live.directory)/chapters.mkv"
        _ = try live.client.clip(ClipRequest(from: "500ms", to: "2500ms", path: path, wait: true))
        let chapters = String(
            decoding: try ExternalTools.run(
                "ffprobe",
                ["-v", "error", "-show_entries", "chapter=start_time:chapter_tags=title", "-of", "csv=p=0", path]),
            as: UTF8.self
        ).split(separator: "\n").map(String.init)
        #expect(chapters == ["1.000000,goal", "2.000000,later"], "\(chapters)")

        // Deleting: gone from the list, told to the clients following events, and a second delete is 404.
        let events = EventFollower(live.client)
        try waitUntil("the events client is connected") { live.control.eventClients == 1 }
        #expect(try live.client.unmark(id: goal.markers[0].id)?.label == "goal")
        let data = try events.first("marker_removed")
        #expect(data["label"] as? String == "goal" && (data["id"] as? NSNumber)?.int64Value == goal.markers[0].id)
        do {
            _ = try live.client.unmark(id: goal.markers[0].id)
            Issue.record("a deleted marker was deleted again")
        } catch ControlError.refused(let error) {
            #expect(error.code == .notFound)
        }
        try live.finish()
        // Durable: a store opened afterwards lists the rest.
        let store = try SegmentStore.openReadOnly(directory: live.directory)
        #expect(try store.markers().map(\.label) == ["later", "now, with \"quotes\""])
    }

    /// `GET /v1/markers?from=&to=` lists a marker whose hold overlaps the range though its time lies outside it: a
    /// view zoomed into held frames draws the hold.
    @Test func aMarkerWhoseHoldOverlapsTheRangeIsListed() throws {
        let live = try LiveRecorder()
        defer { try? live.finish() }
        let hold = MarkerRequest.Hold(before: "200ms", after: "2s")
        _ = try #require(try live.client.mark(MarkerRequest(label: "held", at: "1s", hold: hold)))
        _ = try #require(try live.client.mark(MarkerRequest(label: "plain", at: "300ms")))
        func labels(_ query: String) throws -> [String] {
            let listed = try curl(live.control.socketPath, "GET", "/v1/markers?\(query)")
            #expect(listed.status == 200, "\(query): \(listed.body)")
            return try decode(MarkerList.self, listed.body).markers.map(\.label)
        }
        // The hold is [800 ms, 3 s + 1 ns).
        #expect(try labels("from=2s&to=2500ms") == ["held"], "inside the hold, after the marker")
        #expect(try labels("from=3s&to=4s") == ["held"], "the hold's last nanosecond")
        #expect(try labels("from=3000000001ns&to=4s") == [], "after the hold")
        #expect(try labels("from=0s&to=500ms") == ["plain"], "before the hold")
        #expect(try labels("from=0s&to=900ms") == ["plain", "held"], "by time")
        #expect(try labels("from=700ms&to=1500ms") == ["held"], "listed once")
    }

    /// Frames inside a marker's hold stay on disk whatever the disk budget says, also after a restart, until the
    /// marker is deleted.
    @Test func holdsBeatRetentionAndSurviveARestart() throws {
        var options = StoreOptions()
        options.segmentMaxDuration = .milliseconds(500)
        // The recorder (and its lock on the store) ends with this scope.
        let (directory, held, feed) = try { () throws -> (String, MarkerList, CameraFeed) in
            let live = try LiveRecorder(options: options)
            let held = try #require(
                try live.client.mark(
                    MarkerRequest(
                        label: "keep", at: "1200ms", hold: MarkerRequest.Hold(before: "200ms", after: "200ms"))
                ))
            try live.finish()
            return (live.directory, held, live.feed)
        }()
        #expect(held.markers[0].holdFromNanoseconds == 1_000_000_000)
        #expect(held.markers[0].holdToNanoseconds == 1_400_000_001)

        // Reopened with a budget far below what the store holds: retention deletes all it may.
        var tight = StoreOptions()
        tight.diskBudget = 1
        // The control's thread lets go of the recorder (and the store's lock) just after it stopped.
        var reopened: SegmentStore?
        try waitUntil("the stopped recorder has released the store") {
            reopened = try? SegmentStore.open(directory: directory, options: tight)
            return reopened != nil
        }
        let store = try #require(reopened)
        let before = try store.segments().count
        let report = try store.enforceRetention()
        #expect(!report.deleted.isEmpty)
        #expect(!report.keptByHolds.isEmpty)
        let kept = try store.segments()
        #expect(kept.count < before)
        let source = ClipSource.store(store, stream: try store.streams()[0])
        // Every frame of the hold is there; frames outside the held segments are gone.
        var ptsHeld: [Int64] = []
        try source.frames(in: 1_000_000_000..<1_400_000_001) { view in
            ptsHeld.append(view.info.ptsNanoseconds)
            return true
        }
        #expect(ptsHeld == (60...84).map { feed.pts($0) })
        #expect(try !source.hasFrames(in: 0..<200_000_000))
        // Deleting the marker lets retention take them.
        _ = try store.removeMarker(id: held.markers[0].id)
        _ = try store.enforceRetention()
        #expect(try !source.hasFrames(in: 1_000_000_000..<1_400_000_001))
    }

    /// A hold that would need more than the disk budget, with the holds already kept, is refused with 409 naming
    /// the bytes; a small one is accepted. So too before the index has any row of the stream (spill on eviction,
    /// every frame still in a long window): the bytes to come are then estimated from the ring.
    @Test(arguments: [SpillPolicy.eager, .onEvict]) func aHoldThatCannotFitIsAConflict(spill: SpillPolicy) throws {
        var options = StoreOptions()
        options.diskBudget = 64 << 20
        let live = try LiveRecorder(
            window: spill == .eager ? .seconds(2) : .seconds(60), options: options, spill: spill)
        defer { try? live.finish() }
        if spill == .onEvict { #expect(try live.recorder.store?.summary().frames == 0, "nothing on disk yet") }
        let answer = try curl(
            live.control.socketPath, "POST", "/v1/markers", body: #"{"label":"day","hold":{"after":"24h"}}"#)
        #expect(answer.status == 409, "\(answer.body)")
        let error = try decode(APIError.Body.self, answer.body).error
        #expect(error.code == "conflict" && error.message.contains("bytes"), "\(error.message)")
        #expect(try live.client.markers()?.markers.isEmpty == true, "nothing was stored")
        let small = try curl(
            live.control.socketPath, "POST", "/v1/markers", body: #"{"label":"moment","hold":{"before":"1s"}}"#)
        #expect(small.status == 201, "\(small.body)")
    }

    /// Without a disk budget, retention by free space bounds holds by what the disk has above the floor: a hold that
    /// would fill it is refused (409 naming the floor), a small one accepted; with no retention at all nothing is
    /// deleted to make room, so any hold is accepted (it changes nothing).
    ///
    /// Segments of a second: a hold keeps whole segments, and the recorder keeps two more for each stream, each the
    /// size of its files so far. Of a minute's default they took 21 to 43 MB each here, by how many chunks the
    /// encoder stored raw when the machine was busy, and the small hold would be refused too on a slow one.
    @Test func aHoldThatWouldFillTheDiskIsAConflictWithoutADiskBudget() throws {
        let directory = try TemporaryDirectory.store()
        let disk = FaultInjectingFileSystem()
        disk.setCapacity(96 << 20, of: directory + "/segments")
        var options = StoreOptions(fileSystem: disk)
        options.minimumFreeBytes = 8 << 20
        options.segmentMaxDuration = .seconds(1)
        let live = try LiveRecorder(options: options, directory: directory)
        defer { try? live.finish() }
        let day = try curl(
            live.control.socketPath, "POST", "/v1/markers", body: #"{"label":"day","hold":{"after":"24h"}}"#)
        #expect(day.status == 409, "\(day.body)")
        let error = try decode(APIError.Body.self, day.body).error
        #expect(error.message.contains("free-space floor"), "\(error.message)")
        #expect(try live.client.markers()?.markers.isEmpty == true, "nothing was stored")
        let small = try curl(
            live.control.socketPath, "POST", "/v1/markers", body: #"{"label":"moment","hold":{"before":"1s"}}"#)
        #expect(small.status == 201, "\(small.body)")

        let unbounded = try LiveRecorder()
        defer { try? unbounded.finish() }
        let kept = try curl(
            unbounded.control.socketPath, "POST", "/v1/markers", body: #"{"label":"day","hold":{"after":"24h"}}"#)
        #expect(kept.status == 201, "no retention deletes anything: \(kept.body)")
    }

    /// Under `--spill on-evict` a hold's frames still in memory are written at once, and so are those still to come
    /// within it as they come: a recorder killed afterwards keeps what the hold said it keeps (otherwise they would
    /// wait a window, here a minute, to be evicted).
    @Test func aHoldUnderOnEvictWritesItsFramesAtOnce() throws {
        let live = try LiveRecorder(window: .seconds(60), spill: .onEvict)
        defer { try? live.finish() }
        let store = try #require(live.recorder.store)
        #expect(try store.summary().frames == 0, "nothing is due within a minute")
        let answer = try curl(
            live.control.socketPath, "POST", "/v1/markers",
            body: #"{"label":"goal","at":"2s","hold":{"before":"1s","after":"3s"}}"#)
        #expect(answer.status == 201, "\(answer.body)")
        // Frames are written in order: every frame up to the newest, inside the hold, reaches the disk.
        try waitUntil("the held frames in memory are on disk") { try store.summary().lastPTS == live.feed.pts(179) }
        live.startProducer()
        try waitUntil("the held frames still to come are written as they come") {
            (try store.summary().lastPTS ?? 0) >= live.feed.pts(270)
        }
    }

    /// A hold over frames retention already deleted would keep nothing: refused with 409 naming the oldest frame
    /// left; a hold over what is still kept is accepted.
    @Test func aHoldOverDeletedFramesIsAConflict() throws {
        let live = try LiveRecorder.onASmallDisk()
        defer { try? live.finish() }
        let store = try #require(live.recorder.store)
        try waitUntil("retention deleted the first half second") {
            (try store.summary().firstPTS ?? 0) > 500_000_000
        }
        let gone = try curl(
            live.control.socketPath, "POST", "/v1/markers",
            body: #"{"label":"late","at":"200ms","hold":{"before":"100ms","after":"100ms"}}"#)
        #expect(gone.status == 409, "\(gone.body)")
        let error = try decode(APIError.Body.self, gone.body).error
        #expect(error.message.contains("is stored: its oldest frame on disk is at"), "\(error.message)")
        #expect(try live.client.markers()?.markers.isEmpty == true, "nothing was stored")
        // Before the oldest frame on disk but in the ring (whose 2 s reach further back than the disk's 256 KiB): the
        // refusal names the disk's oldest frame, and says the ring still has these for a save.
        // (Waited for: the spill stage may still be writing the prefill, and retention deletes as it goes.)
        var ringFirst: Int64 = 0
        try waitUntil("retention deleted frames the ring still holds") {
            ringFirst = live.recorder.streams[0].memoryStatistics.firstPTSNanoseconds ?? 0
            return ringFirst + 50_000_000 < (try store.summary().firstPTS ?? 0)
        }
        let inRing = try curl(
            live.control.socketPath, "POST", "/v1/markers",
            body: #"{"label":"ring","at":"\#(ringFirst)ns","hold":{"after":"20ms"}}"#)
        #expect(inRing.status == 409, "\(inRing.body)")
        #expect(inRing.body.contains("its oldest frame on disk is at"), "\(inRing.body)")
        #expect(inRing.body.contains("the ring still holds frames of it"), "\(inRing.body)")
        // Around the newest frame on disk once every frame is written: retention never takes a stream's newest
        // segment.
        try waitUntil("the spill wrote every frame") { try store.summary().lastPTS == live.feed.pts(179) }
        let newest = try #require(try store.summary().lastPTS)
        let kept = try curl(
            live.control.socketPath, "POST", "/v1/markers",
            body: #"{"label":"kept","at":"\#(newest)ns","hold":{"before":"20ms"}}"#)
        #expect(kept.status == 201, "\(kept.body)")
        // Older frames held beside it by a program using the store directly (the API would refuse this hold: it
        // leaves the stream less than its two segments): retention goes on deleting what comes after the kept hold,
        // a hole behind it, where a hold keeps nothing. Its `retention` gap is an event too (the store records it,
        // not the recorder).
        let oldest = try #require(try store.summary().firstPTS)
        let pinned = store.addHold(streamName: live.recorder.streams[0].name, range: oldest..<(newest - 20_000_000))
        defer { store.removeHold(pinned) }
        let follower = try ExternalTools.Child(
            try ExternalTools.locate("curl"),
            ["-sN", "--max-time", "60", "--unix-socket", live.control.socketPath, "http://rewind/v1/events"])
        defer { if follower.process.isRunning { follower.process.terminate() } }
        live.startProducer()
        var hole: GapRow?
        try waitUntil("retention deleted frames after the kept hold") {
            hole = try store.gaps().first { $0.reason == .retention && $0.startNanoseconds >= newest }
            return hole.map { $0.endNanoseconds - $0.startNanoseconds > 200_000_000 } ?? false
        }
        Thread.sleep(forTimeInterval: 1)
        kill(follower.process.processIdentifier, SIGKILL)
        let followed = try follower.finish()
        #expect(followed.output.contains("event: gap\ndata: {") && followed.output.contains(#""reason":"retention""#))
        let middle = try #require(hole).startNanoseconds + 100_000_000
        let inHole = try curl(
            live.control.socketPath, "POST", "/v1/markers",
            body: #"{"label":"hole","at":"\#(middle)ns","hold":{"before":"20ms","after":"20ms"}}"#)
        #expect(inHole.status == 409, "\(inHole.body)")
        #expect(inHole.body.contains("the stream has no frames on disk there"), "\(inHole.body)")
    }

    /// A live recorder with a 64 MiB disk budget and its 180 frames durable (in its open segment, from pts 0), and
    /// how long one of its segments spans: the segment bytes (here the size it is sealed at, an eighth of the budget,
    /// and the frame that takes the file past it; frames and sizes as the file takes them, headers and all) over the
    /// rate the file grows at. Retention keeps whole segments, so a hold of what is still to come needs the segments
    /// it reaches into, each of those bytes.
    static func recorderForHoldsToCome() throws -> (live: LiveRecorder, span: Double, segment: Int64) {
        var options = StoreOptions()
        options.diskBudget = 64 << 20
        let live = try LiveRecorder(options: options)
        do {
            let store = try #require(live.recorder.store)
            try waitUntil("every frame is durable") { try store.summary().frames == 180 }
            let open = try #require(try store.segments().last)
            let (first, last) = (try #require(open.firstPTS), try #require(open.lastPTS))
            // As the recorder reads it: the open segment's file over the time its frames cover.
            let rate = Double(store.fileBytes(of: open)) / (Double(last - first) * 180 / 179)
            let frame = rate * (Double(last - first) / 179)
            let sealed = Double(try #require(store.segmentSealBytes(ofStream: live.recorder.streams[0].name)))
            #expect(sealed == Double(8 << 20), "segments sealed at an eighth of the budget")
            let segment = min(rate * Double(store.options.segmentMaxNanoseconds) + frame, sealed + frame)
            return (live, segment / rate, Int64(segment.rounded(.up)))
        } catch {
            try? live.finish()
            throw error
        }
    }

    /// A hold from the middle of segment `first` to the middle of segment `last` (0: the open one), which needs
    /// segments `first` … `last` whole.
    static func hold(_ label: String, segments first: Int, _ last: Int, span: Double) -> String {
        let from = Int64((Double(first) + 0.5) * span)
        let to = Int64((Double(last) + 0.5) * span)
        return #"{"label":"\#(label)","at":"\#(from)ns","hold":{"after":"\#(to - from)ns"}}"#
    }

    /// Holds of what is still to come count together: two that each fit alone but not both are refused, while one
    /// that overlaps a kept hold adds only the segments it does not share.
    @Test func holdsStillToComeCountTogether() throws {
        let (live, span, segment) = try Self.recorderForHoldsToCome()
        defer { try? live.finish() }
        func hold(_ label: String, _ first: Int, _ last: Int) throws -> Int {
            try curl(
                live.control.socketPath, "POST", "/v1/markers",
                body: Self.hold(label, segments: first, last, span: span)
            ).status
        }
        // Beside the two segments the stream keeps for itself (16 MiB): three (24 MiB), then one more (32 MiB).
        #expect(try hold("first", 1, 3) == 201)
        #expect(try hold("overlapping", 2, 4) == 201, "it adds one segment to the first's three")
        #expect(try hold("later", 6, 8) == 409, "three more would need 56 MiB beside the 16 MiB")
    }

    /// Holds leave every stream the recorder records two segments of its own (the one being written and the last one
    /// sealed): a hold that fits the budget alone but not beside them is refused, saying how much they keep, so holds
    /// made one by one cannot leave retention deleting each new segment as soon as it is sealed.
    @Test func holdsLeaveEveryRecordedStreamTwoSegments() throws {
        let (live, span, segment) = try Self.recorderForHoldsToCome()
        defer { try? live.finish() }
        // Seven segments (56 MiB): within the budget alone, not beside the two segments kept.
        let large = try curl(
            live.control.socketPath, "POST", "/v1/markers", body: Self.hold("large", segments: 1, 7, span: span))
        #expect(large.status == 409, "\(large.body)")
        func number(after words: String) -> Int64? {
            guard let found = large.body.range(of: words) else { return nil }
            return Int64(large.body[found.upperBound...].prefix { $0.isNumber })
        }
        let needed = try #require(number(after: "it needs "), "\(large.body)")
        let reserve = try #require(number(after: "less the "), "\(large.body)")
        #expect(needed == 7 * segment && needed + reserve > 64 << 20, "\(large.body)")
        // Two segments of the size they are sealed at (an eighth of the budget) and the frame that passes it.
        #expect(reserve == 2 * segment, "\(large.body)")
        #expect(large.body.contains("bytes the recorded streams keep for what they record (two segments each)"))
        let kept = try curl(
            live.control.socketPath, "POST", "/v1/markers", body: Self.hold("kept", segments: 1, 4, span: span))
        #expect(kept.status == 201, "\(kept.body)")
    }

    /// Holds asked for at the same moment are counted together: of sixteen that each need four segments (half the
    /// budget), one is kept and fifteen refused, as they would be one after another (twenty rounds, the kept one
    /// deleted after each).
    @Test func holdsAskedAtOnceCountTogether() throws {
        let (live, span, _) = try Self.recorderForHoldsToCome()
        defer { try? live.finish() }
        for round in 0..<20 {
            let kept = Mutex<[Int64]>([])
            let refused = Mutex<Int>(0)
            DispatchQueue.concurrentPerform(iterations: 16) { index in
                let from = Int64((Double(1 + 5 * index) + 0.5) * span)
                let length = Int64(3 * span)
                let request = MarkerRequest(
                    label: "round \(round) hold \(index)", at: "\(from)ns",
                    hold: MarkerRequest.Hold(after: "\(length)ns")
                )
                do {
                    let ids = try ControlClient(directory: live.directory).mark(request)?.markers.map(\.id) ?? []
                    kept.withAnnotatedLock { $0 += ids }
                } catch {
                    if "\(error)".contains("the hold cannot fit") { refused.withAnnotatedLock { $0 += 1 } }
                }
            }
            let ids = kept.withAnnotatedLock { $0 }
            #expect(ids.count == 1 && refused.withAnnotatedLock { $0 } == 15, "round \(round): \(ids) kept")
            for id in ids { _ = try live.client.unmark(id: id) }
        }
    }
}
