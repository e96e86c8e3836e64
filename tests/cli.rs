//! The `xds-gateway` command line as a user meets it: `--help`, errors for
//! bad flags, environment variables and config files (naming the key), the
//! precedence flags > `XDS_GATEWAY_*` environment > `--config` file, the
//! sample `examples/xds-gateway.toml`, and a snapshot directory that does not
//! load.
//!
//! Every child gets an environment without inherited `XDS_GATEWAY_*`
//! variables (the test process's own environment is never changed), binds
//! free loopback ports only, and is killed when its guard drops. Every wait
//! is bounded.

#[path = "support/process.rs"]
mod process;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use process::{eventually, free_port, http_get, ChildGuard};
use xds_gateway::config::{
    Config, ForwardedHeader, LogFormat, RewritePolicy, SessionKey, UpstreamMode, UpstreamStreams,
    Validation,
};

const BIN: &str = env!("CARGO_BIN_EXE_xds-gateway");
/// Bound on a run that should exit by itself (`--help`, a rejected config).
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on a started gateway answering on its admin port.
const START_TIMEOUT: Duration = Duration::from_secs(20);
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Attempts at starting a gateway (a "free" port can be taken meanwhile).
const START_ATTEMPTS: usize = 3;

/// One setting: its long flag, its environment variable, its key in the
/// `--config` file (`None`: not settable from the file).
struct Setting {
    flag: &'static str,
    env: &'static str,
    key: Option<&'static str>,
}

const fn setting(flag: &'static str, env: &'static str, key: &'static str) -> Setting {
    Setting {
        flag,
        env,
        key: Some(key),
    }
}

