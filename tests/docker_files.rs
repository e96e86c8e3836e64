//! `Dockerfile`, `.dockerignore` and `docker-compose.yml`, checked without a
//! Docker engine (there is none where these tests run): what the files say is
//! checked against the binary, the example files and, where Envoy is
//! available (always under CI), Envoy 1.40 itself.
//!
//! - docker-compose.yml parses; it mounts exactly `examples/demo` and
//!   `examples/envoy-rest-bootstrap.yaml` (what `tests/envoy_demo.rs` runs),
//!   read-only; its gateway command is accepted by the binary and serves the
//!   mounted demo; its ports agree with the binary's defaults, the demo's
//!   endpoints and the bootstrap's `xds_cluster` (loopback, which holds
//!   because Envoy shares the gateway's network namespace);
//! - `envoy --mode validate` accepts the bootstrap with the compose
//!   service's command line; an `--config-yaml` override of `xds_cluster`
//!   is refused as a duplicate cluster (why compose shares the namespace);
//! - the Dockerfile: rust:1-bookworm builder, debian:bookworm-slim runtime,
//!   the binary stripped in the builder (only it copied out), non-root user,
//!   the binary in /usr/local/bin, `ENTRYPOINT ["xds-gateway"]`, `EXPOSE` and
//!   `ENV` on the binary's default ports;
//! - `.dockerignore` keeps every build input and drops target/ and .venv/;
//! - the Docker section of `docs/production.md` says what was checked here.
//!
//! The gateway is started, and its `/readyz` awaited, as the Envoy tests do
//! (`support/envoy.rs`).

#[path = "support/envoy.rs"]
mod envoy;
#[path = "support/process.rs"]
mod process;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use xds_gateway::config::Config;

use process::{free_port, http_get};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const COMPOSE: &str = "docker-compose.yml";
/// The host paths compose may mount: what the other tests exercise.
const DEMO: &str = "examples/demo";
const BOOTSTRAP: &str = "examples/envoy-rest-bootstrap.yaml";
const ENVOY_IMAGE: &str = "envoyproxy/envoy:v1.40-latest";

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

fn yaml_file(rel: &str) -> Value {
    serde_yaml_ng::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel} is not YAML: {e}"))
}

fn strings(value: &Value, what: &str) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("{what}: not a list: {value}"))
        .iter()
        .map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("{what}: not a string: {v}"))
                .to_owned()
        })
        .collect()
}

/// The value after `flag` in `args`.
fn flag<'a>(args: &'a [String], flag: &str) -> &'a str {
    let at = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("no {flag} in {args:?}"));
    args.get(at + 1)
        .unwrap_or_else(|| panic!("{flag} without a value in {args:?}"))
}

/// One `host:container[:mode]` volume of a compose service.
#[derive(Debug, Clone)]
struct Mount {
    /// Relative to the repository root, without the leading `./`.
    host: String,
    container: String,
    read_only: bool,
}

/// docker-compose.yml, parsed.
struct Compose {
    doc: Value,
}

impl Compose {
    fn load() -> Compose {
        Compose {
            doc: yaml_file(COMPOSE),
        }
    }

    fn service(&self, name: &str) -> &Value {
        let service = &self.doc["services"][name];
        assert!(service.is_object(), "{COMPOSE}: no service {name}");
        service
    }

    fn command(&self, name: &str) -> Vec<String> {
        strings(
            &self.service(name)["command"],
            &format!("{name}.command (a list)"),
        )
    }

    fn mounts(&self, name: &str) -> Vec<Mount> {
        let volumes = &self.service(name)["volumes"];
        if volumes.is_null() {
            return Vec::new();
        }
        strings(volumes, &format!("{name}.volumes (short syntax)"))
            .into_iter()
            .map(|v| {
                let parts: Vec<&str> = v.split(':').collect();
                let (host, container, mode) = match parts.as_slice() {
                    [h, c] => (*h, *c, ""),
                    [h, c, m] => (*h, *c, *m),
                    _ => panic!("{name}: volume {v:?} is not host:container[:mode]"),
                };
                let host = host.strip_prefix("./").unwrap_or_else(|| {
                    panic!("{name}: volume {v:?}: host path must start with ./")
                });
                Mount {
                    host: host.trim_end_matches('/').to_owned(),
                    container: container.to_owned(),
                    read_only: mode.split(',').any(|m| m == "ro"),
                }
            })
            .collect()
    }

