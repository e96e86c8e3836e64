use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::admin::views::NodeSession;
use crate::cache::{Intake, ParsedRequests};
use crate::config::{Config, SessionKey, UpstreamStreams};
use crate::metrics::Metrics;
use crate::observe::{AnsweredPoll, ClientBook, Standing};
use crate::store::{Feed, Inspect, Namespace, Sessions};
use crate::store::{LastError, ReplyView, SessionTypeView, SessionView, StreamView};
use crate::upstream::{FileFeeder, Route, SotwFeeder, UpstreamContext};
use crate::xds::{Codec, ResourceType};

const HOSTILE: &str = "<script>alert('x')</script>\"&";

/// A client book as the REST side fills it: one client of `node` whose
/// listeners are a suspected rejection of version 2.
fn book(node: &str) -> ClientBook {
    let book = ClientBook::new(Duration::from_secs(60), 3);
    let body = json!({
        "version_info": "1~aaaaaaaaaaaa",
        "node": {"id": node, "cluster": "edge", "user_agent_name": "envoy"},
    });
    let request = ParsedRequests::new(SessionKey::Node)
        .parse(body.to_string().into())
        .unwrap();
    // Served version 1, then version 2 four times while it presented 1.
    let first = request.presenting("");
    for (request, current) in [(&first, "1~aaaaaaaaaaaa")]
        .into_iter()
        .chain([(&*request, "2~bbbbbbbbbbbb"); 4])
    {
        book.book(AnsweredPoll {
            request,
            kind: ResourceType::Listeners,
            remote: Some(IpAddr::from([127, 0, 0, 1])),
            current,
            body: true,
            judged: Some(current),
            rewritten_for: None,
            watch: false,
            served: None,
        });
    }
    let standing = book.nodes()[0].subscriptions[0].standing;
    assert_eq!(standing, Standing::Suspected { polls: 3 });
    book
}

fn session(node: &str) -> SessionsView {
    let kind = |version: Option<&str>, resources, last_reply| SessionTypeView {
        version: version.map(str::to_owned),
        resources,
        wildcard: true,
        names: Vec::new(),
        name_count: 0,
        last_reply,
        resource_errors: Vec::new(),
        resource_error_count: 0,
    };
    let nack = ReplyView {
        kind: ReplyKind::Nack,
        version: "2".into(),
        at: "2026-01-01T00:00:00Z".into(),
        error_detail: Some("<i>bad</i>".into()),
        in_a_row: 1,
    };
    let session = SessionView {
        node_id: node.into(),
        cluster: "edge".into(),
        source: "gRPC upstream".into(),
        serves: None,
        stream: Some(StreamView {
            phase: Phase::Open,
            since: "2026-01-01T00:00:00Z".into(),
            stale_since: None,
            last_error: Some(LastError {
                at: "2026-01-01T00:00:00Z".into(),
                error: "<b>refused</b>".into(),
            }),
            placement: None,
        }),
        node_sent: Default::default(),
        requests_in_flight: 1,
        types: [
            ("listeners", kind(Some("2"), Some(2), Some(nack))),
            ("clusters", kind(None, None, None)),
        ]
        .into(),
    };
    SessionsView {
        source: "gRPC upstream".into(),
        ready: true,
        sessions: vec![NodeSession {
            session,
            clients: 1,
        }],
    }
}

fn page(node: &str, ready: bool) -> String {
    let readiness = Readiness {
        ready,
        draining: false,
        source: "gRPC upstream <x>".into(),
        problems: vec!["file <a>".into()],
        sessions: 1,
        stale_sessions: 0,
        waiting_sessions: 0,
        failed_over_sessions: 0,
        refusing_sessions: 0,
        failovers: Vec::new(),
        session_errors: Vec::new(),
        upstream_streams_open: 1,
    };
    render(&Views {
        readiness,
        sessions: session(node),
        clients: book(node).view(),
        now: "2026-01-01T00:00:00Z".into(),
        refresh: 5,
    })
}

