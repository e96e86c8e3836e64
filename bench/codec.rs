//! Codec benchmarks, measured against Python's reference
//! `google.protobuf.json_format` in the same run.
//!
//! `cargo bench --bench codec` measures:
//! - (a) parsing a real Envoy 1.40 CDS request body (~77 KB, mostly the node's
//!   `extensions`) with [`DiscoveryRequestView::parse`] and, for comparison,
//!   with a full `Codec::parse_message` into a `DiscoveryRequest`; and the
//!   same body through the gateway's memo of parsed bodies as a poll after a
//!   version change sends it (a new `version_info` each call: a miss of the
//!   memo of whole bodies, answered by the memo of frames, issue 41), beside
//!   building such a body alone (part of that row) and the same bytes again
//!   (a hit); and two bodies that share the memo's sampled key (one letter
//!   of the node's extension list changed), parsed in turn, which must
//!   each be a hit too;
//! - (b) rendering 1,000 Listeners (HttpConnectionManager with RDS, a local
//!   rate limit filter and the router, all nested `Any`s) with `render_any`;
//! - (c) rendering 10,000 EDS Clusters with a TLS transport socket;
//! - (d) an upstream push of 10,000 Clusters of which 1 changed, taken by
//!   the gateway's own code (`bench_support::Pipeline`: the decode a session
//!   runs, which keeps the 9,999 resources whose bytes did not change, then
//!   the body a wildcard poll is served, assembled), against taking the same
//!   push as a new state (every resource decoded, checked and rendered).
//!   Each push's changed Cluster is a new one (a generation counter), built
//!   inside the timed call (one `parse_any`, a few µs), so no render is
//!   ever a memo hit; the push's `Vec<Any>` is cloned inside it too, in
//!   place of the stream's own decode of the message;
//! - (e) (d)'s answer served to a REST Envoy, whose config sources the
//!   gateway points at its own xDS cluster: through the memo of rewrites
//!   (`Assembler::rewritten`) that earlier answers filled, against an
//!   assembler that holds none (every Cluster's sources rewritten again);
//! - (f) (d)'s answer as `?pretty` asks for it, from the REST face's memo
//!   of renditions (`Renditions::made`) that holds it, against rendering it
//!   again (indented JSON written as the body is read);
//! - (g) the served version of (d)'s state, as the config history shows an
//!   event of it, worked out on every read (what the history's per-event
//!   memo of it, `gateway_version`, saves each read after the first);
//! - beside (c), Envoy's field rules checked by one validator (its plan of
//!   each message type made once) and by a new one per Cluster (each
//!   reads its message types' `validate.rules` again): what the
//!   validator's plans save.
//!
//! The fixtures are generated as snake_case JSON and turned into `Any` bytes
//! with `Codec::parse_any`, outside the timed sections. The same bytes are
//! written to a temporary directory for `bench/reference.py`, which does the
//! same work with `json_format` (Python from `XDS_GATEWAY_PYTHON`, else
//! `.venv/bin/python`, else `python3`) and checks that both sides produce the
//! same bytes.
//!
//! Machines are noisy, so the run is split into rounds, each a Rust pass and
//! a Python pass (alternating which goes first): both sides are sampled over
//! the same stretch of time. Every pass sizes its samples with one call, runs
//! one warm-up sample, then several samples, each repeating the work until it
//! lasts at least `min_sample`. Figures are medians over all rounds' samples.
//!
//! Without `--bench` (that is, under `cargo test --all-targets`) this runs as
//! a smoke test: small fixtures, one sample, every correctness check, and the
//! Python side only if `XDS_GATEWAY_PYTHON` is set (it must then succeed and
//! agree byte for byte).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use envoy_types::pb::google::protobuf::Any as PbAny;
use prost_types::Any;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use xds_gateway::bench_support::{Pipeline, Pushed, Renditions, RequestBodies};
use xds_gateway::xds::rewrite::RestTarget;
use xds_gateway::xds::{Codec, DiscoveryRequestView, ResourceType, Validator};

