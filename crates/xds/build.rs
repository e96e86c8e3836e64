//! Compiles Envoy's v3 API, and the project's own messages in the
//! repository's top-level `proto/`, into one `FileDescriptorSet` this crate
//! embeds (`descriptors.rs`).
//!
//! The `.proto` files are not in this repository. They come from two crates
//! pinned in `Cargo.lock`:
//! - `envoy-types`: the whole `envoy/**/v3` tree with its xds/udpa, validate,
//!   googleapis and cel dependencies (its generated Rust is what the code uses
//!   statically: discovery envelope, gRPC clients);
//! - `data-plane-api`: cncf/xds files the first lacks (TypedStruct, the rest of
//!   the xds matcher inputs, xds.core resources). It is declared under a cfg
//!   that is never set, so it is never compiled; `cargo metadata` downloads it
//!   and tells where its sources are.
//!
//! `XDS_GATEWAY_PROTO_ROOTS` (paths separated by `:`, first wins) replaces the
//! lookup for offline or vendored builds: the first root must hold the envoy
//! tree layout of envoy-types' `proto/` directory, the optional second one
//! that of data-plane-api's package.
//!
//! protox needs no system `protoc`. Each root file is compiled on its own and
//! the results merged, so one file protox cannot compile is reported by name
//! instead of failing the whole set. Files are merged as protox encoded them,
//! byte for byte: `prost_types` would drop the custom options (the
//! protoc-gen-validate `validate.rules` annotations the gateway checks
//! resources against).

use std::collections::BTreeMap;
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use prost_reflect::prost::bytes::Buf;
use prost_reflect::prost::encoding::{
    decode_key, decode_varint, encode_key, encode_varint, WireType,
};
use prost_reflect::prost::Message;
use prost_reflect::prost_types::FileDescriptorProto;

/// Include directories inside envoy-types' package, in lookup order.
const ENVOY_TYPES_INCLUDES: &[&str] = &[
    "proto/data-plane-api",
    "proto/xds",
    "proto/googleapis",
    "proto/protoc-gen-validate",
    "proto/cel-spec/proto",
    "proto/opentelemetry-proto",
    "proto/client_model",
    "proto/ratelimit",
];

/// Include directories inside data-plane-api's package (fallback only).
const DATA_PLANE_API_INCLUDES: &[&str] = &["xds", "googleapis", "protoc-gen-validate"];

/// cncf/xds files envoy-types lacks, taken from data-plane-api.
const EXTRA_XDS_ROOTS: &[&str] = &[
    "xds/type/v3/typed_struct.proto",
    "udpa/type/v1/typed_struct.proto",
    "xds/type/matcher/v3/cel.proto",
    "xds/type/matcher/v3/domain.proto",
    "xds/type/matcher/v3/http_inputs.proto",
    "xds/type/matcher/v3/ip.proto",
    "xds/type/matcher/v3/range.proto",
    "xds/core/v3/resource.proto",
    "xds/core/v3/resource_name.proto",
];

/// The project's own .proto files (under proto/), compiled into the same set.
const OWN_ROOTS: &[&str] = &["xds_gateway/v1/opaque.proto"];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=XDS_GATEWAY_PROTO_ROOTS");

    let (envoy_types, data_plane_api) = package_roots();
    let mut includes: Vec<PathBuf> = ENVOY_TYPES_INCLUDES
        .iter()
        .map(|dir| envoy_types.join(dir))
        .filter(|dir| dir.is_dir())
        .collect();
    if let Some(extra) = &data_plane_api {
        includes.extend(DATA_PLANE_API_INCLUDES.iter().map(|dir| extra.join(dir)));
    }
    // The project's own messages (proto/xds_gateway/... at the top level).
    let own =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo")).join("../../proto");
    println!("cargo:rerun-if-changed=../../proto");
    includes.push(own);

    let mut roots = Vec::new();
    collect_protos(&envoy_types.join("proto/data-plane-api"), &mut roots);
    let mut roots: Vec<String> = roots
        .iter()
        .filter_map(|p| {
            p.strip_prefix(envoy_types.join("proto/data-plane-api"))
                .ok()
        })
        .map(|p| p.to_string_lossy().replace('\\', "/"))
        .filter(|p| p.starts_with("envoy/"))
        .collect();
    roots.sort();
    if data_plane_api.is_some() {
        roots.extend(EXTRA_XDS_ROOTS.iter().map(|s| s.to_string()));
    } else {
        println!("cargo:warning=data-plane-api sources not found: TypedStruct and some xds matcher types will be unknown");
    }

    roots.extend(OWN_ROOTS.iter().map(|s| s.to_string()));

    let mut merged: BTreeMap<String, RawFile> = BTreeMap::new();
    let mut failures = Vec::new();
    for root in &roots {
        match compile_one(&includes, root) {
            Ok(files) => {
                for file in files {
                    merged.entry(file.name.clone()).or_insert(file);
                }
            }
            Err(err) => failures.push(format!("{root}: {err}")),
        }
    }
    for failure in &failures {
        println!("cargo:warning=proto not compiled: {failure}");
    }
    // Fail loudly if the core of the API is missing: the gateway is useless without it.
    for required in [
        "envoy/service/discovery/v3/discovery.proto",
        "envoy/config/listener/v3/listener.proto",
        "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto",
        "xds_gateway/v1/opaque.proto",
    ] {
        assert!(
            merged.contains_key(required),
            "required proto {required} was not compiled"
        );
    }

    // Order files so that every file comes after its dependencies, and
    // write them as a FileDescriptorSet (field 1, repeated).
    let mut bytes = Vec::new();
    for file in topological(merged) {
        encode_key(1, WireType::LengthDelimited, &mut bytes);
        encode_varint(file.bytes.len() as u64, &mut bytes);
        bytes.extend_from_slice(&file.bytes);
    }
    // Validate the merged set as a pool before embedding it.
    if let Err(err) = prost_reflect::DescriptorPool::decode(bytes.as_slice()) {
        panic!("merged descriptor set is not a valid pool: {err}");
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR set by cargo"));
    fs::write(out.join("envoy_descriptor_set.bin"), bytes).expect("write descriptor set");
}

