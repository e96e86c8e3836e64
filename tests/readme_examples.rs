//! README.md's "## Try it with curl" and "## Three questions" sections, run
//! as written, in that order against one gateway.
//!
//! The sections' fenced ```sh blocks are extracted, `localhost:8080` and
//! `localhost:9901` are rewritten to a gateway started on free loopback ports
//! (serving the embedded demo snapshot, the README's default), and each block
//! runs with `bash -euo pipefail -c` (killed with its process group after
//! [`SCRIPT_TIMEOUT`]). A DEBUG trap prints a marker before every command, so
//! each command's own output (and how long it took) can be checked:
//!
//! - the `If-None-Match` line prints `304`; the long-poll (`wait=`) line
//!   prints `304` after holding about as long as it asked; another poll
//!   printing only its status prints `200`;
//! - the YAML lines (`format=yaml`, `Accept: application/yaml`) print YAML
//!   with `'@type'` lines; the other discovery lines print JSON responses;
//! - `GET /` lists the endpoints with curl lines naming the Host it was sent;
//! - `/readyz` says `"ready":true`; the `/metrics | grep` line matches;
//! - the admin debug views answer the three questions: `/debug/config`
//!   gives the node's config per type (only the `type=` asked for),
//!   `/debug/clients`, `/debug/client_status` and `/debug/sessions` list
//!   the node that polled in the examples before them; `/debug/history`
//!   gives the node's timeline of versions, `/debug/diff?format=text` its
//!   `diff -u`-style summary.
//!
//! The ```console examples (`$ command` followed by its output) are run too
//! and their output must equal the lines shown (after the same rewrite).
//!
//! The test fails when the section, its sh block or any of the checked
//! examples disappears, so README rot cannot turn into a test that runs
//! nothing. Without bash or curl it fails, saying how to install them.

#![cfg(unix)]

#[path = "support/process.rs"]
mod process;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use process::{eventually, free_port, http_get, run_in_group, ChildGuard};

const TEST: &str = "readme_examples";
const SECTION: &str = "## Try it with curl";
/// The sections whose examples run, in order (the second reads what the
/// first one's polls left in the gateway).
const SECTIONS: [&str; 2] = [SECTION, "## Three questions"];
/// Bound on one example block (the long poll alone holds 2 s).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on the gateway starting to answer.
const START_TIMEOUT: Duration = Duration::from_secs(20);
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Attempts at starting the gateway (a "free" port can be taken meanwhile).
const START_ATTEMPTS: usize = 3;

/// Lines of bash run before a block: marks every command on stdout with its
/// line number and a timestamp (and the end of the script).
const PRELUDE: &str = "trap 'printf \"\\n@@readme-end %s@@\\n\" \"${EPOCHREALTIME:-}\"' EXIT\n\
trap 'printf \"\\n@@readme-line %s %s@@\\n\" \"$LINENO\" \"${EPOCHREALTIME:-}\"' DEBUG\n";
const MARK: &str = "\n@@readme-";

// ---------------------------------------------------------------------------
// Extracting the examples
// ---------------------------------------------------------------------------

/// A fenced block of the section: its info string, the README line number
/// (1-based) of its first body line, and its body lines.
#[derive(Debug, Clone, PartialEq)]
struct Fenced {
    info: String,
    first_line: usize,
    lines: Vec<String>,
}

/// A `$ command` of a ```console block and the output lines shown under it.
#[derive(Debug, Clone, PartialEq)]
struct ConsoleExample {
    line: usize,
    command: String,
    expected: Vec<String>,
}

/// The lines (number, text) of `heading`'s section: after the heading line,
/// up to the next `## ` heading.
fn section<'a>(readme: &'a str, heading: &str) -> Result<Vec<(usize, &'a str)>, String> {
    let mut lines = readme.lines().enumerate().map(|(i, l)| (i + 1, l));
    lines
        .by_ref()
        .find(|(_, l)| l.trim_end() == heading)
        .ok_or_else(|| format!("README.md has no {heading:?} section"))?;
    Ok(lines.take_while(|(_, l)| !l.starts_with("## ")).collect())
}