#[test]
fn everything_from_clients_and_the_upstream_is_escaped() {
    let html = page(HOSTILE, true);
    for raw in ["<script>", "<b>refused", "<i>bad", "<x>", "file <a>", "'x'"] {
        assert!(!html.contains(raw), "{raw:?} unescaped in:\n{html}");
    }
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&quot;&amp;"));
    // Links carry the node percent-encoded, the `&` between parameters escaped.
    assert!(
        html.contains("/debug/config?node=%3Cscript%3Ealert%28%27x%27%29%3C%2Fscript%3E%22%26&amp;type=listeners&amp;pretty"),
        "{html}"
    );
    // No markup but the page's own: the only elements are from this list.
    let tags: std::collections::BTreeSet<&str> = html
        .split('<')
        .skip(1)
        .map(|t| {
            t.split(|c: char| !c.is_ascii_alphanumeric() && c != '!' && c != '/')
                .next()
                .unwrap_or("")
        })
        .collect();
    let allowed = [
        "!doctype", "html", "/html", "head", "/head", "meta", "title", "/title", "style", "/style",
        "body", "/body", "header", "/header", "h1", "/h1", "h2", "/h2", "h3", "/h3", "p", "/p",
        "code", "/code", "nav", "/nav", "a", "/a", "section", "/section", "ul", "/ul", "li", "/li",
        "table", "/table", "tr", "/tr", "th", "/th", "td", "/td", "b", "/b", "br", "span", "/span",
    ];
    for tag in &tags {
        assert!(allowed.contains(tag), "unexpected <{tag} in:\n{html}");
    }
}

#[test]
fn the_page_shows_the_node_its_versions_and_what_is_wrong() {
    let html = page("edge-1", false);
    assert!(
        html.contains("id=\"readiness\" class=\"bad\">not ready<"),
        "{html}"
    );
    assert!(html.contains("data-node=\"edge-1\""), "{html}");
    assert!(
        html.contains("data-state=\"suspected rejection\""),
        "{html}"
    );
    assert!(html.contains("it rejected the newer one"), "{html}");
    assert!(
        html.contains("served <code>2~bbbbbbbbbbbb</code>"),
        "{html}"
    );
    assert!(
        html.contains("NACK of listeners version <code>2</code>"),
        "{html}"
    );
    assert!(html.contains("<meta http-equiv=\"refresh\" content=\"5\">"));
    assert!(
        html.contains(">clusters</a> (<a href=\"/debug/history?node=edge-1&amp;cluster=edge&amp;type=clusters&amp;pretty\">history</a>): <span class=\"warn\">waiting for the upstream</span>"),
        "{html}"
    );
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no external assets"
    );
}

