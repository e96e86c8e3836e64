//! The crates' import graphs have no circle ([`ALLOWED`] is empty), and
//! the gateway's top-level modules import only down their layers
//! ([`LAYERS`]). Between crates Cargo keeps the direction itself: the
//! producer, store, ledger, cache, metrics, vocabulary, configuration and
//! leaf crates (`crates/upstream`, `crates/store`, `crates/observe`,
//! `crates/cache`, `crates/metrics`, `crates/xds`, `crates/config`,
//! `crates/base`) cannot name the gateway, nor a crate one above it.
//!
//! Every production file under `src/` and each crate's `crates/*/src/` (test-only modules and items left
//! out: `#[cfg(test)]` items and the files they declare) is read for the
//! paths it names through `crate::`, `super::` and `self::`, braces of `use`
//! trees expanded. Each path is resolved to the module it names, and from
//! that come graphs between modules that share a parent (a path through a
//! parent's `pub use` is followed to where the item is): the top-level
//! modules of the crate, and the children of every module that has
//! children (each crate's top level, the producers' `connection` and
//! `delta`, the vocabulary crate's `validate`, ...). A path to an
//! item of the parent itself (`super::SourceError` in `store/session_registry.rs`)
//! is no edge: the parent is no node of its children's graph.
//!
//! Every simple circle of those graphs is printed, and the set must be
//! exactly [`ALLOWED`]: a new circle fails (break it instead), and so does a
//! listed circle that is gone (take it off the list: the list only
//! shrinks). A circle is written from its smallest member, as
//! `parent: a -> b -> c` (`c` names `a` again; `crate` is the top level).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The circles the crate has now: none, and none may be added (issue 39).
/// (Gone so far: `crate: http -> serve`, when the JSON
/// error body moved to `error_body.rs`; every circle through `source::view`,
/// when the view types `Phase` and `Placement` moved into it; 27 circles of
/// `source` through `UpstreamContext`, when `source::upstream` stopped
/// naming `delta`, `health` and `probe`: the held sets moved out of `delta`
/// into `source/held.rs`, and `health` and `probe` became children of
/// `upstream`; the 7 circles of `cache`, when `Resource` stayed in
/// `resource.rs` and the `Renderer` (since renamed `Intake`) moved to
/// `renderer.rs` (now `intake.rs`), the memo of
/// assembled bodies out of `state.rs` into `body_memo.rs`, and the config
/// history out of the renderer, handed to the sessions and the admin
/// apart; `source: coalesce -> stream`, when the coalescing was handed the
/// stream's `nack` and `subscribe` instead of naming its `Protocol`; the 3
/// circles of `config` through `fields`, when the serde form of a duration
/// (`opt_duration`) moved out of `settings.rs` into `opt_duration.rs`, and
/// the forwarding rule of `proxies.rs` became a function of the three
/// values it reads instead of a method of `Config`; the 3 circles of `xds`
/// through `json`, when the descriptor pool and its lookups moved out of
/// `Codec` into `Descriptors` (`descriptors.rs`), `JsonError` into
/// `json_error.rs` and the bounded decoding of an `Any` into `nesting.rs`,
/// so that `canonical`, `nesting` and `opaque` are handed `Descriptors`
/// instead of the codec that calls them; the 2 circles of
/// `xds::validate`, when `Broken` moved out of `rules.rs` into `broken.rs`
/// and the readers of a rules message (`field`, `list`, ...) into
/// `fields.rs`, which `bounds`, `rules` and `text` all use.) A
/// path through a re-export (`super::UpstreamContext` in
/// `crates/upstream/src/failover.rs`) is an edge to the module the item is
/// defined in (the producers' `connection`). (`source` was split into `store` and
/// `upstream` since; the history above keeps the names of its time.)
const ALLOWED: &[&str] = &[];

/// More circles than this in one graph: the graph is a knot, and listing
/// them would not help anyone.
const MAX_CIRCLES: usize = 1_000;

type Module = Vec<String>;