/// Every setting the binary has. The tests below check this table against
/// `--help` and against the keys the config file accepts, so a new flag
/// cannot go untested or be left out of `examples/xds-gateway.toml`.
const SETTINGS: &[Setting] = &[
    Setting {
        flag: "--config",
        env: "XDS_GATEWAY_CONFIG",
        key: None,
    },
    setting("--upstream", "XDS_GATEWAY_UPSTREAM", "upstream"),
    setting(
        "--upstream-mode",
        "XDS_GATEWAY_UPSTREAM_MODE",
        "upstream-mode",
    ),
    setting(
        "--upstream-streams",
        "XDS_GATEWAY_UPSTREAM_STREAMS",
        "upstream-streams",
    ),
    setting("--upstream-ca", "XDS_GATEWAY_UPSTREAM_CA", "upstream-ca"),
    setting(
        "--upstream-cert",
        "XDS_GATEWAY_UPSTREAM_CERT",
        "upstream-cert",
    ),
    setting("--upstream-key", "XDS_GATEWAY_UPSTREAM_KEY", "upstream-key"),
    setting(
        "--upstream-tls-server-name",
        "XDS_GATEWAY_UPSTREAM_TLS_SERVER_NAME",
        "upstream-tls-server-name",
    ),
    // Repeatable flag, plural key and variable (like --descriptor-set).
    setting(
        "--upstream-header",
        "XDS_GATEWAY_UPSTREAM_HEADERS",
        "upstream-headers",
    ),
    setting(
        "--upstream-keepalive",
        "XDS_GATEWAY_UPSTREAM_KEEPALIVE",
        "upstream-keepalive",
    ),
    setting(
        "--upstream-node-first-only",
        "XDS_GATEWAY_UPSTREAM_NODE_FIRST_ONLY",
        "upstream-node-first-only",
    ),
    setting(
        "--fetch-cache-ttl",
        "XDS_GATEWAY_FETCH_CACHE_TTL",
        "fetch-cache-ttl",
    ),
    setting("--snapshot", "XDS_GATEWAY_SNAPSHOT", "snapshot"),
    setting("--listen", "XDS_GATEWAY_LISTEN", "listen"),
    setting("--admin", "XDS_GATEWAY_ADMIN", "admin"),
    setting("--session-key", "XDS_GATEWAY_SESSION_KEY", "session-key"),
    setting("--idle-timeout", "XDS_GATEWAY_IDLE_TIMEOUT", "idle-timeout"),
    setting("--max-sessions", "XDS_GATEWAY_MAX_SESSIONS", "max-sessions"),
    setting(
        "--first-response-timeout",
        "XDS_GATEWAY_FIRST_RESPONSE_TIMEOUT",
        "first-response-timeout",
    ),
    setting("--default-wait", "XDS_GATEWAY_DEFAULT_WAIT", "default-wait"),
    setting("--max-wait", "XDS_GATEWAY_MAX_WAIT", "max-wait"),
    setting(
        "--cache-max-age",
        "XDS_GATEWAY_CACHE_MAX_AGE",
        "cache-max-age",
    ),
    setting(
        "--rewrite-config-sources",
        "XDS_GATEWAY_REWRITE_CONFIG_SOURCES",
        "rewrite-config-sources",
    ),
    setting(
        "--refresh-delay",
        "XDS_GATEWAY_REFRESH_DELAY",
        "refresh-delay",
    ),
    setting(
        "--request-timeout",
        "XDS_GATEWAY_REQUEST_TIMEOUT",
        "request-timeout",
    ),
    setting(
        "--rejection-threshold",
        "XDS_GATEWAY_REJECTION_THRESHOLD",
        "rejection-threshold",
    ),
    setting(
        "--forward-rejections",
        "XDS_GATEWAY_FORWARD_REJECTIONS",
        "forward-rejections",
    ),
    setting(
        "--allow-insecure-admin",
        "XDS_GATEWAY_ALLOW_INSECURE_ADMIN",
        "allow-insecure-admin",
    ),
    setting(
        "--make-before-break",
        "XDS_GATEWAY_MAKE_BEFORE_BREAK",
        "make-before-break",
    ),
    setting(
        "--trusted-proxies",
        "XDS_GATEWAY_TRUSTED_PROXIES",
        "trusted-proxies",
    ),
    setting(
        "--allow-secrets",
        "XDS_GATEWAY_ALLOW_SECRETS",
        "allow-secrets",
    ),
    setting(
        "--max-body-bytes",
        "XDS_GATEWAY_MAX_BODY_BYTES",
        "max-body-bytes",
    ),
    setting(
        "--max-upstream-message-bytes",
        "XDS_GATEWAY_MAX_UPSTREAM_MESSAGE_BYTES",
        "max-upstream-message-bytes",
    ),
    setting("--validate", "XDS_GATEWAY_VALIDATE", "validate"),
    setting("--log-format", "XDS_GATEWAY_LOG_FORMAT", "log-format"),
    setting("--tls-cert", "XDS_GATEWAY_TLS_CERT", "tls-cert"),
    setting("--tls-key", "XDS_GATEWAY_TLS_KEY", "tls-key"),
    setting("--client-ca", "XDS_GATEWAY_CLIENT_CA", "client-ca"),
    setting("--client-auth", "XDS_GATEWAY_CLIENT_AUTH", "client-auth"),
    setting(
        "--admin-tls-cert",
        "XDS_GATEWAY_ADMIN_TLS_CERT",
        "admin-tls-cert",
    ),
    setting(
        "--admin-tls-key",
        "XDS_GATEWAY_ADMIN_TLS_KEY",
        "admin-tls-key",
    ),
    setting(
        "--admin-client-ca",
        "XDS_GATEWAY_ADMIN_CLIENT_CA",
        "admin-client-ca",
    ),
    setting(
        "--admin-client-auth",
        "XDS_GATEWAY_ADMIN_CLIENT_AUTH",
        "admin-client-auth",
    ),
    setting("--auth-policy", "XDS_GATEWAY_AUTH_POLICY", "auth-policy"),
    setting(
        "--allow-insecure-listen",
        "XDS_GATEWAY_ALLOW_INSECURE_LISTEN",
        "allow-insecure-listen",
    ),
    setting(
        "--forwarded-header",
        "XDS_GATEWAY_FORWARDED_HEADER",
        "forwarded-header",
    ),
    setting(
        "--allowed-hosts",
        "XDS_GATEWAY_ALLOWED_HOSTS",
        "allowed-hosts",
    ),
    setting(
        "--source-connection-share",
        "XDS_GATEWAY_SOURCE_CONNECTION_SHARE",
        "source-connection-share",
    ),
    setting(
        "--max-connections",
        "XDS_GATEWAY_MAX_CONNECTIONS",
        "max-connections",
    ),
    setting(
        "--max-long-polls",
        "XDS_GATEWAY_MAX_LONG_POLLS",
        "max-long-polls",
    ),
    setting("--max-watches", "XDS_GATEWAY_MAX_WATCHES", "max-watches"),
    setting(
        "--principal-share",
        "XDS_GATEWAY_PRINCIPAL_SHARE",
        "principal-share",
    ),
    setting(
        "--watch-heartbeat",
        "XDS_GATEWAY_WATCH_HEARTBEAT",
        "watch-heartbeat",
    ),
    setting(
        "--max-streams-per-connection",
        "XDS_GATEWAY_MAX_STREAMS_PER_CONNECTION",
        "max-streams-per-connection",
    ),
    setting(
        "--header-read-timeout",
        "XDS_GATEWAY_HEADER_READ_TIMEOUT",
        "header-read-timeout",
    ),
    setting(
        "--body-read-timeout",
        "XDS_GATEWAY_BODY_READ_TIMEOUT",
        "body-read-timeout",
    ),
    setting(
        "--keep-alive-timeout",
        "XDS_GATEWAY_KEEP_ALIVE_TIMEOUT",
        "keep-alive-timeout",
    ),
    setting(
        "--drain-timeout",
        "XDS_GATEWAY_DRAIN_TIMEOUT",
        "drain-timeout",
    ),
    setting(
        "--max-node-bytes",
        "XDS_GATEWAY_MAX_NODE_BYTES",
        "max-node-bytes",
    ),
    setting(
        "--memory-budget-bytes",
        "XDS_GATEWAY_MEMORY_BUDGET_BYTES",
        "memory-budget-bytes",
    ),
    setting(
        "--max-session-bytes",
        "XDS_GATEWAY_MAX_SESSION_BYTES",
        "max-session-bytes",
    ),
    setting(
        "--history-max-bytes",
        "XDS_GATEWAY_HISTORY_MAX_BYTES",
        "history-max-bytes",
    ),
    setting("--history-file", "XDS_GATEWAY_HISTORY_FILE", "history-file"),
    setting(
        "--history-file-max-bytes",
        "XDS_GATEWAY_HISTORY_FILE_MAX_BYTES",
        "history-file-max-bytes",
    ),
    setting(
        "--max-names-per-request",
        "XDS_GATEWAY_MAX_NAMES_PER_REQUEST",
        "max-names-per-request",
    ),
    setting(
        "--max-names-per-session",
        "XDS_GATEWAY_MAX_NAMES_PER_SESSION",
        "max-names-per-session",
    ),
    // The one setting whose names differ: repeatable flag, plural key/env.
    setting(
        "--descriptor-set",
        "XDS_GATEWAY_DESCRIPTOR_SETS",
        "descriptor-sets",
    ),
    // Repeatable flag, plural key and variable, like --descriptor-set.
    setting("--extra-type", "XDS_GATEWAY_EXTRA_TYPES", "extra-types"),
    setting(
        "--upstream-reflection",
        "XDS_GATEWAY_UPSTREAM_REFLECTION",
        "upstream-reflection",
    ),
    setting(
        "--node-profiles",
        "XDS_GATEWAY_NODE_PROFILES",
        "node-profiles",
    ),
];