const LISTENER_URL: &str = xds_gateway::xds::ResourceType::Listeners.type_url();
const CLUSTER_URL: &str = xds_gateway::xds::ResourceType::Clusters.type_url();
const HCM_URL: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const LOCAL_RATELIMIT_URL: &str =
    "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit";
const ROUTER_URL: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";
const UPSTREAM_TLS_URL: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
const DISCOVERY_REQUEST: &str = "envoy.service.discovery.v3.DiscoveryRequest";
const DISCOVERY_RESPONSE: &str = "envoy.service.discovery.v3.DiscoveryResponse";

/// The captured request body, relative to the crate root.
const REQUEST_FIXTURE: &str = "bench/fixtures/envoy-1.40-cds-request.json";

/// Sizes and sampling of one run.
struct Config {
    full: bool,
    listeners: usize,
    clusters: usize,
    /// Rust pass + Python pass, this many times.
    rounds: usize,
    /// Samples per case and pass, after the warm-up sample.
    runs: usize,
    /// Shortest sample; fast cases repeat their work to reach it.
    min_sample: Duration,
    /// Index of the Cluster that changes in (d).
    changed: usize,
}

impl Config {
    fn from_args() -> Config {
        // `cargo bench` passes --bench; `cargo test` does not.
        if std::env::args().any(|a| a == "--bench") {
            Config {
                full: true,
                listeners: 1_000,
                clusters: 10_000,
                rounds: 3,
                runs: 3,
                min_sample: Duration::from_millis(200),
                changed: 5_000,
            }
        } else {
            Config {
                full: false,
                listeners: 10,
                clusters: 100,
                rounds: 1,
                runs: 1,
                min_sample: Duration::ZERO,
                changed: 50,
            }
        }
    }
}

/// Samples of `f`, in seconds per call: one call sizes the samples, one
/// warm-up sample is dropped, then `runs` samples of enough calls to last
/// `min_sample`.
fn sample<T>(config: &Config, mut f: impl FnMut() -> T) -> Vec<f64> {
    let start = Instant::now();
    black_box(f());
    let once = start.elapsed().as_secs_f64().max(1e-9);
    let iters = ((config.min_sample.as_secs_f64() / once).ceil() as usize).max(1);
    let mut one = || {
        let start = Instant::now();
        for _ in 0..iters {
            black_box(f());
        }
        start.elapsed().as_secs_f64() / iters as f64
    };
    one();
    (0..config.runs).map(|_| one()).collect()
}

/// `body` with one letter changed where the memo's sampled key does not
/// look (a letter of the node's extension list, past the middle), still a
/// request that parses.
fn sharing_a_key(body: &[u8]) -> bytes::Bytes {
    let memo = RequestBodies::default();
    (body.len() / 2..body.len())
        .filter(|&i| body[i].is_ascii_lowercase())
        .map(|i| {
            let mut other = body.to_vec();
            other[i] = if body[i] == b'a' { b'b' } else { b'a' };
            bytes::Bytes::from(other)
        })
        .find(|other| RequestBodies::share_a_key(body, other) && memo.parse(other.clone()))
        .expect("a letter between the memo's samples")
}

/// Median and quartiles of a case's samples, in seconds per call.
#[derive(Clone, Copy, Debug)]
struct Stats {
    median: f64,
    q1: f64,
    q3: f64,
}

fn stats(samples: &[f64]) -> Option<Stats> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    // Linear interpolation between closest ranks.
    let at = |q: f64| {
        let pos = q * (s.len() - 1) as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
    };
    Some(Stats {
        median: at(0.5),
        q1: at(0.25),
        q3: at(0.75),
    })
}

