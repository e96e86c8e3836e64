//! [`Escaped`]: how a value someone else chose (a REST client's node id,
//! cluster, resource names, versions, type URLs; an upstream's names and
//! versions) is written into a log line.
//!
//! Every such value goes through it in `tracing` fields (`node = %Escaped(id)`),
//! so no value can end a log line, forge the next one, or drive the terminal
//! it is read on. It escapes every Unicode control character (C0, DEL, C1:
//! newline as `\n`, carriage return as `\r`, tab as `\t`, the rest as
//! `\u{1b}`), the line and paragraph separators and the bidirectional
//! overrides and isolates (which reorder what a reader sees), and the
//! backslash itself (`\\`), so an escaped value cannot pass for another one.
//!
//! The pinned tracing-subscriber (0.3.23) escapes ESC, BEL, BS, FF, DEL and
//! C1 in field values when it writes text, but not newlines, carriage
//! returns or tabs; the JSON format escapes what JSON needs. This module
//! does not depend on either. It owns no I/O and holds no state.

use std::fmt::{self, Write};

/// `value`, formatted with every control character escaped (see the module).
/// Works for anything `Display`, so a value is escaped as it is written and
/// never copied first; a `Debug`-only value goes in as
/// `Escaped(format_args!("{v:?}"))`. (A string's `Debug` form is already
/// escaped by the standard library: `?names` needs no wrapper.)
#[derive(Debug, Clone, Copy)]
pub struct Escaped<T>(pub T);

impl<T: fmt::Display> fmt::Display for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(EscapingWriter(f), "{}", self.0)
    }
}

/// Writes through to `f`, escaping as it goes.
struct EscapingWriter<'a, 'b>(&'a mut fmt::Formatter<'b>);

impl Write for EscapingWriter<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // Runs of characters that need nothing are written in one piece.
        let mut clean_from = 0;
        for (at, ch) in s.char_indices() {
            let escape = match ch {
                '\\' => Some("\\\\"),
                '\n' => Some("\\n"),
                '\r' => Some("\\r"),
                '\t' => Some("\\t"),
                c if needs_escape(c) => None,
                _ => continue,
            };
            self.0.write_str(&s[clean_from..at])?;
            match escape {
                Some(text) => self.0.write_str(text)?,
                None => write!(self.0, "\\u{{{:x}}}", u32::from(ch))?,
            }
            clean_from = at + ch.len_utf8();
        }
        self.0.write_str(&s[clean_from..])
    }
}

/// Control characters, line and paragraph separators, and the
/// bidirectional formatting characters.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(s: &str) -> String {
        Escaped(s).to_string()
    }

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(escaped("node-1.eu"), "node-1.eu");
        assert_eq!(escaped("ünïcödé ✓ 节点"), "ünïcödé ✓ 节点");
        assert_eq!(
            escaped("a\nb\r\tc\x1b[31md\x07\x7f\u{9b}"),
            "a\\nb\\r\\tc\\u{1b}[31md\\u{7}\\u{7f}\\u{9b}"
        );
        assert_eq!(escaped("\0"), "\\u{0}");
        assert_eq!(
            escaped("x\u{2028}y\u{202e}z\u{2066}"),
            "x\\u{2028}y\\u{202e}z\\u{2066}"
        );
    }

    #[test]
    fn an_escaped_value_cannot_pass_for_another() {
        // A literal backslash-n is not the escape of a newline.
        assert_eq!(escaped("a\\nb"), "a\\\\nb");
        assert_ne!(escaped("a\\nb"), escaped("a\nb"));
    }

    #[test]
    fn any_display_value_is_escaped_as_written() {
        let peer: std::net::SocketAddr = "127.0.0.1:80".parse().unwrap();
        assert_eq!(Escaped(peer).to_string(), "127.0.0.1:80");
        assert_eq!(Escaped(42).to_string(), "42");
        assert_eq!(
            Escaped(format_args!("{}-{}", "a\n", 1)).to_string(),
            "a\\n-1"
        );
    }
}