fn file_keys() -> BTreeSet<&'static str> {
    SETTINGS.iter().filter_map(|s| s.key).collect()
}

fn manifest_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// `n` distinct free loopback ports.
fn free_ports<const N: usize>() -> [u16; N] {
    let mut ports = [0; N];
    let mut i = 0;
    while i < N {
        let port = free_port();
        if !ports[..i].contains(&port) {
            ports[i] = port;
            i += 1;
        }
    }
    ports
}

/// The binary with `args`, an environment free of inherited `XDS_GATEWAY_*`
/// variables plus `env`, info logging and no backtraces (what a user sees).
fn gateway(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(BIN);
    command.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("XDS_GATEWAY_") {
            command.env_remove(name);
        }
    }
    command
        .env("RUST_LOG", "info")
        .env("RUST_BACKTRACE", "0")
        .env_remove("RUST_LIB_BACKTRACE")
        .envs(env.iter().copied());
    command
}

/// How a run that should exit by itself ended.
struct Exited {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Exited {
    fn describe(&self) -> String {
        format!(
            "exit code {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `command` to its exit; fails the test (killing it) after
/// [`EXIT_TIMEOUT`].
async fn run_to_exit(command: Command, what: &str) -> Exited {
    let mut command = tokio::process::Command::from(command);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start {BIN}: {e}"));
    let output = tokio::time::timeout(EXIT_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what}: still running after {EXIT_TIMEOUT:?} (killed)"))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    Exited {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs `command`, expecting a start-up error: a non-zero exit whose stderr
/// contains every one of `needles`.
async fn expect_rejected(command: Command, what: &str, needles: &[&str]) -> Exited {
    let exited = run_to_exit(command, what).await;
    assert!(
        exited.code.is_some_and(|c| c != 0),
        "{what}: expected a non-zero exit; {}",
        exited.describe()
    );
    for needle in needles {
        assert!(
            exited.stderr.contains(needle),
            "{what}: stderr does not mention {needle:?}; {}",
            exited.describe()
        );
    }
    exited
}

/// Why [`start`] gave up.
enum NotStarted {
    /// It exited because an address was taken: retry with fresh ports.
    PortTaken,
}

/// Starts a long-running gateway (log in `dir`) and waits until its admin
/// listener on `admin_port` answers `/healthz`. Panics if it exits for any
/// reason but a taken port, or does not answer within [`START_TIMEOUT`].
async fn start(
    mut command: Command,
    dir: &Path,
    admin_port: u16,
    what: &str,
) -> Result<ChildGuard, NotStarted> {
    let log = dir.join(format!("gateway-{admin_port}.log"));
    let file = std::fs::File::create(&log).expect("create the gateway log");
    command
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("clone the log handle"))
        .stderr(file);
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start {BIN}: {e}"));
    let mut guard = ChildGuard::new(format!("xds-gateway ({what})"), child).with_log(&log);
    let answered = eventually(START_TIMEOUT, POLL_INTERVAL, || {
        let exited = guard.try_exit_status();
        async move {
            if let Some(status) = exited {
                return Some(Err(status));
            }
            matches!(http_get(admin_port, "/healthz").await, Ok((200, _))).then_some(Ok(()))
        }
    })
    .await;
    match answered {
        Some(Ok(())) => Ok(guard),
        Some(Err(_)) if guard.log_text().contains("Address already in use") => {
            Err(NotStarted::PortTaken)
        }
        Some(Err(status)) => {
            guard.print_log();
            panic!("{what}: xds-gateway exited at start-up ({status})");
        }
        None => {
            guard.print_log();
            panic!("{what}: the admin listener did not answer within {START_TIMEOUT:?}");
        }
    }
}

/// `GET path` on `port`, expecting an answer (status, body).
async fn get(port: u16, path: &str) -> (u16, String) {
    http_get(port, path).await.unwrap_or_else(|e| panic!("{e}"))
}

// ---------------------------------------------------------------------------
// --help, --version
// ---------------------------------------------------------------------------

#[tokio::test]
async fn help_lists_every_flag_with_its_environment_variable() {
    let exited = run_to_exit(gateway(&["--help"], &[]), "--help").await;
    assert_eq!(exited.code, Some(0), "--help: {}", exited.describe());
    let help = &exited.stdout;
    for s in SETTINGS {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{} ", s.flag))
                    || l.trim_end().ends_with(s.flag)),
            "--help does not list {}:\n{help}",
            s.flag
        );
        assert!(
            help.contains(&format!("[env: {}=", s.env)),
            "--help does not name {} for {}:\n{help}",
            s.env,
            s.flag
        );
    }
    // And nothing the table (so the rest of this file) does not know about.
    // Option lines are indented 2-6 columns; descriptions (which may
    // mention flags) 10.
    let listed: BTreeSet<&str> = help
        .lines()
        .filter(|l| l.len() - l.trim_start().len() <= 6)
        .map(str::trim_start)
        .map(|l| {
            l.strip_prefix("-h, ")
                .or(l.strip_prefix("-V, "))
                .unwrap_or(l)
        })
        .filter(|l| l.starts_with("--"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let known: BTreeSet<&str> = SETTINGS
        .iter()
        .map(|s| s.flag)
        .chain(["--help", "--version"])
        .collect();
    assert_eq!(
        listed, known,
        "flags in --help vs. the flags this test knows"
    );
}

#[tokio::test]
async fn version_names_the_binary() {
    let exited = run_to_exit(gateway(&["--version"], &[]), "--version").await;
    assert_eq!(exited.code, Some(0), "{}", exited.describe());
    assert_eq!(
        exited.stdout.trim(),
        format!("xds-gateway {}", env!("CARGO_PKG_VERSION"))
    );
}

// ---------------------------------------------------------------------------
// Errors name what was wrong
// ---------------------------------------------------------------------------

/// Ports for runs that should fail before binding: if one wrongly starts,
/// it binds these (not 8080/9901) until the exit timeout fails the test.
fn unused_listeners() -> Vec<String> {
    let [rest, admin] = free_ports::<2>();
    vec!["--listen".into(), addr(rest), "--admin".into(), addr(admin)]
}

fn with_unused_listeners<'a>(args: &[&'a str], listeners: &'a [String]) -> Vec<&'a str> {
    args.iter()
        .copied()
        .chain(listeners.iter().map(String::as_str))
        .collect()
}

#[tokio::test]
async fn bad_flag_values_name_the_flag() {
    let listeners = unused_listeners();
    for (args, flag) in [
        (&["--max-wait", "soon"][..], "--max-wait"),
        (&["--idle-timeout", "forever"][..], "--idle-timeout"),
        (&["--max-sessions", "many"][..], "--max-sessions"),
        (&["--session-key", "pod"][..], "--session-key"),
        (&["--no-such-flag"][..], "--no-such-flag"),
    ] {
        let what = format!("xds-gateway {}", args.join(" "));
        let exited = expect_rejected(
            gateway(&with_unused_listeners(args, &listeners), &[]),
            &what,
            &[flag],
        )
        .await;
        // clap's usage error: exit code 2.
        assert_eq!(exited.code, Some(2), "{what}: {}", exited.describe());
    }
    expect_rejected(
        gateway(&["--listen", "nowhere"], &[]),
        "--listen nowhere",
        &["--listen", "nowhere"],
    )
    .await;
}

#[tokio::test]
async fn bad_environment_values_name_the_setting() {
    let listeners = unused_listeners();
    let args = with_unused_listeners(&[], &listeners);
    expect_rejected(
        gateway(&args, &[("XDS_GATEWAY_MAX_WAIT", "soon")]),
        "XDS_GATEWAY_MAX_WAIT=soon",
        &["max-wait", "soon"],
    )
    .await;
    expect_rejected(
        gateway(
            &args,
            &[("XDS_GATEWAY_REWRITE_CONFIG_SOURCES", "sometimes")],
        ),
        "XDS_GATEWAY_REWRITE_CONFIG_SOURCES=sometimes",
        &["rewrite-config-sources", "sometimes"],
    )
    .await;
}

#[tokio::test]
async fn bad_config_files_name_the_key() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let listeners = unused_listeners();
    for (name, text, needles) in [
        (
            "bad-duration.toml",
            "max-wait = \"soon\"\n",
            &["max-wait", "soon"][..],
        ),
        ("unknown-key.toml", "mystery = 1\n", &["mystery"][..]),
        (
            "bad-type.toml",
            "max-sessions = \"many\"\n",
            &["max-sessions"][..],
        ),
        (
            "bad-enum.toml",
            "session-key = \"pod\"\n",
            &["session-key", "pod"][..],
        ),
        (
            "bad-address.toml",
            "admin = \"nowhere\"\n",
            &["admin", "nowhere"][..],
        ),
        ("invalid.toml", "max-sessions = 0\n", &["max-sessions"][..]),
        (
            "wait-over-cap.toml",
            "default-wait = \"2m\"\nmax-wait = \"1m\"\n",
            &["default-wait", "max-wait"][..],
        ),
        (
            "cache-max-age-fraction.toml",
            "cache-max-age = \"1500ms\"\n",
            &["cache-max-age", "whole seconds"][..],
        ),
        (
            "not-toml.toml",
            "listen: 127.0.0.1:1\n",
            &["not-toml.toml"][..],
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write the config file");
        let path = path.to_str().expect("a UTF-8 temporary path");
        // Listen/admin flags win over the file, so nothing binds 8080/9901.
        let args = with_unused_listeners(&["--config", path], &listeners);
        let exited =
            expect_rejected(gateway(&args, &[]), &format!("{name}: {text}"), needles).await;
        // Values that parse but fail validation are named by key, not file.
        let validated = [
            "invalid.toml",
            "wait-over-cap.toml",
            "cache-max-age-fraction.toml",
        ];
        if !validated.contains(&name) {
            assert!(
                exited.stderr.contains(path),
                "{name}: the error does not name the file; {}",
                exited.describe()
            );
        }
    }
    let missing = dir.path().join("missing.toml");
    let missing = missing.to_str().expect("a UTF-8 temporary path");
    expect_rejected(
        gateway(
            &with_unused_listeners(&["--config", missing], &listeners),
            &[],
        ),
        "--config missing.toml",
        &[missing],
    )
    .await;
}

/// Issue 24: a node profile that is not a Node stops start-up, naming the
/// profile and where it was declared; a `[[profile]]` table with an
/// unknown key names the key.
#[tokio::test]
async fn bad_node_profiles_stop_start_up_naming_them() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let profiles = dir.path().join("profiles");
    std::fs::create_dir(&profiles).expect("a profiles directory");
    std::fs::write(
        profiles.join("sidecar.json"),
        r#"{"bootstrap": {"node": {"id": "n", "metdata": {}}}}"#,
    )
    .expect("write a profile");
    let listeners = unused_listeners();
    let dir_arg = profiles.to_str().expect("a UTF-8 temporary path");
    let args = with_unused_listeners(&["--node-profiles", dir_arg], &listeners);
    expect_rejected(
        gateway(&args, &[]),
        "--node-profiles with a misspelt field",
        &["\"sidecar\"", "sidecar.json", "metdata"],
    )
    .await;
    let table = dir.path().join("gw.toml");
    std::fs::write(&table, "[[profile]]\nname = \"edge\"\nclustr = \"edge\"\n")
        .expect("write the config file");
    let args = with_unused_listeners(&["--config", table.to_str().unwrap()], &listeners);
    expect_rejected(
        gateway(&args, &[]),
        "a [[profile]] table with an unknown key",
        &["clustr", "gw.toml"],
    )
    .await;
}

#[tokio::test]
async fn unknown_keys_are_answered_with_the_valid_ones() {
    // The list of valid keys in the error is the file's schema: it must be
    // exactly the keys this test (and examples/xds-gateway.toml) knows.
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("gw.toml");
    std::fs::write(&path, "mystery = 1\n").expect("write the config file");
    let listeners = unused_listeners();
    let args = with_unused_listeners(&["--config", path.to_str().unwrap()], &listeners);
    let exited = expect_rejected(gateway(&args, &[]), "mystery = 1", &["mystery"]).await;
    let (_, list) = exited
        .stderr
        .split_once("expected one of")
        .unwrap_or_else(|| panic!("no list of valid keys; {}", exited.describe()));
    let list = list.lines().next().unwrap_or_default();
    let valid: BTreeSet<&str> = list
        .split(',')
        .map(|k| k.trim().trim_matches('`'))
        .filter(|k| !k.is_empty())
        .collect();
    // A repeatable flag's singular name is accepted as an alias of its key;
    // `[[profile]]` tables have no flag (examples/profiles/profiles.toml).
    let mut expected = file_keys();
    expected.extend(["descriptor-set", "extra-type", "upstream-header", "profile"]);
    assert_eq!(valid, expected, "keys the config file accepts");
}

/// A REST listener off loopback without TLS and without an auth policy is
/// refused at start-up, before anything binds (so this test binds nothing
/// but loopback), unless --allow-insecure-listen says the network is trusted.
#[tokio::test]
async fn an_unprotected_non_loopback_listener_is_refused() {
    let [port] = free_ports::<1>();
    let wildcard = format!("0.0.0.0:{port}");
    let [admin] = free_ports::<1>();
    let admin = addr(admin);
    for (args, env) in [
        (
            vec!["--listen", wildcard.as_str(), "--admin", admin.as_str()],
            vec![],
        ),
        (
            vec!["--admin", admin.as_str()],
            vec![("XDS_GATEWAY_LISTEN", wildcard.as_str())],
        ),
    ] {
        expect_rejected(
            gateway(&args, &env),
            "a non-loopback --listen without TLS or a policy",
            &[
                "listen",
                &wildcard,
                "--allow-insecure-listen",
                "--tls-cert",
                "--auth-policy",
            ],
        )
        .await;
    }
}

/// Finding 8 of issue 20: off loopback, --allow-secrets with server-only
/// TLS (which does not say who the client is) is refused at start-up,
/// before anything binds: it needs an auth policy or required mTLS. The
/// certificate files need not exist: validation refuses before reading them.
#[tokio::test]
async fn secrets_off_loopback_with_server_only_tls_are_refused() {
    let [port, admin] = free_ports::<2>();
    let wildcard = format!("0.0.0.0:{port}");
    let admin = addr(admin);
    let tls = [
        "--tls-cert",
        "missing-cert.pem",
        "--tls-key",
        "missing-key.pem",
    ];
    let mut args = vec!["--listen", wildcard.as_str(), "--admin", admin.as_str()];
    args.extend(tls);
    for (args, env) in [
        ([&args[..], &["--allow-secrets"][..]].concat(), vec![]),
        (args.clone(), vec![("XDS_GATEWAY_ALLOW_SECRETS", "true")]),
        (
            [
                &args[..],
                &["--allow-secrets", "--allow-insecure-listen"][..],
            ]
            .concat(),
            vec![],
        ),
    ] {
        let exited = expect_rejected(
            gateway(&args, &env),
            "--allow-secrets off loopback with server-only TLS",
            &["allow-secrets", &wildcard, "--auth-policy", "--client-ca"],
        )
        .await;
        assert!(
            !exited.stderr.contains("missing-cert.pem"),
            "refused by validation, before the certificate is read; {}",
            exited.describe()
        );
    }
}

/// Issue 38, finding 2: `--session-key cluster` serves every node of a
/// cluster what the upstream made for the first, so it is refused with
/// `--allow-secrets`, and with an auth policy whose rules name nodes.
#[tokio::test]
async fn cluster_sessions_with_secrets_or_node_rules_are_refused() {
    let listeners = unused_listeners();
    let args = with_unused_listeners(&["--session-key", "cluster", "--allow-secrets"], &listeners);
    expect_rejected(
        gateway(&args, &[]),
        "--session-key cluster with --allow-secrets",
        &["session-key", "--allow-secrets", "--session-key node"],
    )
    .await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[[principal]]\nname = \"edge\"\ntoken-sha256 = [\"0000000000000000000000000000000000000000000000000000000000000000\"]\n\
         [[principal.allow]]\nnodes = [\"edge-2\"]\nclusters = [\"edge\"]\n",
    )
    .expect("write the policy");
    let policy = policy.to_str().expect("a UTF-8 path");
    let args = with_unused_listeners(
        &["--session-key", "cluster", "--auth-policy", policy],
        &listeners,
    );
    expect_rejected(
        gateway(&args, &[]),
        "--session-key cluster with a policy naming nodes",
        &["--session-key cluster", "edge-2", "nodes = [\"*\"]"],
    )
    .await;
}

#[tokio::test]
async fn upstream_and_snapshot_together_are_refused() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let snapshot = dir.path().to_str().expect("a UTF-8 temporary path");
    let listeners = unused_listeners();
    let needles = ["--upstream", "--snapshot"];
    expect_rejected(
        gateway(
            &with_unused_listeners(
                &[
                    "--upstream",
                    "grpc://127.0.0.1:18000",
                    "--snapshot",
                    snapshot,
                ],
                &listeners,
            ),
            &[],
        ),
        "--upstream and --snapshot flags",
        &needles,
    )
    .await;
    // The same from different places: environment upstream, file snapshot.
    let file = dir.path().join("gw.toml");
    std::fs::write(&file, format!("snapshot = {snapshot:?}\n")).expect("write the config file");
    expect_rejected(
        gateway(
            &with_unused_listeners(&["--config", file.to_str().unwrap()], &listeners),
            &[("XDS_GATEWAY_UPSTREAM", "grpc://127.0.0.1:18000")],
        ),
        "XDS_GATEWAY_UPSTREAM and a file snapshot",
        &needles,
    )
    .await;
}

