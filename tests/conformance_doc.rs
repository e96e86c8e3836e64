//! `docs/conformance.md` names only tests that exist, and every row of its
//! matrix says how it is covered.
//!
//! This file owns three rules about that document:
//! - every test it names in backticks as `path.rs::name` (or
//!   `path.rs::module::name`) is a function `name` in that file, under a
//!   `#[test]` or `#[tokio::test...]` attribute (for a nested module path
//!   only the function's name is looked for in the file);
//! - a name marked `PENDING:` (a test someone is writing) is only reported
//!   while it is missing, and is an error once it exists: whoever lands the
//!   test removes the mark;
//! - every table row's last cell (the Tests column) names a test or says
//!   GAP.
//!
//! Relative links and paths in the document are `tests/doc_links.rs`'s.

use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const DOC: &str = "docs/conformance.md";
/// How many lines above a test function its test attribute may be (doc
/// comments and other attributes come between).
const ATTRIBUTE_REACH: usize = 6;

/// One test named in the document.
#[derive(Debug, PartialEq, Eq)]
struct Reference {
    /// Line of the document (1-based).
    line: usize,
    /// The file, relative to the repository.
    path: String,
    /// The test function's name (the last `::` segment).
    name: String,
    /// Marked `PENDING:`: the test is being written.
    pending: bool,
}

impl Reference {
    fn shown(&self) -> String {
        format!("{DOC}:{}: {}::{}", self.line, self.path, self.name)
    }
}

/// A code span `path.rs::a::b` read as a reference: the path and the last
/// segment, if it has that shape.
fn parse_span(span: &str) -> Option<(String, String)> {
    let (path, tail) = span.split_once("::")?;
    let path_ok = path.ends_with(".rs")
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'));
    let segments_ok = tail
        .split("::")
        .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    let name = tail.rsplit("::").next()?;
    (path_ok && segments_ok).then(|| (path.to_owned(), name.to_owned()))
}

/// The tests named on `line` (number `at`): every code span of that shape,
/// pending when the text just before it ends in `PENDING:`.
fn references_in(line: &str, at: usize) -> Vec<Reference> {
    let parts: Vec<&str> = line.split('`').collect();
    let mut out = Vec::new();
    // Code spans are the odd parts; the last part is text (or an unclosed span).
    for (i, span) in parts.iter().enumerate().skip(1).step_by(2) {
        if i + 1 == parts.len() {
            break;
        }
        if let Some((path, name)) = parse_span(span) {
            out.push(Reference {
                line: at,
                path,
                name,
                pending: parts[i - 1].trim_end().ends_with("PENDING:"),
            });
        }
    }
    out
}

fn references(text: &str) -> Vec<Reference> {
    text.lines()
        .enumerate()
        .flat_map(|(i, line)| references_in(line, i + 1))
        .collect()
}

/// Whether `source` has a test function `name`: a `fn name(` line with a
/// `#[test]` or `#[tokio::test...]` attribute at most [`ATTRIBUTE_REACH`]
/// lines above it, with no code line in between.
fn has_test(source: &str, name: &str) -> bool {
    let lines: Vec<&str> = source.lines().collect();
    let declares = |line: &str| {
        line.match_indices(&format!("fn {name}("))
            .any(|(at, _)| at == 0 || line[..at].ends_with(' '))
    };
    lines.iter().enumerate().any(|(i, line)| {
        declares(line)
            && lines[i.saturating_sub(ATTRIBUTE_REACH)..i]
                .iter()
                .rev()
                .map(|l| l.trim())
                .take_while(|l| !(l.ends_with('}') || l.ends_with(';') || l.ends_with('{')))
                .any(|l| l.starts_with("#[test]") || l.starts_with("#[tokio::test"))
    })
}

/// Whether the test `reference` names exists; `Err` says why not.
fn check(reference: &Reference) -> Result<(), String> {
    let file = Path::new(ROOT).join(&reference.path);
    let source = std::fs::read_to_string(&file).map_err(|e| {
        format!(
            "{}: {} cannot be read: {e}",
            reference.shown(),
            reference.path
        )
    })?;
    if has_test(&source, &reference.name) {
        Ok(())
    } else {
        Err(format!(
            "{}: no test function {} in {}",
            reference.shown(),
            reference.name,
            reference.path
        ))
    }
}

