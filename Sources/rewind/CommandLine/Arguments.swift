import RewindKit

/// A mistake on the command line: printed on stderr with the command's usage, exit status 64 (`EX_USAGE`).
public struct UsageError: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String
    /// The command whose usage should be shown, if known.
    public let command: String?
    /// Whether the command's help follows the message: for a command line that is malformed, not for a well-formed
    /// one whose values cannot work together (the message says what to change).
    public let showsHelp: Bool
    /// Whether only the help's usage line follows (and where the rest is): for a value that is not one of its
    /// option's, whose message says what it must look like; the whole table of options buried that advice.
    public var showsUsageLineOnly = false

    public init(_ message: String, command: String? = nil, showsHelp: Bool = true) {
        self.message = message
        self.command = command
        self.showsHelp = showsHelp
        // A message that starts with the option it is about (`--segment 50ms is shorter than …`) says what to give
        // that option: the usage line is enough beside it.
        showsUsageLineOnly = message.hasPrefix("--") || message.hasPrefix("-o: ")
    }

    /// A value that is not one of its option's: the message and the command's usage line.
    static func badValue(_ message: String, command: String?) -> UsageError {
        var error = UsageError(message, command: command)
        error.showsUsageLineOnly = true
        return error
    }

    public var description: String { message }
}

/// One option of a command, as a row of the command's table.
public struct OptionSpec: Sendable {
    public enum Kind: Sendable {
        /// `--json`: present or not.
        case flag
        /// `--store DIR`: takes one value (also accepted as `--store=DIR`).
        case value(placeholder: String)
    }

    /// What a value must look like; checked while parsing, so a bad value is a usage error before any work starts.
    public enum ValueType: Sendable {
        case text
        case duration
        case size
        case time
        case dimensions
        case frameRate
        case choice([String])
        case integer(ClosedRange<Int>)

        /// Throws when `text` is not a value of this type.
        func check(_ text: String) throws(ValueError) {
            switch self {
            case .text: return
            case .duration: _ = try Values.duration(text)
            case .size: _ = try Values.size(text)
            case .time: _ = try TimeSpec(parsing: text)
            case .dimensions: _ = try Values.dimensions(text)
            case .frameRate: _ = try Values.frameRate(text)
            case .choice(let choices):
                guard choices.contains(text) else {
                    throw ValueError(input: text, expected: "one of " + choices.joined(separator: ", "))
                }
            case .integer(let range):
                guard let value = Int(text), range.contains(value) else {
                    throw ValueError(input: text, expected: "a whole number in \(range.lowerBound)…\(range.upperBound)")
                }
            }
        }
    }

    public let name: String
    /// A one-letter alias such as `o` for `-o`.
    public let short: Character?
    public let kind: Kind
    public let type: ValueType
    public let help: String
    /// The default, shown in help and used when the option is absent.
    public let defaultValue: String?
    public let isRequired: Bool
    /// Whether the option may be given more than once (``ParsedArguments/strings(_:)`` has every value).
    public var isRepeatable = false

    public static func flag(_ name: String, short: Character? = nil, _ help: String) -> OptionSpec {
        OptionSpec(name: name, short: short, kind: .flag, type: .text, help: help, defaultValue: nil, isRequired: false)
    }

    public static func value(
        _ name: String, short: Character? = nil, _ placeholder: String, _ help: String, type: ValueType = .text,
        default defaultValue: String? = nil, required: Bool = false, repeatable: Bool = false
    ) -> OptionSpec {
        OptionSpec(
            name: name, short: short, kind: .value(placeholder: placeholder), type: type, help: help,
            defaultValue: defaultValue, isRequired: required, isRepeatable: repeatable)
    }
}

/// What a command accepts: its name, a summary line, and its table of options.
public struct CommandSpec: Sendable {
    public let name: String
    public let summary: String
    public let options: [OptionSpec]
    /// Extra lines after the option list (examples, notes).
    public let details: String
    /// The value option a single bare argument stands for (`rewind unmark 3` = `rewind unmark --id 3`), if any.
    public let positional: String?

