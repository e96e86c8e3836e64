//! Embeds `examples/demo/` (the default snapshot) into the binary, which
//! hands it to the producers (`src/demo.rs`). Envoy's descriptors, and the
//! project's own messages in `proto/`, are compiled by the build script of
//! the xDS vocabulary crate (`crates/xds/build.rs`).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    embed_demo_snapshot();
}

/// Embeds `examples/demo/` (the default snapshot) as `(relative path, text)`
/// pairs, so the binary serves it from anywhere.
fn embed_demo_snapshot() {
    let root =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR set by cargo"))
            .join("examples/demo");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect_files(&root, &mut files);
    files.sort();
    let mut out = String::from("/// The demo snapshot: (path relative to examples/demo, contents).\npub(super) static DEMO_FILES: &[(&str, &str)] = &[\n");
    for path in files {
        println!("cargo:rerun-if-changed={}", path.display());
        let rel = path
            .strip_prefix(&root)
            .expect("under root")
            .to_string_lossy()
            .replace('\\', "/");
        out.push_str(&format!(
            "    ({rel:?}, include_str!({:?})),\n",
            path.display().to_string()
        ));
    }
    out.push_str("];\n");
    let dest =
        PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR set by cargo")).join("demo_snapshot.rs");
    fs::write(dest, out).expect("write demo_snapshot.rs");
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            println!("cargo:rerun-if-changed={}", path.display());
            collect_files(&path, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(path);
        }
    }
}