// ---------------------------------------------------------------------------
// Precedence: flags > environment > file
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
enum Winner {
    Flag,
    Env,
    File,
}

#[tokio::test]
async fn listen_address_precedence_is_flag_then_env_then_file() {
    let dir = tempfile::tempdir().expect("temporary directory");
    for (with_env, with_flag, winner) in [
        (true, true, Winner::Flag),
        (true, false, Winner::Env),
        (false, false, Winner::File),
    ] {
        let mut started = None;
        for _ in 0..START_ATTEMPTS {
            let [file_port, env_port, flag_port, admin] = free_ports::<4>();
            let file = dir.path().join(format!("listen-{admin}.toml"));
            std::fs::write(&file, format!("listen = \"{}\"\n", addr(file_port)))
                .expect("write the config file");
            let listen_flag = addr(flag_port);
            let admin_flag = addr(admin);
            let mut args = vec!["--config", file.to_str().unwrap(), "--admin", &admin_flag];
            if with_flag {
                args.extend(["--listen", listen_flag.as_str()]);
            }
            let env_value = addr(env_port);
            let env: Vec<(&str, &str)> = if with_env {
                vec![("XDS_GATEWAY_LISTEN", env_value.as_str())]
            } else {
                Vec::new()
            };
            let what = format!(
                "listen in the file{}{}: the {winner:?} should win",
                if with_env { ", XDS_GATEWAY_LISTEN" } else { "" },
                if with_flag { ", --listen" } else { "" },
            );
            let expected = match winner {
                Winner::Flag => flag_port,
                Winner::Env => env_port,
                Winner::File => file_port,
            };
            if let Ok(guard) = start(gateway(&args, &env), dir.path(), admin, &what).await {
                started = Some((guard, expected, what));
                break;
            }
        }
        let (guard, expected, what) =
            started.unwrap_or_else(|| panic!("no free ports in {START_ATTEMPTS} attempts"));
        // The start-up log names the REST address it bound ...
        let log = guard.log_text();
        assert!(
            log.contains(&format!("rest={}", addr(expected))),
            "{what}: expected the REST listener on {}; the start-up log says:\n{log}",
            addr(expected)
        );
        // ... and the REST listener (the only one besides admin) answers
        // there, so it is on none of the other addresses.
        let (status, body) = get(expected, "/").await;
        assert!(
            status == 200 && body.starts_with("xds-gateway:"),
            "{what}: GET / on {expected}: {status} {body}"
        );
        drop(guard);
    }
}

