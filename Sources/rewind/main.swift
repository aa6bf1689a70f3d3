import RewindKit

print("rewind \(rewindVersion)")
