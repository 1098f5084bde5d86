//! Diagnostics: what the compiler tells a pattern author, and how it is printed.
//!
//! Invariants:
//! - every diagnostic carries a stable `code` from [`codes`]; codes never change meaning once
//!   published (tests and `spec/patterns.md` rely on them);
//! - `line` and `col` are 1-based and always refer to the author's original source text, never
//!   to the edited text the compiler feeds its second pass; `col` counts Unicode scalar values;
//! - `span` is a byte range into that original source;
//! - a diagnostic carries its own source line, so rendering needs no access to the files.

use serde::Serialize;

/// Stable diagnostic codes. `spec/patterns.md` documents each one; a test checks that it does.
pub mod codes {
    /// The source is not valid TypeScript/TSX.
    pub const SYNTAX: &str = "SYNTAX";
    /// A module could not be read at all (the entry file, or an I/O failure other than absence).
    pub const MODULE_UNREADABLE: &str = "MODULE_UNREADABLE";
    /// An import of something other than `"commonfabric"` or a relative path.
    pub const IMPORT_FORBIDDEN: &str = "IMPORT_FORBIDDEN";
    /// A relative import names a file that does not exist.
    pub const IMPORT_NOT_FOUND: &str = "IMPORT_NOT_FOUND";
    /// A pattern that declares `[SCHEDULE]` is instantiated inside another pattern.
    pub const SCHEDULE_NESTED: &str = "SCHEDULE_NESTED";
    /// A program would have more modules than [`super::super::MAX_MODULES`].
    pub const TOO_MANY_MODULES: &str = "TOO_MANY_MODULES";
    /// A relative import names a file that is not `.ts`/`.tsx`.
    pub const IMPORT_EXTENSION: &str = "IMPORT_EXTENSION";
    /// `import(...)` at run time.
    pub const IMPORT_DYNAMIC: &str = "IMPORT_DYNAMIC";
    /// A name imported from `"commonfabric"` (or a subpath of it) and used as a value, which
    /// that module does not export.
    pub const IMPORT_UNKNOWN_EXPORT: &str = "IMPORT_UNKNOWN_EXPORT";
    /// `dataFile(...)` whose argument is not a string literal.
    pub const DATA_FILE_NOT_LITERAL: &str = "DATA_FILE_NOT_LITERAL";
    /// `dataFile("...")` names a file that cannot be read as text.
    pub const DATA_FILE_NOT_FOUND: &str = "DATA_FILE_NOT_FOUND";
    /// `dataFile("...")` names a file larger than the compiler's bound.
    pub const DATA_FILE_TOO_LARGE: &str = "DATA_FILE_TOO_LARGE";
    /// `dataFile("...")` names a file outside the entry's folder, by an absolute path, or a
    /// hidden one.
    pub const DATA_FILE_FORBIDDEN: &str = "DATA_FILE_FORBIDDEN";
    /// JSX is used while `h` is bound to something other than commonfabric's `h`.
    pub const JSX_H_CONFLICT: &str = "JSX_H_CONFLICT";
    /// `Default<T, V>` whose `V` is not a literal type.
    pub const DEFAULT_NOT_LITERAL: &str = "DEFAULT_NOT_LITERAL";
    /// A reactive expression of a pattern body reads the clock or randomness.
    pub const NONDETERMINISTIC_CALL: &str = "NONDETERMINISTIC_CALL";
    /// `[SCHEDULE]` value is not an array literal.
    pub const SCHEDULE_NOT_ARRAY: &str = "SCHEDULE_NOT_ARRAY";
    /// More than 4 schedule entries.
    pub const SCHEDULE_TOO_MANY: &str = "SCHEDULE_TOO_MANY";
    /// A spread inside the schedule array or inside an entry.
    pub const SCHEDULE_SPREAD: &str = "SCHEDULE_SPREAD";
    /// A schedule entry that is not an object literal (or an array hole).
    pub const SCHEDULE_ENTRY_NOT_OBJECT: &str = "SCHEDULE_ENTRY_NOT_OBJECT";
    /// A schedule entry key other than `intervalMinutes` and `callback`.
    pub const SCHEDULE_UNKNOWN_KEY: &str = "SCHEDULE_UNKNOWN_KEY";
    /// A schedule entry without `intervalMinutes` or without `callback`.
    pub const SCHEDULE_MISSING_KEY: &str = "SCHEDULE_MISSING_KEY";
    /// The same key twice in one schedule entry.
    pub const SCHEDULE_DUPLICATE_KEY: &str = "SCHEDULE_DUPLICATE_KEY";
    /// A computed key (`[k]: ...`) inside a schedule entry.
    pub const SCHEDULE_COMPUTED_KEY: &str = "SCHEDULE_COMPUTED_KEY";
    /// `intervalMinutes` is not a literal (variable, call, conditional, template, ...).
    pub const SCHEDULE_INTERVAL_NOT_LITERAL: &str = "SCHEDULE_INTERVAL_NOT_LITERAL";
    /// `intervalMinutes` is a literal but not a number (string, boolean, null, BigInt).
    pub const SCHEDULE_INTERVAL_NOT_NUMBER: &str = "SCHEDULE_INTERVAL_NOT_NUMBER";
    /// `intervalMinutes` is a number written in exponent, hex, octal, binary or separator form.
    pub const SCHEDULE_INTERVAL_NOT_DECIMAL: &str = "SCHEDULE_INTERVAL_NOT_DECIMAL";
    /// `intervalMinutes` has a fractional part or a decimal point.
    pub const SCHEDULE_INTERVAL_NOT_INTEGER: &str = "SCHEDULE_INTERVAL_NOT_INTEGER";
    /// `intervalMinutes` below 60.
    pub const SCHEDULE_INTERVAL_TOO_SMALL: &str = "SCHEDULE_INTERVAL_TOO_SMALL";
    /// `intervalMinutes` above 44640 (31 days).
    pub const SCHEDULE_INTERVAL_TOO_LARGE: &str = "SCHEDULE_INTERVAL_TOO_LARGE";
    /// `callback` is something that can never be a stream (a literal, an inline function, ...).
    pub const SCHEDULE_CALLBACK_NOT_STREAM: &str = "SCHEDULE_CALLBACK_NOT_STREAM";
    /// `callback` is a handler (or another factory) not bound to its state: `sweep`, not `sweep({…})`.
    pub const SCHEDULE_CALLBACK_UNBOUND: &str = "SCHEDULE_CALLBACK_UNBOUND";
    /// `callback` names something that is not defined (`swep({…})` for `sweep`).
    pub const SCHEDULE_CALLBACK_UNDEFINED: &str = "SCHEDULE_CALLBACK_UNDEFINED";
    /// A reference to a name declared nowhere (not in the module, not imported, not a global).
    pub const NAME_UNDEFINED: &str = "NAME_UNDEFINED";
    /// `cron` written as anything but a string literal.
    pub const SCHEDULE_CRON_NOT_LITERAL: &str = "SCHEDULE_CRON_NOT_LITERAL";
    /// `timeZone` written as anything but a string literal.
    pub const SCHEDULE_TIMEZONE_NOT_LITERAL: &str = "SCHEDULE_TIMEZONE_NOT_LITERAL";
    /// Both `intervalMinutes` and `cron` on one entry.
    pub const SCHEDULE_SHAPE_CONFLICT: &str = "SCHEDULE_SHAPE_CONFLICT";
    /// `timeZone` on an entry without `cron`.
    pub const SCHEDULE_TIMEZONE_WITHOUT_CRON: &str = "SCHEDULE_TIMEZONE_WITHOUT_CRON";
    /// `at` written as anything but a field of the pattern's state (a literal, a call, …).
    pub const SCHEDULE_AT_NOT_FIELD: &str = "SCHEDULE_AT_NOT_FIELD";
    /// `at` names something that is not defined.
    pub const SCHEDULE_AT_UNDEFINED: &str = "SCHEDULE_AT_UNDEFINED";
    /// A cron expression that does not read (`schedule::cron`).
    pub const SCHEDULE_CRON_INVALID: &str = crate::schedule::cron::codes::CRON_INVALID;
    /// A cron expression that can fire less than 60 minutes apart.
    pub const SCHEDULE_CRON_TOO_FREQUENT: &str = crate::schedule::cron::codes::CRON_TOO_FREQUENT;
    /// A cron expression no date matches.
    pub const SCHEDULE_CRON_NEVER_FIRES: &str = crate::schedule::cron::codes::CRON_NEVER_FIRES;
    /// A `timeZone` the compiled-in IANA database does not know.
    pub const SCHEDULE_TIMEZONE_UNKNOWN: &str = crate::schedule::cron::codes::TIMEZONE_UNKNOWN;
    /// `[SCHEDULE]` anywhere but the root of the object a pattern callback returns.
    pub const SCHEDULE_NOT_ROOT: &str = "SCHEDULE_NOT_ROOT";
    /// `[SCHEDULE]` twice in one result object.
    pub const SCHEDULE_DUPLICATE: &str = "SCHEDULE_DUPLICATE";
    /// The stored spelling `"$SCHEDULE"` written as a plain key, which would bypass validation.
    pub const RESERVED_KEY_LITERAL: &str = "RESERVED_KEY_LITERAL";
    /// A `$`-prefixed key at the root of a pattern result that is not a known reserved key.
    pub const RESERVED_KEY_UNKNOWN: &str = "RESERVED_KEY_UNKNOWN";