/// The fenced code blocks among `lines`.
fn fenced_blocks(lines: &[(usize, &str)]) -> Result<Vec<Fenced>, String> {
    let mut blocks = Vec::new();
    let mut open: Option<Fenced> = None;
    for &(number, line) in lines {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => {
                open = Some(Fenced {
                    info: info.trim().to_owned(),
                    first_line: number + 1,
                    lines: Vec::new(),
                })
            }
            (Some(_), Some(rest)) if rest.trim().is_empty() => blocks.extend(open.take()),
            (Some(block), _) => block.lines.push(line.to_owned()),
            (None, None) => {}
        }
    }
    match open {
        Some(block) => Err(format!(
            "README.md line {}: fenced ```{} block is never closed",
            block.first_line - 1,
            block.info
        )),
        None => Ok(blocks),
    }
}

/// The `$ command` lines of a console block and the output shown under each.
fn console_examples(block: &Fenced) -> Result<Vec<ConsoleExample>, String> {
    let mut examples: Vec<ConsoleExample> = Vec::new();
    for (i, line) in block.lines.iter().enumerate() {
        let number = block.first_line + i;
        if let Some(command) = line.strip_prefix("$ ") {
            examples.push(ConsoleExample {
                line: number,
                command: command.to_owned(),
                expected: Vec::new(),
            });
        } else if let Some(example) = examples.last_mut() {
            example.expected.push(line.clone());
        } else {
            return Err(format!(
                "README.md line {number}: console block output before any `$ ` command"
            ));
        }
    }
    Ok(examples)
}

/// Points the README's default addresses at the test's gateway.
fn rewrite(text: &str, rest: u16, admin: u16) -> String {
    text.replace("localhost:8080", &format!("127.0.0.1:{rest}"))
        .replace("localhost:9901", &format!("127.0.0.1:{admin}"))
}

/// A script must not reach any address but the test gateway's after the
/// rewrite (a stray gateway on 8080 must not make the test pass).
fn assert_only_test_ports(script: &str, what: &str) {
    for stray in ["localhost", ":8080", ":9901"] {
        assert!(
            !script.contains(stray),
            "{what} still names {stray:?} after rewriting localhost:8080/9901; \
             the README should use localhost:8080 and localhost:9901:\n{script}"
        );
    }
}

// ---------------------------------------------------------------------------
// Commands and their outputs
// ---------------------------------------------------------------------------

/// One command of an sh block (backslash continuations joined).
#[derive(Debug, Clone)]
struct ShCommand {
    /// README line of its first line.
    readme_line: usize,
    /// Script lines (0-based, within the block) it spans.
    lines: std::ops::RangeInclusive<usize>,
    text: String,
}

fn sh_commands(block: &Fenced) -> Vec<ShCommand> {
    let mut commands = Vec::new();
    let mut start: Option<(usize, String)> = None;
    for (i, line) in block.lines.iter().enumerate() {
        let (first, mut text) = start.take().unwrap_or((i, String::new()));
        text.push_str(line);
        if let Some(stripped) = text.strip_suffix('\\') {
            text = format!("{stripped} ");
            start = Some((first, text));
            continue;
        }
        let trimmed = text.trim();
        if !trimmed.is_empty() && !trimmed.starts_with('#') {
            commands.push(ShCommand {
                readme_line: block.first_line + first,
                lines: first..=i,
                text,
            });
        }
    }
    if let Some((first, text)) = start {
        commands.push(ShCommand {
            readme_line: block.first_line + first,
            lines: first..=block.lines.len() - 1,
            text,
        });
    }
    commands
}

/// What one command printed and how long it ran (seconds, when bash has
/// `EPOCHREALTIME`).
#[derive(Debug, Default, Clone)]
struct Ran {
    output: String,
    seconds: Option<f64>,
}

