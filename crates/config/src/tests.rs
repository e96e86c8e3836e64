//! Merging, precedence and validation of the configuration.

use clap::Parser;

use super::*;

fn cli(args: &[&str]) -> Settings {
    Settings::try_parse_from(std::iter::once("xds-gateway").chain(args.iter().copied())).unwrap()
}

#[test]
fn defaults_are_loopback() {
    let c = Config::from_settings(Settings::default()).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(c.admin.to_string(), "127.0.0.1:9901");
    assert_eq!(c.idle_timeout, Duration::from_secs(300));
}

#[test]
fn flags_override_file_which_overrides_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.toml");
    std::fs::write(
        &path,
        "upstream = \"grpc://127.0.0.1:1\"\nmax-wait = \"10s\"\nidle-timeout = \"1m\"\n",
    )
    .unwrap();
    let c = Config::from_settings(cli(&[
        "--config",
        path.to_str().unwrap(),
        "--max-wait",
        "20s",
    ]))
    .unwrap();
    assert_eq!(c.upstream.as_deref(), Some("http://127.0.0.1:1"));
    assert_eq!(c.max_wait, Duration::from_secs(20));
    assert_eq!(c.idle_timeout, Duration::from_secs(60));
}

#[test]
fn bad_file_values_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.toml");
    std::fs::write(&path, "max-wait = \"soon\"\n").unwrap();
    let err = Config::from_settings(cli(&["--config", path.to_str().unwrap()])).unwrap_err();
    assert!(err.to_string().contains("max-wait"), "{err}");
    std::fs::write(&path, "mystery = 1\n").unwrap();
    let err = Config::from_settings(cli(&["--config", path.to_str().unwrap()])).unwrap_err();
    assert!(err.to_string().contains("mystery"), "{err}");
}

#[test]
fn upstream_headers_and_tls_rules() {
    let c = Config::from_settings(cli(&[
        "--upstream",
        "grpc://127.0.0.1:1",
        "--upstream-header",
        "X-Consul-Token: abc",
        "--upstream-header",
        "tenant=t1",
    ]))
    .unwrap();
    assert_eq!(
        c.upstream_headers,
        [
            ("x-consul-token".to_string(), "abc".to_string()),
            ("tenant".to_string(), "t1".to_string())
        ]
    );
    assert!(Config::from_settings(cli(&[
        "--upstream",
        "grpc://127.0.0.1:1",
        "--upstream-header",
        "nocolon"
    ]))
    .is_err());
    let err = Config::from_settings(cli(&[
        "--upstream",
        "grpc://127.0.0.1:1",
        "--upstream-ca",
        "ca.pem",
    ]))
    .unwrap_err();
    assert!(err.to_string().contains("https"), "{err}");
    assert!(Config::from_settings(cli(&[
        "--upstream",
        "grpcs://cp:443",
        "--upstream-cert",
        "c.pem"
    ]))
    .is_err());
    assert!(Config::from_settings(cli(&[
        "--upstream",
        "grpcs://cp:443",
        "--upstream-ca",
        "ca.pem"
    ]))
    .is_ok());
}

#[test]
fn upstream_forms() {
    assert_eq!(
        normalise_upstream("grpcs://cp:443").unwrap(),
        "https://cp:443"
    );
    assert_eq!(
        normalise_upstream("127.0.0.1:18000").unwrap(),
        "http://127.0.0.1:18000"
    );
    assert!(normalise_upstream("ftp://x:1").is_err());
    assert!(normalise_upstream("grpc://nohost").is_err());
}

#[test]
fn a_bare_upstream_with_tls_settings_is_refused() {
    let err = Config::from_settings(cli(&[
        "--upstream",
        "cp.example:443",
        "--upstream-ca",
        "ca.pem",
    ]))
    .unwrap_err();
    assert!(err.to_string().contains("grpcs://cp.example:443"), "{err}");
    let plain = Config::from_settings(cli(&["--upstream", "127.0.0.1:7999"])).unwrap();
    assert_eq!(plain.upstream.as_deref(), Some("http://127.0.0.1:7999"));
    assert!(plain.warnings.iter().any(|w| w.contains("plaintext")));
    let schemed = Config::from_settings(cli(&["--upstream", "grpc://127.0.0.1:7999"])).unwrap();
    assert!(schemed.warnings.is_empty(), "{:?}", schemed.warnings);
}

#[test]
fn request_timeout_covers_the_first_response_bound() {
    let err = Config::from_settings(cli(&["--first-response-timeout", "20s"])).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("request-timeout") && message.contains("20s"),
        "{message}"
    );
    let c = Config::from_settings(cli(&[
        "--first-response-timeout",
        "20s",
        "--request-timeout",
        "25s",
    ]))
    .unwrap();
    assert_eq!(c.request_timeout, Duration::from_secs(25));
}