    fn mount(&self, service: &str, host: &str) -> Mount {
        self.mounts(service)
            .into_iter()
            .find(|m| m.host == host)
            .unwrap_or_else(|| panic!("{service} does not mount ./{host}"))
    }

    /// `args` with every container path under one of `service`'s mounts
    /// replaced by the host path (absolute).
    fn on_host(&self, service: &str, args: &[String]) -> Vec<OsString> {
        let mounts = self.mounts(service);
        args.iter()
            .map(|arg| {
                for m in &mounts {
                    if let Some(rest) = arg.strip_prefix(&m.container) {
                        if rest.is_empty() || rest.starts_with('/') {
                            let mut host = PathBuf::from(ROOT).join(&m.host).into_os_string();
                            host.push(rest);
                            return host;
                        }
                    }
                }
                OsString::from(arg)
            })
            .collect()
    }
}

fn defaults() -> Config {
    Config::default()
}

#[test]
fn compose_parses_and_mounts_only_the_tested_example_files() {
    let compose = Compose::load();
    let top: BTreeSet<&str> = compose
        .doc
        .as_object()
        .expect("docker-compose.yml is a mapping")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        top,
        BTreeSet::from(["services"]),
        "{COMPOSE}: top-level keys"
    );
    let services = compose.doc["services"].as_object().expect("services");
    let known = BTreeSet::from([
        "build",
        "image",
        "command",
        "volumes",
        "ports",
        "network_mode",
        "depends_on",
        "profiles",
    ]);
    let mut hosts = BTreeMap::new();
    for (name, service) in services {
        for key in service.as_object().expect("a service is a mapping").keys() {
            assert!(known.contains(key.as_str()), "{name}: unexpected key {key}");
        }
        for m in compose.mounts(name) {
            assert!(m.read_only, "{name}: ./{} is mounted read-write", m.host);
            hosts.insert(m.host.clone(), name.clone());
        }
    }
    let mounted: BTreeSet<&str> = hosts.keys().map(String::as_str).collect();
    assert_eq!(
        mounted,
        BTreeSet::from([DEMO, BOOTSTRAP]),
        "{COMPOSE} must mount exactly the files the tests exercise"
    );
    assert!(Path::new(ROOT).join(DEMO).is_dir(), "{DEMO} is a directory");
    assert!(
        Path::new(ROOT).join(BOOTSTRAP).is_file(),
        "{BOOTSTRAP} is a file"
    );
    assert_eq!(hosts[DEMO], "gateway");
    assert_eq!(hosts[BOOTSTRAP], "envoy");

    // The gateway is built from this repository's Dockerfile.
    let gateway = compose.service("gateway");
    assert_eq!(gateway["build"], ".", "gateway.build");
    assert!(Path::new(ROOT).join("Dockerfile").is_file());
    // Envoy: the 1.40 image the tests' Envoy matches, running the bootstrap.
    let envoy = compose.service("envoy");
    assert_eq!(envoy["image"], ENVOY_IMAGE);
    let command = compose.command("envoy");
    assert_eq!(
        flag(&command, "-c"),
        compose.mount("envoy", BOOTSTRAP).container,
        "envoy runs the mounted bootstrap"
    );
    assert!(
        !command.iter().any(|a| a == "--config-yaml"),
        "no override: the bootstrap runs unchanged"
    );
}

/// Compose's gateway command, with the mounted demo at its host path and the
/// listeners on free loopback ports, runs the binary and serves the demo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_gateway_command_is_accepted_by_the_binary() {
    let compose = Compose::load();
    let command = compose.command("gateway");
    let d = defaults();
    let demo = compose.mount("gateway", DEMO);
    assert_eq!(flag(&command, "--snapshot"), demo.container);
    let listen: SocketAddr = flag(&command, "--listen").parse().expect("--listen");
    let admin: SocketAddr = flag(&command, "--admin").parse().expect("--admin");
    for (what, addr, default) in [("--listen", listen, d.listen), ("--admin", admin, d.admin)] {
        assert!(
            addr.ip().is_unspecified(),
            "{what} {addr}: inside a container the gateway must listen on 0.0.0.0"
        );
        assert_eq!(
            addr.port(),
            default.port(),
            "{what}: the binary's default port"
        );
    }

    let (rest_port, admin_port) = (free_port(), free_port());
    let args: Vec<OsString> = compose
        .on_host("gateway", &command)
        .into_iter()
        .map(|a| {
            if a == listen.to_string().as_str() {
                format!("127.0.0.1:{rest_port}").into()
            } else if a == admin.to_string().as_str() {
                format!("127.0.0.1:{admin_port}").into()
            } else {
                a
            }
        })
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join(envoy::GATEWAY_LOG);
    let mut gateway = envoy::spawn_gateway(&args, false, &log);
    let what = format!("xds-gateway {args:?}");
    let interval = Duration::from_millis(50);
    let readyz = envoy::wait_gateway_ready(&mut gateway, admin_port, interval, &what).await;
    let source = readyz["source"].as_str().unwrap_or_default();
    assert!(
        source.starts_with("snapshot directory") && source.ends_with(DEMO),
        "{readyz}"
    );
    let (status, body) = http_get(rest_port, "/v3/discovery:listeners?node=demo")
        .await
        .expect("GET listeners");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"name\":\"demo\""), "{body}");
}