/// A boolean set in the file can be turned off from a higher-precedence
/// source: `XDS_GATEWAY_ALLOW_SECRETS=false` wins over `allow-secrets = true`.
#[tokio::test]
async fn environment_false_overrides_a_file_true() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("secrets.toml");
    std::fs::write(&file, "allow-secrets = true\n").expect("write the config file");
    for _ in 0..START_ATTEMPTS {
        let [rest, admin] = free_ports::<2>();
        let (rest_flag, admin_flag) = (addr(rest), addr(admin));
        let args = [
            "--config",
            file.to_str().unwrap(),
            "--listen",
            &rest_flag,
            "--admin",
            &admin_flag,
        ];
        let command = gateway(&args, &[("XDS_GATEWAY_ALLOW_SECRETS", "false")]);
        let Ok(guard) = start(command, dir.path(), admin, "allow-secrets").await else {
            continue;
        };
        let (status, body) = get(rest, "/v3/discovery:secrets?node=n&names=s").await;
        assert_eq!(
            status, 403,
            "secrets served although the environment says false: {body}"
        );
        drop(guard);
        return;
    }
    panic!("no free ports in {START_ATTEMPTS} attempts");
}

// ---------------------------------------------------------------------------
// The sample config file
// ---------------------------------------------------------------------------