    /// Every code, for documentation checks.
    pub const ALL: &[&str] = &[
        SYNTAX,
        MODULE_UNREADABLE,
        IMPORT_FORBIDDEN,
        IMPORT_NOT_FOUND,
        TOO_MANY_MODULES,
        IMPORT_EXTENSION,
        IMPORT_DYNAMIC,
        IMPORT_UNKNOWN_EXPORT,
        DATA_FILE_NOT_LITERAL,
        DATA_FILE_NOT_FOUND,
        DATA_FILE_TOO_LARGE,
        DATA_FILE_FORBIDDEN,
        JSX_H_CONFLICT,
        DEFAULT_NOT_LITERAL,
        NONDETERMINISTIC_CALL,
        SCHEDULE_NOT_ARRAY,
        SCHEDULE_TOO_MANY,
        SCHEDULE_SPREAD,
        SCHEDULE_ENTRY_NOT_OBJECT,
        SCHEDULE_UNKNOWN_KEY,
        SCHEDULE_MISSING_KEY,
        SCHEDULE_DUPLICATE_KEY,
        SCHEDULE_COMPUTED_KEY,
        SCHEDULE_INTERVAL_NOT_LITERAL,
        SCHEDULE_INTERVAL_NOT_NUMBER,
        SCHEDULE_INTERVAL_NOT_DECIMAL,
        SCHEDULE_INTERVAL_NOT_INTEGER,
        SCHEDULE_INTERVAL_TOO_SMALL,
        SCHEDULE_INTERVAL_TOO_LARGE,
        SCHEDULE_CALLBACK_NOT_STREAM,
        SCHEDULE_CALLBACK_UNBOUND,
        SCHEDULE_CALLBACK_UNDEFINED,
        SCHEDULE_CRON_NOT_LITERAL,
        SCHEDULE_TIMEZONE_NOT_LITERAL,
        SCHEDULE_SHAPE_CONFLICT,
        SCHEDULE_TIMEZONE_WITHOUT_CRON,
        SCHEDULE_AT_NOT_FIELD,
        SCHEDULE_AT_UNDEFINED,
        SCHEDULE_CRON_INVALID,
        SCHEDULE_CRON_TOO_FREQUENT,
        SCHEDULE_CRON_NEVER_FIRES,
        SCHEDULE_TIMEZONE_UNKNOWN,
        NAME_UNDEFINED,
        SCHEDULE_NOT_ROOT,
        SCHEDULE_DUPLICATE,
        SCHEDULE_NESTED,
        RESERVED_KEY_LITERAL,
        RESERVED_KEY_UNKNOWN,
    ];
}

