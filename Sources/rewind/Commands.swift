import RewindKit
import RewindSoak

let storeOption = OptionSpec.value(
    "store", "DIR", "store directory (index.sqlite, segments/, exports/)", required: true)

let demoCommand = Command(
    spec: CommandSpec(
        name: "demo",
        summary: "record a synthetic 1080p60 camera, save the last 5 s, query a range, print what happened",
        options: [
            .value(
                "store", "DIR", "store directory (replaced if an earlier demo made it; any other store is refused)",
                default: "demo-store"),
            .value("seconds", "DURATION", "stream time to record", type: .duration, default: "20s"),
        ]),
    run: runDemo)

let recordCommand = Command(
    spec: CommandSpec(
        name: "record",
        summary: "record frames into a store from a synthetic camera or YUV4MPEG2",
        options: [
            storeOption,
            .value(
                "input", "[NAME=]SOURCE",
                "synthetic[:WxH@FPS], y4m:PATH, or - (YUV4MPEG2 on stdin); repeat for several streams, each "
                    + "NAME=SOURCE (names: a-z 0-9 _ -)",
                default: "synthetic", repeatable: true),
            .value("window", "DURATION", "rewind window kept in memory", type: .duration, default: "10s"),
            .value(
                "memory", "SIZE", "hard memory budget of all streams, shared by byte rate", type: .size,
                default: "512MiB"),
            .value("disk", "SIZE", "disk budget of all streams; oldest segments are deleted past it", type: .size),
            .value("max-age", "DURATION", "delete segments older than this (e.g. 7d)", type: .duration),
            .value(
                "min-free", "SIZE",
                "free space to keep on the disk; oldest segments are deleted below it (with --disk: 256MiB)",
                type: .size),
            .value(
                "spill", "MODE", "eager | on-evict | off", type: .choice(["eager", "on-evict", "off"]), default: "eager"
            ),
            .value("duration", "DURATION", "stop after this much stream time", type: .duration),
            .flag("realtime", "pace the input at its frame rate"),
            .value(
                "backpressure", "POLICY", "when the disk falls behind: drop-newest | drop-oldest-unspilled",
                type: .choice(["drop-newest", "drop-oldest-unspilled"]), default: "drop-newest"),
            .value("stream", "NAME", "stream name of an input given without NAME=", default: "camera"),
            .value(
                "segment", "DURATION", "start a new segment file after this much stream time (at least 100ms)",
                type: .duration,
                default: "60s"),
            .value(
                "memory-pressure", "MODE",
                "auto (shed memory when the kernel reports pressure: Linux PSI) | off",
                type: .choice(["auto", "off"]), default: "auto"),
            .value("listen", "HOST:PORT", "also serve the HTTP API on TCP (loopback only), with a bearer token"),
            .flag("listen-any", "allow --listen on an address that is not loopback"),
            .value(
                "token-file", "PATH", "the TCP listener's token (created with mode 0600 if missing; default: DIR/token)"
            ),
            .value(
                "allow-host", "NAME",
                "a name browsers may reach the API by besides IP addresses and localhost (a reverse proxy's); repeat "
                    + "for several", repeatable: true),
        ]),
    run: runRecord)

/// `--json` of `save` and `clip`.
private let exportJSONFlag = OptionSpec.flag(
    "json", "print JSON: the save object of the API, with where it came from and each stream's file (not with -o -)")

/// What `save --help` and `clip --help` say of `--json`.
private let exportJSONDetails = """
    --json prints one JSON document on stdout once the file is written: the keys of the API's save object (id: the
    live recorder's save, null from the disk; from_ns, to_ns: the range on the recorder clock; first_pts_ns,
    last_pts_ns: the pts the files cover, as the text line gives them; files: absolute paths; frames, repeated_frames,
    bytes, format, tracks, lost, lost_unknown (why the gaps could not be read; lost is then absent), cut_short), and
    source (recorder or disk), stream_files ([{stream, file}]) and
    without_frames (streams with no frame in the range). One that fails before its file is written prints nothing on
    stdout; one that keeps its file and then fails (cut short, say) prints the document, and its exit status says so.
    """