/// A `socket_address` port inside `value` at `pointer`.
fn port_at(value: &Value, pointer: &str, what: &str) -> (String, u16) {
    let sa = value
        .pointer(pointer)
        .unwrap_or_else(|| panic!("{what}: no {pointer}"));
    let address = sa["address"].as_str().expect("address").to_owned();
    let port = sa["port_value"].as_u64().expect("port_value") as u16;
    (address, port)
}

/// The demo's resources by name (ClusterLoadAssignments as
/// `endpoints/<cluster_name>`).
fn demo_resources() -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(Path::new(ROOT).join(DEMO)).expect("read the demo") {
        let path = entry.expect("demo entry").path();
        let text = std::fs::read_to_string(&path).expect("read a demo file");
        let doc: Value = serde_yaml_ng::from_str(&text).expect("demo YAML");
        let items = match doc {
            Value::Array(items) => items,
            other => vec![other],
        };
        for item in items {
            let name = match (item["name"].as_str(), item["cluster_name"].as_str()) {
                (Some(name), _) => name.to_owned(),
                (None, Some(cluster)) => format!("endpoints/{cluster}"),
                (None, None) => panic!("{}: a resource without a name", path.display()),
            };
            assert!(
                out.insert(name, item).is_none(),
                "{}: a duplicate",
                path.display()
            );
        }
    }
    out
}

/// In compose, Envoy reaches the gateway at the loopback addresses the
/// bootstrap and the demo name because it shares the gateway's network
/// namespace; the ports must be the gateway's (its defaults).
#[test]
fn compose_networking_matches_the_bootstrap_and_the_demo() {
    let compose = Compose::load();
    let d = defaults();
    for service in ["envoy", "check"] {
        assert_eq!(
            compose.service(service)["network_mode"],
            "service:gateway",
            "{service} shares the gateway's network namespace"
        );
    }
    let published = strings(&compose.service("gateway")["ports"], "gateway.ports");
    assert_eq!(
        published,
        [
            format!("127.0.0.1:{0}:{0}", d.listen.port()),
            format!("127.0.0.1:{0}:{0}", d.admin.port())
        ],
        "the gateway's ports, on the host's loopback"
    );

    let bootstrap = yaml_file(BOOTSTRAP);
    let (xds_host, xds_port) = port_at(
        &bootstrap,
        "/static_resources/clusters/0/load_assignment/endpoints/0/lb_endpoints/0/endpoint/address/socket_address",
        BOOTSTRAP,
    );
    assert_eq!(
        bootstrap["static_resources"]["clusters"][0]["name"],
        "xds_cluster"
    );
    assert_eq!(
        (xds_host.as_str(), xds_port),
        ("127.0.0.1", d.listen.port())
    );

    let demo = demo_resources();
    let endpoint = "/endpoints/0/lb_endpoints/0/endpoint/address/socket_address";
    let rest = port_at(&demo["endpoints/gateway_rest"], endpoint, "gateway_rest");
    let admin = port_at(&demo["endpoints/gateway_admin"], endpoint, "gateway_admin");
    assert_eq!(
        rest,
        ("127.0.0.1".into(), d.listen.port()),
        "demo gateway_rest"
    );
    assert_eq!(
        admin,
        ("127.0.0.1".into(), d.admin.port()),
        "demo gateway_admin"
    );

    // `check` asks Envoy's demo listener for the gateway's /healthz.
    let (_, listener_port) = port_at(&demo["demo"], "/address/socket_address", "demo listener");
    let check = compose.command("check");
    assert_eq!(
        check.last().map(String::as_str),
        Some(format!("http://127.0.0.1:{listener_port}/healthz").as_str()),
        "{check:?}"
    );
}