const SAMPLE: &str = "examples/xds-gateway.toml";
/// Keys whose default is "not set": the sample shows them commented out.
const NO_DEFAULT: &[&str] = &[
    "upstream",
    "snapshot",
    "tls-cert",
    "tls-key",
    "client-ca",
    "client-auth",
    "admin-tls-cert",
    "admin-tls-key",
    "admin-client-ca",
    "admin-client-auth",
    "auth-policy",
    "history-file",
    "upstream-ca",
    "upstream-cert",
    "upstream-key",
    "upstream-tls-server-name",
    "trusted-proxies",
    "node-profiles",
];

#[test]
fn sample_config_has_every_key_documented_at_its_default() {
    let text =
        std::fs::read_to_string(manifest_path(SAMPLE)).unwrap_or_else(|e| panic!("{SAMPLE}: {e}"));
    let table: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{SAMPLE}: {e}"));
    let lines: Vec<&str> = text.lines().collect();
    let d = Config::default();
    for key in file_keys() {
        // The line setting it, or a commented-out example of it.
        let set = lines
            .iter()
            .position(|l| l.starts_with(&format!("{key} = ")));
        let commented = lines
            .iter()
            .position(|l| l.starts_with(&format!("# {key} = ")));
        let at = set
            .or(commented)
            .unwrap_or_else(|| panic!("{SAMPLE} does not mention {key}"));
        assert!(
            at > 0 && lines[at - 1].starts_with('#') && lines[at - 1] != "#",
            "{SAMPLE}: {key} has no comment above it explaining it"
        );
        let Some(value) = table.get(key) else {
            assert!(
                NO_DEFAULT.contains(&key),
                "{SAMPLE}: only keys without a default ({NO_DEFAULT:?}) may be commented out, not {key}"
            );
            continue;
        };
        let duration = || {
            humantime::parse_duration(value.as_str().unwrap_or_else(|| panic!("{key}: {value}")))
                .unwrap_or_else(|e| panic!("{SAMPLE}: {key}: {e}"))
        };
        let integer = || {
            value
                .as_integer()
                .unwrap_or_else(|| panic!("{SAMPLE}: {key} is not an integer"))
        };
        let address = || {
            value
                .as_str()
                .and_then(|v| v.parse::<SocketAddr>().ok())
                .unwrap_or_else(|| panic!("{SAMPLE}: {key} is not an address"))
        };
        let same = match key {
            "upstream-mode" => {
                value.clone().try_into::<UpstreamMode>().ok() == Some(d.upstream_mode)
            }
            "upstream-streams" => {
                value.clone().try_into::<UpstreamStreams>().ok() == Some(d.upstream_streams)
            }
            "upstream-headers" => {
                value.as_array().is_some_and(|a| a.is_empty()) && d.upstream_headers.is_empty()
            }
            "forwarded-header" => {
                value.clone().try_into::<ForwardedHeader>().ok() == Some(d.forwarded_header)
            }
            "allowed-hosts" => {
                value.as_array().is_some_and(|a| a.is_empty()) && d.allowed_hosts.is_empty()
            }
            "upstream-keepalive" => duration() == d.upstream_keepalive,
            "upstream-node-first-only" => value.as_bool() == Some(d.upstream_node_first_only),
            "fetch-cache-ttl" => duration() == d.fetch_cache_ttl,
            "listen" => address() == d.listen,
            "admin" => address() == d.admin,
            "session-key" => value.clone().try_into::<SessionKey>().ok() == Some(d.session_key),
            "idle-timeout" => duration() == d.idle_timeout,
            "max-sessions" => integer() == d.max_sessions as i64,
            "first-response-timeout" => duration() == d.first_response_timeout,
            "default-wait" => duration() == d.default_wait,
            "max-wait" => duration() == d.max_wait,
            "cache-max-age" => duration() == d.cache_max_age,
            "rewrite-config-sources" => {
                value.clone().try_into::<RewritePolicy>().ok() == Some(d.rewrite_config_sources)
            }
            "refresh-delay" => duration() == d.refresh_delay,
            "request-timeout" => duration() == d.request_timeout,
            "validate" => value.clone().try_into::<Validation>().ok() == Some(d.validate),
            "log-format" => value.clone().try_into::<LogFormat>().ok() == Some(d.log_format),
            "rejection-threshold" => integer() == i64::from(d.rejection_threshold),
            "forward-rejections" => value.as_bool() == Some(d.forward_rejections),
            "make-before-break" => duration() == d.make_before_break,
            "allow-secrets" => value.as_bool() == Some(d.allow_secrets),
            "max-body-bytes" => integer() == d.max_body_bytes as i64,
            "allow-insecure-listen" => value.as_bool() == Some(d.allow_insecure_listen),
            "allow-insecure-admin" => value.as_bool() == Some(d.allow_insecure_admin),
            "max-connections" => integer() == d.max_connections as i64,
            "source-connection-share" => integer() == i64::from(d.source_connection_share),
            "max-long-polls" => integer() == d.max_long_polls as i64,
            "max-watches" => integer() == d.max_watches as i64,
            "principal-share" => integer() == i64::from(d.principal_share),
            "watch-heartbeat" => duration() == d.watch_heartbeat,
            "max-streams-per-connection" => integer() == i64::from(d.max_streams_per_connection),
            "header-read-timeout" => duration() == d.header_read_timeout,
            "body-read-timeout" => duration() == d.body_read_timeout,
            "keep-alive-timeout" => duration() == d.keep_alive_timeout,
            "drain-timeout" => duration() == d.drain_timeout,
            "max-node-bytes" => integer() == d.max_node_bytes as i64,
            "max-session-bytes" => integer() == d.max_session_bytes as i64,
            "memory-budget-bytes" => integer() == d.memory_budget_bytes as i64,
            "history-max-bytes" => integer() == d.history_max_bytes as i64,
            "history-file-max-bytes" => integer() == d.history_file_max_bytes as i64,
            "max-names-per-request" => integer() == d.max_names_per_request as i64,
            "max-names-per-session" => integer() == d.max_names_per_session as i64,
            "max-upstream-message-bytes" => integer() == d.max_upstream_message_bytes as i64,
            "descriptor-sets" => {
                value.as_array().is_some_and(|a| a.is_empty()) && d.descriptor_sets.is_empty()
            }
            "extra-types" => {
                value.as_array().is_some_and(|a| a.is_empty()) && d.extra_types.is_empty()
            }
            "upstream-reflection" => value.as_bool() == Some(d.upstream_reflection),
            other => panic!("{SAMPLE}: no default known for {other}: add it to this test"),
        };
        assert!(same, "{SAMPLE}: {key} = {value} is not the default");
    }
    let unknown: Vec<&String> = table
        .keys()
        .filter(|k| !file_keys().contains(k.as_str()))
        .collect();
    assert!(unknown.is_empty(), "{SAMPLE}: unknown keys {unknown:?}");
}