/// A graph between the children of one module: child → children it names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every production module, and the modules each names (paths through a
/// parent's `pub use` followed to where the item is).
fn import_graph() -> (BTreeMap<Module, BTreeSet<Module>>, BTreeSet<Module>) {
    import_graph_of("src")
}

/// The library crates of the workspace besides the gateway: the label
/// their circles are printed with, and their source directory.
const CRATES: &[(&str, &str)] = &[
    ("xds-gateway-base", "crates/base/src"),
    ("xds-gateway-cache", "crates/cache/src"),
    ("xds-gateway-config", "crates/config/src"),
    ("xds-gateway-metrics", "crates/metrics/src"),
    ("xds-gateway-observe", "crates/observe/src"),
    ("xds-gateway-store", "crates/store/src"),
    ("xds-gateway-upstream", "crates/upstream/src"),
    ("xds-gateway-xds", "crates/xds/src"),
];

/// [`import_graph`] of the crate whose sources are in `dir` (from the
/// repository's top).
fn import_graph_of(dir: &str) -> (BTreeMap<Module, BTreeSet<Module>>, BTreeSet<Module>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let names = production_files(&src);
    let modules: BTreeSet<Module> = names.values().cloned().collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    let mut reexported = Reexports::new();
    for (file, module) in &names {
        let text = std::fs::read_to_string(file).expect("a source file reads");
        let code = strip_tests(&text).0;
        reexports(&code, module, &mut reexported);
        let named = edges.entry(module.clone()).or_default();
        for path in named_paths(&code, module) {
            named.insert(path);
        }
    }
    for named in edges.values_mut() {
        *named = named.iter().map(|p| through(p, &reexported)).collect();
    }
    (edges, modules)
}

#[test]
fn no_import_circle_but_the_allowed_ones() {
    let mut found = BTreeSet::new();
    for (name, dir) in [("crate", "src")].iter().chain(CRATES) {
        let (edges, modules) = import_graph_of(dir);
        let parents: BTreeSet<Module> = modules
            .iter()
            .filter(|m| !m.is_empty())
            .map(|m| m[..m.len() - 1].to_vec())
            .collect();
        for parent in &parents {
            let graph = graph_under(parent, &edges, &modules);
            let label = match (*name, parent.is_empty()) {
                (name, true) => name.to_owned(),
                ("crate", false) => parent.join("::"),
                (name, false) => format!("{name}::{}", parent.join("::")),
            };
            for circle in circles(&graph) {
                found.insert(format!("{label}: {}", circle.join(" -> ")));
            }
        }
    }
    println!("import circles found ({}):", found.len());
    for circle in &found {
        println!("  {circle}");
    }
    let allowed: BTreeSet<String> = ALLOWED.iter().map(|c| c.to_string()).collect();
    let new: Vec<&String> = found.difference(&allowed).collect();
    let gone: Vec<&String> = allowed.difference(&found).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "new import circles (break them; ALLOWED may only shrink): {new:#?}\n\
         circles ALLOWED lists that are gone (take them off the list): {gone:#?}"
    );
}

/// Every production `.rs` file under `src` with the module it is, from
/// `lib.rs` down through `mod` declarations not gated by `#[cfg(test)]`
/// (`main.rs`, the binary, names the crate as `xds_gateway::`, not
/// `crate::`).
fn production_files(src: &Path) -> BTreeMap<PathBuf, Module> {
    let mut files = BTreeMap::new();
    let mut pending = vec![(src.join("lib.rs"), Vec::new())];
    while let Some((file, module)) = pending.pop() {
        let text = std::fs::read_to_string(&file).expect("a module file reads");
        let (_, test_only) = strip_tests(&text);
        let dir = match file.file_name().and_then(|n| n.to_str()) {
            Some("lib.rs" | "mod.rs") => file.parent().expect("in a directory").to_owned(),
            _ => file.with_extension(""),
        };
        for child in declared_modules(&text) {
            if test_only.contains(&child) {
                continue;
            }
            let flat = dir.join(format!("{child}.rs"));
            let nested = dir.join(&child).join("mod.rs");
            let path = if flat.exists() { flat } else { nested };
            assert!(
                path.exists(),
                "module {child} of {} has a file",
                file.display()
            );
            let mut child_module = module.clone();
            child_module.push(child);
            pending.push((path, child_module));
        }
        files.insert(file, module);
    }
    files
}