/// Splits the marked stdout of a block into each command's output, keyed by
/// the index of the command in `commands`.
fn split_output(stdout: &str, commands: &[ShCommand]) -> BTreeMap<usize, Ran> {
    let prelude_lines = PRELUDE.lines().count();
    let mut ran: BTreeMap<usize, Ran> = BTreeMap::new();
    // (command index or None for prelude/end markers, time) of the marker
    // that opened the current chunk.
    let mut current: Option<(Option<usize>, Option<f64>)> = None;
    let time = |s: &str| s.replace(',', ".").parse::<f64>().ok();
    let mut pieces = stdout.split(MARK);
    let before = pieces.next().unwrap_or_default();
    assert!(
        before.is_empty(),
        "output before the first command marker: {before:?}"
    );
    for piece in pieces {
        let (header, output) = piece
            .split_once("@@\n")
            .unwrap_or_else(|| panic!("malformed command marker in {piece:?}"));
        let (index, at) = if let Some(rest) = header.strip_prefix("line ") {
            let (lineno, at) = rest.split_once(' ').unwrap_or((rest, ""));
            let lineno: usize = lineno.parse().expect("marker line number");
            let index = lineno
                .checked_sub(prelude_lines + 1)
                .and_then(|script_line| {
                    commands.iter().position(|c| c.lines.contains(&script_line))
                });
            (index, time(at))
        } else if let Some(at) = header.strip_prefix("end ") {
            (None, time(at))
        } else {
            panic!("unknown marker {header:?}")
        };
        // A new command (or the end) closes the previous command's timing.
        if let Some((Some(previous), started)) = current {
            if index != Some(previous) {
                if let (Some(started), Some(at)) = (started, at) {
                    let entry = ran.entry(previous).or_default();
                    entry.seconds = Some(entry.seconds.unwrap_or(0.0) + (at - started));
                }
            }
        }
        if let Some(index) = index {
            ran.entry(index).or_default().output.push_str(output);
        } else {
            assert!(
                output.is_empty(),
                "output outside any README command: {output:?}"
            );
        }
        match current {
            Some((previous, started)) if previous == index && index.is_some() => {
                current = Some((previous, started));
            }
            _ => current = Some((index, at)),
        }
    }
    ran
}

/// bash with an environment that cannot redirect curl elsewhere (proxies,
/// a user's .curlrc) and a C locale (for `EPOCHREALTIME`'s decimal point).
fn bash(script: &str, home: &Path) -> Command {
    let mut command = Command::new("bash");
    command.args(["-euo", "pipefail", "-c", script]);
    for proxy in [
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
    ] {
        command.env_remove(proxy);
    }
    command
        .env("NO_PROXY", "*")
        .env("no_proxy", "*")
        .env("HOME", home)
        .env("CURL_HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .env("LC_ALL", "C");
    command
}

/// Panics, saying how to install it, unless `tool --version` runs (README's
/// examples need curl and bash; a missing one fails the test, never skips it).
async fn require_tool(tool: &str) {
    let mut command = tokio::process::Command::new(tool);
    command
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let ok = matches!(
        tokio::time::timeout(Duration::from_secs(10), command.status()).await,
        Ok(Ok(status)) if status.success()
    );
    assert!(
        ok,
        "{TEST}: `{tool}` is needed to run README's examples; install it (Debian: apt-get install {tool})"
    );
}

/// The gateway on the embedded demo with free loopback ports, answering on
/// both listeners. Returns the guard and (REST, admin) ports.
async fn start_gateway(dir: &Path) -> (ChildGuard, u16, u16) {
    for attempt in 1..=START_ATTEMPTS {
        let rest = free_port();
        let admin = loop {
            let port = free_port();
            if port != rest {
                break port;
            }
        };
        let log = dir.join(format!("gateway-{attempt}.log"));
        let log_file = std::fs::File::create(&log).expect("create the gateway log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_xds-gateway"));
        command
            .args(["--listen", &format!("127.0.0.1:{rest}")])
            .args(["--admin", &format!("127.0.0.1:{admin}")])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("clone the log handle"))
            .stderr(log_file);
        // The README describes the defaults: no inherited XDS_GATEWAY_*
        // variable may change them.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("XDS_GATEWAY_") {
                command.env_remove(name);
            }
        }
        let child = command.spawn().expect("start xds-gateway");
        let mut guard = ChildGuard::new("xds-gateway", child).with_log(&log);
        let answered = eventually(START_TIMEOUT, POLL_INTERVAL, || {
            let exited = guard.try_exit_status();
            async move {
                if let Some(status) = exited {
                    return Some(Err(status));
                }
                let ready = matches!(http_get(admin, "/readyz").await, Ok((200, _)));
                let index = matches!(http_get(rest, "/").await, Ok((200, _)));
                (ready && index).then_some(Ok(()))
            }
        })
        .await;
        match answered {
            Some(Ok(())) => return (guard, rest, admin),
            Some(Err(status)) if guard.log_text().contains("Address already in use") => {
                eprintln!("attempt {attempt}: a port was taken ({status}); retrying");
            }
            Some(Err(status)) => {
                guard.print_log();
                panic!("xds-gateway exited at start-up: {status}");
            }
            None => {
                guard.print_log();
                panic!("xds-gateway did not answer /readyz and / within {START_TIMEOUT:?}");
            }
        }
    }
    panic!("xds-gateway could not bind free ports in {START_ATTEMPTS} attempts");
}

