extension String {
    /// The text made safe inside an HTML or XML element or attribute: `&`, `<`, `>`, `"` and `'` become character
    /// references (`&#39;` for the apostrophe, which both languages read).
    public var escapingMarkup: String {
        var escaped = ""
        for character in self {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&#39;"
            default: escaped.append(character)
            }
        }
        return escaped
    }
}