let saveCommand = Command(
    spec: CommandSpec(
        name: "save",
        summary:
            "save seconds before (and after) now to a file (a running recorder saves from memory; otherwise from disk)",
        options: [
            storeOption,
            .value("stream", "NAME", "stream to save, or all (default: the only one)"),
            .value("last", "DURATION", "how much to save: --before with --after 0s (default: 5s)", type: .duration),
            .value("before", "DURATION", "pre-roll: how much before now (default with --after: 5s)", type: .duration),
            .value("after", "DURATION", "post-roll: how much after now; waits for it (live recorder)", type: .duration),
            .flag("since-last-save", "start where the previous save of the stream ended (live recorder)"),
            .value(
                "output", short: "o", "PATH",
                "clip.y4m | clip.mkv | clip.mp4 | - (stdout); default with a live recorder: DIR/exports/"),
            .value(
                "quality", "Q", "how .mp4 is encoded: fast (faster than real time) | balanced | lossless (exact)",
                type: .choice(ExportQuality.allCases.map(\.rawValue)), default: "fast"),
            exportJSONFlag,
        ],
        details: exportJSONDetails),
    run: { try lettingTheFIFOsReaderGoOnFailure($0, runSave) })

let clipCommand = Command(
    spec: CommandSpec(
        name: "clip",
        summary: "extract the frames in [from, to) to a file (through a running recorder when there is one)",
        options: [
            storeOption,
            .value("stream", "NAME", "stream to extract, or all (default: the only one)"),
            .value(
                "from", "TIME", "start, inclusive: 12.5s, 1500ms, ISO-8601 wall time or HH:MM:SS.fff", type: .time,
                required: true),
            .value("to", "TIME", "end, exclusive", type: .time, required: true),
            .value("output", short: "o", "PATH", "out.y4m | out.mkv | out.mp4 | - (stdout)", required: true),
            .value(
                "quality", "Q", "how .mp4 is encoded: fast (faster than real time) | balanced | lossless (exact)",
                type: .choice(ExportQuality.allCases.map(\.rawValue)), default: "fast"),
            exportJSONFlag,
        ],
        details: exportJSONDetails),
    run: { try lettingTheFIFOsReaderGoOnFailure($0, runClip) })

let infoCommand = Command(
    spec: CommandSpec(
        name: "info",
        summary: "describe a store: streams, time span, segments, sizes, gaps, drops",
        options: [
            storeOption, .value("stream", "NAME", "describe one stream, or all (default: all)"),
            .flag("json", "print JSON"),
        ]),
    run: runInfo)

let verifyCommand = Command(
    spec: CommandSpec(
        name: "verify",
        summary: "check every segment and index row; --repair fixes what it can",
        options: [
            storeOption, .value("stream", "NAME", "check one stream's segments, or all (default: all)"),
            .flag("repair", "cut torn segments, rebuild missing rows"), .flag("json", "print JSON"),
        ]),
    run: runVerify)

