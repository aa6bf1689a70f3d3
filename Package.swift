// swift-tools-version:6.0
import PackageDescription

// Who may import whom (ARCHITECTURE.md draws the graph): every edge below points down, never across or up.
let package = Package(
    name: "Rewind",
    products: [
        .library(name: "RewindKit", targets: ["RewindKit"]),
        .executable(name: "rewind", targets: ["rewind"]),
    ],
    targets: [
        // C libraries and shims, nothing else.
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"]), .yum(["sqlite-devel"]), .brew(["sqlite"])]
        ),
        .systemLibrary(
            name: "CLZ4",
            pkgConfig: "liblz4",
            providers: [.apt(["liblz4-dev"]), .yum(["lz4-devel"]), .brew(["lz4"])]
        ),
        .systemLibrary(
            name: "CTurboJPEG",
            pkgConfig: "libturbojpeg",
            providers: [.apt(["libturbojpeg0-dev"]), .yum(["turbojpeg-devel"]), .brew(["jpeg-turbo"])]
        ),
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"]), .yum(["zlib-devel"]), .brew(["zlib"])]
        ),
        // The header only: libmicrohttpd itself is loaded when a recorder starts serving (see its shim.h).
        .systemLibrary(
            name: "CMicroHTTPD",
            providers: [.apt(["libmicrohttpd-dev"]), .yum(["libmicrohttpd-devel"]), .brew(["libmicrohttpd"])]
        ),
        // libFuzzer's driver, declared weak: linked in only by `make fuzz`.
        .systemLibrary(name: "CFuzzer"),
        .target(name: "CCRC32C"),
        .target(name: "CPlatform"),
        .target(
            name: "RewindMigrations",
            path: "Migrations",
            exclude: ["README.md"],
            sources: ["Migrations.swift"],
            resources: [
                .embedInCode("0001_initial.sql"), .embedInCode("0002_segments.sql"),
                .embedInCode("0003_stream_clocks.sql"), .embedInCode("0004_markers.sql"),
                .embedInCode("0005_marker_ids.sql"), .embedInCode("0006_stream_newest_pts.sql"),
                .embedInCode("0007_stream_shape.sql"),
            ]
        ),

        // The library's modules, lowest first.
        .target(name: "RewindSystem", dependencies: ["CPlatform"]),
        .target(name: "RewindCore", dependencies: ["RewindSystem"]),
        .target(name: "RewindSQLite", dependencies: ["RewindSystem", "CSQLite", "RewindMigrations"]),
        .target(name: "SegmentStore", dependencies: ["RewindCore", "RewindSQLite", "CLZ4", "CCRC32C"]),
        .target(name: "RewindCapture", dependencies: ["RewindCore", "SegmentStore"]),
        .target(name: "RewindMedia", dependencies: ["RewindCore", "CTurboJPEG", "CZlib"]),
        .target(name: "RewindQuery", dependencies: ["RewindCapture", "RewindMedia"]),
        .target(
            name: "RewindControl", dependencies: ["RewindQuery", "CPlatform", "CMicroHTTPD"],
            resources: [
                .embedInCode("Web/timeline.html"), .embedInCode("Web/timeline.css"), .embedInCode("Web/timeline.js"),
                .embedInCode("API/openapi.json"),
            ]),
        .target(
            name: "RewindKit",
            dependencies: [
                "RewindCore", "SegmentStore", "RewindCapture", "RewindMedia", "RewindQuery", "RewindControl",
            ]
        ),

        // Tooling: test seams and harnesses, never part of RewindKit.
        .target(name: "RewindTesting", dependencies: ["RewindCapture", "RewindMedia"]),
        .target(name: "RewindSoak", dependencies: ["RewindQuery", "RewindTesting", "CPlatform"]),
        .target(name: "RewindBenchmarks", dependencies: ["RewindQuery", "RewindControl", "RewindTesting"]),
        .executableTarget(name: "rewind", dependencies: ["RewindKit", "RewindSoak", "RewindBenchmarks"]),
        .target(
            name: "RewindFuzzing",
            dependencies: [
                "SegmentStore", "RewindCapture", "RewindMedia", "RewindQuery", "RewindControl", "RewindTesting",
            ]
        ),
        .executableTarget(name: "rewind-fuzz", dependencies: ["RewindFuzzing", "CFuzzer"]),

        .testTarget(name: "RewindCoreTests", dependencies: ["RewindCore", "RewindTesting"]),
        .testTarget(name: "RewindSQLiteTests", dependencies: ["RewindSQLite", "RewindTesting"]),
        .testTarget(name: "SegmentStoreTests", dependencies: ["SegmentStore", "RewindSQLite", "RewindTesting"]),
        .testTarget(
            name: "RewindCaptureTests", dependencies: ["RewindCapture", "RewindMedia", "RewindQuery", "RewindTesting"]),
        .testTarget(name: "RewindMediaTests", dependencies: ["RewindMedia", "RewindTesting"]),
        .testTarget(name: "RewindQueryTests", dependencies: ["RewindQuery", "RewindTesting"]),
        .testTarget(name: "RewindControlTests", dependencies: ["RewindControl", "RewindTesting"]),
        .testTarget(name: "RewindSoakTests", dependencies: ["RewindSoak", "RewindTesting"]),
        .testTarget(name: "RewindBenchmarksTests", dependencies: ["RewindBenchmarks", "SegmentStore"]),
        .testTarget(name: "RewindKitTests", dependencies: ["RewindKit", "RewindTesting"]),
        .testTarget(name: "RewindCLITests", dependencies: ["rewind", "RewindTesting"]),
        .testTarget(
            name: "RewindFuzzingTests",
            dependencies: [
                "RewindFuzzing", "SegmentStore", "RewindMedia", "RewindQuery", "RewindControl", "RewindTesting",
            ],
            exclude: ["Reproducers"]),
    ],
    swiftLanguageModes: [.v6]
)