// ---------------------------------------------------------------------------
// Checks on the outputs
// ---------------------------------------------------------------------------

/// Which README examples must be present and what each must print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Check {
    Index,
    Json,
    Yaml,
    NotModified,
    LongPoll,
    Ready,
    Metrics,
    DebugConfig,
    DebugClients,
    ClientStatus,
    DebugSessions,
    DebugHistory,
    DebugDiff,
    PollStatus,
}

fn classify(text: &str) -> Option<Check> {
    let t = text.trim();
    let first_word = t.split_whitespace().next().unwrap_or_default();
    let is_assignment = first_word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    // `host:port/` alone (the index), quoted or not, with or without http://.
    let is_index = |word: &str| {
        let url = word.trim_matches(|c| c == '\'' || c == '"');
        let url = url.strip_prefix("http://").unwrap_or(url);
        url.strip_suffix('/')
            .is_some_and(|host| !host.is_empty() && !host.contains('/'))
    };
    if t.contains("/debug/history") {
        Some(Check::DebugHistory)
    } else if t.contains("/debug/diff") {
        Some(Check::DebugDiff)
    } else if t.contains("/readyz") {
        Some(Check::Ready)
    } else if t.contains("/debug/config") {
        Some(Check::DebugConfig)
    } else if t.contains("/debug/clients") {
        Some(Check::DebugClients)
    } else if t.contains("/debug/client_status") {
        Some(Check::ClientStatus)
    } else if t.contains("/debug/sessions") {
        Some(Check::DebugSessions)
    } else if t.contains("/metrics") {
        Some(Check::Metrics)
    } else if t.contains("%{http_code}") && t.contains("wait=") {
        Some(Check::LongPoll)
    } else if t.contains("%{http_code}") && t.contains("If-None-Match") {
        Some(Check::NotModified)
    } else if t.contains("%{http_code}") && t.contains("/v3/discovery:") {
        Some(Check::PollStatus)
    } else if is_assignment {
        None
    } else if t.contains("format=yaml") || t.contains("application/yaml") {
        Some(Check::Yaml)
    } else if t.contains("/v3/discovery:") && !t.contains("-o /dev/null") {
        Some(Check::Json)
    } else if t.split_whitespace().any(is_index) {
        Some(Check::Index)
    } else {
        None
    }
}

/// The value of query parameter `name` in a command's URL (up to `&`, a
/// quote or a space).
fn query_value<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let start = [format!("?{name}="), format!("&{name}=")]
        .iter()
        .find_map(|key| text.find(key.as_str()).map(|i| i + key.len()))?;
    let rest = &text[start..];
    let end = rest
        .find(|c: char| c == '&' || c == '\'' || c == '"' || c.is_whitespace())
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The `wait=` of a long-poll command, in seconds (`wait=2s` → 2).
fn wait_seconds(text: &str) -> Option<f64> {
    let rest = &text[text.find("wait=")? + 5..];
    let value: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '.')
        .collect();
    humantime::parse_duration(&value)
        .ok()
        .map(|d| d.as_secs_f64())
}