/// A client that never presents a version (curl, a script) is a
/// one-shot reader, listed apart and in no colour; the Envoy beside it
/// that presents versions stays a subscriber, red when it is in trouble.
#[test]
fn one_shot_readers_are_listed_apart_from_subscribers() {
    let book = book("edge-1");
    let memo = ParsedRequests::new(SessionKey::Node);
    let curl = json!({"node": {"id": "curl-<1>", "cluster": ""}, "resource_names": ["a"]});
    let curl = memo.parse(curl.to_string().into()).unwrap();
    for _ in 0..3 {
        book.book(AnsweredPoll {
            request: &curl,
            kind: ResourceType::Clusters,
            remote: Some(IpAddr::from([127, 0, 0, 2])),
            current: "3~cccccccccccc",
            body: true,
            judged: None,
            rewritten_for: None,
            watch: false,
            served: None,
        });
    }
    // A watch presents no version on its first event, yet it subscribes.
    let watcher = json!({"node": {"id": "watcher"}});
    let watcher = memo.parse(watcher.to_string().into()).unwrap();
    book.book(AnsweredPoll {
        request: &watcher,
        kind: ResourceType::Clusters,
        remote: None,
        current: "3~cccccccccccc",
        body: true,
        judged: None,
        rewritten_for: None,
        watch: true,
        served: None,
    });
    let clients = book.view();
    let served = serde_json::to_value(&clients).unwrap();
    assert_eq!(
        (served["subscribers"].clone(), served["readers"].clone()),
        (json!(2), json!(1)),
        "{served}"
    );
    let role = |node: &str| {
        served["clients"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["node_id"] == node)
            .map(|c| c["role"].clone())
    };
    assert_eq!(role("curl-<1>"), Some(json!("reader")));
    assert_eq!(role("edge-1"), Some(json!("subscriber")));
    assert_eq!(role("watcher"), Some(json!("subscriber")));

    let readiness = Readiness {
        ready: true,
        draining: false,
        source: "gRPC upstream".into(),
        problems: Vec::new(),
        sessions: 1,
        stale_sessions: 0,
        waiting_sessions: 0,
        failed_over_sessions: 0,
        refusing_sessions: 0,
        failovers: Vec::new(),
        session_errors: Vec::new(),
        upstream_streams_open: 1,
    };
    let html = render(&Views {
        readiness,
        sessions: session("edge-1"),
        clients,
        now: "2026-01-01T00:00:00Z".into(),
        refresh: 5,
    });
    assert!(
        html.contains("REST clients (3: 2 subscribers, 1 one-shot readers)"),
        "{html}"
    );
    let readers_at = html.find("id=\"readers\"").expect("a readers table");
    let reader_row = &html[html.find("<tr class=\"reader\"").expect("a reader row")..];
    let reader_row = &reader_row[..reader_row.find("</tr>").unwrap()];
    assert!(html.find("<tr class=\"reader\"").unwrap() > readers_at);
    assert!(
        reader_row.contains("data-node=\"curl-&lt;1&gt;\""),
        "{reader_row}"
    );
    assert!(
        reader_row.contains("served <code>3~cccccccccccc</code>"),
        "{reader_row}"
    );
    assert!(
        reader_row.contains("<td>clusters</td><td>3</td>"),
        "three reads: {reader_row}"
    );
    for not in ["class=\"bad\"", "class=\"warn\"", "catching up", "in step"] {
        assert!(!reader_row.contains(not), "{not} in {reader_row}");
    }
    // No reader among the subscribers' rows, which keep their colours.
    let subscribers = &html[html.find("id=\"subscribers\"").unwrap()..readers_at];
    assert!(!subscribers.contains("curl-"), "{subscribers}");
    assert!(
        subscribers.contains("data-node=\"watcher\""),
        "{subscribers}"
    );
    assert!(
        subscribers.contains("data-state=\"suspected rejection\""),
        "{subscribers}"
    );
    assert!(subscribers.contains("class=\"bad\""), "{subscribers}");
}

#[test]
fn refresh_is_read_from_the_query() {
    assert_eq!(refresh(None), Ok(REFRESH));
    assert_eq!(refresh(Some("refresh=0")), Ok(0));
    assert_eq!(refresh(Some("a=b&refresh=30")), Ok(30));
    // A malformed one is refused, saying what was wrong (schemathesis
    // found `?refresh=-1` answered as if it were absent).
    assert_eq!(refresh(Some("refresh=86400")), Ok(86_400));
    // A schemathesis run (seed 2263462783) sent one past u64.
    for bad in [
        "refresh=nope",
        "refresh=-1",
        "refresh=",
        "refresh=86401",
        "refresh=4254796461312600702976",
    ] {
        let why = refresh(Some(bad)).unwrap_err();
        assert!(why.contains("whole number"), "{bad}: {why}");
    }
}

/// The one session row of `html`.
fn session_row(html: &str) -> &str {
    let start = html.find("<tr class=\"session\"").expect("a session row");
    let len = html[start..].find("</tr>").expect("the row ends");
    &html[start..start + len]
}