/// The modules `text` declares with a file of their own (`mod name;`).
fn declared_modules(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let rest = without_visibility(line.trim()).strip_prefix("mod ")?;
            let name = rest.strip_suffix(';')?;
            is_ident(name).then(|| name.to_owned())
        })
        .collect()
}

/// `item` without its visibility (`pub`, `pub(crate)`, `pub(super)`,
/// `pub(in path)`).
fn without_visibility(item: &str) -> &str {
    if let Some(rest) = item.strip_prefix("pub(") {
        return rest
            .split_once(')')
            .map_or(item, |(_, rest)| rest.trim_start());
    }
    item.strip_prefix("pub ").unwrap_or(item)
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// `text` without comments and without the items `#[cfg(test)]`
/// gates; and the names of the modules such items declare (`mod name;`).
fn strip_tests(text: &str) -> (String, BTreeSet<String>) {
    let mut kept = String::new();
    let mut test_modules = BTreeSet::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed.starts_with("//") {
            continue;
        }
        if trimmed != "#[cfg(test)]" {
            // A trailing comment (a string holding " // " would be cut
            // too: none names a path).
            let line = line.split(" // ").next().unwrap_or_default();
            kept.push_str(line);
            kept.push('\n');
            continue;
        }
        // Skip the gated item: to its `;` before any brace, or to the
        // brace that closes its first one.
        let mut depth = 0i32;
        let mut opened = false;
        for item in lines.by_ref() {
            let item = item.trim();
            if item.starts_with("//") || item.starts_with("#[") {
                continue;
            }
            if !opened {
                if let Some(name) = without_visibility(item)
                    .strip_prefix("mod ")
                    .and_then(|rest| rest.strip_suffix(';'))
                {
                    test_modules.insert(name.to_owned());
                }
            }
            for c in item.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if (opened && depth <= 0) || (!opened && item.ends_with(';')) {
                break;
            }
        }
    }
    (kept, test_modules)
}

/// The modules (and items) `text`, the code of `module`, names through
/// `crate::`, `super::` and `self::` paths, resolved to absolute paths.
fn named_paths(text: &str, module: &Module) -> Vec<Module> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b'$');
        let head = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|h| starts_word && bytes[i..].starts_with(h.as_bytes()));
        let Some(head) = head else {
            i += 1;
            continue;
        };
        i += head.len();
        let mut base: Module = match head {
            "crate::" => Vec::new(),
            "self::" => module.clone(),
            _ => module[..module.len().saturating_sub(1)].to_vec(),
        };
        while head == "super::" && bytes[i..].starts_with(b"super::") {
            base.pop();
            i += "super::".len();
        }
        use_tree(bytes, &mut i, base, &mut out);
    }
    out
}

/// What a module's `pub use` lines re-export: the path an item is named by
/// in it → the path of the item re-exported.
type Reexports = BTreeMap<Module, Module>;

/// Adds the re-exports of `text`, the code of `module` (`pub(crate) use
/// session::Session;` in `source/mod.rs`: `source::Session` is
/// `source::session::Session`), to `out`.
fn reexports(text: &str, module: &Module, out: &mut Reexports) {
    for line in text.lines() {
        let line = line.trim();
        let Some(tree) = ["pub use ", "pub(crate) use ", "pub(super) use "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p))
        else {
            continue;
        };
        let mut paths = Vec::new();
        if let Some(path) = named_paths(tree, module).into_iter().next() {
            // `pub use crate::..`, `super::..` or `self::..`: one path.
            paths.push(path);
        } else {
            use_tree(tree.as_bytes(), &mut 0, module.clone(), &mut paths);
        }
        for path in paths {
            if let Some(name) = path.last() {
                let mut alias = module.clone();
                alias.push(name.clone());
                if alias != path {
                    out.insert(alias, path);
                }
            }
        }
    }
}