    public init(
        name: String, summary: String, options: [OptionSpec], details: String = "", positional: String? = nil
    ) {
        self.name = name
        self.summary = summary
        self.options = options + [.flag("help", short: "h", "show this help")]
        self.details = details
        self.positional = positional
    }

    /// The `--help` text: usage line, summary, one line per option with its default.
    public var help: String {
        var lines = ["usage: rewind \(name) \(usageLine)", "", summary, "", "options:"]
        for option in options {
            var left = "  --\(option.name)"
            if let short = option.short { left = "  -\(short), --\(option.name)" }
            if case .value(let placeholder) = option.kind { left += " \(placeholder)" }
            var right = option.help
            if let defaultValue = option.defaultValue { right += " (default: \(defaultValue))" }
            if option.isRequired { right += " (required)" }
            let padding = String(repeating: " ", count: max(2, 28 - left.count))
            lines.append(left + padding + right)
        }
        if !details.isEmpty { lines += ["", details] }
        return lines.joined(separator: "\n")
    }

    var usageLine: String {
        options.filter { $0.name != "help" }.map { option -> String in
            var text = "--\(option.name)"
            if case .value(let placeholder) = option.kind { text += " \(placeholder)" }
            return option.isRequired ? text : "[\(text)]"
        }.joined(separator: " ")
    }

    /// Parses `arguments` (without the command name) against this table.
    ///
    /// - Throws: ``UsageError`` for an unknown option, a missing value, a repeated option, a stray argument or a
    ///   missing required option.
    public func parse(_ arguments: [String]) throws(UsageError) -> ParsedArguments {
        var parsed = ParsedArguments(command: name)
        var index = 0
        func spec(named name: String) throws(UsageError) -> OptionSpec {
            guard let option = options.first(where: { $0.name == name }) else {
                throw UsageError("unknown option '--\(name)'", command: self.name)
            }
            return option
        }
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            let option: OptionSpec
            var inlineValue: String? = nil
            if argument.hasPrefix("--") && argument.count > 2 {
                var name = String(argument.dropFirst(2))
                if let equals = name.firstIndex(of: "=") {
                    inlineValue = String(name[name.index(after: equals)...])
                    name = String(name[..<equals])
                }
                option = try spec(named: name)
            } else if argument.hasPrefix("-") && argument.count == 2, let letter = argument.last, letter != "-" {
                guard let match = options.first(where: { $0.short == letter }) else {
                    throw UsageError("unknown option '\(argument)'", command: name)
                }
                option = match
            } else if let positional, parsed.values[positional] == nil, !argument.hasPrefix("-") {
                parsed.values[positional] = argument
                continue
            } else if argument == "--" {
                // The end of options: what follows is the bare argument (an id that reads like an option).
                for rest in arguments[index...] {
                    guard let positional, parsed.values[positional] == nil else {
                        throw UsageError("unexpected argument '\(rest)'", command: name)
                    }
                    parsed.values[positional] = rest
                }
                break
            } else if let positional, let given = parsed.values[positional], !argument.hasPrefix("-") {
                // `unmark --id 3 3`: the bare argument is that option again.
                throw UsageError.badValue(
                    "unexpected argument '\(argument)': --\(positional) is given already (\(given)); give it once",
                    command: name)
            } else {
                throw UsageError("unexpected argument '\(argument)'", command: name)
            }
            if option.name == "help" {
                parsed.wantsHelp = true
                continue
            }
            guard option.isRepeatable || (parsed.values[option.name] == nil && !parsed.flags.contains(option.name))
            else {
                // `unmark 3 --id 3`: given once as the option, once bare.
                if option.name == positional, let given = parsed.values[option.name] {
                    throw UsageError.badValue(
                        "--\(option.name) is given already (\(given), as the bare argument); give it once",
                        command: name)
                }
                throw UsageError("option '--\(option.name)' given twice", command: name)
            }
            switch option.kind {
            case .flag:
                guard inlineValue == nil else {
                    throw UsageError("option '--\(option.name)' takes no value", command: name)
                }
                parsed.flags.insert(option.name)
            case .value(let placeholder):
                let value: String
                if let inlineValue {
                    value = inlineValue
                } else {
                    // The next option is not this one's value (`--store --realtime`): give one as `--store=--x`.
                    guard index < arguments.count, !(arguments[index].hasPrefix("--") && arguments[index].count > 2)
                    else {
                        throw UsageError("option '--\(option.name)' needs a value (\(placeholder))", command: name)
                    }
                    value = arguments[index]
                    index += 1
                }
                if parsed.values[option.name] == nil { parsed.values[option.name] = value }
                parsed.repeatedValues[option.name, default: []].append(value)
                parsed.given.insert(option.name)
            }
        }
        if parsed.wantsHelp { return parsed }
        for option in options {
            if parsed.values[option.name] == nil, let defaultValue = option.defaultValue {
                parsed.values[option.name] = defaultValue
                parsed.repeatedValues[option.name] = [defaultValue]
            }
            if option.isRequired && parsed.values[option.name] == nil {
                throw UsageError("'rewind \(name)' needs --\(option.name)", command: name)
            }
            for text in parsed.repeatedValues[option.name] ?? [] {
                do {
                    try option.type.check(text)
                } catch {
                    throw UsageError.badValue("--\(option.name): \(error)", command: name)
                }
            }
        }
        return parsed
    }
}