fn listener_json(i: usize) -> Value {
    let ads = json!({"ads": {}, "resource_api_version": "V3"});
    json!({
        "@type": LISTENER_URL,
        "name": format!("listener-{i}"),
        "address": {"socket_address": {"address": "0.0.0.0", "port_value": 10_000 + i}},
        "filter_chains": [{
            "filters": [{
                "name": "envoy.filters.network.http_connection_manager",
                "typed_config": {
                    "@type": HCM_URL,
                    "stat_prefix": format!("ingress_http_{i}"),
                    "codec_type": "AUTO",
                    "use_remote_address": true,
                    "common_http_protocol_options": {"idle_timeout": format!("{}s", 60 + i % 240)},
                    "rds": {"route_config_name": format!("route-{i}"), "config_source": ads},
                    "http_filters": [
                        {
                            "name": "envoy.filters.http.local_ratelimit",
                            "typed_config": {
                                "@type": LOCAL_RATELIMIT_URL,
                                "stat_prefix": format!("local_rate_limit_{i}"),
                                "token_bucket": {
                                    "max_tokens": 100 + i % 900,
                                    "tokens_per_fill": 10 + i % 90,
                                    "fill_interval": "1s"
                                },
                                "filter_enabled": {
                                    "runtime_key": "local_rate_limit_enabled",
                                    "default_value": {"numerator": 100, "denominator": "HUNDRED"}
                                },
                                "filter_enforced": {
                                    "runtime_key": "local_rate_limit_enforced",
                                    "default_value": {"numerator": 50, "denominator": "HUNDRED"}
                                }
                            }
                        },
                        {"name": "envoy.filters.http.router", "typed_config": {"@type": ROUTER_URL}}
                    ]
                }
            }]
        }]
    })
}

fn cluster_json(i: usize, generation: usize) -> Value {
    let ads = json!({"ads": {}, "resource_api_version": "V3"});
    json!({
        "@type": CLUSTER_URL,
        "name": format!("cluster-{i}"),
        "type": "EDS",
        "eds_cluster_config": {"eds_config": ads, "service_name": format!("svc-{i}.ns-{}", i % 50)},
        "connect_timeout": format!("{}.{:03}s", 1 + (i + generation) % 5, (i * 37) % 1000),
        "lb_policy": "LEAST_REQUEST",
        "circuit_breakers": {"thresholds": [{
            "max_connections": 1024 + (i + generation) % 1000,
            "max_pending_requests": 512,
            "max_requests": 2048
        }]},
        "transport_socket": {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": UPSTREAM_TLS_URL,
                "sni": format!("svc-{i}.example.internal"),
                "common_tls_context": {
                    "tls_params": {"tls_minimum_protocol_version": "TLSv1_2"},
                    "alpn_protocols": ["h2", "http/1.1"],
                    "tls_certificate_sds_secret_configs": [{"name": "client-cert", "sds_config": ads}],
                    "validation_context_sds_secret_config": {"name": "ca-bundle", "sds_config": ads}
                }
            }
        }
    })
}

fn to_any(codec: &Codec, json: &Value) -> Any {
    codec
        .parse_any(json.to_string().as_bytes())
        .expect("fixture parses")
}

/// An `Any` as the upstream streams carry it.
fn pushed_any(a: &Any) -> PbAny {
    PbAny {
        type_url: a.type_url.clone(),
        value: a.value.clone(),
    }
}

/// SHA-256 of the resource's protobuf bytes (what the gateway digests each
/// changed resource by).
fn content_hash(any: &Any) -> [u8; 32] {
    Sha256::digest(&any.value).into()
}

fn render_each(codec: &Codec, anys: &[Any]) -> usize {
    anys.iter()
        .map(|a| {
            codec
                .render_any(&a.type_url, &a.value)
                .expect("renders")
                .len()
        })
        .sum()
}

fn write_hex_lines(path: &Path, anys: &[Any]) {
    let mut text = String::new();
    for a in anys {
        let _ = writeln!(text, "{} {}", a.type_url, hex::encode(&a.value));
    }
    std::fs::write(path, text).expect("write fixture for Python");
}

/// Samples by case key.
type Samples = HashMap<String, Vec<f64>>;