/// `path` with the re-exports it goes through followed.
fn through(path: &Module, reexports: &Reexports) -> Module {
    let mut path = path.clone();
    for _ in 0..8 {
        let Some((alias, target)) = (1..=path.len())
            .rev()
            .find_map(|n| reexports.get_key_value(&path[..n]))
        else {
            break;
        };
        let mut followed = target.clone();
        followed.extend_from_slice(&path[alias.len()..]);
        path = followed;
    }
    path
}

/// Expands the use tree (or path) at `i` under `prefix` into `out`.
fn use_tree(bytes: &[u8], i: &mut usize, prefix: Module, out: &mut Vec<Module>) {
    skip_space(bytes, i);
    if bytes.get(*i) == Some(&b'{') {
        *i += 1;
        loop {
            skip_space(bytes, i);
            match bytes.get(*i) {
                None => return,
                Some(b'}') => {
                    *i += 1;
                    return;
                }
                Some(b',') => *i += 1,
                Some(_) => {
                    let before = *i;
                    use_tree(bytes, i, prefix.clone(), out);
                    if *i == before {
                        *i += 1;
                    }
                }
            }
        }
    }
    let start = *i;
    while bytes
        .get(*i)
        .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
    {
        *i += 1;
    }
    let segment = String::from_utf8_lossy(&bytes[start..*i]).into_owned();
    let more = bytes[*i..].starts_with(b"::") && !segment.is_empty();
    let mut path = prefix;
    if !segment.is_empty() && segment != "self" {
        path.push(segment);
    }
    if more {
        *i += 2;
        use_tree(bytes, i, path, out);
    } else {
        out.push(path);
    }
}

fn skip_space(bytes: &[u8], i: &mut usize) {
    while bytes.get(*i).is_some_and(u8::is_ascii_whitespace) {
        *i += 1;
    }
}

/// The graph between the children of `parent`: a child names another when
/// any module inside it names anything inside the other.
fn graph_under(
    parent: &Module,
    edges: &BTreeMap<Module, BTreeSet<Module>>,
    modules: &BTreeSet<Module>,
) -> Graph {
    let depth = parent.len();
    let child_of = |m: &Module| -> Option<String> {
        (m.len() > depth && m[..depth] == parent[..]).then(|| m[depth].clone())
    };
    let children: BTreeSet<String> = modules.iter().filter_map(child_of).collect();
    let mut graph = Graph::new();
    for (from, named) in edges {
        let Some(a) = child_of(from) else { continue };
        for to in named {
            let Some(b) = child_of(to) else { continue };
            if a != b && children.contains(&b) {
                graph.entry(a.clone()).or_default().insert(b);
            }
        }
    }
    graph
}

/// Every simple circle of `graph`, each from its smallest node, sorted.
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = graph
        .iter()
        .flat_map(|(a, bs)| std::iter::once(a).chain(bs))
        .collect();
    let mut found = BTreeSet::new();
    for start in nodes {
        // Circles through `start` over nodes greater than it only: each
        // circle is found once, from its smallest node.
        let mut stack = vec![vec![start.clone()]];
        while let Some(path) = stack.pop() {
            let last = path.last().expect("a path is never empty");
            for next in graph.get(last).into_iter().flatten() {
                if next == start {
                    found.insert(path.clone());
                    assert!(
                        found.len() <= MAX_CIRCLES,
                        "more than {MAX_CIRCLES} circles"
                    );
                } else if next > start && !path.contains(next) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push(longer);
                }
            }
        }
    }
    found.into_iter().collect()
}

#[test]
fn the_circle_finder_finds_circles_and_only_them() {
    let graph = |edges: &[(&str, &str)]| {
        let mut graph = Graph::new();
        for (a, b) in edges {
            graph
                .entry(a.to_string())
                .or_default()
                .insert(b.to_string());
        }
        graph
    };
    let chain = graph(&[("a", "b"), ("b", "c")]);
    assert!(circles(&chain).is_empty(), "a chain is no circle");
    let knot = graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("b", "a"), ("c", "d")]);
    assert_eq!(
        circles(&knot),
        [vec!["a", "b"], vec!["a", "b", "c"]],
        "each circle once, from its smallest node"
    );
}

