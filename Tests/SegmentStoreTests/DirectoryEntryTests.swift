import Foundation
import RewindSystem
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A `readdir(3)` entry is only as long as its name needs (`d_reclen`), not `sizeof(struct dirent)`: its name is read
/// in place, never by copying the whole `d_name` array past the end of the record.
struct DirectoryEntryTests {
    @Test func aNameIsReadWithinItsRecordEvenFlushAgainstAnUnreadablePage() throws {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let mapping = try #require(mmap(nil, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))
        try #require(mapping != MAP_FAILED)
        defer { munmap(mapping, 2 * page) }
        try #require(mprotect(mapping + page, page, PROT_NONE) == 0)
        // The record of "ab" as the kernel lays it out (header, name, NUL, padded to 8 bytes), ending where the
        // unreadable page begins: reading 256 bytes of `d_name` would fault.
        let nameOffset = try #require(MemoryLayout<dirent>.offset(of: \.d_name))
        let length = (nameOffset + 3 + 7) & ~7
        let record = mapping + page - length
        memset(record, 0, length)
        let recordLength = UInt16(length)
        let lengthOffset = try #require(MemoryLayout<dirent>.offset(of: \.d_reclen))
        withUnsafeBytes(of: recordLength) { (record + lengthOffset).copyMemory(from: $0.baseAddress!, byteCount: 2) }
        (record + nameOffset).copyMemory(from: "ab", byteCount: 3)
        let entry = record.bindMemory(to: dirent.self, capacity: 1)
        #expect(String(cString: System.directoryEntryName(entry)) == "ab")
    }

    @Test func everyNameOfADirectoryIsListedButTheDots() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rewind-dir-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // Short and long names: records of every length, the last of them at the end of the stream's buffer.
        let names = (1...300).map { String(repeating: "n", count: $0 % 200 + 1) + "-\($0)" }
        for name in names { #expect(FileManager.default.createFile(atPath: directory + "/" + name, contents: nil)) }
        let listed = try POSIXFileSystem().contentsOfDirectory(directory)
        #expect(listed.sorted() == names.sorted())
        #expect(System.openDescriptorCount > 0)
    }
}