/// Everything the Rust cases work on.
struct Work<'a> {
    config: &'a Config,
    codec: &'a Codec,
    validator: &'a Validator,
    request: Option<&'a [u8]>,
    listeners: &'a [Any],
    clusters: &'a [Any],
    /// The push before: every (d) push changes one Cluster against it.
    pipeline: Pipeline,
    last: Pushed,
    /// The Clusters as pushed, and the generation of the changed one.
    pushed: Vec<PbAny>,
    generation: usize,
}

/// One Rust pass over every case.
fn rust_pass(w: &mut Work<'_>, out: &mut Samples) {
    let config = w.config;
    let codec = w.codec;
    let mut add = |key: &str, samples: Vec<f64>| {
        out.entry(key.to_owned()).or_default().extend(samples);
    };
    if let Some(body) = w.request {
        add(
            "view",
            sample(config, || DiscoveryRequestView::parse(body).unwrap()),
        );
        add(
            "full",
            sample(config, || {
                codec.parse_message(DISCOVERY_REQUEST, body, true).unwrap()
            }),
        );
        // A poll after a change: the body with a new version each call.
        let rest = body
            .strip_prefix(br#"{"version_info":"1""#.as_slice())
            .expect("the fixture starts with its version");
        let memo = RequestBodies::default();
        let mut version = 0u64;
        let mut next_body = || {
            version += 1;
            let mut next = Vec::with_capacity(body.len() + 20);
            next.extend_from_slice(br#"{"version_info":""#);
            next.extend_from_slice(version.to_string().as_bytes());
            next.push(b'"');
            next.extend_from_slice(rest);
            bytes::Bytes::from(next)
        };
        add("build", sample(config, &mut next_body));
        add(
            "framed",
            sample(config, || assert!(memo.parse(next_body()))),
        );
        let same = bytes::Bytes::copy_from_slice(body);
        add("hit", sample(config, || memo.parse(same.clone())));
        // Two clients whose bodies differ only between the memo's samples
        // (one letter of the node's extension list), polling in turn: each
        // poll must be a hit too, not a parse (issue 41).
        let other = sharing_a_key(body);
        let (mut turn, bodies) = (false, [same.clone(), other]);
        add(
            "shared",
            sample(config, || {
                turn = !turn;
                assert!(memo.parse(bodies[usize::from(turn)].clone()));
            }),
        );
    }
    add(
        "listeners",
        sample(config, || render_each(codec, w.listeners)),
    );
    add(
        "clusters",
        sample(config, || render_each(codec, w.clusters)),
    );
    // Every push changes exactly one Cluster against the one before, to a
    // content never seen (so never a render memo hit).
    let (pipeline, last, pushed, generation) =
        (&w.pipeline, &mut w.last, &mut w.pushed, &mut w.generation);
    add(
        "cached",
        sample(config, || {
            *generation += 1;
            pushed[config.changed] =
                pushed_any(&to_any(codec, &cluster_json(config.changed, *generation)));
            let (state, body) = pipeline
                .push(ResourceType::Clusters, "v", pushed.clone(), Some(last))
                .expect("the push is taken");
            assert_eq!((state.decoded, state.reused), (1, config.clusters - 1));
            *last = state;
            body
        }),
    );
    let fresh = &w.pushed;
    add(
        "all",
        sample(config, || {
            Pipeline::new(codec.clone())
                .push(ResourceType::Clusters, "v", fresh.clone(), None)
                .expect("the push is taken")
                .1
        }),
    );
    add(
        "decode",
        sample(config, || {
            for a in w.clusters {
                black_box(codec.decode_any(&a.type_url, &a.value).expect("decodes"));
            }
        }),
    );
    add(
        "validate",
        sample(config, || {
            for a in w.clusters {
                let message = codec.decode_any(&a.type_url, &a.value).expect("decodes");
                w.validator.validate(&message).expect("valid");
                black_box(());
            }
        }),
    );
    // Validation as it would cost if each resource read its message
    // types' rules again: a validator with no plans yet, per Cluster.
    add(
        "validate_unplanned",
        sample(config, || {
            for a in w.clusters {
                let message = codec.decode_any(&a.type_url, &a.value).expect("decodes");
                Validator::new(codec.pool())
                    .validate(&message)
                    .expect("valid");
                black_box(());
            }
        }),
    );
    // The push's wildcard answer for a REST Envoy (its config sources
    // pointed at the gateway): through the pipeline's memo of rewrites,
    // which holds the resources earlier pushes shared, and through an
    // assembler that holds none.
    let target = rest_target();
    add(
        "rest",
        sample(config, || pipeline_answer(&w.pipeline, &w.last, &target)),
    );
    add(
        "rest_unmemoised",
        sample(config, || {
            pipeline_answer(&Pipeline::new(codec.clone()), &w.last, &target)
        }),
    );
    // The served version the config history shows for an event of this
    // state, worked out on each read as it would be without the history's
    // memo of it (a wildcard subscription's, and one naming every Cluster).
    add(
        "served_wildcard",
        sample(config, || Pipeline::served_version(&w.last, false)),
    );
    add(
        "served_named",
        sample(config, || Pipeline::served_version(&w.last, true)),
    );
    // The same answer as `?pretty` asks for it: rendered by a memo that
    // holds it (every poll after the first), and by one that does not.
    let answer = w
        .pipeline
        .answer(&w.last, None)
        .expect("the push is answered");
    let renditions = Renditions::default();
    add(
        "pretty_hit",
        sample(config, || renditions.pretty(&answer, codec)),
    );
    add(
        "pretty",
        sample(config, || Renditions::default().pretty(&answer, codec)),
    );
    add(
        "hash",
        sample(config, || {
            w.clusters
                .iter()
                .map(|a| content_hash(a)[0])
                .fold(0u8, u8::wrapping_add)
        }),
    );
}

/// The target of a REST Envoy's xDS cluster, as the gateway rewrites to it.
fn rest_target() -> RestTarget {
    RestTarget {
        cluster_name: "xds_gateway".into(),
        refresh_delay: Duration::from_secs(1),
        request_timeout: Duration::from_secs(5),
    }
}

fn pipeline_answer(pipeline: &Pipeline, pushed: &Pushed, target: &RestTarget) -> bytes::Bytes {
    pipeline
        .answer(pushed, Some(target))
        .expect("the push is answered")
}

fn python_interpreter() -> PathBuf {
    if let Some(p) = std::env::var_os("XDS_GATEWAY_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// One Python pass: its samples by case and what it reported.
fn python_pass(
    config: &Config,
    dir: &Path,
    request: Option<&Path>,
    check: bool,
) -> Result<(Samples, Value), String> {
    let python = python_interpreter();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/reference.py");
    let mut cmd = Command::new(&python);
    cmd.arg(&script)
        .arg("--dir")
        .arg(dir)
        .arg("--runs")
        .arg(config.runs.to_string())
        .arg("--min-sample")
        .arg(config.min_sample.as_secs_f64().to_string())
        .arg("--changed")
        .arg(config.changed.to_string());
    if let Some(r) = request {
        cmd.arg("--request").arg(r);
    }
    if check {
        cmd.arg("--check");
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(format!(
            "{} {} failed ({}): {}",
            python.display(),
            script.display(),
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    let info: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("unreadable output from reference.py: {e}"))?;
    let samples: Samples = serde_json::from_value(info["samples"].clone())
        .map_err(|e| format!("unreadable samples from reference.py: {e}"))?;
    Ok((samples, info))
}

fn fmt_time(secs: f64) -> String {
    if !secs.is_finite() {
        "-".into()
    } else if secs >= 1.0 {
        format!("{secs:.2} s")
    } else if secs >= 1e-3 {
        format!("{:.2} ms", secs * 1e3)
    } else {
        format!("{:.1} µs", secs * 1e6)
    }
}

/// Median with the half interquartile range relative to it.
fn fmt_stats(s: &Stats) -> String {
    format!(
        "{} ±{:.0}%",
        fmt_time(s.median),
        (s.q3 - s.q1) / s.median * 50.0
    )
}

/// `n` with thousands separators.
fn count(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn main() {
    let config = Config::from_args();
    let (nl, nc) = (count(config.listeners), count(config.clusters));
    let codec = Codec::embedded();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    println!(
        "xds-gateway codec benchmark ({} mode), {} CPU(s) available",
        if config.full { "bench" } else { "smoke test" },
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{nl} Listeners, {nc} Clusters; {} rounds x {} samples per case and side, \
         each >= {:?}, after a warm-up",
        config.rounds, config.runs, config.min_sample
    );

    // ---- fixtures (untimed) ----
    let request_path = root.join(REQUEST_FIXTURE);
    let request = match std::fs::read(&request_path) {
        Ok(body) => Some(body),
        Err(e) if config.full => panic!("{}: {e}", request_path.display()),
        Err(e) => {
            println!("skipping (a): {}: {e}", request_path.display());
            None
        }
    };
    let listeners: Vec<Any> = (0..config.listeners)
        .map(|i| to_any(&codec, &listener_json(i)))
        .collect();
    let clusters: Vec<Any> = (0..config.clusters)
        .map(|i| to_any(&codec, &cluster_json(i, 0)))
        .collect();
    let changed = to_any(&codec, &cluster_json(config.changed, 1));
    assert_ne!(changed, clusters[config.changed]);
    let v1: Vec<PbAny> = clusters.iter().map(pushed_any).collect();
    let mut v2 = v1.clone();
    v2[config.changed] = pushed_any(&changed);

    // ---- correctness checks (untimed) ----
    if let Some(body) = &request {
        let view = DiscoveryRequestView::parse(body).expect("view parses the fixture");
        let full = codec
            .parse_message(DISCOVERY_REQUEST, body, true)
            .expect("codec parses the fixture");
        let node = view.node.as_ref().expect("fixture has a node");
        let full_node = full.get_field_by_name("node").expect("node field");
        let full_node = full_node.as_message().expect("node is a message");
        let full_id = full_node.get_field_by_name("id").expect("id field");
        assert_eq!(Some(node.id.as_str()), full_id.as_str());
        let full_type = full.get_field_by_name("type_url").expect("type_url");
        assert_eq!(full_type.as_str(), Some(view.type_url.as_str()));
        println!(
            "(a) request: {} bytes, {}, node {:?}",
            count(body.len()),
            view.type_url,
            node.id
        );
    }
    // The gateway's push: v1 whole, then v2 with one Cluster changed.
    let pipeline = Pipeline::new(codec.clone());
    let (first, _) = pipeline
        .push(ResourceType::Clusters, "v", v1.clone(), None)
        .expect("v1 is taken");
    assert_eq!((first.decoded, first.reused), (config.clusters, 0));
    let (second, body_v2) = pipeline
        .push(ResourceType::Clusters, "v", v2.clone(), Some(&first))
        .expect("v2 is taken");
    assert_eq!(
        (second.decoded, second.reused),
        (1, config.clusters - 1),
        "exactly the changed cluster is decoded again"
    );
    let (_, whole_v2) = Pipeline::new(codec.clone())
        .push(ResourceType::Clusters, "v", v2.clone(), None)
        .expect("v2 is taken as a new state");
    assert_eq!(body_v2, whole_v2, "reuse changes no byte of the body");
    codec
        .parse_message(DISCOVERY_RESPONSE, &body_v2, false)
        .expect("the body is a DiscoveryResponse");
    let proto_len = |anys: &[Any]| count(anys.iter().map(|a| a.value.len()).sum());
    println!(
        "(b) {nl} Listeners: {} protobuf bytes -> {} JSON bytes",
        proto_len(&listeners),
        count(render_each(&codec, &listeners))
    );
    println!(
        "(c) {nc} Clusters: {} protobuf bytes -> {} JSON bytes; (d) response body {} bytes",
        proto_len(&clusters),
        count(render_each(&codec, &clusters)),
        count(body_v2.len())
    );

    // ---- inputs for Python: the very same Any bytes ----
    let dir = std::env::temp_dir().join(format!("xds-gateway-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    write_hex_lines(&dir.join("listeners.hex"), &listeners);
    write_hex_lines(&dir.join("clusters.hex"), &clusters);
    write_hex_lines(&dir.join("changed.hex"), std::slice::from_ref(&changed));
    let render = |a: &Any| codec.render_any(&a.type_url, &a.value).unwrap();
    std::fs::write(dir.join("rust-listener-0.json"), render(&listeners[0])).unwrap();
    std::fs::write(dir.join("rust-cluster-0.json"), render(&clusters[0])).unwrap();
    std::fs::write(dir.join("rust-response-v2.json"), &body_v2).unwrap();

    // ---- rounds: a Rust pass and a Python pass each ----
    let use_python = config.full || std::env::var_os("XDS_GATEWAY_PYTHON").is_some();
    if use_python {
        println!(
            "Python reference: {} {}",
            python_interpreter().display(),
            root.join("bench/reference.py").display()
        );
    }
    let validator = Validator::new(codec.pool());
    let mut work = Work {
        config: &config,
        codec: &codec,
        validator: &validator,
        request: request.as_deref(),
        listeners: &listeners,
        clusters: &clusters,
        pipeline,
        last: second,
        pushed: v2,
        generation: 1,
    };
    let mut rust = Samples::new();
    let mut python = Samples::new();
    let mut python_info = None;
    let mut python_error =
        (!use_python).then(|| "not run in smoke mode without XDS_GATEWAY_PYTHON".to_owned());
    let started = Instant::now();
    for round in 0..config.rounds {
        for side in 0..2 {
            if (round + side) % 2 == 0 {
                rust_pass(&mut work, &mut rust);
            } else if python_error.is_none() {
                let check = python_info.is_none();
                match python_pass(
                    &config,
                    &dir,
                    request.as_ref().map(|_| &*request_path),
                    check,
                ) {
                    Ok((samples, info)) => {
                        for (k, v) in samples {
                            python.entry(k).or_default().extend(v);
                        }
                        python_info.get_or_insert(info);
                    }
                    Err(e) => python_error = Some(e),
                }
            }
        }
        println!(
            "round {}/{} done ({:.0} s)",
            round + 1,
            config.rounds,
            started.elapsed().as_secs_f64()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);

    // ---- report ----
    let rows: [(&str, String, &str); 10] = [
        (
            "view",
            "(a) parse request: DiscoveryRequestView::parse".into(),
            "parse",
        ),
        (
            "full",
            "(a) parse request: full Codec::parse_message".into(),
            "parse",
        ),
        (
            "framed",
            "(a) a poll after a change, memo of frames".into(),
            "-",
        ),
        ("build", "  (a) building that body alone".into(), "-"),
        ("hit", "(a) the same bytes again, memo hit".into(), "-"),
        (
            "shared",
            "(a) two bodies sharing a key, in turn".into(),
            "-",
        ),
        (
            "listeners",
            format!("(b) render {nl} Listeners"),
            "listeners",
        ),
        ("clusters", format!("(c) render {nc} Clusters"), "clusters"),
        (
            "cached",
            format!("(d) 1 of {nc} changed: the gateway's push"),
            "rerender_all",
        ),
        (
            "all",
            "(d) the same push as a new state".to_string(),
            "rerender_all",
        ),
    ];
    let rust_stats = |key: &str| rust.get(key).and_then(|s| stats(s));
    let python_stats = |key: &str| python.get(key).and_then(|s| stats(s));
    println!();
    println!(
        "{:<46} {:>17} {:>17} {:>12}",
        "case", "Rust median", "Python median", "Python/Rust"
    );
    for (key, label, python_key) in &rows {
        let Some(r) = rust_stats(key) else { continue };
        let (py, ratio) = match python_stats(python_key) {
            Some(p) => (fmt_stats(&p), format!("{:.1}x", p.median / r.median)),
            None => ("-".into(), "-".into()),
        };
        println!("{label:<46} {:>17} {py:>17} {ratio:>12}", fmt_stats(&r));
    }
    for (key, label) in [
        (
            "decode",
            format!("  (c) decode only: Codec::decode_any x {nc}"),
        ),
        (
            "validate",
            format!("  (c) decode + Envoy's field rules x {nc}"),
        ),
        (
            "validate_unplanned",
            format!("  (c) the same, each rules read again x {nc}"),
        ),
        (
            "hash",
            format!("  (d) SHA-256 of the {nc} Anys (what reuse skips)"),
        ),
        (
            "rest",
            "(e) (d)'s answer to a REST Envoy, rewrites memoised".into(),
        ),
        (
            "rest_unmemoised",
            "(e) the same, every config source rewritten".into(),
        ),
        ("pretty_hit", "(f) (d)'s answer as ?pretty, memo hit".into()),
        ("pretty", "(f) the same, rendered again".into()),
        (
            "served_wildcard",
            "(g) (d)'s served version, worked out again".into(),
        ),
        (
            "served_named",
            format!("(g) the same, subscribed to {nc} names"),
        ),
    ] {
        if let Some(r) = rust_stats(key) {
            println!("{label:<46} {:>17}", fmt_stats(&r));
        }
    }
    println!("Python column: json_format.Parse (full) for the two (a) parse rows, re-render all for both (d) rows.");
    println!("± is half the interquartile range of all samples, relative to the median.");
    let median = |key: &str| rust_stats(key).map(|s| s.median);
    if let (Some(view), Some(full)) = (median("view"), median("full")) {
        println!(
            "(a) DiscoveryRequestView::parse is {:.1}x faster than the full parse",
            full / view
        );
    }
    if let (Some(view), Some(framed), Some(build)) =
        (median("view"), median("framed"), median("build"))
    {
        println!(
            "(a) a poll after a change costs {:.1}x less through the memo of frames than \
             DiscoveryRequestView::parse alone ({:.1}x less without building the body)",
            view / framed,
            view / (framed - build).max(1e-9)
        );
    }
    if let (Some(cached), Some(all)) = (median("cached"), median("all")) {
        println!(
            "(d) keeping unchanged resources is {:.1}x faster than taking the push whole",
            all / cached
        );
    }
    if let (Some(l), Some(c)) = (median("listeners"), median("clusters")) {
        println!(
            "(b)/(c) Rust: {} per Listener, {} per Cluster",
            fmt_time(l / config.listeners as f64),
            fmt_time(c / config.clusters as f64)
        );
    }
    match (&python_info, &python_error) {
        (Some(info), None) => {
            if let (Some(l), Some(c)) = (python_stats("listeners"), python_stats("clusters")) {
                println!(
                    "(b)/(c) Python: {} per Listener, {} per Cluster",
                    fmt_time(l.median / config.listeners as f64),
                    fmt_time(c.median / config.clusters as f64)
                );
            }
            if let Some(s) = python_stats("json_loads") {
                println!(
                    "(a) Python json.loads alone of the request body: {}",
                    fmt_stats(&s)
                );
            }
            println!("Python: {}", info["runtime"].as_str().unwrap_or("?"));
            let agree = &info["agreement"];
            println!("Python output vs ours: {agree}");
            if !config.full {
                for key in ["listener", "cluster", "response"] {
                    assert_eq!(agree[key], "identical bytes", "{key}: {agree}");
                }
            }
        }
        (_, Some(e)) => {
            if config.full {
                println!("Python reference unavailable, Rust figures only: {e}");
            } else if std::env::var_os("XDS_GATEWAY_PYTHON").is_some() {
                panic!("XDS_GATEWAY_PYTHON is set but the Python reference failed: {e}");
            } else {
                println!("Python reference skipped: {e}");
            }
        }
        (None, None) => unreachable!("a Python pass either reports or fails"),
    }
}
