//! Writes the seed files of `corpus/<target>/` (`seed-*`) from the project's
//! real inputs: the Envoy 1.40 requests of `tests/fuzz_corpus/`, the
//! resources of `tests/corpus/`, the demo snapshot and the example config
//! and policy of `examples/`, and the names, queries and files the tests
//! use. Run from `fuzz/`: `cargo run --bin seed_corpora` (stable Rust is
//! enough). Files the fuzzers added (named by their SHA-1) are left alone.

use std::fs;
use std::path::{Path, PathBuf};

use xds_gateway::xds::{Codec, ResourceType};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("fuzz/ is in the repository")
        .to_owned();
    let seeds = Seeds {
        root: root.clone(),
        out: root.join("fuzz/corpus"),
    };
    seeds.discovery_post();
    seeds.discovery_get();
    seeds.codec();
    seeds.xdstp();
    seeds.auth_policy();
    seeds.config_toml();
    seeds.snapshot();
    seeds.upstream_response();
}

/// `bytes` as field `tag` (length-delimited) of a protobuf message.
fn delimited(tag: u32, bytes: &[u8], out: &mut Vec<u8>) {
    fn varint(mut n: u64, out: &mut Vec<u8>) {
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }
    varint(u64::from(tag << 3 | 2), out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// Protobuf bytes of a TypedExtensionConfig (name `x`) whose typed_config
/// is `levels` `Any`s one inside the other, around an Empty.
fn nested_anys(levels: usize) -> Vec<u8> {
    fn varint(mut n: usize, out: &mut Vec<u8>) {
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }
    fn delimited(field: u8, data: &[u8]) -> Vec<u8> {
        let mut out = vec![field << 3 | 2];
        varint(data.len(), &mut out);
        out.extend_from_slice(data);
        out
    }
    let mut any = delimited(1, b"type.googleapis.com/google.protobuf.Empty");
    for _ in 0..levels {
        any = [
            delimited(1, b"type.googleapis.com/google.protobuf.Any"),
            delimited(2, &any),
        ]
        .concat();
    }
    [delimited(1, b"x"), delimited(2, &any)].concat()
}

struct Seeds {
    root: PathBuf,
    out: PathBuf,
}

/// The eight types a snapshot serves, in the order the kind byte picks them.
fn served() -> Vec<ResourceType> {
    ResourceType::BUILT_IN
        .into_iter()
        .filter(|k| !k.delta_only())
        .collect()
}

fn kind_byte(kind: ResourceType) -> u8 {
    served()
        .iter()
        .position(|k| *k == kind)
        .expect("a served kind") as u8
}

impl Seeds {
    fn write(&self, target: &str, name: &str, data: &[u8]) {
        let dir = self.out.join(target);
        fs::create_dir_all(&dir).expect("create the corpus directory");
        fs::write(dir.join(format!("seed-{name}")), data).expect("write a seed");
    }

    /// `*.json` (or any `ext`) directly in `relative`, sorted: (stem, text).
    fn files(&self, relative: &str, ext: &str) -> Vec<(String, String)> {
        let dir = self.root.join(relative);
        let mut paths: Vec<PathBuf> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == ext))
            .collect();
        paths.sort();
        paths
            .into_iter()
            .map(|p| {
                let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
                (stem, fs::read_to_string(&p).expect("a text file"))
            })
            .collect()
    }

    fn read(&self, relative: &str) -> String {
        fs::read_to_string(self.root.join(relative)).expect("a text file")
    }

    /// The captured requests, their `node.extensions` (75 KB of Envoy's
    /// extension registry) cut to the first three; each sent to its own
    /// type with no query, and a few with the other presentations.
    fn discovery_post(&self) {
        let queries = ["", "pretty", "yaml", "changes", "wait", "watch", "sse"];
        for (i, (stem, text)) in self
            .files("tests/fuzz_corpus/discovery_request", "json")
            .into_iter()
            .enumerate()
        {
            let mut body: serde_json::Value = serde_json::from_str(&text).expect("JSON");
            if let Some(list) = body["node"]["extensions"].as_array_mut() {
                list.truncate(3);
            }
            let type_url = body["type_url"].as_str().expect("a type_url");
            let kind = ResourceType::from_type_url(type_url).expect("a known type");
            let body = serde_json::to_vec(&body).expect("JSON");
            // Also under each query form, spread over the files.
            let query = i % queries.len();
            for q in [0, query] {
                let mut data = vec![kind_byte(kind) | (q as u8) << 3];
                data.extend_from_slice(&body);
                let name = match q {
                    0 => stem.clone(),
                    _ => format!("{stem}-{}", queries[q]),
                };
                self.write("discovery_post", &name, &data);
            }
        }
        // The README's POST.
        let mut data = vec![kind_byte(ResourceType::Clusters)];
        data.extend_from_slice(br#"{"node": {"id": "demo"}}"#);
        self.write("discovery_post", "readme", &data);
    }

    /// The README's GET requests (and one of each type).
    fn discovery_get(&self) {
        use ResourceType::*;
        let cases: &[(&str, ResourceType, &str)] = &[
            ("pretty", Clusters, "node=demo&pretty"),
            (
                "yaml",
                Endpoints,
                "node=demo&names=gateway_rest&format=yaml",
            ),
            ("routes", Routes, "node=demo&names=demo_routes"),
            ("listeners", Listeners, "node=demo"),
            ("version-wait", Listeners, "node=demo&version=v1&wait=2s"),
            ("watch", Clusters, "node=demo&watch"),
            (
                "watch-names",
                Endpoints,
                "node=demo&names=gateway_rest&watch",
            ),
            ("watch-changes", Clusters, "node=demo&watch&changes"),
            (
                "changes",
                Clusters,
                "node=demo&cluster=c&changes&version=v1",
            ),
            (
                "secrets",
                Secrets,
                "node=demo&cluster=demo&names=server_cert",
            ),
            ("runtime", Runtime, "node=demo&names=rtds"),
            ("scoped", ScopedRoutes, "node=demo"),
            ("ecds", ExtensionConfigs, "node=demo&names=ext"),
        ];
        for (name, kind, query) in cases {
            let mut data = vec![kind_byte(*kind)];
            data.extend_from_slice(query.as_bytes());
            self.write("discovery_get", name, &data);
        }
        let mut data = vec![kind_byte(Listeners)];
        data.extend_from_slice(b"node=demo\n\"v1\"");
        self.write("discovery_get", "if-none-match", &data);
    }

    /// `tests/corpus/`: as JSON, and as protobuf bytes under their own type.
    fn codec(&self) {
        let codec = Codec::embedded();
        let mut all = self.files("tests/corpus", "json");
        all.extend(self.invalid());
        for (stem, text) in &all {
            self.write("json_to_proto", stem, text.as_bytes());
            let any = codec.parse_any(text.as_bytes()).expect("the corpus parses");
            let Some(index) = ResourceType::BUILT_IN
                .iter()
                .position(|k| k.type_url() == any.type_url)
            else {
                continue;
            };
            let mut data = vec![index as u8];
            data.extend_from_slice(&any.value);
            self.write("proto_to_json", stem, &data);
            self.write("rewrite", stem, &data);
        }
        // A TypedExtensionConfig whose typed_config is 40 Anys one inside
        // the other (over the nesting bound; 5000 used to overflow a stack).
        let index = ResourceType::BUILT_IN
            .iter()
            .position(|k| *k == ResourceType::ExtensionConfigs)
            .expect("a type") as u8;
        let mut data = vec![index];
        data.extend_from_slice(&nested_anys(40));
        self.write("proto_to_json", "any-nested-40", &data);
        self.write("rewrite", "any-nested-40", &data);
    }

    /// The resources of `tests/corpus/invalid/` (each breaks one of Envoy's
    /// field rules, which the validator checks), as JSON.
    fn invalid(&self) -> Vec<(String, String)> {
        self.files("tests/corpus/invalid", "json")
            .into_iter()
            .map(|(stem, text)| {
                let case: serde_json::Value = serde_json::from_str(&text).expect("JSON");
                let resource = serde_json::to_string(&case["resource"]).expect("JSON");
                (format!("invalid-{stem}"), resource)
            })
            .collect()
    }

    /// The names and globs of `crates/xds/src/xdstp.rs`'s tests.
    fn xdstp(&self) {
        let glob = "xdstp://example.org/envoy.config.cluster.v3.Cluster/prod/*";
        let pairs = [
            (
                "member",
                "xdstp://example.org/envoy.config.cluster.v3.Cluster/prod/c1",
                glob,
            ),
            (
                "escaped",
                "xdstp://example.org/envoy.config.cluster.v3.Cluster/prod/c%201",
                glob,
            ),
            (
                "deeper",
                "xdstp://example.org/envoy.config.cluster.v3.Cluster/prod/eu/c1",
                glob,
            ),
            (
                "params",
                "xdstp://a/T/x/r?tier=gold&zone=eu-1",
                "xdstp://a/T/x/*?zone=eu%2D1&tier=gold",
            ),
            (
                "directive",
                "xdstp://a/T/x/r?tier=gold&zone=eu-1#alt=xdstp://b/T/r",
                "xdstp://a/T/x/*?zone=eu%2D1&tier=gold",
            ),
            ("top", "xdstp://a/T/r", "xdstp://a/T/*"),
            ("plain", "prod/c1", glob),
            ("bad-escape", "xdstp://a/T/%ff/r", "xdstp://a/T/*"),
        ];
        for (name, resource, glob) in pairs {
            self.write("xdstp", name, format!("{resource}\n{glob}").as_bytes());
        }
    }

    fn auth_policy(&self) {
        self.write(
            "auth_policy",
            "example",
            self.read("examples/auth-policy.toml").as_bytes(),
        );
        // tests/auth_bindings.rs: per-node secrets, HDS and CSDS switches.
        let digest = "d2eadfb6e52d65b4bbf254e5046c0c495328b4d208f8b1591c229e62c5c6362f";
        let other = "83be5447375907e352eccf262f47a288924102f4e031dc650e189322653103d4";
        let bindings = format!(
            r#"[admin]
token-sha256 = ["{digest}"]

[[principal]]
name = "edge"
token-sha256 = ["{other}"]
[[principal.allow]]
nodes = ["edge-2"]
clusters = ["edge"]
types = ["secrets"]

[[principal]]
name = "hds"
dns-san = ["hds-*.example"]
hds = true
csds = true
[[principal.allow]]
nodes = ["edge-*"]
clusters = ["*"]
types = ["clusters"]
"#
        );
        self.write("auth_policy", "bindings", bindings.as_bytes());
    }

    fn config_toml(&self) {
        self.write(
            "config_toml",
            "example",
            self.read("examples/xds-gateway.toml").as_bytes(),
        );
        // tests/cli.rs and crates/config/src/tests.rs.
        let cases = [
            ("upstream", "upstream = \"grpc://127.0.0.1:1\"\nmax-wait = \"10s\"\nidle-timeout = \"1m\"\n"),
            ("tls-upstream", "upstream = \"grpcs://cp.example:443\"\nupstream-ca = \"ca.pem\"\nupstream-cert = \"c.pem\"\nupstream-key = \"k.pem\"\nupstream-header = [\"X-Consul-Token: abc\", \"tenant=t1\"]\n"),
            ("listener-tls", "listen = \"0.0.0.0:8443\"\ntls-cert = \"tls.crt\"\ntls-key = \"tls.key\"\nclient-ca = \"ca.crt\"\nclient-auth = \"optional\"\nauth-policy = \"policy.toml\"\nallow-secrets = true\n"),
            ("snapshot", "snapshot = \"config/\"\nsession-key = \"cluster\"\ncache-max-age = \"5s\"\n"),
            ("bad-duration", "max-wait = \"soon\"\n"),
        ];
        for (name, text) in cases {
            self.write("config_toml", name, text.as_bytes());
        }
    }

    /// The demo snapshot (whole, and file by file), each resource of
    /// `tests/corpus/` (and `invalid/`) as a JSON snapshot file, and a
    /// layered snapshot.
    /// SotW `DiscoveryResponse`s as an upstream sends them: one per type
    /// of `tests/corpus/` with every resource of it, one with the fields
    /// the gateway skips (`canary`, `control_plane`), and an empty one.
    fn upstream_response(&self) {
        let codec = Codec::embedded();
        let mut by_type: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
        for (_, text) in self.files("tests/corpus", "json") {
            let any = codec.parse_any(text.as_bytes()).expect("the corpus parses");
            let mut encoded = Vec::new();
            delimited(1, any.type_url.as_bytes(), &mut encoded);
            delimited(2, &any.value, &mut encoded);
            let response = by_type.entry(any.type_url.clone()).or_insert_with(|| {
                let mut head = Vec::new();
                delimited(1, b"v1", &mut head);
                delimited(4, any.type_url.as_bytes(), &mut head);
                delimited(5, b"n1", &mut head);
                head
            });
            delimited(2, &encoded, response);
        }
        for (url, response) in &by_type {
            let stem = url.rsplit('.').next().unwrap_or("any");
            self.write("upstream_response", stem, response);
        }
        if let Some(response) = by_type.values().next() {
            let mut skipped = response.clone();
            skipped.extend_from_slice(&[0x18, 1]); // canary: true
            let mut control_plane = Vec::new();
            delimited(1, b"cp", &mut control_plane);
            delimited(6, &control_plane, &mut skipped);
            self.write("upstream_response", "skipped-fields", &skipped);
        }
        self.write("upstream_response", "empty", b"");
    }

    fn snapshot(&self) {
        let demo = self.files("examples/demo", "yaml");
        let mut whole = String::new();
        for (stem, text) in &demo {
            self.write("snapshot", &format!("demo-{stem}"), text.as_bytes());
            whole.push_str(&format!("#! {stem}.yaml\n{text}"));
        }
        self.write("snapshot", "demo", whole.as_bytes());
        let mut resources = self.files("tests/corpus", "json");
        resources.extend(self.invalid());
        for (stem, text) in resources {
            let data = format!("#! {stem}.json\n{text}");
            self.write("snapshot", &format!("corpus-{stem}"), data.as_bytes());
        }
        let layered = "'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: a\nconnect_timeout: 1s\n\
#! more.json\n[{\"@type\":\"type.googleapis.com/envoy.config.cluster.v3.Cluster\",\"name\":\"b\"}]\n\
#! clusters/edge/c.yaml\nresources:\n- '@type': type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: a\n  connect_timeout: 2s\n\
#! nodes/n1/override.yaml\nresources:\n- '@type': type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: a\n  connect_timeout: 9s\n---\n'@type': type.googleapis.com/envoy.config.listener.v3.Listener\nname: l\n";
        self.write("snapshot", "layered", layered.as_bytes());
    }
}