/// The views and the page of an admin over `source` once node `edge-1`
/// polled its clusters (answered or not: the session stays either way).
async fn page_of(source: Arc<dyn Feed>, metrics: Arc<Metrics>, config: Config) -> (Views, String) {
    let intake = Intake::new(Codec::embedded());
    let body = json!({"node": {"id": "edge-1", "cluster": "edge"}});
    let request = ParsedRequests::new(SessionKey::Node)
        .parse(body.to_string().into())
        .unwrap();
    let _ = source.poll(ResourceType::Clusters, &request, None).await;
    let clients = Arc::new(ClientBook::new(Duration::from_secs(60), 3));
    let admin = Admin::new(
        source.clone() as Arc<dyn Inspect>,
        metrics,
        clients,
        intake.opaque_types().clone(),
        crate::cache::Assembler::new(intake.codec().clone()),
        crate::observe::ConfigHistory::default(),
        config.admin_views(),
    );
    let views = Views::of(&admin, 0);
    let html = render(&views);
    source.close();
    (views, html)
}

/// The page tells a snapshot's sessions from an upstream's by a
/// field of the typed view (`stream`, `None` for a snapshot), not by a key
/// missing from JSON; and the JSON served keeps the stream's fields inline,
/// absent for the snapshot.
#[tokio::test]
async fn the_page_shows_a_sessions_stream_or_its_absence_from_the_view() {
    let config = Config {
        first_response_timeout: Duration::from_millis(100),
        ..Config::default()
    };
    let intake = Intake::new(Codec::embedded());

    let metrics = Arc::new(Metrics::new());
    let feeder = FileFeeder::start(crate::demo::origin(), intake.clone(), config.session_key);
    let snapshot = Sessions::start(
        Arc::new(feeder),
        intake.clone(),
        crate::observe::ConfigHistory::default(),
        metrics.clone(),
        &config,
    );
    let (views, html) = page_of(snapshot, metrics, config.clone()).await;
    let session = &views.sessions.sessions[0].session;
    assert!(session.stream.is_none(), "{session:?}");
    let row = session_row(&html);
    assert!(
        row.contains(&format!(
            "<td><span class=\"muted\">{}</span></td>",
            escape(&session.source)
        )),
        "{row}"
    );
    assert!(!row.contains(" since "), "{row}");
    let served = serde_json::to_value(&views.sessions).unwrap();
    assert_eq!(served["sessions"][0].get("stream"), None, "{served}");

    // An upstream nobody listens on: the session's stream never opens.
    let refused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let metrics = Arc::new(Metrics::new());
    let config = Config {
        upstream: Some(format!("http://{refused}")),
        ..config
    };
    let spec = &config.upstream_set().specs[0];
    let max_bytes = config.max_upstream_message_bytes;
    let ctx = UpstreamContext::new(spec, max_bytes, intake.clone(), metrics.clone()).unwrap();
    let namespace = Namespace::new(Default::default(), &spec.name, &spec.name);
    let feeder = SotwFeeder::new(Route::single(ctx), UpstreamStreams::Aggregated, namespace);
    let upstream = Sessions::start(
        Arc::new(feeder),
        intake,
        crate::observe::ConfigHistory::default(),
        metrics.clone(),
        &config,
    );
    let (views, html) = page_of(upstream, metrics, config).await;
    let session = &views.sessions.sessions[0].session;
    let stream = session
        .stream
        .as_ref()
        .expect("an upstream session has a stream");
    assert_ne!(stream.phase, Phase::Open);
    let row = session_row(&html);
    assert!(
        row.contains(&format!(
            "<td><span class=\"warn\">{}</span> since {}",
            stream.phase.name(),
            stream.since
        )),
        "{row}"
    );
    assert!(!row.contains("class=\"muted\""), "{row}");
    let served = serde_json::to_value(&views.sessions).unwrap();
    assert_eq!(
        served["sessions"][0]["stream"],
        stream.phase.name(),
        "{served}"
    );
}