/// `envoy --mode validate` with `args` (plus a private base id); returns
/// (success, output).
fn envoy_validate(envoy: &Path, args: &[OsString]) -> (bool, String) {
    let output = Command::new(envoy)
        .args(["--mode", "validate"])
        .args(["--base-id", &process::envoy_base_id().to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", envoy.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[test]
fn envoy_validates_the_bootstrap_as_compose_runs_it() {
    let envoy = process::require_envoy("docker_files");
    let compose = Compose::load();
    let args = compose.on_host("envoy", &compose.command("envoy"));
    let (ok, text) = envoy_validate(&envoy, &args);
    assert!(
        ok && text.contains("OK"),
        "envoy --mode validate {args:?}:\n{text}"
    );
}

/// Why compose does not re-point `xds_cluster` with `--config-yaml`: Envoy
/// merges the override into the bootstrap with protobuf merge semantics, so
/// a `static_resources.clusters` entry is appended, not replaced.
#[test]
fn a_config_yaml_override_cannot_replace_xds_cluster() {
    let envoy = process::require_envoy("docker_files");
    let cluster = |name: &str| {
        format!(
            "{{static_resources: {{clusters: [{{name: {name}, type: STRICT_DNS, connect_timeout: 1s, \
             load_assignment: {{cluster_name: {name}, endpoints: [{{lb_endpoints: [{{endpoint: \
             {{address: {{socket_address: {{address: gateway, port_value: 8080}}}}}}}}]}}]}}}}]}}}}"
        )
    };
    let bootstrap = PathBuf::from(ROOT).join(BOOTSTRAP);
    let run = |override_yaml: String| {
        serde_yaml_ng::from_str::<Value>(&override_yaml).expect("the override is YAML");
        envoy_validate(
            &envoy,
            &[
                "-c".into(),
                bootstrap.clone().into(),
                "--config-yaml".into(),
                override_yaml.into(),
            ],
        )
    };
    // The override itself is valid: under another name it is accepted ...
    let (ok, text) = run(cluster("xds_cluster_by_name"));
    assert!(ok, "a new cluster by --config-yaml:\n{text}");
    // ... but it cannot replace xds_cluster.
    let (ok, text) = run(cluster("xds_cluster"));
    assert!(
        !ok && text.contains("duplicate cluster 'xds_cluster'"),
        "Envoy accepted a second xds_cluster from --config-yaml: docker-compose.yml \
         could re-point xds_cluster by name instead of sharing the network namespace:\n{text}"
    );
}

/// The Dockerfile's instructions (continuations joined, comments dropped).
fn dockerfile() -> Vec<(String, String)> {
    let text = read("Dockerfile");
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && pending.is_empty()) {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(trimmed);
        let (op, args) = pending.split_once(' ').unwrap_or((&pending, ""));
        out.push((op.to_ascii_uppercase(), args.trim().to_owned()));
        pending.clear();
    }
    assert!(pending.is_empty(), "Dockerfile ends in a continuation");
    out
}

#[test]
fn dockerfile_matches_the_binary() {
    let instructions = dockerfile();
    let stages: Vec<usize> = instructions
        .iter()
        .enumerate()
        .filter(|(_, (op, _))| op == "FROM")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(stages.len(), 2, "two stages: {instructions:?}");
    assert_eq!(instructions[stages[0]].1, "rust:1-bookworm AS builder");
    assert_eq!(instructions[stages[1]].1, "debian:bookworm-slim");
    let (builder, runtime) = instructions[stages[0]..].split_at(stages[1] - stages[0]);
    let all = |stage: &[(String, String)], op: &str| -> Vec<String> {
        stage
            .iter()
            .filter(|(o, _)| o == op)
            .map(|(_, a)| a.clone())
            .collect()
    };
    let one = |stage: &[(String, String)], op: &str| -> String {
        let found = all(stage, op);
        assert_eq!(found.len(), 1, "one {op}: {found:?}");
        found[0].clone()
    };

    // The builder builds this binary, with the lock file.
    let binary = Path::new(env!("CARGO_BIN_EXE_xds-gateway"))
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let build = all(builder, "RUN").join("\n");
    assert!(
        build.contains("cargo build --release --locked")
            && build.contains(&format!("--bin {binary}")),
        "{build}"
    );
    // The image ships a stripped binary: the builder writes what cargo built,
    // without symbols or debug info, to /out, and nothing overwrites it
    // afterwards but a chmod (scripts/container-run checks the ELF itself).
    let built = format!("target/release/{binary}");
    let out = format!("/out/{binary}");
    let commands: Vec<Vec<&str>> = build
        .split("&&")
        .map(|c| c.split_whitespace().collect())
        .collect();
    let strip = commands
        .iter()
        .position(|words| match words.first() {
            Some(&"objcopy") => {
                words.contains(&"--strip-all") && words.ends_with(&[built.as_str(), out.as_str()])
            }
            Some(&"strip") => {
                words.contains(&"--strip-all")
                    && words.windows(2).any(|w| w == ["-o", out.as_str()])
                    && words.last() == Some(&built.as_str())
            }
            _ => false,
        })
        .unwrap_or_else(|| panic!("no `objcopy --strip-all ... {built} {out}` in {build}"));
    for later in &commands[strip + 1..] {
        assert!(
            later.first() == Some(&"chmod") || !later.contains(&out.as_str()),
            "{later:?} rewrites the stripped {out}"
        );
    }
    // The runtime: the binary on PATH, a non-root user, the entrypoint.
    let copy = one(runtime, "COPY");
    assert_eq!(
        copy,
        format!("--from=builder {out} /usr/local/bin/{binary}"),
        "the stripped binary, and only it (not its debug file)"
    );
    let user = one(runtime, "USER");
    let uid = user.split(':').next().unwrap();
    assert!(
        uid != "root" && uid != "0" && uid.parse::<u32>().is_ok_and(|n| n >= 1000),
        "USER {user}: a numeric non-root user"
    );
    let entrypoint: Vec<String> =
        serde_json::from_str(&one(runtime, "ENTRYPOINT")).expect("ENTRYPOINT in exec (JSON) form");
    assert_eq!(entrypoint, [binary.as_str()]);
    assert!(all(runtime, "CMD").is_empty(), "no CMD: the defaults apply");

    // EXPOSE and ENV: the binary's default ports, on 0.0.0.0.
    let d = defaults();
    let exposed: Vec<u16> = one(runtime, "EXPOSE")
        .split_whitespace()
        .map(|p| p.trim_end_matches("/tcp").parse().expect("an exposed port"))
        .collect();
    assert_eq!(exposed, [d.listen.port(), d.admin.port()]);
    let env: BTreeMap<String, String> = all(runtime, "ENV")
        .iter()
        .flat_map(|a| a.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect();
    for (key, default) in [
        ("XDS_GATEWAY_LISTEN", d.listen),
        ("XDS_GATEWAY_ADMIN", d.admin),
    ] {
        let addr: SocketAddr = env
            .get(key)
            .unwrap_or_else(|| panic!("no ENV {key}: {env:?}"))
            .parse()
            .unwrap_or_else(|e| panic!("ENV {key}: {e}"));
        assert!(addr.ip().is_unspecified(), "{key}={addr}");
        assert_eq!(addr.port(), default.port(), "{key}");
    }
}

/// `.dockerignore` pattern (`*`, `?` within a component, `**` across
/// components) against a relative path; a match on a directory excludes
/// everything under it.
fn ignored(pattern: &[&str], path: &[&str]) -> bool {
    fn component(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => component(&p[1..], s) || (!s.is_empty() && component(p, &s[1..])),
            (Some(b'?'), Some(_)) => component(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => component(&p[1..], &s[1..]),
            _ => false,
        }
    }
    match pattern.split_first() {
        None => true,
        Some((&"**", rest)) => (0..=path.len()).any(|i| ignored(rest, &path[i..])),
        Some((p, rest)) => {
            !path.is_empty()
                && component(p.as_bytes(), path[0].as_bytes())
                && ignored(rest, &path[1..])
        }
    }
}

fn files_under(rel: &str, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(Path::new(ROOT).join(rel)).expect("read a source directory") {
        let entry = entry.expect("directory entry");
        let child = format!("{rel}/{}", entry.file_name().to_string_lossy());
        if entry.path().is_dir() {
            files_under(&child, out);
        } else {
            out.push(child);
        }
    }
}

#[test]
fn dockerignore_keeps_the_build_inputs_and_drops_the_bulk() {
    let patterns: Vec<String> = read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_start_matches('/').trim_end_matches('/').to_owned())
        .collect();
    assert!(
        patterns.iter().all(|p| !p.starts_with('!')),
        "no exceptions: {patterns:?}"
    );
    let is_ignored = |path: &str| {
        let parts: Vec<&str> = path.split('/').collect();
        patterns.iter().find(|p| {
            let pattern: Vec<&str> = p.split('/').collect();
            ignored(&pattern, &parts)
        })
    };

    // What `cargo build --release --locked --bin xds-gateway` reads.
    let manifest: toml::Table = read("Cargo.toml").parse().expect("Cargo.toml");
    let mut inputs: Vec<String> = ["Cargo.toml", "Cargo.lock", "build.rs"]
        .map(String::from)
        .to_vec();
    if let Some(build) = manifest["package"].get("build").and_then(|b| b.as_str()) {
        inputs.push(build.to_owned());
    }
    for section in ["bin", "bench", "test", "example"] {
        for target in manifest
            .get(section)
            .and_then(|t| t.as_array())
            .into_iter()
            .flatten()
        {
            if let Some(path) = target.get("path").and_then(|p| p.as_str()) {
                inputs.push(path.to_owned());
            }
        }
    }
    files_under("src", &mut inputs);
    files_under(DEMO, &mut inputs);
    for input in &inputs {
        assert!(
            Path::new(ROOT).join(input).is_file(),
            "{input}: listed as a build input but missing"
        );
        if let Some(pattern) = is_ignored(input) {
            panic!(".dockerignore pattern {pattern:?} drops the build input {input}");
        }
    }
    // The bulk stays out of the build context.
    for bulk in [
        "target/release/xds-gateway",
        ".venv/bin/python",
        ".git/HEAD",
        "fuzz/target/x86_64-unknown-linux-gnu/release/snapshot",
    ] {
        assert!(
            is_ignored(bulk).is_some(),
            "{bulk} is sent to the Docker daemon"
        );
    }
    // Sanity of the matcher itself.
    assert!(ignored(&["**", "*.pyc"], &["a", "b", "c.pyc"]));
    assert!(!ignored(&["target"], &["src", "target.rs"]));
}

/// The Docker section of the docs (moved out of the README with the other
/// reference sections).
const DOCKER_DOC: &str = "docs/production.md";

#[test]
fn docs_docker_section_names_what_was_validated() {
    let doc = read(DOCKER_DOC);
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Docker\n"))
        .unwrap_or_else(|| panic!("{DOCKER_DOC} has no \"## Docker\" section"));
    for needle in [
        "docker compose",
        "docker_files",
        "no Docker engine",
        "scripts/container-run",
        "stripped",
    ] {
        assert!(
            section.contains(needle),
            "{DOCKER_DOC}'s Docker section lacks {needle:?}"
        );
    }
}

/// The image listens on 0.0.0.0 without TLS or a policy: the binary refuses
/// that unless told the network is trusted. The image does not tell it (an
/// unprotected deployment must be a visible choice); compose does, and says
/// why. Checked with the configuration layer, so nothing binds 0.0.0.0.
#[test]
fn an_unprotected_container_listener_is_an_explicit_choice() {
    use clap::Parser;
    let env: BTreeMap<String, String> = dockerfile()
        .iter()
        .filter(|(op, _)| op == "ENV")
        .flat_map(|(_, a)| a.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect();
    assert!(
        !env.contains_key("XDS_GATEWAY_ALLOW_INSECURE_LISTEN"),
        "{env:?}"
    );
    let image = xds_gateway::config::Settings::try_parse_from([
        "xds-gateway",
        "--listen",
        &env["XDS_GATEWAY_LISTEN"],
        "--admin",
        &env["XDS_GATEWAY_ADMIN"],
    ])
    .expect("the image's settings parse");
    let err = Config::from_settings(image).expect_err("the bare image must not serve on 0.0.0.0");
    assert!(err.to_string().contains("--allow-insecure-listen"), "{err}");

    let compose = Compose::load();
    let command = compose.command("gateway");
    assert!(
        command.iter().any(|a| a == "--allow-insecure-listen"),
        "{command:?}"
    );
    let args = std::iter::once("xds-gateway".to_owned()).chain(
        command
            .iter()
            .filter(|a| a.as_str() != "/demo" && a.as_str() != "--snapshot")
            .cloned(),
    );
    let settings =
        xds_gateway::config::Settings::try_parse_from(args).expect("compose's command parses");
    Config::from_settings(settings).expect("compose's command is accepted");
    let text = read(COMPOSE);
    assert!(
        text.contains("published on the host's loopback"),
        "compose says why"
    );
}