#[test]
fn paths_are_read_and_resolved_as_rustc_would() {
    let module: Module = vec!["source".into(), "sotw".into()];
    let text = "use super::{decode::{self, Rejection}, Source};\n\
                use crate::cache::{Names, TypeState};\n\
                let x = crate::metrics::Metrics::new(); self::inner::f(); super::super::app::run();\n\
                let y = $crate::nope::X; // crate::comment\n";
    let (code, _) = strip_tests(text);
    let paths: BTreeSet<String> = named_paths(&code, &module)
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    let expected = [
        "source::decode",
        "source::decode::Rejection",
        "source::Source",
        "cache::Names",
        "cache::TypeState",
        "metrics::Metrics::new",
        "source::sotw::inner::f",
        "app::run",
    ];
    assert_eq!(paths, expected.iter().map(|p| p.to_string()).collect());
}

#[test]
fn test_only_items_are_left_out() {
    let text = "use crate::a::X;\n#[cfg(test)]\nuse crate::b::Y;\n#[cfg(test)]\nmod tests;\n\
                #[cfg(test)]\nmod inline {\n    use crate::c::Z;\n}\nfn f() {}\n";
    let (code, test_modules) = strip_tests(text);
    assert_eq!(code, "use crate::a::X;\nfn f() {}\n");
    assert_eq!(test_modules, BTreeSet::from(["tests".to_owned()]));
}

#[test]
fn a_path_through_a_reexport_names_where_the_item_is() {
    let source: Module = vec!["source".into()];
    let mut reexported = Reexports::new();
    reexports(
        "pub(crate) use upstream::{CallError, UpstreamContext};\nuse probe::Probe;\n",
        &source,
        &mut reexported,
    );
    let via = |p: &str| {
        let path: Module = p.split("::").map(str::to_owned).collect();
        through(&path, &reexported).join("::")
    };
    assert_eq!(
        via("source::UpstreamContext"),
        "source::upstream::UpstreamContext"
    );
    assert_eq!(via("source::Probe"), "source::Probe", "not re-exported");
}

/// Modules declared with any visibility are in the graph
/// (`pub(super) mod fuzz;` was skipped before).
#[test]
fn modules_of_every_visibility_are_read() {
    let text = "mod a;\npub mod b;\npub(crate) mod c;\npub(super) mod d;\npub(in crate::x) mod e;\nmod f { }\n";
    assert_eq!(declared_modules(text), ["a", "b", "c", "d", "e"]);
}

/// The top-level modules, from the top layer down: a module names only
/// modules of layers below its own (`docs/architecture.md`, "Layers").
/// `admin` reuses the REST face's error type and header checks, so it sits
/// above `http`; the last layer holds the leaves everything may use.
const LAYERS: &[&[&str]] = &[
    &["app", "fuzz"],
    &["admin", "http"],
    &["face"],
    &["serve", "auth", "profiles", "demo"],
    &["upstream"],
    &["store"],
    &["observe", "tls"],
    &["cache", "metrics"],
    &["xds", "config"],
    &[
        "log_escape",
        "error_body",
        "reload",
        "drain",
        "shares",
        "huge_pages",
        "read_ahead",
    ],
    &["sync"],
];

#[test]
fn top_level_modules_import_only_downward() {
    let (edges, modules) = import_graph();
    let graph = graph_under(&Vec::new(), &edges, &modules);
    let top: BTreeSet<&str> = modules
        .iter()
        .filter_map(|m| m.first().map(String::as_str))
        .collect();
    let unlisted: Vec<&&str> = top
        .iter()
        .filter(|m| layer_of(LAYERS, m).is_none())
        .collect();
    assert!(
        unlisted.is_empty(),
        "top-level modules LAYERS does not place: {unlisted:?}"
    );
    let upward = against_layers(&graph, LAYERS);
    assert!(
        upward.is_empty(),
        "imports that run sideways or back up the layers: {upward:#?}"
    );
}

