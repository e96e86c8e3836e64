//! Whether a glob a rule grants secrets for pins what it matches: the rule
//! that secrets are never granted for "any value" goes by what a pattern can
//! match, not by how it is spelled.
//! `"*"`, `"?*"`, but also `"[!~]*"`, `"*[!~]"` and `"[[:alnum:]]*"` match
//! every value a client would send. A pattern is pinned when it begins or
//! ends with a literal character (a one-character class such as `[*]` is
//! one): `"edge-*"`, `"*-edge"`, `"edge-?"`, an exact name. One that begins
//! and ends with wildcards or classes (`"*edge*"`, `"?*?"`) is not: a
//! client's value only has to contain its letters somewhere.

/// One piece of a glob.
#[derive(Debug, PartialEq)]
enum Token {
    Literal,
    Wildcard,
}

/// The pieces of `pattern`, as the `glob` crate reads it.
fn tokens(pattern: &str) -> Vec<Token> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' | '?' => {
                out.push(Token::Wildcard);
                i += 1;
            }
            '[' => {
                // `[` ... `]`, a `]` right after `[` or `[!` being a member.
                let mut j = i + 1;
                let negated = chars.get(j) == Some(&'!');
                if negated {
                    j += 1;
                }
                let start = j;
                if chars.get(j) == Some(&']') {
                    j += 1;
                }
                while j < chars.len() && chars[j] != ']' {
                    j += 1;
                }
                if j >= chars.len() {
                    // Unclosed: the glob crate refuses it; count it open.
                    out.push(Token::Wildcard);
                    return out;
                }
                let members = &chars[start..j];
                out.push(if !negated && members.len() == 1 {
                    Token::Literal
                } else {
                    Token::Wildcard
                });
                i = j + 1;
            }
            _ => {
                out.push(Token::Literal);
                i += 1;
            }
        }
    }
    out
}

/// Whether `pattern` begins or ends with a literal character (or is
/// empty, which matches only the empty value).
pub(super) fn is_pinned(pattern: &str) -> bool {
    let tokens = tokens(pattern);
    let literal = Some(&Token::Literal);
    tokens.is_empty() || tokens.first() == literal || tokens.last() == literal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_by_a_literal_at_either_end() {
        for pinned in [
            "edge-1",
            "edge-*",
            "edge-?",
            "*-edge",
            "e*",
            "[*]*",
            "*[e]",
            "edge-[0-9]",
            "[]]*",
            "",
        ] {
            assert!(is_pinned(pinned), "{pinned}");
        }
        for open in [
            "*",
            "?*",
            "??",
            "**",
            "[!~]*",
            "*[!~]",
            "[[:alnum:]]*",
            "*edge*",
            "?edge?",
            "[a-z]*[0-9]",
            "[!a]",
        ] {
            assert!(!is_pinned(open), "{open}");
        }
    }
}