/// The options a command was given, with typed accessors that turn bad values into usage errors.
public struct ParsedArguments: Sendable {
    public let command: String
    public var values: [String: String] = [:]
    /// Every value of each option, in the order given (one for an option given once or by its default).
    public var repeatedValues: [String: [String]] = [:]
    public var flags: Set<String> = []
    /// The value options given on the command line (not by their defaults).
    public var given: Set<String> = []
    public var wantsHelp = false

    public init(command: String) { self.command = command }

    public func flag(_ name: String) -> Bool { flags.contains(name) }

    public func string(_ name: String) -> String? { values[name] }

    /// Whether a value option was given on the command line, rather than taking its default.
    public func isGiven(_ name: String) -> Bool { given.contains(name) }

    /// Every value of a repeatable option, in the order given.
    public func strings(_ name: String) -> [String] { repeatedValues[name] ?? [] }

    public func duration(_ name: String) throws(UsageError) -> Duration? {
        try convert(name) { text throws(ValueError) in try Values.duration(text) }
    }

    public func size(_ name: String) throws(UsageError) -> Int? {
        try convert(name) { text throws(ValueError) in try Values.size(text) }
    }

    public func time(_ name: String) throws(UsageError) -> TimeSpec? {
        try convert(name) { text throws(ValueError) in try TimeSpec(parsing: text) }
    }

    /// Runs `body`, which reads the value of option `name` further (a time placed on a recording's date, say): a
    /// ``ValueError`` it throws is a usage error naming the option, as one of ``convert(_:_:)`` is.
    public func naming<T>(_ name: String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as ValueError {
            throw UsageError.badValue("--\(name): \(error)", command: command)
        }
    }

    public func integer(_ name: String, in range: ClosedRange<Int>) throws(UsageError) -> Int? {
        try convert(name) { text throws(ValueError) in
            guard let value = Int(text), range.contains(value) else {
                throw ValueError(input: text, expected: "a whole number in \(range.lowerBound)…\(range.upperBound)")
            }
            return value
        }
    }

    /// The value of `name` if it is one of `choices`.
    public func choice(_ name: String, _ choices: [String]) throws(UsageError) -> String? {
        try convert(name) { text throws(ValueError) in
            guard choices.contains(text) else {
                throw ValueError(input: text, expected: "one of " + choices.joined(separator: ", "))
            }
            return text
        }
    }

    public func convert<T>(_ name: String, _ body: (String) throws(ValueError) -> T) throws(UsageError) -> T? {
        guard let text = values[name] else { return nil }
        do {
            return try body(text)
        } catch {
            throw UsageError.badValue("--\(name): \(error)", command: command)
        }
    }
}
