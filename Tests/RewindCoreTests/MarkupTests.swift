import RewindCore
import Testing

@Suite struct MarkupTests {
    @Test func markupCharactersBecomeReferencesAndTheRestStays() {
        #expect(
            "<a href='x'>\"Tom & Jerry\"</a>".escapingMarkup
                == "&lt;a href=&#39;x&#39;&gt;&quot;Tom &amp; Jerry&quot;&lt;/a&gt;")
        #expect("plain text, ümlauts, 日本".escapingMarkup == "plain text, ümlauts, 日本")
        #expect("".escapingMarkup == "")
    }
}