#[tokio::test]
async fn sample_config_loads_and_serves_the_demo() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let sample = manifest_path(SAMPLE);
    for _ in 0..START_ATTEMPTS {
        let [rest, admin] = free_ports::<2>();
        let (rest_flag, admin_flag) = (addr(rest), addr(admin));
        let args = [
            "--config",
            sample.to_str().unwrap(),
            "--listen",
            &rest_flag,
            "--admin",
            &admin_flag,
        ];
        let Ok(guard) = start(gateway(&args, &[]), dir.path(), admin, SAMPLE).await else {
            continue;
        };
        let ready = eventually(START_TIMEOUT, POLL_INTERVAL, || async move {
            match http_get(admin, "/readyz").await {
                Ok((200, body)) => Some(body),
                _ => None,
            }
        })
        .await;
        let Some(body) = ready else {
            guard.print_log();
            panic!("{SAMPLE}: /readyz never answered 200");
        };
        let json: serde_json::Value = serde_json::from_str(&body).expect("/readyz is JSON");
        assert_eq!(json["ready"], true, "{body}");
        assert!(
            json["source"]
                .as_str()
                .is_some_and(|s| s.contains("embedded demo")),
            "{body}"
        );
        let (status, body) = get(rest, "/v3/discovery:clusters?node=demo").await;
        assert_eq!(status, 200, "{body}");
        drop(guard);
        return;
    }
    panic!("no free ports in {START_ATTEMPTS} attempts");
}