#[test]
fn rest_tls_files_go_together() {
    let c = Config::from_settings(cli(&[
        "--tls-cert",
        "c.pem",
        "--tls-key",
        "k.pem",
        "--client-ca",
        "ca.pem",
    ]))
    .unwrap();
    let tls = c.tls.unwrap();
    assert_eq!(
        tls.client_auth,
        ClientAuth::Required,
        "mTLS requires by default"
    );
    assert_eq!(tls.client_ca.unwrap().to_str(), Some("ca.pem"));
    for (args, key) in [
        (&["--tls-cert", "c.pem"][..], "tls-cert"),
        (&["--tls-key", "k.pem"][..], "tls-cert"),
        (&["--client-ca", "ca.pem"][..], "client-ca"),
        (
            &[
                "--tls-cert",
                "c.pem",
                "--tls-key",
                "k.pem",
                "--client-auth",
                "optional",
            ][..],
            "client-auth",
        ),
    ] {
        let err = Config::from_settings(cli(args)).unwrap_err();
        assert!(err.to_string().starts_with(key), "{args:?}: {err}");
    }
}

#[test]
fn admin_tls_files_go_together_and_stand_apart_from_rest() {
    let c = Config::from_settings(cli(&[
        "--admin-tls-cert",
        "a.pem",
        "--admin-tls-key",
        "ak.pem",
    ]))
    .unwrap();
    let admin = c.admin_tls.unwrap();
    assert_eq!(admin.cert.to_str(), Some("a.pem"));
    assert_eq!(
        admin.client_ca, None,
        "admin TLS asks for no client certificate"
    );
    assert!(c.tls.is_none(), "REST stays plaintext");
    for args in [
        &["--admin-tls-cert", "a.pem"][..],
        &["--admin-tls-key", "ak.pem"],
    ] {
        let err = Config::from_settings(cli(args)).unwrap_err();
        assert!(
            err.to_string().starts_with("admin-tls-cert"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn admin_mtls_needs_admin_tls_and_stands_apart_from_rest() {
    let c = Config::from_settings(cli(&[
        "--admin-tls-cert",
        "a.pem",
        "--admin-tls-key",
        "ak.pem",
        "--admin-client-ca",
        "admin-ca.pem",
    ]))
    .unwrap();
    let admin = c.admin_tls.unwrap();
    assert_eq!(admin.client_ca.unwrap().to_str(), Some("admin-ca.pem"));
    assert_eq!(
        admin.client_auth,
        ClientAuth::Required,
        "mTLS requires by default"
    );
    assert!(c.tls.is_none(), "REST stays plaintext");
    let optional = Config::from_settings(cli(&[
        "--admin-tls-cert",
        "a.pem",
        "--admin-tls-key",
        "ak.pem",
        "--admin-client-ca",
        "admin-ca.pem",
        "--admin-client-auth",
        "optional",
    ]))
    .unwrap();
    assert_eq!(
        optional.admin_tls.unwrap().client_auth,
        ClientAuth::Optional
    );
    // The REST listener's client CA is not the admin's.
    let rest = Config::from_settings(cli(&[
        "--admin-tls-cert",
        "a.pem",
        "--admin-tls-key",
        "ak.pem",
        "--tls-cert",
        "c.pem",
        "--tls-key",
        "k.pem",
        "--client-ca",
        "ca.pem",
    ]))
    .unwrap();
    assert_eq!(rest.admin_tls.unwrap().client_ca, None);
    for (args, key) in [
        (
            &["--admin-client-ca", "admin-ca.pem"][..],
            "admin-client-ca",
        ),
        (
            &[
                "--tls-cert",
                "c.pem",
                "--tls-key",
                "k.pem",
                "--admin-client-ca",
                "ca.pem",
            ][..],
            "admin-client-ca",
        ),
        (
            &[
                "--admin-tls-cert",
                "a.pem",
                "--admin-tls-key",
                "ak.pem",
                "--admin-client-auth",
                "optional",
            ][..],
            "admin-client-auth",
        ),
    ] {
        let err = Config::from_settings(cli(args)).unwrap_err();
        assert!(err.to_string().starts_with(key), "{args:?}: {err}");
    }
}

#[test]
fn trusted_proxies_are_cidrs_addresses_or_none() {
    let c = Config::from_settings(cli(&["--trusted-proxies", "10.0.0.0/8,127.0.0.1,fd00::/8"]))
        .unwrap();
    let proxies = c.trusted_proxies.unwrap();
    for (ip, trusted) in [
        ("10.1.2.3", true),
        ("127.0.0.1", true),
        ("127.0.0.2", false),
        ("fd12::1", true),
        ("::ffff:10.9.9.9", true),
        ("192.0.2.1", false),
    ] {
        assert_eq!(proxies.contains(ip.parse().unwrap()), trusted, "{ip}");
    }
    let none = Config::from_settings(cli(&["--trusted-proxies", "none"])).unwrap();
    assert!(none.trusted_proxies.unwrap().is_empty());
    assert!(Config::from_settings(Settings::default())
        .unwrap()
        .trusted_proxies
        .is_none());
    for bad in ["10.0.0.0/33", "proxy.example", "none,10.0.0.0/8", ""] {
        let err = Config::from_settings(cli(&["--trusted-proxies", bad])).unwrap_err();
        assert!(
            err.to_string().starts_with("trusted-proxies"),
            "{bad}: {err}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.toml");
    std::fs::write(&path, "trusted-proxies = []\n").unwrap();
    let file = Config::from_settings(cli(&["--config", path.to_str().unwrap()])).unwrap();
    assert_eq!(file.trusted_proxies, Some(TrustedProxies::default()));
}

#[test]
fn forwarding_rejections_off_loopback_needs_trusted_proxies() {
    let off = [
        "--listen",
        "0.0.0.0:8080",
        "--allow-insecure-listen",
        "--forward-rejections",
    ];
    let with = |extra: &[&'static str]| {
        let args: Vec<&str> = off.iter().chain(extra).copied().collect();
        Config::from_settings(cli(&args))
    };
    let err = with(&[]).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("forward-rejections"), "{text}");
    assert!(text.contains("--trusted-proxies"), "{text}");
    assert!(with(&["--trusted-proxies", "10.0.0.0/8"]).is_ok());
    assert!(with(&["--trusted-proxies", "none"]).is_ok());
    assert!(
        Config::from_settings(cli(&["--forward-rejections"])).is_ok(),
        "loopback"
    );
    assert!(Config::from_settings(cli(&[
        "--listen",
        "0.0.0.0:8080",
        "--allow-insecure-listen"
    ]))
    .is_ok());
}

#[test]
fn a_listener_off_loopback_needs_tls_a_policy_or_a_flag() {
    let off = ["--listen", "0.0.0.0:8080"];
    let err = Config::from_settings(cli(&off)).unwrap_err();
    assert!(err.to_string().contains("--allow-insecure-listen"), "{err}");
    let with = |extra: &[&'static str]| {
        let args: Vec<&str> = off.iter().chain(extra).copied().collect();
        Config::from_settings(cli(&args))
    };
    assert!(with(&["--allow-insecure-listen"]).is_ok());
    assert!(with(&["--auth-policy", "policy.toml"]).is_ok());
    assert!(with(&["--tls-cert", "c.pem", "--tls-key", "k.pem"]).is_ok());
    assert!(Config::from_settings(cli(&["--listen", "[::1]:8080"])).is_ok());
}

/// Off loopback, --allow-secrets needs a policy or
/// required mTLS; server-only TLS (or an "insecure" flag) is not enough.
#[test]
fn secrets_off_loopback_need_a_policy_or_required_mtls() {
    let tls = ["--tls-cert", "c.pem", "--tls-key", "k.pem"];
    let with = |listen: &'static str, extra: &[&'static str]| {
        let args: Vec<&str> = ["--listen", listen, "--allow-secrets"]
            .iter()
            .chain(extra)
            .copied()
            .collect();
        Config::from_settings(cli(&args))
    };
    for refused in [
        &tls[..],
        &["--allow-insecure-listen"],
        &[
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--client-ca",
            "ca.pem",
            "--client-auth",
            "optional",
        ],
    ] {
        for listen in ["0.0.0.0:8080", "10.0.0.1:8080", "[::]:8080"] {
            let err = with(listen, refused).unwrap_err();
            let text = err.to_string();
            assert!(text.starts_with("allow-secrets: "), "{refused:?}: {text}");
            for needle in ["--auth-policy", "--client-ca", listen] {
                assert!(text.contains(needle), "{refused:?}: {text}");
            }
        }
    }
    let accepted: [&[&str]; 3] = [
        &["--auth-policy", "policy.toml"],
        &[
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--auth-policy",
            "policy.toml",
        ],
        &[
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--client-ca",
            "ca.pem",
        ],
    ];
    for args in accepted {
        assert!(with("0.0.0.0:8080", args).is_ok(), "{args:?}");
    }
    // On loopback, nothing more is asked; without --allow-secrets, the
    // listener rule alone.
    assert!(with("127.0.0.1:8080", &[]).is_ok());
    assert!(with("[::1]:8080", &[]).is_ok());
    let plain: Vec<&str> = ["--listen", "0.0.0.0:8080"]
        .iter()
        .chain(&tls)
        .copied()
        .collect();
    assert!(Config::from_settings(cli(&plain)).is_ok());
}

/// Sessions keyed by cluster serve every node of a
/// cluster what the upstream made for the first, so they never serve
/// secrets, on loopback or off it, with a policy or without.
#[test]
fn cluster_sessions_and_secrets_are_refused_together() {
    for extra in [
        &[][..],
        &["--auth-policy", "policy.toml"][..],
        &["--listen", "0.0.0.0:8080", "--auth-policy", "policy.toml"][..],
    ] {
        let args: Vec<&str> = ["--session-key", "cluster", "--allow-secrets"]
            .iter()
            .chain(extra)
            .copied()
            .collect();
        let text = Config::from_settings(cli(&args)).unwrap_err().to_string();
        assert!(text.starts_with("session-key: "), "{extra:?}: {text}");
        assert!(text.contains("--allow-secrets"), "{text}");
        assert!(text.contains("--session-key node"), "{text}");
    }
    assert!(Config::from_settings(cli(&["--session-key", "cluster"])).is_ok());
    assert!(Config::from_settings(cli(&["--session-key", "node", "--allow-secrets"])).is_ok());
}

/// Off loopback with --allow-secrets, the admin
/// listener needs a credential (admin client certificates, or a policy,
/// whose admin token is checked when it is loaded).
#[test]
fn an_admin_listener_off_loopback_with_secrets_needs_a_credential() {
    let with = |extra: &[&'static str]| {
        let args: Vec<&str> = ["--admin", "0.0.0.0:9901", "--allow-secrets"]
            .iter()
            .chain(extra)
            .copied()
            .collect();
        Config::from_settings(cli(&args))
    };
    let text = with(&[]).unwrap_err().to_string();
    assert!(text.starts_with("admin: "), "{text}");
    for needle in ["0.0.0.0:9901", "--auth-policy", "--admin-client-ca"] {
        assert!(text.contains(needle), "{text}");
    }
    assert!(with(&["--auth-policy", "policy.toml"]).is_ok());
    let mtls = [
        "--admin-tls-cert",
        "a.pem",
        "--admin-tls-key",
        "k.pem",
        "--admin-client-ca",
        "ca.pem",
    ];
    assert!(with(&mtls).is_ok());
    assert!(Config::from_settings(cli(&["--admin", "0.0.0.0:9901"])).is_ok());
    assert!(Config::from_settings(cli(&["--admin", "[::1]:9901", "--allow-secrets"])).is_ok());
}

#[test]
fn limits_are_validated() {
    for (args, key) in [
        (&["--max-connections", "0"][..], "max-connections"),
        (&["--header-read-timeout", "0s"][..], "header-read-timeout"),
        (
            &[
                "--max-names-per-request",
                "10",
                "--max-names-per-session",
                "5",
            ][..],
            "max-names-per-session",
        ),
        (
            &["--max-node-bytes", "4096", "--max-session-bytes", "1024"][..],
            "max-session-bytes",
        ),
    ] {
        let err = Config::from_settings(cli(args)).unwrap_err();
        assert!(err.to_string().starts_with(key), "{args:?}: {err}");
    }
}

#[test]
fn per_type_streams_are_for_the_stream_modes() {
    let config = |upstream_mode, upstream_streams| Config {
        upstream: Some("http://127.0.0.1:18000".into()),
        upstream_mode,
        upstream_streams,
        ..Config::default()
    };
    for mode in [UpstreamMode::Sotw, UpstreamMode::Delta, UpstreamMode::Auto] {
        assert!(
            config(mode, UpstreamStreams::PerType).validate().is_ok(),
            "{mode:?}"
        );
    }
    let err = config(UpstreamMode::Fetch, UpstreamStreams::PerType)
        .validate()
        .unwrap_err();
    assert!(
        err.to_string().contains("fetch mode opens no stream"),
        "{err}"
    );
}

#[test]
fn cache_max_age_is_whole_seconds_up_to_an_hour() {
    let config = |cache_max_age| Config {
        cache_max_age,
        ..Config::default()
    };
    for ok in [0, 1, 30, 3600] {
        assert!(config(Duration::from_secs(ok)).validate().is_ok(), "{ok}");
    }
    for (bad, why) in [
        (Duration::from_millis(1500), "whole seconds"),
        (Duration::from_secs(3601), "at most 1h"),
    ] {
        let err = config(bad).validate().unwrap_err();
        assert!(
            err.to_string().contains("cache-max-age") && err.to_string().contains(why),
            "{err}"
        );
    }
}

/// Found by reading what start-up derives from a config, and confirmed
/// through the `config_toml` fuzz target (fuzz/corpus/config_toml/
/// regress-huge-heartbeat): `watch-heartbeat = "500000000000years"` was
/// valid, and the write stall timeout (two heartbeats and a header read)
/// overflowed, a panic at start-up. Every duration is now at most a year.
#[test]
fn durations_over_a_year_name_their_key() {
    let keys = [
        "upstream-keepalive",
        "fetch-cache-ttl",
        "watch-heartbeat",
        "header-read-timeout",
        "body-read-timeout",
        "keep-alive-timeout",
        "drain-timeout",
        "idle-timeout",
        "first-response-timeout",
        "default-wait",
        "max-wait",
        "refresh-delay",
        "request-timeout",
    ];
    for key in keys {
        let file = Settings::from_toml(&format!("{key} = \"500000000000years\"\n")).unwrap();
        let err = Config::from_layers(Some(file), Settings::default()).unwrap_err();
        assert!(
            matches!(err, ConfigError::Invalid { key: k, .. } if k == key),
            "{key}: {err}"
        );
    }
    // Everything at its longest: valid, and what start-up derives is fine.
    let longest: String = keys
        .iter()
        .filter(|k| !matches!(**k, "default-wait"))
        .map(|k| format!("{k} = \"366d\"\n"))
        .collect();
    let file = Settings::from_toml(&longest).unwrap();
    let config = Config::from_layers(Some(file), Settings::default()).unwrap();
    assert_eq!(
        config.write_stall_timeout(),
        Duration::from_secs(3 * 366 * 24 * 3600)
    );
}

#[test]
fn every_default_the_help_states_is_the_default() {
    use clap::CommandFactory;
    let mut command = Settings::command();
    command.build();
    let defaults = Config::default().plain_as_help_text();
    let mut stated = 0;
    for (field, value) in &defaults {
        let id = field.to_owned();
        let arg = command
            .get_arguments()
            .find(|a| a.get_id() == id)
            .unwrap_or_else(|| panic!("no flag for {field}"));
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let Some((_, rest)) = help.split_once("[default: ") else {
            continue;
        };
        let said = rest.split(']').next().unwrap_or_default();
        // `60s` and `1m` are the same duration (and `0` reads as one too).
        let normal = |text: &str| {
            humantime::parse_duration(text)
                .map(|d| humantime::format_duration(d).to_string())
                .unwrap_or_else(|_| text.to_owned())
        };
        let said = normal(said);
        assert_eq!(
            said,
            normal(value),
            "--{} says [default: {said}]",
            field.replace('_', "-")
        );
        stated += 1;
    }
    // The plain settings that state a default (booleans and lists do not).
    assert!(
        stated >= 30,
        "only {stated} of {} state a default",
        defaults.len()
    );
}

/// One memory budget every per-kind bound sits in. A
/// budget caps `--max-session-bytes` and `--history-max-bytes` at their
/// shares (a flag set above is cut; one set below stands), and the REST
/// face's memos take their shares; without one (no flag, no cgroup limit
/// read here) every bound is its default, the flags' defaults included.
#[test]
fn a_memory_budget_caps_every_kind_at_its_share() {
    let budget: u64 = 512 << 20;
    let flag = budget.to_string();
    let config =
        Config::from_settings(cli(&["--memory-budget-bytes", &flag])).expect("a valid budget");
    let shares = MemoryShares::of(budget);
    assert_eq!(config.memory, shares);
    assert_eq!(config.max_session_bytes as u64, shares.sessions);
    assert_eq!(config.history_max_bytes, shares.history);
    assert_eq!(config.rest().memory, shares);
    assert!(shares.total() <= (budget - super::memory::BASE) / 5 * 4);
    let set = Config::from_settings(cli(&[
        "--memory-budget-bytes",
        &flag,
        "--max-session-bytes",
        "2000000",
        "--history-max-bytes",
        "1",
    ]))
    .expect("valid");
    assert_eq!(
        (set.max_session_bytes, set.history_max_bytes),
        (2_000_000, 1)
    );
    let defaults = Config::default();
    assert_eq!(defaults.memory, MemoryShares::default());
    assert_eq!(
        defaults.max_session_bytes as u64,
        MemoryShares::default().sessions
    );
    assert_eq!(defaults.history_max_bytes, MemoryShares::default().history);
}
