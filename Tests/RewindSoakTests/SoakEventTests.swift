import RewindSoak
import Testing

@Suite struct SoakEventTests {
    @Test func parsesEveryKindOfEventInTimeOrder() throws {
        let events = try SoakEvent.parseList(
            "90s:disk=full, 30s:pressure=critical,60s:thermal=serious,1500ms:pressure=warning,90s:disk=ok,"
                + "2m:disk=slow,0s:thermal=fair,100s:thermal=critical,110s:thermal=nominal,120s:pressure=normal")
        #expect(
            events == [
                SoakEvent(at: 0, action: .thermal(.fair)),
                SoakEvent(at: 1_500_000_000, action: .pressure(.warning)),
                SoakEvent(at: 30_000_000_000, action: .pressure(.critical)),
                SoakEvent(at: 60_000_000_000, action: .thermal(.serious)),
                SoakEvent(at: 90_000_000_000, action: .disk(.full)),
                SoakEvent(at: 90_000_000_000, action: .disk(.ok)),
                SoakEvent(at: 100_000_000_000, action: .thermal(.critical)),
                SoakEvent(at: 110_000_000_000, action: .thermal(.nominal)),
                SoakEvent(at: 120_000_000_000, action: .disk(.slow)),
                SoakEvent(at: 120_000_000_000, action: .pressure(.normal)),
            ])
        #expect(events.map(\.description).first == "0s:thermal=fair")
        #expect(events[1].description == "1.5s:pressure=warning")
    }

    @Test(arguments: ["", " ", "   "])
    func anEmptyListIsNoEvents(text: String) throws {
        #expect(try SoakEvent.parseList(text).isEmpty)
    }

    @Test(
        arguments: [
            ("30s:pressure=critical,,60s:disk=full", "''", "an empty event"),
            ("30s:pressure=critical,", "''", "an empty event"),
            ("pressure=critical", "'pressure=critical'", "an event is TIME:KEY=VALUE"),
            ("30s:pressure", "'30s:pressure'", "an event is TIME:KEY=VALUE"),
            ("30s:pressure=critical=1", "'30s:pressure=critical=1'", "an event is TIME:KEY=VALUE"),
            ("soon:pressure=critical", "'soon:pressure=critical'", "'soon' is not a duration"),
            ("-5s:disk=full", "'-5s:disk=full'", "is not a duration"),
            (":disk=full", "':disk=full'", "is not a duration"),
            ("30s:memory=low", "'30s:memory=low'", "unknown key 'memory' (pressure, thermal or disk)"),
            ("30s:pressure=high", "'30s:pressure=high'", "pressure must be normal, warning or critical, not 'high'"),
            ("30s:thermal=hot", "'30s:thermal=hot'", "thermal must be nominal, fair, serious or critical"),
            ("30s:disk=broken", "'30s:disk=broken'", "disk must be full, slow or ok, not 'broken'"),
            ("30s:Disk=full", "'30s:Disk=full'", "unknown key 'Disk'"),
            ("30s:disk=", "'30s:disk='", "disk must be full, slow or ok, not ''"),
            ("10s:disk=full,20s:pressure=critical x", "'20s:pressure=critical x'", "pressure must be"),
        ] as [(String, String, String)])
    func badItemsAreNamedWithWhatWasExpected(text: String, item: String, message: String) {
        #expect {
            try SoakEvent.parseList(text)
        } throws: { error in
            let description = "\(error)"
            return error is SoakEventError && description.hasPrefix(item + ": ") && description.contains(message)
        }
    }

    @Test func anEventAtOrAfterTheEndCouldNeverHappen() throws {
        #expect(try SoakEvent.parseList("59.999s:disk=full", duration: .seconds(60)).count == 1)
        #expect {
            try SoakEvent.parseList("30s:disk=full,60s:disk=ok", duration: .seconds(60))
        } throws: { error in
            "\(error)" == "'60s:disk=ok': it is at or after the end of the run (60s), so it would never happen"
        }
    }

    @Test func thermalStatesLowerTheFrameRateAsCamerasDo() {
        #expect(ThermalState.allCases.map(\.frameDivisor) == [1, 1, 2, 4])
    }
}