/// The layer `name` is in (0 the top), if any.
fn layer_of(layers: &[&[&str]], name: &str) -> Option<usize> {
    layers.iter().position(|layer| layer.contains(&name))
}

/// Every edge of `graph` that does not go to a lower layer (or names a
/// module no layer places), as `from -> to`.
fn against_layers(graph: &Graph, layers: &[&[&str]]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (from, names) in graph {
        for to in names {
            let (a, b) = (layer_of(layers, from), layer_of(layers, to));
            if a.is_none() || b.is_none() || b <= a {
                wrong.push(format!("{from} -> {to}"));
            }
        }
    }
    wrong
}

#[test]
fn the_layer_check_finds_sideways_upward_and_unplaced_imports() {
    let layers: &[&[&str]] = &[&["a"], &["b", "c"], &["d"]];
    let graph: Graph = [
        ("a", vec!["b", "d"]),
        ("b", vec!["c", "d", "a"]),
        ("d", vec!["e"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(
        against_layers(&graph, layers),
        ["b -> a", "b -> c", "d -> e"]
    );
}

/// The files a poll runs through in `http` and in the code both faces
/// share (`face`): the router and its state, the client's address through
/// a trusted proxy, admission, a POST or GET poll, a long poll, make-before-
/// break, a `?watch` stream, and the error table they answer through.
const POLL_PATH: &[&str] = &[
    "http",
    "http::forwarded",
    "http::admission",
    "http::authorize",
    "http::discovery",
    "http::asked",
    "http::long_poll",
    "http::make_before_break",
    "http::wait",
    "http::caching",
    "http::present",
    "http::pieces",
    "http::renditions",
    "http::watch",
    "http::watch::stream",
    "face",
    "face::body",
    "face::error",
    "face::query",
    "face::host",
    "face::credential",
];

/// What a poll is checked against before it reaches a source: the
/// connection it came on (`serve`), who the caller is (`tls`, `auth`), its
/// share of the limits (`shares`) and the node a GET presents (`profiles`).
const ADMISSION: &[&str] = &["serve", "auth", "tls", "shares", "profiles"];

/// Vocabulary and leaves every layer may use: no state a poll passes
/// through.
const VOCABULARY: &[&str] = &[
    "xds",
    "config",
    "metrics",
    "sync",
    "log_escape",
    "error_body",
    "drain",
];

/// Past admission, the files of a poll's path in the faces (`http`,
/// `face`) name exactly three other top-level modules that hold state or
/// logic: `store` (the `Source` seam and `Polled`), `cache` (parsed
/// requests, the assembler, the answer) and `observe` (the client book and
/// the answer log). A poll path that starts naming a producer (`upstream`)
/// or anything else fails here.
///
/// What it leaves out: calls through `dyn Source` reach `upstream` at run
/// time (the fetch and auto sources answer polls themselves), which no
/// import shows; and it says which modules a poll names, not how often it
/// goes back and forth between them.
#[test]
fn a_poll_crosses_http_store_cache_and_observe_only() {
    let (edges, modules) = import_graph();
    let mut rooms = BTreeSet::new();
    for file in POLL_PATH {
        let module: Module = file.split("::").map(str::to_owned).collect();
        assert!(modules.contains(&module), "{file} is no module any more");
        for named in edges.get(&module).into_iter().flatten() {
            let Some(top) = named.first().map(String::as_str) else {
                continue;
            };
            let face = top == "http" || top == "face";
            if !face && !ADMISSION.contains(&top) && !VOCABULARY.contains(&top) {
                rooms.insert(top.to_owned());
            }
        }
    }
    println!("a poll crosses the faces and {rooms:?}");
    assert_eq!(
        rooms,
        ["cache", "observe", "store"].map(str::to_owned).into(),
        "the modules a poll's path names past admission"
    );
}