/// One problem in one file, positioned in the author's original source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{file}:{line}:{col}: error[{code}]: {message}")]
pub struct Diagnostic {
    /// Stable code, one of [`codes`].
    pub code: &'static str,
    /// Display path of the file (as the module source was asked for it).
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in Unicode scalar values.
    pub col: u32,
    /// A sentence a pattern author understands.
    pub message: String,
    /// Byte range in the original source.
    pub span: (u32, u32),
    /// The full text of the line `line` (without its newline), for rendering.
    pub source_line: String,
}

/// A diagnostic before it is attached to a file: code, byte span, sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawDiag {
    pub code: &'static str,
    pub start: u32,
    pub end: u32,
    pub message: String,
}

impl RawDiag {
    pub(crate) fn new(
        code: &'static str,
        span: oxc_span::Span,
        message: impl Into<String>,
    ) -> Self {
        Self {
            code,
            start: span.start,
            end: span.end,
            message: message.into(),
        }
    }
}

impl Diagnostic {
    /// Attach a code, span and message to `file`, computing line/column from `text`.
    pub(crate) fn at(
        code: &'static str,
        file: &str,
        text: &str,
        span: (u32, u32),
        message: impl Into<String>,
    ) -> Self {
        let (line, col, source_line) = line_col(text, span.0);
        Diagnostic {
            code,
            file: file.to_string(),
            line,
            col,
            message: message.into(),
            span,
            source_line,
        }
    }