// ---------------------------------------------------------------------------
// A snapshot directory that never loads
// ---------------------------------------------------------------------------

/// Line 4 is indented under a scalar: a YAML error on line 4.
const BROKEN_YAML: &str = "'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster\n\
name: broken\n\
connect_timeout: 1s\n  type: EDS\n";

#[tokio::test]
async fn broken_snapshot_starts_unready_and_says_where() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let snapshot = dir.path().join("snapshot");
    std::fs::create_dir(&snapshot).expect("create the snapshot directory");
    let broken = snapshot.join("broken.yaml");
    std::fs::write(&broken, BROKEN_YAML).expect("write the broken file");
    for _ in 0..START_ATTEMPTS {
        let [rest, admin] = free_ports::<2>();
        let (rest_flag, admin_flag) = (addr(rest), addr(admin));
        let args = [
            "--snapshot",
            snapshot.to_str().unwrap(),
            "--listen",
            &rest_flag,
            "--admin",
            &admin_flag,
        ];
        let Ok(mut guard) = start(gateway(&args, &[]), dir.path(), admin, "broken snapshot").await
        else {
            continue;
        };
        let (status, body) = get(admin, "/readyz").await;
        assert_eq!(
            status, 503,
            "/readyz of a snapshot that never loaded: {body}"
        );
        let json: serde_json::Value = serde_json::from_str(&body).expect("/readyz is JSON");
        assert_eq!(json["ready"], false, "{body}");
        let problems = json["problems"].as_array().cloned().unwrap_or_default();
        let where_ = format!("{}:4", broken.display());
        assert!(
            problems
                .iter()
                .any(|p| p.as_str().is_some_and(|p| p.contains(&where_))),
            "/readyz problems do not name {where_}: {body}"
        );
        // Still serving: the process is up and REST answers.
        assert!(guard.try_exit_status().is_none(), "the gateway exited");
        let (status, _) = get(rest, "/").await;
        assert_eq!(status, 200);
        drop(guard);
        return;
    }
    panic!("no free ports in {START_ATTEMPTS} attempts");
}

/// A wrong upstream shows at start-up, before any client polls: the
/// gateway connects once and logs why it cannot; a bare HOST:PORT is said
/// to mean plaintext. With `--log-format json` every line is a JSON object.
#[tokio::test]
async fn an_unreachable_upstream_is_logged_at_start_up() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let closed = free_port();
    let upstream = format!("127.0.0.1:{closed}");
    for _ in 0..START_ATTEMPTS {
        let [rest, admin] = free_ports::<2>();
        let (rest_flag, admin_flag) = (addr(rest), addr(admin));
        let args = [
            "--upstream",
            &upstream,
            "--listen",
            &rest_flag,
            "--admin",
            &admin_flag,
        ];
        let env = [("XDS_GATEWAY_LOG_FORMAT", "json")];
        let Ok(guard) = start(gateway(&args, &env), dir.path(), admin, "dead upstream").await
        else {
            continue;
        };
        let logged = eventually(START_TIMEOUT, POLL_INTERVAL, || {
            let log = guard.log_text();
            async move { log.contains("cannot reach the upstream").then_some(log) }
        })
        .await;
        let Some(log) = logged else {
            guard.print_log();
            panic!("no start-up line about the unreachable upstream");
        };
        assert!(log.contains("Connection refused"), "{log}");
        assert!(log.contains("has no scheme"), "{log}");
        for line in log.lines().filter(|l| !l.trim().is_empty()) {
            let parsed: Result<serde_json::Value, _> = serde_json::from_str(line);
            assert!(
                parsed.is_ok_and(|v| v["level"].is_string() && v["fields"].is_object()),
                "not a JSON log line: {line}"
            );
        }
        drop(guard);
        return;
    }
    panic!("no free ports in {START_ATTEMPTS} attempts");
}