/// A protox resolver over the include directories that fixes, in memory, the
/// one relative type reference protox resolves differently from protoc.
struct PatchingResolver(protox::file::ChainFileResolver);

/// (file, relative reference as written, fully qualified replacement)
const REFERENCE_FIXES: &[(&str, &str, &str)] = &[(
    "envoy/extensions/clusters/dynamic_forward_proxy/v3/cluster.proto",
    " common.dynamic_forward_proxy.v3.DnsCacheConfig ",
    " .envoy.extensions.common.dynamic_forward_proxy.v3.DnsCacheConfig ",
)];

impl protox::file::FileResolver for PatchingResolver {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        let file = self.0.open_file(name)?;
        for (fix_name, from, to) in REFERENCE_FIXES {
            if name == *fix_name {
                if let Some(source) = file.source() {
                    return protox::file::File::from_source(name, &source.replace(from, to));
                }
            }
        }
        Ok(file)
    }
}

/// One compiled file: its name, its dependencies, and its encoding as
/// protox wrote it (custom options included).
#[derive(Clone)]
struct RawFile {
    name: String,
    dependencies: Vec<String>,
    bytes: Vec<u8>,
}

/// The files of an encoded `FileDescriptorSet`, each kept as raw bytes.
fn split_set(mut set: &[u8]) -> Result<Vec<RawFile>, String> {
    let mut files = Vec::new();
    while set.has_remaining() {
        let (tag, wire) = decode_key(&mut set).map_err(|e| e.to_string())?;
        if tag != 1 || wire != WireType::LengthDelimited {
            return Err(format!("unexpected field {tag} in a FileDescriptorSet"));
        }
        let len = decode_varint(&mut set).map_err(|e| e.to_string())? as usize;
        let bytes = set
            .get(..len)
            .ok_or("truncated FileDescriptorSet")?
            .to_vec();
        set.advance(len);
        let proto = FileDescriptorProto::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
        files.push(RawFile {
            name: proto.name().to_owned(),
            dependencies: proto.dependency,
            bytes,
        });
    }
    Ok(files)
}

fn compile_one(includes: &[PathBuf], root: &str) -> Result<Vec<RawFile>, String> {
    let mut chain = protox::file::ChainFileResolver::new();
    for include in includes {
        chain.add(protox::file::IncludeFileResolver::new(include.clone()));
    }
    chain.add(protox::file::GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(PatchingResolver(chain));
    compiler.include_imports(true);
    compiler.open_file(root).map_err(|e| e.to_string())?;
    split_set(&compiler.encode_file_descriptor_set())
}

fn topological(files: BTreeMap<String, RawFile>) -> Vec<RawFile> {
    fn visit(
        name: &str,
        files: &BTreeMap<String, RawFile>,
        done: &mut std::collections::HashSet<String>,
        out: &mut Vec<RawFile>,
    ) {
        if !done.insert(name.to_owned()) {
            return;
        }
        if let Some(file) = files.get(name) {
            for dep in &file.dependencies {
                visit(dep, files, done, out);
            }
            out.push(file.clone());
        }
    }
    let mut done = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(files.len());
    for name in files.keys() {
        visit(name, &files, &mut done, &mut out);
    }
    out
}

fn collect_protos(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_protos(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "proto") {
            out.push(path);
        }
    }
}

/// Where the envoy-types and data-plane-api packages are unpacked.
fn package_roots() -> (PathBuf, Option<PathBuf>) {
    if let Ok(roots) = env::var("XDS_GATEWAY_PROTO_ROOTS") {
        let mut parts = env::split_paths(&roots);
        let envoy_types = parts
            .next()
            .expect("XDS_GATEWAY_PROTO_ROOTS names at least one directory");
        return (envoy_types, parts.next());
    }
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest_dir = env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR set by cargo");
    let mut cmd = Command::new(cargo);
    cmd.args(["metadata", "--format-version", "1", "--locked"])
        .arg("--manifest-path")
        .arg(Path::new(&manifest_dir).join("Cargo.toml"));
    if env::var("CARGO_NET_OFFLINE").is_ok_and(|v| v == "true") {
        cmd.arg("--offline");
    }
    let output = cmd.output().expect("run cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let find = |name: &str| -> Option<PathBuf> {
        meta["packages"].as_array()?.iter().find_map(|pkg| {
            (pkg["name"] == name)
                .then(|| pkg["manifest_path"].as_str())
                .flatten()
                .and_then(|m| Path::new(m).parent().map(Path::to_path_buf))
        })
    };
    let envoy_types = find("envoy-types").expect("envoy-types is a locked dependency");
    (envoy_types, find("data-plane-api"))
}