/// The body rows of the document's tables: (line, last cell). A header is
/// the row above a `|---|` delimiter row.
fn rows(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let is_delimiter =
        |line: &str| line.contains('-') && line.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '));
    let is_row = |line: &str| line.trim_start().starts_with('|');
    lines
        .iter()
        .enumerate()
        .filter(|(i, line)| {
            is_row(line)
                && !is_delimiter(line)
                && !lines.get(i + 1).is_some_and(|next| is_delimiter(next))
        })
        .map(|(i, line)| {
            let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
            (i + 1, cells.last().map_or("", |c| c.trim()).to_owned())
        })
        .collect()
}

fn document() -> String {
    let path = Path::new(ROOT).join(DOC);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_test_the_matrix_names_exists() {
    let all = references(&document());
    assert!(all.len() > 20, "{DOC} names only {} tests", all.len());
    let mut missing = Vec::new();
    for reference in &all {
        match (check(reference), reference.pending) {
            (Ok(()), _) => {}
            (Err(why), true) => eprintln!("pending, not there yet: {why}"),
            (Err(why), false) => missing.push(why),
        }
    }
    eprintln!("{} tests named in {DOC}", all.len());
    assert!(
        missing.is_empty(),
        "{DOC} names tests that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_pending_test_that_exists_is_no_longer_marked_pending() {
    let landed: Vec<String> = references(&document())
        .iter()
        .filter(|r| r.pending && check(r).is_ok())
        .map(Reference::shown)
        .collect();
    assert!(
        landed.is_empty(),
        "these tests exist now: remove their PENDING: mark in {DOC}:\n{}",
        landed.join("\n")
    );
}

#[test]
fn every_row_names_a_test_or_a_gap() {
    let text = document();
    let rows = rows(&text);
    assert!(rows.len() > 20, "{DOC} has only {} rows", rows.len());
    let (mut covered, mut pending, mut gaps, mut bare) = (0, 0, 0, Vec::new());
    for (line, tests) in &rows {
        let named = references_in(tests, *line);
        if tests.contains("GAP") {
            gaps += 1;
        } else if named.is_empty() {
            bare.push(format!("{DOC}:{line}: {tests:?}"));
        } else if named.iter().all(|r| r.pending) {
            pending += 1;
        } else {
            covered += 1;
        }
    }
    eprintln!(
        "{} rows: {covered} covered, {pending} pending, {gaps} gaps",
        rows.len()
    );
    assert!(
        bare.is_empty(),
        "rows whose Tests cell names no test and says no GAP:\n{}",
        bare.join("\n")
    );
}

#[test]
fn the_checks_themselves() {
    assert_eq!(
        parse_span("src/upstream/sotw.rs::tests::a_b"),
        Some(("src/upstream/sotw.rs".into(), "a_b".into()))
    );
    assert_eq!(
        parse_span("tests/x.rs::t"),
        Some(("tests/x.rs".into(), "t".into()))
    );
    for not_a_test in ["src/lib.rs", "Names::from_request", "a.rs::", "a.rs::b c"] {
        assert_eq!(parse_span(not_a_test), None, "{not_a_test}");
    }
    let line = "| x | `tests/a.rs::one`, PENDING: `src/b.rs::tests::two` | `src/c.rs` |";
    let found = references_in(line, 7);
    assert_eq!(found.len(), 2);
    assert!(!found[0].pending && found[1].pending);
    assert_eq!((found[1].line, found[1].name.as_str()), (7, "two"));

    let source = "#[test]\nfn plain() {}\n\n/// Doc.\n#[tokio::test(flavor = \"multi_thread\")]\nasync fn held() {\n}\nfn helper() {}\n#[test]\nfn other() { helper(); }\nfn not_one() {}\n";
    assert!(has_test(source, "plain") && has_test(source, "held"));
    assert!(!has_test(source, "helper"), "a helper is no test");
    assert!(
        !has_test(source, "not_one"),
        "the attribute above belongs to another"
    );
    assert!(!has_test(source, "plai"), "a prefix is no name");

    let table = "| a | Tests |\n|---|---|\n| 1 | `t.rs::x` |\n| 2 | GAP: why |\n\ntext\n";
    assert_eq!(
        rows(table),
        [(3, "`t.rs::x`".to_owned()), (4, "GAP: why".to_owned())]
    );
}
