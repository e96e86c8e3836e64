//! The README and `docs/*.md` point at things that exist: every relative
//! Markdown link names a file of the repository (and, with `#anchor`, a
//! heading of that file, as GitHub derives anchors from headings), and every
//! repository path written in backticks outside code blocks (`src/...`,
//! `tests/...`, or a file such as `serve/connection.rs` named relative to its
//! module) names a file or directory that is there. A moved section or a
//! renamed module then fails here instead of leaving a dead pointer.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Directories never searched for files (build output, environments, VCS).
const SKIPPED: [&str; 4] = ["target", ".git", ".venv", "node_modules"];
/// Extensions of a file named by a path relative to its module.
const FILE_EXTENSIONS: [&str; 8] = ["rs", "md", "yaml", "yml", "toml", "py", "sh", "conf"];

/// The documents checked: the README and every Markdown file under docs/.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut docs = vec![root.join("README.md")];
    let dir = std::fs::read_dir(root.join("docs")).expect("docs/ exists");
    let mut more: Vec<PathBuf> = dir
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    more.sort();
    assert!(!more.is_empty(), "docs/ holds no Markdown file");
    docs.extend(more);
    docs
}

/// Every file and directory of the repository, relative to its root, with
/// `/` separators (directories end in `/`).
fn repository_paths() -> BTreeSet<String> {
    fn walk(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let entry = entry.expect("a directory entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = format!("{prefix}{name}");
            if entry.file_type().expect("a file type").is_dir() {
                if SKIPPED.contains(&name.as_str()) {
                    continue;
                }
                out.insert(format!("{path}/"));
                walk(&entry.path(), &format!("{path}/"), out);
            } else {
                out.insert(path);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(Path::new(ROOT), "", &mut out);
    out
}

/// The text outside fenced code blocks, line by line (number, line).
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// The anchor GitHub gives a heading: lower case, spaces as `-`, every
/// character but letters, digits, `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .into_iter()
        .filter_map(|(_, line)| {
            let hashes = line.chars().take_while(|c| *c == '#').count();
            (hashes > 0 && line[hashes..].starts_with(' ')).then(|| slug(&line[hashes..]))
        })
        .collect()
}

/// The targets of the inline links `[text](target)` of a line.
fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(after[..end].trim());
        rest = &after[end..];
    }
    out
}

/// The code spans `` `...` `` of a line.
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// Whether `word` reads as a repository path: segments of path characters
/// separated by `/`, beginning with a top-level entry of the repository or
/// ending in a file name with a known extension.
fn as_repo_path<'a>(word: &'a str, top: &BTreeSet<String>) -> Option<&'a str> {
    let word = word.trim_matches(|c: char| matches!(c, '(' | ')' | ',' | ';' | ':' | '.'));
    let path_chars = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
    };
    if !word.contains('/') || word.starts_with('/') || !path_chars(word) {
        return None;
    }
    let first = word.split('/').next().unwrap_or_default();
    let extension = word.rsplit_once('.').map(|(_, e)| e).unwrap_or_default();
    (top.contains(first) || FILE_EXTENSIONS.contains(&extension)).then_some(word)
}

