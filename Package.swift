// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Rewind",
    products: [
        .library(name: "RewindKit", targets: ["RewindKit"]),
        .executable(name: "rewind", targets: ["rewind"]),
    ],
    targets: [
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
        .target(
            name: "RewindMigrations",
            path: "Migrations",
            exclude: ["README.md"],
            sources: ["Migrations.swift"],
            resources: [.embedInCode("0001_initial.sql"), .embedInCode("0002_segments.sql")]
        ),
        .target(name: "CCRC32C"),
        .target(name: "CPlatform"),
        .target(name: "RewindCore"),
        .target(name: "SegmentStore", dependencies: ["RewindCore", "CSQLite", "CLZ4", "CCRC32C", "RewindMigrations"]),
        .target(name: "RewindKit", dependencies: ["RewindCore", "SegmentStore", "CPlatform"]),
        .executableTarget(name: "rewind", dependencies: ["RewindKit", "CSQLite"]),
        .testTarget(name: "RewindCoreTests", dependencies: ["RewindCore"]),
        .testTarget(name: "SegmentStoreTests", dependencies: ["SegmentStore", "RewindMigrations"]),
        .testTarget(name: "RewindKitTests", dependencies: ["RewindKit"]),
        .testTarget(name: "RewindCLITests", dependencies: ["RewindKit"]),
    ],
    swiftLanguageModes: [.v6]
)
