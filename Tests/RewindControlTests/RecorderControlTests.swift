import Dispatch
import Foundation
import Glibc
import RewindCapture
import RewindControl
import RewindCore
import RewindMedia
import RewindQuery
import RewindSystem
import RewindTesting
import SegmentStore
import Synchronization
import Testing

/// Saves and clips through the Swift client, against a live recorder.
@Suite(.timeLimit(.minutes(45))) struct RecorderControlTests {
    /// A recorder of two streams of ``CameraFeed`` frames, `front` and `rear`, into a new store, with its control:
    /// the caller appends frames to each stream, and stops the control and finishes the recorder.
    static func frontAndRear() throws -> (directory: String, recorder: Recorder, control: RecorderControl) {
        let directory = try TemporaryDirectory.store()
        let stream = try CameraFeed().stream
        let recorder = try Recorder(
            streams: [
                RecorderStreamSpec(name: "front", stream: stream), RecorderStreamSpec(name: "rear", stream: stream),
            ], store: try SegmentStore.open(directory: directory),
            configuration: RecorderConfiguration(window: .seconds(10), memoryBudget: 64 << 20))
        return (directory, recorder, try RecorderControl(recorder: recorder, directory: directory) { _, _, _ in })
    }

    /// ``frontAndRear()`` with a camera feed per stream and a client of its control.
    final class FrontAndRear {
        let directory: String
        let recorder: Recorder
        let control: RecorderControl
        let client: ControlClient
        /// Both cameras' frame layout.
        let layout: FrameLayout
        private var feeds: [CameraFeed]

        init() throws {
            (directory, recorder, control) = try RecorderControlTests.frontAndRear()
            feeds = [try CameraFeed(), try CameraFeed()]
            client = ControlClient(directory: directory)
            layout = feeds[0].stream.layout
        }

        /// Appends `frames` frames to each stream of `streams` (0: front, 1: rear), a frame of each in turn, each
        /// once the spill stage has room.
        func append(_ frames: Int, to streams: [Int]) throws {
            for _ in 0..<frames {
                for index in streams {
                    recorder.waitForSpillRoom()
                    _ = try feeds[index].appendNext(to: recorder.streams[index])
                }
            }
        }

        func stop() {
            control.stop()
            _ = try? recorder.finish()
        }
    }

    @Test func overlappingSavesEachGetTheirOwnBitExactFileWhileRecordingGoesOn() throws {
        let live = try LiveRecorder()
        live.startProducer()
        let paths = (0..<3).map { "\(live.directory)/clip-\($0).mkv" }
        let replies = Mutex<[Int: SaveObject]>([:])
        let failures = Mutex<[String]>([])
        let group = DispatchGroup()
        for (number, path) in paths.enumerated() {
            DispatchQueue.global().async(group: group) {
                do {
                    let reply = try live.client.save(SaveRequest(last: "1s", path: path, wait: true))
                    replies.withAnnotatedLock { $0[number] = reply }
                } catch {
                    let message = "\(error)"
                    failures.withAnnotatedLock { $0.append(message) }
                }
            }
        }
        try wait(for: group, until: "three overlapping saves are answered")
        try live.finish()
        #expect(failures.withAnnotatedLock { $0 }.isEmpty, "\(failures.withAnnotatedLock { $0 })")
        for (number, path) in paths.enumerated() {
            let reply = try #require(replies.withAnnotatedLock { $0[number] })
            #expect(reply.state == .done)
            #expect(reply.files == [path])
            // One second at 60 fps: 60 consecutive frames, bit-exact, the newest at the time of the request.
            let indexes = try exportedIndexes(path, layout: live.feed.stream.layout)
            #expect(indexes.count == 60 && reply.frames == 60)
            #expect(indexes == live.indexes(from: reply.fromNanoseconds, to: reply.toNanoseconds))
            #expect((indexes.first ?? 0) >= 120)
        }
        #expect(live.log.summaries.withAnnotatedLock { $0 }.compactMap { $0 }.count == 3)
    }

    /// A save or clip to a file another one still writes is a conflict naming it (both said `done` and the file
    /// held the later one); once that one is final, the path is free again.
    @Test func aSaveToAFileAnotherStillWritesIsAConflict() throws {
        let live = try LiveRecorder()
        defer { try? live.finish() }
        let path = "\(live.directory)/same.mkv"
        let first = try #require(try live.client.save(SaveRequest(before: "1s", after: "1h", path: path)))
        #expect(first.state == .waiting)
        // Spelled otherwise: through `.`, a link to its directory, a link to the file (which does not exist yet).
        let alias = "\(live.directory)/alias"
        try FileManager.default.createSymbolicLink(atPath: alias, withDestinationPath: live.directory)
        let link = "\(live.directory)/link.mkv"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: "same.mkv")
        for spelled in [path, "\(live.directory)/./same.mkv", "\(alias)/same.mkv", link] {
            #expect {
                _ = try live.client.save(SaveRequest(last: "1s", path: spelled, wait: true))
            } throws: { error in
                guard case ControlError.refused(let refusal) = error else { return false }
                return refusal.code == .conflict
                    && refusal.message.hasPrefix("save \(first.id) is writing \(path) still: wait for it")
            }
        }
        let other = try live.client.save(SaveRequest(last: "1s", path: "\(live.directory)/other.mkv", wait: true))
        #expect(other?.state == .done)
        _ = try live.client.cancelSave(id: first.id)
        let again = try live.client.save(SaveRequest(last: "1s", path: path, wait: true))
        #expect(again?.state == .done)
    }

    /// A save with pre-roll and post-roll of frames arriving in real time holds exactly the frames from
    /// trigger − before to trigger + after: it waits for the post-roll, and its pre-roll is there although it left
    /// memory meanwhile (the window is 2 s; the post-roll 1.5 s).
    @Test func prePostRollSaveHoldsExactlyTheFramesAroundTheTrigger() throws {
        let live = try LiveRecorder()
        live.startProducer(realtime: true)
        try waitUntil("the real-time producer has appended a second") {
            live.nextIndex.load(ordering: .acquiring) >= 240
        }
        let path = "\(live.directory)/around.mkv"
        let started = try #require(try live.client.save(SaveRequest(before: "1s", after: "1500ms", path: path)))
        #expect(started.state == .waiting)
        // The trigger is the newest frame when the request arrived: the range is (trigger − 1 s, trigger + 1.5 s].
        let trigger = started.toNanoseconds - 1 - 1_500_000_000
        #expect(started.fromNanoseconds == trigger + 1 - 1_000_000_000)
        let triggerIndex = live.index(atPTS: trigger)
        #expect(live.feed.pts(triggerIndex) == trigger, "the trigger is a frame's pts")
        #expect(live.nextIndex.load(ordering: .acquiring) < triggerIndex + 90, "the post-roll is still to come")
        let done = try live.client.waitForSave(id: started.id)
        #expect(done.state == .done, "\(done)")
        #expect(live.nextIndex.load(ordering: .acquiring) > triggerIndex + 90, "it waited for the post-roll")
        try live.finish()
        let indexes = try exportedIndexes(path, layout: live.feed.stream.layout)
        // 1 s before (60 frames, the trigger's included) and 1.5 s after (90 frames).
        #expect(indexes == Array((triggerIndex - 59)...(triggerIndex + 90)))
        #expect(done.frames == 150)
        #expect(done.progress == 1)
    }

    /// Without a store memory is the only copy: the pre-roll is pinned when the save is made, so it is exported
    /// although the window (1 s) moved past it while the post-roll (1.5 s) was recorded.
    @Test func withoutAStoreThePreRollIsPinnedInMemory() throws {
        let live = try LiveRecorder(window: .seconds(1), spill: .off)
        let path = "\(live.directory)/memory.mkv"
        let save = try #require(try live.client.save(SaveRequest(before: "900ms", after: "1500ms", path: path)))
        live.startProducer()
        let done = try live.client.waitForSave(id: save.id)
        #expect(done.state == .done, "\(done)")
        try live.finish()
        // The trigger is frame 179: 54 frames before (its own included) and 90 after.
        #expect(try exportedIndexes(path, layout: live.feed.stream.layout) == Array(126...269))
    }

    /// The same for a save of every stream (`all`): each stream's pre-roll is pinned.
    @Test func withoutAStoreThePreRollOfEveryStreamIsPinned() throws {
        let live = try LiveRecorder(window: .seconds(1), spill: .off)
        let path = "\(live.directory)/memory-all.mkv"
        let save = try #require(
            try live.client.save(SaveRequest(stream: "all", before: "900ms", after: "1500ms", path: path)))
        live.startProducer()
        let done = try live.client.waitForSave(id: save.id)
        #expect(done.state == .done, "\(done)")
        try live.finish()
        #expect(try exportedIndexes(path, layout: live.feed.stream.layout) == Array(126...269))
    }

    /// Without a store, a save whose post-roll cannot fit in memory beside its pinned frames (the ring lets new
    /// frames go, or drops them as `pinned frames`, and the recorder clock stops with them) is cut short: written
    /// at once with every frame up to the last it holds, its end moved there, instead of waiting for ever.
    @Test func withoutAStoreASaveThatFillsMemoryIsWrittenShort() throws {
        let live = try LiveRecorder(window: .seconds(1), spill: .off)
        let path = "\(live.directory)/full.mkv"
        let save = try #require(try live.client.save(SaveRequest(before: "900ms", after: "1h", path: path)))
        live.startProducer()
        let done = try live.client.waitForSave(id: save.id)
        #expect(done.state == .done, "\(done)")
        try live.finish()
        let indexes = try exportedIndexes(path, layout: live.feed.stream.layout)
        #expect(indexes.first == 126 && indexes.count > 200)
        let missing = Set(126...indexes.last!).subtracting(indexes).sorted()
        #expect(missing.isEmpty, "every frame up to where memory filled; missing \(missing.prefix(20))")
        let last = try #require(done.lastPTSNanoseconds)
        #expect(last == live.feed.pts(indexes.last!))
        #expect(done.toNanoseconds == last + 1 && done.toNanoseconds < save.toNanoseconds, "the end moved")
    }

    /// `since_last_save` knows each stream's last save, whether it was saved alone or in a save of `all`: a save of
    /// one stream after one of `all` starts where that ended, and a save of `all` starts where the stream saved least
    /// recently ended, so no frame of any stream is missed.
    @Test func sinceLastSaveFollowsEachStreamThroughSavesOfAll() throws {
        let (directory, recorder, control) = try Self.frontAndRear()
        var feeds = [try CameraFeed(), try CameraFeed()]
        defer {
            control.stop()
            _ = try? recorder.finish()
        }
        func record(_ frames: Int) throws {
            for _ in 0..<frames {
                for index in feeds.indices { _ = try feeds[index].appendNext(to: recorder.streams[index]) }
            }
        }
        func save(_ stream: String, since: Bool) throws -> SaveObject {
            let request = SaveRequest(
                stream: stream, last: "1s", path: "\(directory)/exports/\(UUID().uuidString).mkv", wait: true,
                sinceLastSave: since ? true : nil)
            let object = try #require(try ControlClient(directory: directory).save(request))
            #expect(object.state == .done, "\(object)")
            return object
        }
        try FileManager.default.createDirectory(atPath: directory + "/exports", withIntermediateDirectories: true)
        try record(120)
        let all = try save("all", since: false)
        try record(30)
        let front = try save("front", since: true)
        // Right after front's last frame in the save of all (its newest then, so within a frame of that save's end).
        #expect(front.fromNanoseconds <= all.toNanoseconds && front.fromNanoseconds > all.toNanoseconds - 16_666_667)
        try record(30)
        let both = try save("all", since: true)
        // Rear was saved last by the save of all: right after its last frame in it.
        #expect(both.fromNanoseconds <= all.toNanoseconds && both.fromNanoseconds > all.toNanoseconds - 16_666_667)
        #expect(both.toNanoseconds > front.toNanoseconds)
    }

    /// A save whose gaps the index cannot give (its `gaps` table renamed away by another program) is done and keeps
    /// every frame of its range, with no `lost` (an empty one would say nothing was lost) and a `lost_unknown`
    /// naming the index; a save going on from the last one alike.
    @Test func aSaveWhoseGapsCannotBeReadIsKeptWithItsLossesUnknown() throws {
        let live = try LiveRecorder()
        defer { try? live.finish() }
        let layout = live.feed.stream.layout
        let readable = try #require(try live.client.save(SaveRequest(last: "250ms", wait: true)))
        #expect(readable.lost == [] && readable.lostUnknown == nil, "\(readable)")
        _ = try ExternalTools.run(
            "sqlite3", [live.directory + "/index.sqlite", ".timeout 10000", "ALTER TABLE gaps RENAME TO away"])
        let last = try #require(try live.client.save(SaveRequest(last: "250ms", wait: true)))
        var feed = live.feed
        for _ in 0..<30 {
            live.recorder.waitForSpillRoom()
            _ = try feed.appendNext(to: live.recorder)
        }
        let since = try #require(try live.client.save(SaveRequest(wait: true, sinceLastSave: true)))
        for (save, indexes) in [(last, Array(Int64(165)..<180)), (since, Array(Int64(180)..<210))] {
            #expect(save.state == .done, "\(save)")
            #expect(save.lost == nil, "\(save)")
            let reason = save.lostUnknown ?? ""
            #expect(reason.contains("/index.sqlite") && reason.contains("no such table: gaps"), "\(save)")
            #expect(try exportedIndexes(save.files[0], layout: layout) == indexes)
        }
    }

    /// `since_last_save` without `last`/`before` starts right where the last save ended, even when the window has
    /// let those frames go (they come from the disk), so consecutive saves miss nothing; `last` still caps it. The
    /// end is kept in the store: the next run goes on from it.
    @Test func sinceLastSaveMissesNothingBeyondTheWindowAndAcrossARestart() throws {
        let directory: String
        let lastEnd: Int64
        do {
            let live = try LiveRecorder()
            defer { try? live.finish() }
            directory = live.directory
            let first = try #require(try live.client.save(SaveRequest(last: "250ms", wait: true)))
            #expect(try exportedIndexes(first.files[0], layout: live.feed.stream.layout) == Array(165..<180))
            // 5 s more, past the 2 s window.
            var feed = live.feed
            for _ in 0..<300 {
                live.recorder.waitForSpillRoom()
                _ = try feed.appendNext(to: live.recorder)
            }
            let since = try #require(try live.client.save(SaveRequest(wait: true, sinceLastSave: true)))
            #expect(since.fromNanoseconds == first.toNanoseconds)
            #expect(since.lost == [], "nothing was deleted since the last save: \(since)")
            #expect(try exportedIndexes(since.files[0], layout: live.feed.stream.layout) == Array(180..<480))
            for _ in 0..<120 {
                live.recorder.waitForSpillRoom()
                _ = try feed.appendNext(to: live.recorder)
            }
            let capped = try #require(try live.client.save(SaveRequest(last: "500ms", wait: true, sinceLastSave: true)))
            #expect(try exportedIndexes(capped.files[0], layout: live.feed.stream.layout) == Array(570..<600))
            lastEnd = capped.toNanoseconds
        }
        let stored = try SegmentStore.openReadOnly(directory: directory)
        #expect(try stored.index.info("last_saved_end_ns:camera") == String(lastEnd))
        // The next run on the store: nothing new since that save, which it knows.
        let again = try LiveRecorder(directory: directory, prefill: 0)
        defer { try? again.finish() }
        #expect {
            _ = try again.client.save(SaveRequest(wait: true, sinceLastSave: true))
        } throws: { error in
            guard case ControlError.refused(let refusal) = error else { return false }
            return refusal.code == .conflict && refusal.message.contains("nothing new since the last save")
        }
    }

    /// Retention deleting frames after the last save before the next `since_last_save` one: the next save says where,
    /// a `retention` gap from its start to the oldest frame left (it went on from there with exit 0, the stretch
    /// between missed unseen); with nothing deleted, no such gap. So too when a hold keeps older frames than the
    /// last save's end (the hole is then behind them: the oldest frame left hid it).
    @Test(arguments: [false, true]) func sinceLastSaveSaysWhatRetentionDeletedSinceTheLastSave(held: Bool) throws {
        let live = try LiveRecorder.onASmallDisk()
        defer { try? live.finish() }
        let store = try #require(live.recorder.store)
        try waitUntil("the spill wrote every frame") { try store.summary().lastPTS == live.feed.pts(179) }
        if held {
            // The oldest stored frames, held: older than the last save's end, and kept.
            let oldest = Double(try #require(try store.summary().firstPTS)) / 1e9
            let hold = MarkerRequest.Hold(before: "1ms", after: "100ms")
            _ = try #require(try live.client.mark(MarkerRequest(label: "keep", at: "\(oldest)s", hold: hold)))
        }
        let end = try #require(try live.client.save(SaveRequest(last: "100ms", wait: true))).toNanoseconds
        var feed = live.feed
        let source = ClipSource.store(store, stream: try store.streams()[0])
        // Until frames half a second past the save's end are stored and those before them deleted, and gone from
        // memory too (a save reads them there: nothing is lost while the ring holds them, as when the encoder stores
        // chunks raw on a busy machine and the small disk holds fewer frames).
        func inMemory() -> Bool {
            (live.recorder.streams[0].ring.statistics.firstPTSNanoseconds ?? .max) < end + 500_000_000
        }
        while try source.hasFrames(in: end..<(end + 500_000_000))
            || !source.hasFrames(in: (end + 500_000_000)..<Int64.max) || inMemory()
        {
            live.recorder.waitForSpillRoom()
            _ = try feed.appendNext(to: live.recorder)
        }
        let since = try #require(try live.client.save(SaveRequest(wait: true, sinceLastSave: true)))
        #expect(since.state == .done, "\(since)")
        let deleted = (since.lost ?? []).filter { $0.reason == "retention" }
        #expect(deleted.count == 1, "\(since)")
        #expect(deleted.first?.startNanoseconds == since.fromNanoseconds, "\(deleted)")
        #expect(deleted.first?.endNanoseconds == since.firstPTSNanoseconds, "to the file's first frame: \(since)")
        #expect((since.firstPTSNanoseconds ?? 0) > end, "frames after the last save were deleted: \(since)")
    }

    /// A done save that is deleted (its client could not deliver it) no longer counts for `since_last_save`: the
    /// next such save goes on from the save before it, in memory and in the store.
    @Test func aDeletedDoneSaveDoesNotCountForSinceLastSave() throws {
        let live = try LiveRecorder()
        defer { try? live.finish() }
        let layout = live.feed.stream.layout
        let first = try #require(try live.client.save(SaveRequest(last: "250ms", wait: true)))
        var feed = live.feed
        for _ in 0..<30 {
            live.recorder.waitForSpillRoom()
            _ = try feed.appendNext(to: live.recorder)
        }
        let undelivered = try #require(try live.client.save(SaveRequest(wait: true, sinceLastSave: true)))
        #expect(try exportedIndexes(undelivered.files[0], layout: layout) == Array(180..<210))
        #expect(try live.client.cancelSave(id: undelivered.id)?.state == .done)
        #expect(try live.recorder.store!.index.info("last_saved_end_ns:camera") == String(first.toNanoseconds))
        for _ in 0..<30 {
            live.recorder.waitForSpillRoom()
            _ = try feed.appendNext(to: live.recorder)
        }
        let next = try #require(try live.client.save(SaveRequest(wait: true, sinceLastSave: true)))
        #expect(next.fromNanoseconds == first.toNanoseconds)
        #expect(try exportedIndexes(next.files[0], layout: layout) == Array(180..<240))
    }

    /// A save whose post-roll does not come because the disk fell behind (a write takes 20 s while the camera goes
    /// on, its frames dropped as `spill behind`) is cut short as `disk_behind`, and the status does not call the
    /// input stalled: both blamed the input, which went on sending.
    @Test func aSaveHeldUpByASlowDiskBlamesTheDiskNotTheInput() throws {
        let disk = FaultInjectingFileSystem()
        let live = try LiveRecorder(options: StoreOptions(fileSystem: disk))
        defer {
            disk.setWriteDelay(.zero)
            try? live.finish()
        }
        let store = try #require(live.recorder.store)
        try waitUntil("the frames so far are on disk") { try store.summary().frames == 180 }
        disk.setWriteDelay(.seconds(20))
        live.startProducer(realtime: true)
        let save = try #require(try live.client.save(SaveRequest(before: "250ms", after: "5s", wait: true)))
        disk.setWriteDelay(.zero)
        #expect(save.cutShort == .diskBehind, "\(save)")
        #expect(save.stalledStreams == [live.recorder.streams[0].name], "\(save)")
        let stream = try #require(try live.client.status()?.streams.first)
        #expect(!stream.inputStalled, "\(stream)")
        #expect((stream.drops["spill behind"] ?? 0) > 0, "\(stream.drops)")
    }

    /// Each save's events come in the order of its states, however many are asked for at once: `waiting`, then
    /// `exporting`, then `done` (a save's `waiting` event, published once the book let go of it, came after the
    /// `exporting` event of the export the control's thread started meanwhile).
    @Test func eachSavesEventsComeInTheOrderOfItsStates() throws {
        let live = try LiveRecorder()
        defer { try? live.finish() }
        let events = EventFollower(live.client)
        try waitUntil("the events client is connected", interval: .milliseconds(2)) { live.control.eventClients == 1 }
        let saves = 48
        DispatchQueue.concurrentPerform(iterations: saves) { _ in
            _ = try? live.client.save(SaveRequest(last: "50ms", format: "y4m"))
        }
        func states() -> [Int: [String]] {
            var byID: [Int: [String]] = [:]
            for event in events.received.withAnnotatedLock({ $0 }) where event.name == "save" {
                guard let object = try? JSONDecoder().decode(SaveObject.self, from: Data(event.data.utf8)) else {
                    continue
                }
                byID[object.id, default: []].append(object.state.rawValue)
            }
            return byID
        }
        try waitUntil("every save is done") { states().values.filter { $0.last == "done" }.count == saves }
        for (id, order) in states() {
            #expect(order == ["waiting", "exporting", "done"], "save \(id): \(order)")
        }
    }

    /// A save still waiting for its post-roll when the recorder stops is written with what there is, and its
    /// `to_ns` says where it ended (the newest frame), not the end it asked for.
    @Test func aSaveCutShortByTheStopSaysWhereItEnded() throws {
        let live = try LiveRecorder()
        defer { try? live.finish() }
        let events = EventFollower(live.client)
        try waitUntil("the events client is connected", interval: .milliseconds(2)) { live.control.eventClients == 1 }
        let waiting = try #require(try live.client.save(SaveRequest(before: "250ms", after: "10s")))
        #expect(waiting.state == .waiting)
        live.control.stop()
        try waitUntil("the save's last event comes") {
            events.received.withAnnotatedLock {
                $0.contains { $0.name == "save" && $0.data.contains(#""state":"done""#) }
            }
        }
        let done = try #require(
            events.received.withAnnotatedLock { $0.last { $0.name == "save" && $0.data.contains(#""state":"done""#) } })
        let object = try JSONDecoder().decode(SaveObject.self, from: Data(done.data.utf8))
        let last = try #require(object.lastPTSNanoseconds)
        #expect(last == live.feed.pts(179), "the newest frame")
        #expect(object.toNanoseconds == last + 1 && object.toNanoseconds < waiting.toNanoseconds, "\(object)")
        #expect(try exportedIndexes(object.files[0], layout: live.feed.stream.layout) == Array(165..<180))
    }

    /// A stream behind the others (its frames come in late) gets its late frames in the next `since_last_save`
    /// save, which goes on after its last frame written, not after the save's end; a clip moves no save's end.
    @Test func sinceLastSaveGoesOnAfterEachStreamsLastFrameAndNotAfterAClip() throws {
        let cameras = try FrontAndRear()
        defer { cameras.stop() }
        let (directory, client, layout) = (cameras.directory, cameras.client, cameras.layout)
        try FileManager.default.createDirectory(atPath: directory + "/exports", withIntermediateDirectories: true)
        func saveRear(since: Bool) throws -> SaveObject {
            let request = SaveRequest(
                stream: "rear", last: "1s", path: "\(directory)/exports/\(UUID().uuidString).mkv", wait: true,
                sinceLastSave: since ? true : nil)
            return try #require(try client.save(request))
        }
        try cameras.append(60, to: [0, 1])
        // The front stream half a second ahead: the save's end is the front's newest frame.
        try cameras.append(30, to: [0])
        let first = try saveRear(since: false)
        let firstIndexes = try exportedIndexes(first.files[0], layout: layout)
        #expect(firstIndexes.last == 59, "\(firstIndexes)")
        // The rear's frames 60…89 come in now, with times before that save's end.
        try cameras.append(30, to: [1])
        let clip = try #require(
            try client.clip(
                ClipRequest(stream: "rear", from: "0s", to: "10s", path: "\(directory)/exports/clip.mkv", wait: true)))
        #expect(clip.state == .done)
        let next = try saveRear(since: true)
        #expect(try exportedIndexes(next.files[0], layout: layout) == Array(60..<90))
    }

    /// `since_last_save` of `all` goes on from the streams that were saved: one never saved does not send it back
    /// to the window, and one whose input ended after its last frame was saved does not hold the others at its end
    /// (a save of it alone then has nothing new: 409).
    @Test func sinceLastSaveOfAllIsNotHeldByAStreamNeverSavedOrOneThatEnded() throws {
        let cameras = try FrontAndRear()
        defer { cameras.stop() }
        let (directory, client, layout) = (cameras.directory, cameras.client, cameras.layout)
        /// The frame indexes of each stream's file in a save of `all` since the last save (nil: no file).
        func saveAllSince() throws -> [String: [Int64]] {
            let path = "\(directory)/\(UUID().uuidString).y4m"
            let save = try #require(
                try client.save(SaveRequest(stream: "all", format: "y4m", path: path, wait: true, sinceLastSave: true)))
            var indexes: [String: [Int64]] = [:]
            for file in save.files {
                let stream = file.hasSuffix(".front.y4m") ? "front" : "rear"
                indexes[stream] = try exportedIndexes(file, layout: layout)
            }
            return indexes
        }
        try cameras.append(60, to: [0, 1])
        let front = try #require(
            try client.save(SaveRequest(stream: "front", last: "1s", path: "\(directory)/front.mkv", wait: true)))
        #expect(try exportedIndexes(front.files[0], layout: layout).last == 59)
        try cameras.append(30, to: [0, 1])
        // The rear's first frame came a little after the front's (its clock is offset by that): its frame 59 is
        // after the front's end too.
        let first = try saveAllSince()
        #expect(first["front"] == Array(60..<90), "from the front's end, not the window: \(first)")
        #expect(first["rear"]?.suffix(30) == Array(60..<90) && first["rear"]!.first! >= 59, "\(first)")
        // The rear's input ends; the front goes on. (A stream saved more recently than the one saved least recently
        // may see its newest frames again: here the rear's frame 89, after the front's end.)
        try cameras.append(30, to: [0])
        let second = try saveAllSince()
        #expect(second["front"] == Array(90..<120), "\(second)")
        #expect(second["rear"] == nil || second["rear"] == [89], "\(second)")
        try cameras.append(30, to: [0])
        let third = try saveAllSince()
        #expect(third["front"] == Array(120..<150), "not from the rear's end again: \(third)")
        // One .mkv of both: the rear, without frames in the range, has no track, and the save says so.
        let both = try #require(
            try client.save(SaveRequest(stream: "all", last: "500ms", path: "\(directory)/both.mkv", wait: true)))
        #expect(both.tracks == ["front"], "\(both)")
        #expect(try ExternalTools.probe(both.files[0], ["-show_entries", "stream=codec_type"]) == [["video"]])
        #expect {
            _ = try client.save(
                SaveRequest(stream: "rear", path: "\(directory)/rear.mkv", wait: true, sinceLastSave: true))
        } throws: { error in
            guard case ControlError.refused(let refusal) = error else { return false }
            return refusal.code == .conflict && refusal.message.contains("nothing new since the last save")
        }
    }

    /// A save of `all` to `.y4m` writes a file per stream: each is checked like `path` itself, so a FIFO or a link
    /// into the store among them is refused (400) before anything is written, and no export waits on a FIFO.
    @Test func everyFileOfASaveOfAllIsChecked() throws {
        let (directory, recorder, control) = try Self.frontAndRear()
        var feeds = [try CameraFeed(), try CameraFeed()]
        defer {
            control.stop()
            _ = try? recorder.finish()
        }
        for _ in 0..<60 {
            for index in feeds.indices { _ = try feeds[index].appendNext(to: recorder.streams[index]) }
        }
        let client = ControlClient(directory: directory)
        try #require(mkfifo(directory + "/fifo.rear.y4m", 0o600) == 0)
        try FileManager.default.createSymbolicLink(
            atPath: directory + "/link.front.y4m", withDestinationPath: directory + "/index.sqlite")
        for (name, words) in [("fifo", "fifo.rear.y4m' is a FIFO"), ("link", "link.front.y4m' would write")] {
            #expect {
                _ = try client.save(
                    SaveRequest(stream: "all", last: "1s", format: "y4m", path: "\(directory)/\(name).y4m", wait: true))
            } throws: { error in
                guard case ControlError.refused(let refusal) = error else { return false }
                return refusal.code == .badRequest && refusal.message.contains(words)
            }
        }
    }

    /// `disk_bytes` is what the segment files take on disk now (the figure `--disk` bounds), headers and records and
    /// all: not the frames' stored payload, which is less.
    @Test func diskBytesAreWhatTheSegmentFilesTake() throws {
        let live = try LiveRecorder()
        defer { try? live.finish() }
        let store = try #require(live.recorder.store)
        try waitUntil("every frame is durable") { try store.summary().frames == 180 }
        let status = try #require(try live.client.status())
        let segments = live.directory + "/segments"
        let sizes = try FileManager.default.contentsOfDirectory(atPath: segments).reduce(Int64(0)) {
            $0
                + ((try FileManager.default.attributesOfItem(atPath: segments + "/" + $1)[.size] as? NSNumber)?
                    .int64Value ?? 0)
        }
        #expect(status.diskBytes == sizes)
        #expect(sizes > (try store.summary().storedBytes))
    }

    /// A `gap` event gives its times on the recorder clock, like every `*_ns` of the API: for a stream whose first
    /// frame came later than another's, its pts plus the stream's clock offset.
    @Test func gapEventsSpeakRecorderTime() throws {
        let (directory, recorder, control) = try Self.frontAndRear()
        var front = try CameraFeed()
        var rear = try CameraFeed()
        defer {
            control.stop()
            _ = try? recorder.finish()
        }
        let events = EventFollower(ControlClient(directory: directory))
        try waitUntil("the events client is connected") { control.eventClients == 1 }
        for _ in 0..<10 { _ = try front.appendNext(to: recorder.streams[0]) }
        Thread.sleep(forTimeInterval: 0.3)
        // The rear camera starts 0.3 s later and then misses 20 frames: an `input interval` gap after frame 9.
        for _ in 0..<10 { _ = try rear.appendNext(to: recorder.streams[1]) }
        _ = try rear.appendNext(to: recorder.streams[1], skip: 20)
        let clock = try #require(recorder.streams[1].clock)
        try #require(clock.offsetNanoseconds > 100_000_000, "the rear stream's clock is offset: \(clock)")
        let data = try events.first("gap")
        #expect(data["stream"] as? String == "rear")
        #expect(data["reason"] as? String == "input interval")
        #expect((data["start_ns"] as? NSNumber)?.int64Value == clock.recorderTime(ofPTS: rear.pts(9)), "\(data)")
        #expect((data["end_ns"] as? NSNumber)?.int64Value == clock.recorderTime(ofPTS: rear.pts(30)), "\(data)")
        // The stretch goes on (20 more frames missed after one): one row, its end moved, and the event sent again
        // with the gap as it stands now.
        _ = try rear.appendNext(to: recorder.streams[1], skip: 20)
        let moved = try events.event("gap", number: 1)
        #expect((moved["start_ns"] as? NSNumber)?.int64Value == clock.recorderTime(ofPTS: rear.pts(9)), "\(moved)")
        #expect((moved["end_ns"] as? NSNumber)?.int64Value == clock.recorderTime(ofPTS: rear.pts(51)), "\(moved)")
        #expect(try recorder.store?.gaps(streamName: "rear").count == 1)
    }

    /// A stream whose input failed shows an `input failed` gap in its timeline from its last frame on while the
    /// recorder still runs (the gap row itself is written when it stops), and an `input_failed` event tells the
    /// clients following events when it happens.
    @Test func aFailedInputShowsInTheTimelineAndTheEventsWhileRecording() throws {
        let live = try LiveRecorder()
        defer { try? live.finish() }
        let events = EventFollower(live.client)
        try waitUntil("the events client is connected") { live.control.eventClients == 1 }
        struct Broken: Error, CustomStringConvertible {
            var description: String { "frame 180 is cut short" }
        }
        live.recorder.streams[0].noteInputFailed(Broken())
        let data = try events.first("input_failed")
        #expect(data["stream"] as? String == "camera")
        #expect(data["message"] as? String == "frame 180 is cut short")
        #expect((data["last_pts_ns"] as? NSNumber)?.int64Value == live.feed.pts(179), "\(data)")
        let end = live.feed.pts(179) + 1_000_000_000
        let answer = try curl(
            live.control.socketPath, "GET", "/v1/streams/camera/timeline?from=0ns&to=\(end)ns&buckets=4")
        #expect(answer.status == 200, "\(answer.body)")
        let timeline = try decode(TimelineResponse.self, answer.body)
        #expect(timeline.buckets.first?.gaps.isEmpty == true, "\(timeline.buckets)")
        #expect(timeline.buckets.last?.gaps == ["input failed"], "\(timeline.buckets)")
        // Not in the future: past where the recording has reached (the newest frame, or the clock's now, well under
        // 100 s after it started), nothing is marked.
        let far = try curl(
            live.control.socketPath, "GET", "/v1/streams/camera/timeline?from=0ns&to=1000s&buckets=10")
        let buckets = try decode(TimelineResponse.self, far.body).buckets
        #expect(buckets.first?.gaps == ["input failed"], "\(buckets)")
        #expect(buckets.dropFirst().allSatisfy { $0.gaps.isEmpty }, "\(buckets)")
    }

    /// A stream of the store that the recorder does not record (an earlier recording's camera) is listed as not
    /// recording, and its timeline, frames and clips are read from the disk; saves of the last seconds and markers
    /// of it are refused, saying that a clip of it works.
    /// A 160×96 30 fps camera whose first `count` frames a store holds as stream `rear` (pts from 0, recorder time =
    /// pts), made in a new store directory; the recorder that opens it next does not record it.
    static func storeRearCamera(frames count: Int) throws -> (directory: String, rear: SyntheticCamera) {
        let directory = try TemporaryDirectory.store()
        let rear = SyntheticCamera(
            layout: try FrameLayout(format: .nv12, width: 160, height: 96),
            frameDuration: FrameTime(value: 1, timescale: 30), frameCount: count)
        let store = try SegmentStore.open(directory: directory)
        let writer = try store.makeWriter(streamName: "rear", stream: rear.stream)
        try rearFrames(rear, count) { try writer.append($0) }
        try writer.close()
        return (directory, rear)
    }

    /// The first `count` frames of `rear`, one at a time.
    static func rearFrames(_ rear: SyntheticCamera, _ count: Int, _ body: (FrameView) throws -> Void) throws {
        var bytes = [UInt8](repeating: 0, count: rear.stream.layout.byteCount)
        for index in 0..<count {
            try bytes.withUnsafeMutableBytes { buffer in
                let info = try rear.frame(at: Int64(index), into: buffer)
                try body(FrameView(layout: rear.stream.layout, info: info, bytes: UnsafeRawBufferPointer(buffer)))
            }
        }
    }

    @Test func aStoredStreamTheRecorderDoesNotRecordHasItsTimelineAndFrames() throws {
        let (directory, rear) = try Self.storeRearCamera(frames: 60)
        let live = try LiveRecorder(directory: directory)
        defer { try? live.finish() }

        let list = try decode(StreamList.self, try curl(live.control.socketPath, "GET", "/v1/streams").body)
        #expect(list.streams.map(\.name) == ["camera", "rear"])
        #expect(list.streams.map(\.recording) == [true, false])
        #expect(list.streams.last?.width == 160 && list.streams.last?.height == 96)
        // The synthetic cameras' colour and square pixels; their chroma siting is not said.
        #expect(
            list.streams.map(\.colorMatrix) == ["bt709", "bt709"]
                && list.streams.map(\.colorRange) == ["video", "video"])
        #expect(list.streams.map(\.chromaSiting) == ["unspecified", "unspecified"])
        #expect(list.streams.map(\.pixelAspect) == ["1:1", "1:1"])
        // The rear camera's 30 fps exactly, as the store keeps it.
        #expect(list.streams.last?.frameDurationValue == 1 && list.streams.last?.frameDurationTimescale == 30)

        // Frames 0…59 of the rear camera cover 0 … 2 s on the recorder clock: on disk, none in memory.
        let answer = try curl(
            live.control.socketPath, "GET", "/v1/streams/rear/timeline?from=0s&to=4s&buckets=4")
        #expect(answer.status == 200, "\(answer.body)")
        let timeline = try decode(TimelineResponse.self, answer.body)
        #expect(timeline.stream == "rear")
        #expect(timeline.buckets.map { ($0.disk * 1000).rounded() / 1000 } == [1, 1, 0, 0], "\(timeline.buckets)")
        #expect(timeline.buckets.allSatisfy { $0.memory == 0 }, "\(timeline.buckets)")

        let frame = try curl(live.control.socketPath, "GET", "/v1/streams/rear/frame?at=1s&format=png")
        #expect(frame.status == 200 && frame.body.dropFirst().hasPrefix("PNG"), "\(frame.status)")
        let after = try curl(live.control.socketPath, "GET", "/v1/streams/rear/frame?at=3s&step=after")
        #expect(after.status == 404, "no frame after the rear camera's last: \(after.body)")
        #expect(after.body.contains("no frame of 'rear' after 3.000s"), "as the time was asked: \(after.body)")
        let odd = try curl(live.control.socketPath, "GET", "/v1/streams/rear/frame?at=3000000001ns&step=after")
        #expect(odd.body.contains("after 3000000001ns"), "to the nanosecond where that would round: \(odd.body)")
        let far = try curl(live.control.socketPath, "GET", "/v1/streams/rear/frame?at=99999d&step=after")
        #expect(far.status == 404 && far.body.contains("after 99999d"), "beyond the clock, as given: \(far.body)")

        // A clip of its first second: frames 0…29, the stored frames bit for bit.
        let clipPath = directory + "/rear.mkv"
        let clip = try curl(
            live.control.socketPath, "POST", "/v1/clips",
            body: #"{"stream":"rear","from":"0s","to":"1s","wait":true,"path":"\#(clipPath)"}"#)
        #expect(clip.status == 200, "\(clip.body)")
        let saved = try decode(SaveObject.self, clip.body)
        #expect(saved.state == .done && saved.frames == 30 && saved.stream == "rear", "\(saved)")
        let reference = directory + "/rear-reference.y4m"
        let writer = try Y4MWriter(stream: rear.stream, destination: .path(reference))
        try Self.rearFrames(rear, 30) { try writer.write($0) }
        _ = try writer.finish()
        let exported = try ExternalTools.frameMD5s(clipPath, pixelFormat: "yuv420p")
        let expected = try ExternalTools.frameMD5s(reference, pixelFormat: "yuv420p")
        #expect(exported.count == 30 && exported == expected)
        // Nothing is written among the store's own files, also through a symbolic link.
        try FileManager.default.createSymbolicLink(
            atPath: directory + "/index.mkv", withDestinationPath: directory + "/index.sqlite")
        for inside in ["/segments/x.mkv", "/index.mkv"] {
            let refused = try curl(
                live.control.socketPath, "POST", "/v1/clips",
                body: #"{"stream":"rear","from":"0s","to":"1s","format":"mkv","path":"\#(directory + inside)"}"#)
            #expect(refused.status == 400 && refused.body.contains("inside the store"), "\(inside): \(refused.body)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory + "/segments/x.mkv"))
        for (path, body) in [
            ("/v1/saves", #"{"stream":"rear","last":"1s"}"#), ("/v1/markers", #"{"stream":"rear","label":"x"}"#),
        ] {
            let refused = try curl(live.control.socketPath, "POST", path, body: body)
            #expect(refused.status == 404 && refused.body.contains("a clip of 'rear'"), "\(path): \(refused.body)")
        }
        let unknownClip = try curl(
            live.control.socketPath, "POST", "/v1/clips", body: #"{"stream":"side","from":"0s","to":"1s"}"#)
        #expect(unknownClip.status == 404 && unknownClip.body.contains("also holds 'rear'"), "\(unknownClip.body)")
        let unknown = try curl(live.control.socketPath, "GET", "/v1/streams/side/timeline?from=0s&to=1s")
        #expect(unknown.status == 404 && unknown.body.contains("its store also holds 'rear'"), "\(unknown.body)")
    }

    /// A clip of a stored stream reads all of it from the disk at once: also past the recorded stream's newest
    /// frame (the stored frames were recorded faster than real time), and while the recorded stream has no frame
    /// yet (no recorder clock to wait for).
    @Test(arguments: [180, 0])
    func aClipOfAStoredStreamIsNotBoundByTheRecordedStream(prefill: Int) throws {
        let (directory, _) = try Self.storeRearCamera(frames: 150)
        let live = try LiveRecorder(directory: directory, prefill: prefill)
        defer { try? live.finish() }
        let path = directory + "/late.mkv"
        let clip = try curl(
            live.control.socketPath, "POST", "/v1/clips",
            body: #"{"stream":"rear","from":"3500ms","to":"4500ms","wait":true,"path":"\#(path)"}"#,
            extra: ["--max-time", "20"])
        #expect(clip.status == 200, "\(clip.body)")
        let saved = try decode(SaveObject.self, clip.body)
        #expect(saved.state == .done && saved.frames == 30, "\(saved)")
        let first = saved.firstPTSNanoseconds ?? 0
        #expect(first >= 3_500_000_000 && first < 3_534_000_000, "\(saved)")
    }

    /// A recorder that runs for months remembers only its newest finished saves: older ones leave the list (and
    /// their downloads are not found), their files stay.
    @Test func onlyTheNewestFinishedSavesAreRemembered() throws {
        var limits = HTTPLimits()
        limits.finishedSavesKept = 3
        let live = try LiveRecorder(limits: limits)
        defer { try? live.finish() }
        var paths: [String] = []
        for index in 0..<5 {
            let path = "\(live.directory)/kept\(index).mkv"
            let save = try #require(try live.client.save(SaveRequest(last: "100ms", path: path, wait: true)))
            #expect(save.state == .done)
            paths.append(path)
        }
        let listed = try decode(SaveList.self, try curl(live.control.socketPath, "GET", "/v1/saves").body)
        #expect(listed.saves.map(\.id) == [3, 4, 5], "\(listed.saves.map(\.id))")
        #expect(try curl(live.control.socketPath, "GET", "/v1/files/1").status == 404)
        #expect(try curl(live.control.socketPath, "GET", "/v1/files/5").status == 200)
        #expect(paths.allSatisfy { FileManager.default.fileExists(atPath: $0) })
    }

    @Test func extendGrowsAWaitingSaveAndCancelRemovesIt() throws {
        let live = try LiveRecorder()
        // No producer yet: the saves wait for frames that have not come.
        let path = "\(live.directory)/extended.mkv"
        let save = try #require(try live.client.save(SaveRequest(before: "500ms", after: "500ms", path: path)))
        #expect(save.state == .waiting)
        let extended = try #require(try live.client.extendSave(id: save.id, after: "500ms"))
        #expect(extended.toNanoseconds == save.toNanoseconds + 500_000_000)
        #expect(extended.state == .waiting)

        let doomedPath = "\(live.directory)/cancelled.mkv"
        let doomed = try #require(try live.client.save(SaveRequest(before: "1s", after: "10s", path: doomedPath)))
        #expect(doomed.files == [doomedPath], "a waiting save lists the file it will write")
        let cancelled = try #require(try live.client.cancelSave(id: doomed.id))
        #expect(cancelled.state == .cancelled)
        #expect(cancelled.files.isEmpty, "a cancelled save wrote no file: \(cancelled.files)")
        #expect(try live.client.save(id: doomed.id)?.files.isEmpty == true)
        #expect(!FileManager.default.fileExists(atPath: doomedPath))
        // Extending what is no longer waiting is a conflict; an unknown id is not found.
        #expect(
            throws: ControlError.refused(
                APIError(.conflict, "save \(doomed.id) is cancelled: only a waiting save can grow"))
        ) {
            try live.client.extendSave(id: doomed.id, after: "1s")
        }
        do {
            _ = try live.client.extendSave(id: 999, after: "1s")
            Issue.record("extending an unknown save succeeded")
        } catch ControlError.refused(let error) {
            #expect(error.code == .notFound)
        }

        live.startProducer()
        let done = try live.client.waitForSave(id: save.id)
        #expect(done.state == .done)
        try live.finish()
        // 0.5 s before and 1 s after the trigger (frame 179): frames 150…239.
        #expect(try exportedIndexes(path, layout: live.feed.stream.layout) == Array(150...239))
        #expect(try live.client.status() == nil, "the recorder has stopped")
    }

    /// Cancelling an export in progress stops it at its next frames and removes its partial file.
    @Test func cancellingAnExportInProgressRemovesThePartialFile() throws {
        let live = try LiveRecorder(window: .seconds(30), prefill: 1200)
        let path = "\(live.directory)/long.y4m"
        let save = try #require(try live.client.save(SaveRequest(last: "20s", path: path)))
        try waitUntil("the export has started writing") {
            (try live.client.save(id: save.id)?.state) != .waiting
        }
        let cancelled = try #require(try live.client.cancelSave(id: save.id))
        try live.finish()
        // It may have finished before the cancel arrived; otherwise nothing of it is left.
        if cancelled.state == .cancelled {
            #expect(!FileManager.default.fileExists(atPath: path))
            #expect(cancelled.files.isEmpty)
        } else {
            #expect(cancelled.state == .done)
            #expect(try exportedIndexes(path, layout: live.feed.stream.layout).count == 1200)
        }
    }

    @Test func savesIntoTheExportsFolderSinceTheLastSaveAndOnSignal() throws {
        let live = try LiveRecorder()
        defer { try? live.finish() }
        // No path: DIR/exports/save-<time>-<id>.mkv, numbered by the save's own id (a save to a path of its own
        // before it takes an id too).
        let elsewhere = live.directory + "/elsewhere.mkv"
        #expect(try live.client.save(SaveRequest(last: "250ms", path: elsewhere, wait: true))?.files == [elsewhere])
        let named = try #require(try live.client.save(SaveRequest(last: "250ms", wait: true)))
        let namedPath = try #require(named.files.first)
        #expect(namedPath.hasPrefix(live.directory + "/exports/save-") && namedPath.hasSuffix("-\(named.id).mkv"))
        #expect(try exportedIndexes(namedPath, layout: live.feed.stream.layout) == Array(165..<180))
        // Nothing new since then: a save since the last one is a conflict; after 30 more frames it holds just those.
        do {
            _ = try live.client.save(SaveRequest(last: "1s", wait: true, sinceLastSave: true))
            Issue.record("a save with nothing new succeeded")
        } catch ControlError.refused(let error) {
            #expect(error.code == .conflict)
        }
        var feed = live.feed
        for _ in 0..<30 { _ = try feed.appendNext(to: live.recorder) }
        let since = try #require(try live.client.save(SaveRequest(last: "2s", wait: true, sinceLastSave: true)))
        #expect(try exportedIndexes(since.files[0], layout: live.feed.stream.layout) == Array(180..<210))
        // requestSave() (SIGUSR1) saves the whole window there.
        live.control.requestSave()
        var windowSave: ExportSummary?
        try waitUntil("requestSave() has written the window into a file") {
            windowSave = live.log.summaries.withAnnotatedLock { saves in
                saves.compactMap { $0 }.first { ![namedPath, since.files[0], elsewhere].contains($0.path) }
            }
            return windowSave != nil
        }
        let window = try #require(windowSave, "requestSave() made no file")
        #expect(window.frames == 120)
        #expect(try exportedIndexes(window.path!, layout: live.feed.stream.layout) == Array(90..<210))
    }

    /// `DIR/exports` that is a file: a save without a path fails saying so (it was Foundation's error object, dumped
    /// whole), and a path in a directory that is a file is refused naming it.
    @Test func aFileWhereTheExportsDirectoryGoesIsNamed() throws {
        let live = try LiveRecorder()
        defer { try? live.finish() }
        let exports = live.directory + "/exports"
        try? FileManager.default.removeItem(atPath: exports)
        #expect(FileManager.default.createFile(atPath: exports, contents: Data("x".utf8)))
        do {
            _ = try live.client.save(SaveRequest(last: "250ms", wait: true))
            Issue.record("a save into a file succeeded")
        } catch ControlError.refused(let error) {
            #expect(error.code == .failed, "\(error)")
            #expect(
                error.message.hasPrefix("'\(exports)' is not a directory, so '\(exports)/save-")
                    && error.message.hasSuffix(
                        "cannot be written in it: move what is there away, or give the save a path"),
                "\(error.message)")
        }
        do {
            _ = try live.client.save(SaveRequest(last: "250ms", path: exports + "/a.mkv", wait: true))
            Issue.record("a save into a file succeeded")
        } catch ControlError.refused(let error) {
            #expect(error.code == .notFound, "\(error)")
            #expect(error.message == "'\(exports)' is not a directory, so '\(exports)/a.mkv' cannot be written in it")
        }
    }

    /// `quality` reaches the `.mp4` export of a save and of a clip: `lossless` decodes to exactly the frames the
    /// same clip holds as `.y4m`, `fast` does not; an unknown quality is refused before anything is written.
    @Test func qualityChoosesHowAnMP4IsEncoded() throws {
        _ = try ExternalTools.locate("ffmpeg")
        let live = try LiveRecorder()
        defer { try? live.finish() }
        let reference = "\(live.directory)/reference.y4m"
        _ = try #require(try live.client.clip(ClipRequest(from: "1s", to: "1500ms", path: reference, wait: true)))
        let expected = try ExternalTools.frameMD5s(reference, pixelFormat: "yuv420p")
        #expect(expected.count == 30)
        for quality in ["lossless", "fast"] {
            let path = "\(live.directory)/clip-\(quality).mp4"
            let clip = try #require(
                try live.client.clip(
                    ClipRequest(from: "1s", to: "1500ms", path: path, wait: true, quality: quality)))
            #expect(clip.state == .done)
            let decoded = try ExternalTools.frameMD5s(path, pixelFormat: "yuv420p")
            #expect(decoded.count == 30, "\(quality)")
            if quality == "lossless" {
                #expect(decoded == expected, "a lossless clip decodes to the frames stored")
            } else {
                #expect(decoded != expected, "fast is lossy (else the test would prove nothing)")
            }
        }
        let savePath = "\(live.directory)/save-lossless.mp4"
        let save = try #require(
            try live.client.save(SaveRequest(last: "500ms", path: savePath, wait: true, quality: "lossless")))
        #expect(save.state == .done)
        let sameRange = "\(live.directory)/save-range.y4m"
        _ = try live.client.clip(
            ClipRequest(
                from: "\(save.fromNanoseconds)ns", to: "\(save.toNanoseconds)ns", path: sameRange, wait: true))
        let saved = try ExternalTools.frameMD5s(savePath, pixelFormat: "yuv420p")
        #expect(saved.count == save.frames && saved.count > 0)
        #expect(saved == (try ExternalTools.frameMD5s(sameRange, pixelFormat: "yuv420p")), "a lossless save is exact")
        for request in [
            { try live.client.clip(ClipRequest(from: "1s", to: "2s", format: "mp4", quality: "best")) },
            { try live.client.save(SaveRequest(last: "1s", format: "mp4", quality: "LOSSLESS")) },
        ] as [() throws -> SaveObject?] {
            do {
                _ = try request()
                Issue.record("an unknown quality was accepted")
            } catch ControlError.refused(let error) {
                #expect(error.code == .badRequest)
                #expect(error.message.contains("quality"), "\(error.message)")
            }
        }
        // A quality for a format that is not encoded would be silently ignored: refused, naming the format.
        for request in [
            { try live.client.clip(ClipRequest(from: "1s", to: "2s", format: "y4m", quality: "lossless")) },
            { try live.client.save(SaveRequest(last: "1s", format: "mkv", quality: "fast")) },
        ] as [() throws -> SaveObject?] {
            do {
                _ = try request()
                Issue.record("a quality for an uncompressed format was accepted")
            } catch ControlError.refused(let error) {
                #expect(error.code == .badRequest)
                #expect(error.message.contains("is always uncompressed and exact"), "\(error.message)")
            }
        }
        #expect(!FileManager.default.fileExists(atPath: live.directory + "/exports"))
    }

    /// A clip spans disk and memory: the 2 s window holds frames 59…179, the store all of them.
    @Test func clipAcrossDiskAndMemoryAndItsErrors() throws {
        let live = try LiveRecorder()
        defer { try? live.finish() }
        let path = "\(live.directory)/span.mkv"
        let reply = try #require(try live.client.clip(ClipRequest(from: "500ms", to: "2.5s", path: path, wait: true)))
        #expect(reply.frames == 120)
        #expect(try exportedIndexes(path, layout: live.feed.stream.layout) == Array(30..<150))
        func refusal(_ request: ClipRequest) -> APIError? {
            do {
                _ = try live.client.clip(request)
                return nil
            } catch ControlError.refused(let error) {
                return error
            } catch {
                Issue.record("unexpected \(error)")
                return nil
            }
        }
        #expect(refusal(ClipRequest(from: "2s", to: "1s"))?.message == "to must be after from (from 2.000s, to 1.000s)")
        let future = refusal(ClipRequest(from: "500s", to: "600s"))
        #expect(
            future?.code == .empty
                && future?.message.hasPrefix("no frames in [500.000s, 600.000s); the store holds 0.000s …")
                    == true
                && future?.message.hasSuffix("; nothing was written") == true, "\(String(describing: future))")
        #expect(refusal(ClipRequest(from: "soon", to: "1s"))?.message.contains("from:") == true)
        #expect(refusal(ClipRequest(from: "1s", to: "2s", path: "relative.mkv"))?.code == .badRequest)
        #expect(refusal(ClipRequest(from: "1s", to: "2s", path: "/tmp/clip.avi"))?.code == .badRequest)
        #expect(refusal(ClipRequest(from: "1s", to: "2s", format: "gif"))?.code == .badRequest)
        #expect(refusal(ClipRequest(stream: "other", from: "1s", to: "2s"))?.code == .notFound)
        #expect(!FileManager.default.fileExists(atPath: live.directory + "/exports"))
        let status = try #require(try live.client.status())
        #expect(status.streams.map(\.stream) == ["camera"])
        #expect(status.streams[0].framesAccepted == 180)
        #expect(status.streams[0].memoryFrames == 121)
    }

    /// A store deeper in the file system than a Unix socket's path can name (108 bytes) still gets its API: the
    /// socket is bound, and reached, through its directory's descriptor.
    @Test func aStoreWithAPathTooLongForASocketStillServesTheAPI() throws {
        let deep = try TemporaryDirectory.store("deep") + "/" + String(repeating: "d", count: 120)
        try FileManager.default.createDirectory(atPath: deep, withIntermediateDirectories: true)
        let live = try LiveRecorder(directory: deep)
        defer { try? live.finish() }
        #expect(live.control.socketPath.utf8.count > 108)
        let status = try #require(try live.client.status())
        #expect(status.streams.first?.framesAccepted == 180)
        let saved = try #require(try live.client.save(SaveRequest(last: "250ms", wait: true)))
        #expect(try exportedIndexes(saved.files[0], layout: live.feed.stream.layout) == Array(165..<180))
    }

    @Test func stoppedOrStaleSocketMeansNoLiveRecorder() throws {
        let live = try LiveRecorder()
        // A second control for the same folder is refused while the first answers.
        #expect(throws: ControlError.self) {
            _ = try RecorderControl(recorder: live.recorder, directory: live.directory)
        }
        try live.finish()
        #expect(!FileManager.default.fileExists(atPath: live.control.socketPath))
        #expect(try live.client.status() == nil)
        // A file left where the socket was (a recorder that was killed): nobody answers.
        #expect(FileManager.default.createFile(atPath: live.control.socketPath, contents: Data()))
        #expect(try live.client.save(SaveRequest(last: "1s")) == nil)
    }

    /// Waiting saves are exported with what was recorded when the recorder stops, and the event stream reports
    /// every state of every save, then `stopping`.
    @Test func eventsReportEachSaveAndStopping() throws {
        let live = try LiveRecorder()
        let follower = EventFollower(live.client)
        try waitUntil("the events client is connected") {
            (try? live.client.status()) != nil && live.control.eventClients == 1
        }
        let save = try #require(try live.client.save(SaveRequest(last: "500ms", wait: true)))
        let waiting = try #require(try live.client.save(SaveRequest(before: "500ms", after: "1h")))
        try live.finish()
        try wait(for: follower.ended, until: "the event stream ends when the recorder stops")
        let events = follower.received.withAnnotatedLock { $0 }
        let saves = try events.filter { $0.0 == "save" }.map { try decode(SaveObject.self, $0.1) }
        #expect(saves.filter { $0.id == save.id }.map(\.state) == [.waiting, .exporting, .done])
        #expect(saves.filter { $0.id == waiting.id }.map(\.state) == [.waiting, .exporting, .done])
        #expect(events.contains { $0.0 == "stopping" })
        // Cut short by the stop: it holds what was recorded, the trigger's half second.
        let cut = try #require(saves.last { $0.id == waiting.id })
        #expect(try exportedIndexes(cut.files[0], layout: live.feed.stream.layout) == Array(150..<180))
    }

    /// The recorder's counters become events: a pressure change, and each sealed segment.
    @Test func pressureAndSegmentsAreEvents() throws {
        var options = StoreOptions()
        options.segmentMaxDuration = .milliseconds(500)
        let live = try LiveRecorder(options: options)
        try waitUntil("the prefill is written") { live.recorder.streams[0].unspilledFrames == 0 }
        let follower = EventFollower(live.client)
        try waitUntil("the events client is connected") { live.control.eventClients == 1 }
        // Segments sealed before the client came (the 3 s of prefill) are not replayed to it as if new.
        Thread.sleep(forTimeInterval: 1.5)
        #expect(!follower.names.contains("segment"), "old seals replayed")
        live.recorder.setPressure(.warning)
        live.startProducer()
        try waitUntil("a pressure event and a segment event arrive", interval: .milliseconds(20)) {
            follower.names.contains("pressure") && follower.names.contains("segment")
        }
        live.recorder.setPressure(.normal)
        try live.finish()
        try wait(for: follower.ended, until: "the event stream ends")
        let events = follower.received.withAnnotatedLock { $0 }
        let pressure = try #require(events.first { $0.0 == "pressure" })
        #expect(pressure.1.contains(#""level":"warning""#) && pressure.1.contains(#""stream":"camera""#))
        let segment = try #require(events.first { $0.0 == "segment" })
        #expect(segment.1.contains(#""file":"#) && segment.1.contains(#""frames":"#), "\(segment.1)")
        let files = events.filter { $0.0 == "segment" }.map(\.1)
        #expect(Set(files).count == files.count, "one event per seal")
    }

    /// A recorder of 500 ms segments with its prefill written, a client following its events, and a second more
    /// recorded after the client came: the client, and the `"file":"NAME"` of each segment sealed since it came.
    static func sealsAfterAClientComes(_ live: LiveRecorder) throws -> (EventFollower, [String]) {
        try waitUntil("the prefill is written") { live.recorder.streams[0].unspilledFrames == 0 }
        let sealed = {
            Set(try live.recorder.store!.segments(streamName: "camera").filter { $0.state == .sealed }.map(\.fileName))
        }
        let before = try sealed()
        let follower = EventFollower(live.client)
        try waitUntil("the events client is connected", interval: .milliseconds(2)) { live.control.eventClients == 1 }
        var feed = live.feed
        for _ in 0..<60 {
            live.recorder.waitForSpillRoom()
            _ = try feed.appendNext(to: live.recorder)
        }
        try waitUntil("every frame is written") { live.recorder.streams[0].unspilledFrames == 0 }
        let new = try sealed().subtracting(before)
        #expect(!new.isEmpty, "a second of frames sealed a segment")
        return (follower, new.sorted().map { #""file":"\#($0)""# })
    }

    /// The options of ``sealsAfterAClientComes(_:)``'s recorder: a segment every 500 ms.
    static var halfSecondSegments: StoreOptions {
        var options = StoreOptions()
        options.segmentMaxDuration = .milliseconds(500)
        return options
    }

    /// Seals in the last moments before the stop (within the second the recorder looks at seals) are events before
    /// the stream ends.
    @Test func sealsRightBeforeTheStopAreEvents() throws {
        let live = try LiveRecorder(options: Self.halfSecondSegments)
        defer { try? live.finish() }
        let (follower, expected) = try Self.sealsAfterAClientComes(live)
        live.control.stop()
        try wait(for: follower.ended, until: "the event stream ends")
        let events = follower.received.withAnnotatedLock { $0.filter { $0.name == "segment" }.map(\.data) }
        for file in expected { #expect(events.contains { $0.contains(file) }, "\(file): \(events)") }
    }

    /// A seal right after a client comes (before the recorder's first look at the seals for it) is an event too:
    /// every segment sealed after the client came is, once, and none sealed before.
    @Test func aSealRightAfterAClientComesIsAnEvent() throws {
        let live = try LiveRecorder(options: Self.halfSecondSegments)
        defer { try? live.finish() }
        let (follower, expected) = try Self.sealsAfterAClientComes(live)
        try waitUntil("an event for each new seal") {
            let data = follower.received.withAnnotatedLock { $0.filter { $0.name == "segment" }.map(\.data) }
            return expected.allSatisfy { file in data.contains { $0.contains(file) } }
        }
        let segments = follower.received.withAnnotatedLock { $0.filter { $0.name == "segment" }.map(\.data) }
        #expect(segments.count == expected.count, "\(segments) against \(expected)")
    }
}