#[test]
fn links_and_paths_in_the_docs_exist() {
    let paths = repository_paths();
    let top: BTreeSet<String> = paths
        .iter()
        .filter_map(|p| p.split('/').next())
        .filter(|first| !first.is_empty())
        .map(str::to_owned)
        .collect();
    let mut problems = Vec::new();
    let mut checked = (0, 0);
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{e}"));
        let name = doc.strip_prefix(ROOT).unwrap_or(&doc).display().to_string();
        let dir = doc.parent().expect("a document's directory");
        for (number, line) in prose(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked.0 += 1;
                let (file, anchor) = match target.split_once('#') {
                    Some((file, anchor)) => (file, Some(anchor)),
                    None => (target, None),
                };
                let path = if file.is_empty() {
                    doc.clone()
                } else {
                    dir.join(file)
                };
                if !path.exists() {
                    problems.push(format!("{name}:{number}: link to {target:?}: no such file"));
                    continue;
                }
                if let Some(anchor) = anchor {
                    let linked = std::fs::read_to_string(&path).unwrap_or_default();
                    if !anchors(&linked).contains(anchor) {
                        problems.push(format!(
                            "{name}:{number}: link to {target:?}: no heading with that anchor"
                        ));
                    }
                }
            }
            for span in code_spans(line) {
                for word in span.split_whitespace() {
                    let Some(path) = as_repo_path(word, &top) else {
                        continue;
                    };
                    checked.1 += 1;
                    let exists = paths.contains(path)
                        || paths.contains(&format!("{path}/"))
                        || paths.iter().any(|p| p.ends_with(&format!("/{path}")));
                    if !exists && !path.starts_with("target/") {
                        problems.push(format!("{name}:{number}: `{path}` does not exist"));
                    }
                }
            }
        }
    }
    eprintln!(
        "checked {} links and {} paths in README.md and docs/",
        checked.0, checked.1
    );
    assert!(
        checked.0 > 0 && checked.1 > 0,
        "nothing checked: {checked:?}"
    );
    assert!(
        problems.is_empty(),
        "dead pointers in the docs:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_checks_themselves() {
    assert_eq!(
        slug("Compared with go-control-plane's HTTPGateway"),
        "compared-with-go-control-planes-httpgateway"
    );
    assert_eq!(slug("The `Source` seam"), "the-source-seam");
    assert_eq!(slug("How to add…"), "how-to-add");
    assert_eq!(
        link_targets("see [a](docs/a.md) and [b](#b-c), not (c)"),
        vec!["docs/a.md", "#b-c"]
    );
    assert_eq!(code_spans("a `x` b `y z` c"), vec!["x", "y z"]);
    let top: BTreeSet<String> = ["src".to_owned()].into();
    assert_eq!(as_repo_path("src/lib.rs", &top), Some("src/lib.rs"));
    assert_eq!(as_repo_path("(delta/mod.rs),", &top), Some("delta/mod.rs"));
    assert_eq!(as_repo_path("src/", &top), Some("src/"));
    assert_eq!(as_repo_path("/v3/discovery:clusters", &top), None);
    assert_eq!(as_repo_path("nodes/<node id>/", &top), None);
    assert_eq!(as_repo_path("a/b", &top), None);
    let text = "# T\n## The `Source` seam\n```\n## not a heading\n```\n";
    assert_eq!(
        anchors(text),
        ["t".to_owned(), "the-source-seam".to_owned()].into()
    );
}

/// The identifiers a code span names (`Type`, `module::item`, `value.method()`,
/// `f()`): each part that reads as a Rust identifier of three characters or
/// more. Spans with spaces, paths, flags or file names name no identifier.
fn identifiers(span: &str) -> Vec<&str> {
    let core = span.trim().trim_end_matches("()");
    let is_file = [".rs", ".md", ".toml", ".yaml", ".py", ".sh", ".json"]
        .iter()
        .any(|ext| core.ends_with(ext));
    if core.is_empty() || is_file || core.contains([' ', '/', '-', '?', '=', '"', '{']) {
        return Vec::new();
    }
    core.split("::")
        .flat_map(|p| p.split('.'))
        .map(|p| p.trim_matches(|c: char| "()&*<>,;:[]!".contains(c)))
        .filter(|p| {
            p.len() > 2
                && p.chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .collect()
}

/// Every word (identifier) of the Rust sources under `dirs`.
fn source_words(dirs: &[&str]) -> BTreeSet<String> {
    fn walk(dir: &Path, words: &mut BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
            if path.is_dir() {
                walk(&path, words);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                words.extend(
                    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .filter(|w| !w.is_empty())
                        .map(str::to_owned),
                );
            }
        }
    }
    let mut words = BTreeSet::new();
    for dir in dirs {
        walk(&Path::new(ROOT).join(dir), &mut words);
    }
    words
}

/// `docs/architecture.md` names only what exists. Every identifier in its
/// code spans, and every `a.b` or `a::b` path in its code blocks, is a word
/// of the Rust sources (`src/`, `crates/`, `tests/`, `bench/`), so a renamed type
/// or a removed method fails here instead of leaving the map wrong.
#[test]
fn the_architecture_names_only_identifiers_that_exist() {
    let text = std::fs::read_to_string(Path::new(ROOT).join("docs/architecture.md")).unwrap();
    let words = source_words(&["src", "crates", "tests", "bench"]);
    let mut spans: Vec<&str> = text.lines().flat_map(code_spans).collect();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            spans.extend(line.split_whitespace().filter(|w| {
                w.contains("::")
                    || (w.contains('.')
                        && w.chars()
                            .all(|c| c.is_ascii_lowercase() || "._()".contains(c)))
            }));
        }
    }
    let missing: BTreeSet<String> = spans
        .iter()
        .flat_map(|span| identifiers(span).into_iter().map(move |id| (span, id)))
        .filter(|(_, id)| !words.contains(*id))
        .map(|(span, id)| format!("`{span}`: {id}"))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names what the sources do not:\n{}",
        missing.into_iter().collect::<Vec<_>>().join("\n")
    );
    assert_eq!(identifiers("Intake::resource"), ["Intake", "resource"]);
    assert_eq!(identifiers("held_polls.take"), ["held_polls", "take"]);
    assert!(identifiers("src/lib.rs").is_empty() && identifiers("--max-sessions").is_empty());
}
