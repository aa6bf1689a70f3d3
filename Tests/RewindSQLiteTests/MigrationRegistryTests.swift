import Foundation
import RewindMigrations
import Testing

@Suite struct MigrationRegistryTests {
    /// The top-level `Migrations/` folder, found from this file's path.
    static let folder = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Migrations")

    @Test func everySQLFileIsRegisteredInOrderWithItsExactText() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.folder.path)
            .filter { $0.hasSuffix(".sql") }.sorted()
        #expect(!files.isEmpty)
        #expect(Migration.all.map(\.fileName) == files, "register every Migrations/*.sql in Migrations.swift")
        for (index, migration) in Migration.all.enumerated() {
            #expect(migration.version == index + 1, "migrations are numbered 1, 2, 3… with no holes")
            #expect(migration.fileName.hasPrefix(String(format: "%04d_", migration.version)))
            let text = try String(contentsOf: Self.folder.appendingPathComponent(migration.fileName), encoding: .utf8)
            #expect(migration.sql == text, "\(migration.fileName) embedded text differs from the file")
        }
    }

    @Test func packageManifestEmbedsEverySQLFile() throws {
        let manifest = try String(
            contentsOf: Self.folder.deletingLastPathComponent().appendingPathComponent("Package.swift"), encoding: .utf8
        )
        for migration in Migration.all {
            #expect(manifest.contains(".embedInCode(\"\(migration.fileName)\")"))
        }
    }
}