let soakCommand = Command(
    spec: CommandSpec(
        name: "soak",
        summary: "run a camera-like load under memory pressure and faults; check memory and every frame",
        options: [
            .value("duration", "DURATION", "stream time to run", type: .duration, default: "10m"),
            .value(
                "speed", "MODE", "max (as fast as the disk allows, waiting for it) | realtime (drops when behind)",
                type: .choice(["max", "realtime"]), default: "max"),
            .value("size", "WxH", "frame size (NV12)", type: .dimensions, default: "1920x1080"),
            .value("fps", "RATE", "frame rate", type: .frameRate, default: "60"),
            .value("memory", "SIZE", "memory budget of the ring", type: .size, default: "256MiB"),
            .value(
                "events", "LIST",
                "TIME:KEY=VALUE,…: pressure=normal|warning|critical, thermal=nominal|fair|serious|critical, "
                    + "disk=full|slow|ok"),
            .value("report", "PATH", "write the JSON report here"),
            .value("chart", "PATH", "write an SVG chart of memory over time here"),
            .value("window", "DURATION", "rewind window kept in memory", type: .duration, default: "10s"),
            .value(
                "disk", "SIZE", "disk budget: oldest segments are deleted past it (0: none)", type: .size,
                default: "4GiB"),
            .value("noise", "LEVEL", "camera sensor noise, 0…8 code values", default: "2"),
            .value("store", "DIR", "record into this empty directory and keep it (default: a temporary one)"),
            .value(
                "sabotage", "FAULT",
                "break an invariant on purpose, to see its check fail: retain-buffers | corrupt-frame | lose-frame",
                type: .choice(SoakConfiguration.Sabotage.allCases.map(\.rawValue))),
        ],
        details: """
            The camera's frames carry a checksum in their pixels; every frame the recorder accepted is read back
            (from disk as it becomes durable, and from memory at the end) and must be bit-exact. Invariants:
            rss_within_limit, rss_shed_after_pressure, frames_bit_exact, no_frames_lost, rss_flat.
            Exit status: 0 when all held, 1 when one failed (named on stderr), 64 for a usage error, 69 when a
            recorder records into --store, 71 when a limit of the system leaves too little (threads, address
            space), 130 when stopped (Ctrl-C) before its duration, naming the events that never happened.
            example: rewind soak --duration 60s --speed realtime \\
                       --events "10s:pressure=critical,20s:pressure=normal,30s:thermal=serious,40s:disk=full,45s:disk=ok" \\
                       --report soak.json --chart soak.svg
            """),
    run: runSoak)

let benchCommand = Command(
    spec: CommandSpec(
        name: "bench",
        summary: "measure speed as ratios against references measured in the same run (build with -c release)",
        options: [
            .flag("json", "print JSON"), .flag("quick", "fewer iterations"),
            .value(
                "only", "PART",
                "measure one part: ring | store | file (recording a file, exports from disk) | live (live recording, "
                    + "saves from memory) | view (thumbnails, timelines) | control (the HTTP API while recording live)",
                type: .choice(["ring", "store", "file", "live", "view", "control"])),
        ]),
    run: runBench)

let statusCommand = Command(
    spec: CommandSpec(
        name: "status",
        summary: "what a running recorder holds and does: streams, memory, drops, saves",
        options: [storeOption, .flag("json", "print JSON (the body of GET /v1/status)")]),
    run: runStatus)

let eventsCommand = Command(
    spec: CommandSpec(
        name: "events",
        summary:
            "follow a running recorder's events (saves, markers, gaps, drops, pressure, segments), one JSON line each",
        options: [
            storeOption,
            .value(
                "since", "ID",
                "start after the event of this id (an earlier run's last line's \"id\"): first what came since"),
        ]),
    run: runEvents)

let markCommand = Command(
    spec: CommandSpec(
        name: "mark",
        summary: "mark a moment of a running recorder, optionally holding the frames around it on disk",
        options: [
            storeOption,
            .value("label", "TEXT", "what the moment is", required: true),
            .value("at", "TIME", "when (default: now)", type: .time),
            .value("stream", "NAME", "stream to mark, or all (default: the only one)"),
            .value("hold", "DURATION", "hold this much before and after on disk", type: .duration),
            .value("hold-before", "DURATION", "hold this much before on disk", type: .duration),
            .value("hold-after", "DURATION", "hold this much after on disk", type: .duration),
            .flag("json", "print JSON (the answer of POST /v1/markers: {\"markers\": [{id, at_ns, label, …}]})"),
        ]),
    run: runMark)

let markersCommand = Command(
    spec: CommandSpec(
        name: "markers",
        summary: "list a store's markers and what they hold",
        options: [storeOption, .flag("json", "print JSON")]),
    run: runMarkers)

let unmarkCommand = Command(
    spec: CommandSpec(
        name: "unmark",
        summary: "delete a marker and release what it holds",
        options: [
            storeOption,
            .value(
                "id", "ID", "the marker's id (rewind markers lists them; also as a bare argument)",
                type: .integer(1...Int.max), required: true),
            .flag("json", "print JSON (the marker removed, as DELETE /v1/markers/ID answers it)"),
        ],
        details: "example: rewind unmark --store cam 3",
        positional: "id"),
    run: runUnmark)