fn check_output(check: Check, command: &ShCommand, ran: &Ran, rest: u16) {
    let out = &ran.output;
    let at = format!(
        "README.md line {}: `{}` printed:\n{out}",
        command.readme_line,
        command.text.trim()
    );
    let json = || -> serde_json::Value {
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{at}\n(expected JSON: {e})"))
    };
    let non_empty = |value: &serde_json::Value, what: &str| -> Vec<serde_json::Value> {
        let items = value.as_array().cloned().unwrap_or_default();
        assert!(!items.is_empty(), "{at}\n(expected {what})");
        items
    };
    match check {
        Check::DebugConfig => {
            let dump = json();
            let configs = non_empty(&dump["configs"], "a config per type");
            let mut types: Vec<String> = Vec::new();
            for config in &configs {
                let response = &config["response"];
                assert!(
                    config["type"].is_string() && response["versionInfo"].is_string(),
                    "{at}\n(expected a type and a DiscoveryResponse per config)"
                );
                types.push(config["type"].as_str().unwrap_or_default().to_owned());
            }
            if let Some(asked) = query_value(&command.text, "type") {
                let mut asked: Vec<&str> = asked.split(',').collect();
                asked.sort_unstable();
                types.sort();
                assert_eq!(types, asked, "{at}\n(expected exactly the types asked for)");
            }
        }
        Check::DebugClients => {
            for client in non_empty(&json()["clients"], "the clients that polled") {
                assert!(
                    client["node_id"].is_string() && client["types"].is_object(),
                    "{at}\n(expected a node id and per type where each client stands)"
                );
            }
        }
        Check::ClientStatus => {
            for config in non_empty(&json()["config"], "a ClientConfig per node") {
                assert!(
                    config["node"]["id"].is_string(),
                    "{at}\n(a ClientConfig without its node)"
                );
                non_empty(
                    &config["genericXdsConfigs"],
                    "a status per type and resource",
                );
            }
        }
        Check::DebugSessions => {
            for session in non_empty(&json()["sessions"], "the sessions") {
                assert!(
                    session["node_id"].is_string() && session["types"].is_object(),
                    "{at}\n(expected a node id and per type what the session holds)"
                );
            }
        }
        Check::PollStatus => assert_eq!(out.trim(), "200", "{at}"),
        Check::DebugHistory => {
            let history = json();
            for timeline in non_empty(&history["timelines"], "a timeline per identity") {
                for event in non_empty(&timeline["events"], "the versions served") {
                    assert!(
                        event["upstream_version"].is_string() && event["at"].is_string(),
                        "{at}\n(expected when and from which upstream version)"
                    );
                }
            }
        }
        Check::DebugDiff => {
            assert!(
                out.starts_with(&format!(
                    "# {}: ",
                    query_value(&command.text, "type").unwrap_or_default()
                )) && out.contains("\n# a: node ")
                    && out.contains("\n# b: node "),
                "{at}\n(expected the diff -u style summary)"
            );
        }
        Check::Index => {
            assert!(
                out.contains(&format!(
                    "curl 'http://127.0.0.1:{rest}/v3/discovery:clusters?"
                )),
                "{at}\n(expected the endpoint list with curl lines for the Host it was sent)"
            );
        }
        Check::Json => {
            let json: serde_json::Value = serde_json::from_str(out)
                .unwrap_or_else(|e| panic!("{at}\n(expected a JSON DiscoveryResponse: {e})"));
            let resources = json["resources"].as_array();
            assert!(
                resources.is_some_and(|r| !r.is_empty()) && json["versionInfo"].is_string(),
                "{at}\n(expected resources and a versionInfo)"
            );
            for resource in resources.into_iter().flatten() {
                assert!(
                    resource["@type"].is_string(),
                    "{at}\n(a resource without @type)"
                );
            }
        }
        Check::Yaml => {
            assert!(
                out.lines().any(|l| l
                    .trim_start()
                    .trim_start_matches("- ")
                    .starts_with("'@type': ")),
                "{at}\n(expected YAML with '@type' lines)"
            );
            let yaml: serde_json::Value = serde_yaml_ng::from_str(out)
                .unwrap_or_else(|e| panic!("{at}\n(expected YAML: {e})"));
            assert!(
                yaml["resources"].as_array().is_some_and(|r| !r.is_empty())
                    && yaml["versionInfo"].is_string(),
                "{at}\n(expected resources and a versionInfo)"
            );
        }
        Check::NotModified => assert_eq!(out.trim(), "304", "{at}"),
        Check::LongPoll => {
            assert_eq!(out.trim(), "304", "{at}");
            if let (Some(wait), Some(took)) = (wait_seconds(&command.text), ran.seconds) {
                assert!(
                    took >= wait * 0.9 && took < wait + 10.0,
                    "{at}\n(the long poll asked to wait {wait}s but took {took:.3}s)"
                );
            }
        }
        Check::Ready => {
            assert!(out.contains("\"ready\":true"), "{at}");
            let json: serde_json::Value = serde_json::from_str(out.trim())
                .unwrap_or_else(|e| panic!("{at}\n(expected JSON: {e})"));
            assert_eq!(json["ready"], true, "{at}");
        }
        Check::Metrics => {
            // What the command greps for, e.g. `... | grep xds_gateway_requests_total`.
            let pattern = command
                .text
                .rsplit_once("grep ")
                .map(|(_, p)| p.trim().trim_matches(|c| c == '\'' || c == '"'))
                .filter(|p| !p.is_empty() && !p.starts_with('-'))
                .unwrap_or("xds_gateway_");
            let lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
            assert!(
                !lines.is_empty() && lines.iter().all(|l| l.contains(pattern)),
                "{at}\n(expected metric samples matching {pattern:?})"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------

/// The lines of every section of [`SECTIONS`], in order.
fn sections(readme: &str) -> Result<Vec<(usize, &str)>, String> {
    let mut lines = Vec::new();
    for heading in SECTIONS {
        lines.extend(section(readme, heading)?);
    }
    Ok(lines)
}

fn readme() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test]
async fn readme_curl_examples_work_as_written() {
    let readme = readme();
    let lines = sections(&readme).unwrap_or_else(|e| panic!("{e}"));
    let blocks = fenced_blocks(&lines).unwrap_or_else(|e| panic!("{e}"));
    let sh: Vec<&Fenced> = blocks.iter().filter(|b| b.info == "sh").collect();
    let console: Vec<ConsoleExample> = blocks
        .iter()
        .filter(|b| b.info == "console")
        .map(|b| console_examples(b).unwrap_or_else(|e| panic!("{e}")))
        .collect::<Vec<_>>()
        .concat();
    assert!(!sh.is_empty(), "{SECTION:?} has no ```sh block");
    assert!(
        !console.is_empty(),
        "{SECTION:?} has no ```console example ($ command + output)"
    );
    for block in &sh {
        let text = block.lines.join("\n");
        assert!(
            text.contains("localhost:8080") || text.contains("localhost:9901"),
            "README.md line {}: the sh block no longer uses localhost:8080 or localhost:9901",
            block.first_line
        );
    }
    let all = sh.iter().map(|b| b.lines.join("\n")).collect::<String>();
    assert!(
        all.contains("localhost:8080") && all.contains("localhost:9901"),
        "the README examples no longer use both localhost:8080 and localhost:9901"
    );
    require_tool("bash").await;
    require_tool("curl").await;

    let dir = tempfile::tempdir().expect("temporary directory");
    let home = dir.path().join("home");
    std::fs::create_dir(&home).expect("create an empty HOME for curl");
    let (gateway, rest, admin) = start_gateway(dir.path()).await;

    let mut seen: BTreeMap<Check, usize> = BTreeMap::new();
    for block in &sh {
        let commands = sh_commands(block);
        assert!(
            !commands.is_empty(),
            "README.md line {}: empty sh block",
            block.first_line
        );
        let body = rewrite(&block.lines.join("\n"), rest, admin);
        assert_only_test_ports(
            &body,
            &format!("the sh block at README.md line {}", block.first_line),
        );
        let script = format!("{PRELUDE}{body}\n");
        let what = format!("the sh block at README.md line {}", block.first_line);
        let done = run_in_group(bash(&script, &home), SCRIPT_TIMEOUT, &what).await;
        assert!(
            done.success,
            "{what} failed ({}):\n--- script ---\n{body}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            done.status, done.stdout, done.stderr
        );
        let ran = split_output(&done.stdout, &commands);
        for (index, command) in commands.iter().enumerate() {
            let Some(output) = ran.get(&index) else {
                panic!(
                    "README.md line {}: `{}` never ran; stdout:\n{}",
                    command.readme_line,
                    command.text.trim(),
                    done.stdout
                );
            };
            let rewritten = ShCommand {
                text: rewrite(&command.text, rest, admin),
                ..command.clone()
            };
            if let Some(check) = classify(&rewritten.text) {
                check_output(check, &rewritten, output, rest);
                *seen.entry(check).or_default() += 1;
            }
        }
    }
    for check in [
        Check::Index,
        Check::Json,
        Check::Yaml,
        Check::NotModified,
        Check::LongPoll,
        Check::Ready,
        Check::Metrics,
        Check::DebugConfig,
        Check::DebugClients,
        Check::ClientStatus,
        Check::DebugSessions,
        Check::DebugHistory,
        Check::DebugDiff,
        Check::PollStatus,
    ] {
        assert!(
            seen.contains_key(&check),
            "{SECTIONS:?} no longer have a {check:?} example (checked: {seen:?}); \
             update tests/readme_examples.rs if it was removed on purpose"
        );
    }
    eprintln!("README sh examples checked: {seen:?}");

    for example in &console {
        let command = rewrite(&example.command, rest, admin);
        let expected = rewrite(&example.expected.join("\n"), rest, admin);
        let what = format!("README.md line {}: `$ {}`", example.line, example.command);
        assert_only_test_ports(&command, &what);
        let done = run_in_group(bash(&command, &home), SCRIPT_TIMEOUT, &what).await;
        assert!(
            done.success,
            "{what} failed ({}):\n{}{}",
            done.status, done.stdout, done.stderr
        );
        // A console block cannot show whether the output ended in a newline.
        let got = done.stdout.strip_suffix('\n').unwrap_or(&done.stdout);
        assert_eq!(got, expected, "{what}: output differs from the README");
    }
    drop(gateway);
}

// ---------------------------------------------------------------------------
// The extraction itself
// ---------------------------------------------------------------------------

const SAMPLE: &str = "# T\n\n## Try it with curl\n\nText.\n\n```sh\ncurl localhost:8080/ \\\n  -s\n# comment\nV=$(echo 1)\n```\n\n```console\n$ echo hi\nhi\nthere\n$ true\n```\n\n## Next\n\n```sh\nnot this\n```\n";

#[test]
fn extraction_finds_the_section_blocks_and_console_examples() {
    let lines = section(SAMPLE, SECTION).unwrap();
    let blocks = fenced_blocks(&lines).unwrap();
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    assert_eq!(blocks[0].info, "sh");
    assert_eq!(blocks[0].first_line, 8);
    let commands = sh_commands(&blocks[0]);
    assert_eq!(commands.len(), 2, "{commands:?}");
    assert_eq!(commands[0].lines, 0..=1);
    assert_eq!(commands[0].readme_line, 8);
    assert_eq!(commands[1].text, "V=$(echo 1)");
    let console = console_examples(&blocks[1]).unwrap();
    assert_eq!(
        console,
        vec![
            ConsoleExample {
                line: 15,
                command: "echo hi".into(),
                expected: vec!["hi".into(), "there".into()],
            },
            ConsoleExample {
                line: 18,
                command: "true".into(),
                expected: vec![],
            },
        ]
    );
}

#[test]
fn extraction_fails_without_the_section_or_with_an_open_fence() {
    assert!(section("# T\n## Other\n", SECTION).is_err());
    let lines = section("## Try it with curl\n```sh\ncurl x\n", SECTION).unwrap();
    assert!(fenced_blocks(&lines).is_err());
}

#[test]
fn the_readme_commands_are_classified() {
    let readme = readme();
    let lines = sections(&readme).unwrap();
    let blocks = fenced_blocks(&lines).unwrap();
    let classified: Vec<(String, Option<Check>)> = blocks
        .iter()
        .filter(|b| b.info == "sh")
        .flat_map(sh_commands)
        .map(|c| (c.text.clone(), classify(&rewrite(&c.text, 1, 2))))
        .collect();
    // Every command is checked except the one that only captures a version.
    let unchecked: Vec<&String> = classified
        .iter()
        .filter(|(_, check)| check.is_none())
        .map(|(text, _)| text)
        .collect();
    assert!(
        unchecked.iter().all(|t| t.trim_start().starts_with("V=$(")),
        "commands no check applies to: {unchecked:?}"
    );
}

#[test]
fn markers_split_outputs_per_command() {
    let block = Fenced {
        info: "sh".into(),
        first_line: 10,
        lines: vec!["a | b".into(), "# c".into(), "d".into()],
    };
    let commands = sh_commands(&block);
    let stdout = "\n@@readme-line 3 1.0@@\nx\n@@readme-line 3 1.1@@\ny\n@@readme-line 5 2.0@@\nz\n@@readme-line 1 4.5@@\n\n@@readme-end 4.5@@\n";
    let ran = split_output(stdout, &commands);
    assert_eq!(ran[&0].output, "xy");
    assert_eq!(ran[&1].output, "z");
    assert!((ran[&0].seconds.unwrap() - 1.0).abs() < 1e-9);
    assert!((ran[&1].seconds.unwrap() - 2.5).abs() < 1e-9);
}