    pub(crate) fn from_raw(raw: RawDiag, file: &str, text: &str) -> Self {
        Self::at(raw.code, file, text, (raw.start, raw.end), raw.message)
    }
}

/// 1-based line and column (in chars) of byte `offset`, plus that line's text.
/// Offsets past the end or inside a UTF-8 sequence are clamped, never panic.
pub(crate) fn line_col(text: &str, offset: u32) -> (u32, u32, String) {
    let mut offset = (offset as usize).min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = text[..line_start].matches('\n').count() as u32 + 1;
    let col = text[line_start..offset].chars().count() as u32 + 1;
    let source_line = text[line_start..line_end]
        .trim_end_matches('\r')
        .to_string();
    (line, col, source_line)
}

/// Render diagnostics for a terminal: `file:line:col: error[CODE]: sentence`, then the source
/// line and a caret (with a tilde underline for the rest of the span on that line).
pub fn render(diags: &[Diagnostic]) -> String {
    let mut out = String::new();
    for d in diags {
        out.push_str(&d.to_string());
        out.push('\n');
        if d.source_line.is_empty() && d.span.0 == d.span.1 {
            continue;
        }
        let gutter = d.line.to_string();
        let pad = " ".repeat(gutter.len());
        out.push_str(&format!("{pad} |\n{gutter} | {}\n", d.source_line));
        // Keep tabs in the caret prefix so the caret lines up however the terminal expands them.
        let prefix: String = d
            .source_line
            .chars()
            .take(d.col.saturating_sub(1) as usize)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        let rest_of_line = d
            .source_line
            .chars()
            .count()
            .saturating_sub(prefix.chars().count());
        let span_chars = (d.span.1.saturating_sub(d.span.0) as usize).clamp(1, rest_of_line.max(1));
        out.push_str(&format!(
            "{pad} | {prefix}^{}\n",
            "~".repeat(span_chars - 1)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_is_one_based_and_counts_chars() {
        let text = "ab\nçd ef\n";
        assert_eq!(line_col(text, 0), (1, 1, "ab".into()));
        // 'ç' is two bytes; "d" starts at byte 5 and is the 2nd char of line 2.
        assert_eq!(line_col(text, 5), (2, 2, "çd ef".into()));
        assert_eq!(line_col(text, 999).0, 3);
    }

    #[test]
    fn render_shows_line_and_caret() {
        let text = "const a = 1;\n  foo(59);\n";
        let d = Diagnostic::at("X", "p.tsx", text, (19, 21), "bad");
        let r = render(&[d]);
        assert!(r.starts_with("p.tsx:2:7: error[X]: bad\n"), "{r}");
        assert!(r.contains("2 |   foo(59);\n"), "{r}");
        assert!(r.contains("  |       ^~\n"), "{r}");
    }
}
