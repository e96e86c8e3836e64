use std::net::IpAddr;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::admin::views::NodeSession;
use crate::cache::{ClientBook, ParsedRequests, Poll, Standing};
use crate::config::SessionKey;
use crate::source::view::{LastError, ReplyView, SessionTypeView, SessionView, StreamView};
use crate::xds::ResourceType;

const HOSTILE: &str = "<script>alert('x')</script>\"&";

/// A client book as the REST side fills it: one client of `node` whose
/// listeners are a suspected rejection of version 2.
fn book(node: &str) -> ClientBook {
    let book = ClientBook::new(Duration::from_secs(60));
    let body = json!({
        "version_info": "1~aaaaaaaaaaaa",
        "node": {"id": node, "cluster": "edge", "user_agent_name": "envoy"},
    });
    let request = ParsedRequests::new(SessionKey::Node)
        .parse(body.to_string().into())
        .unwrap();
    book.record(Poll {
        request: &request,
        kind: ResourceType::Listeners,
        remote: Some(IpAddr::from([127, 0, 0, 1])),
        current: "2~bbbbbbbbbbbb",
        body: false,
        standing: Standing::Suspected { polls: 3 },
        rewritten_for: None,
    });
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
    };
    let nack = ReplyView {
        kind: ReplyKind::Nack,
        version: "2".into(),
        at: "2026-01-01T00:00:00Z".into(),
        error_detail: Some("<i>bad</i>".into()),
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
        "body", "/body", "header", "/header", "h1", "/h1", "h2", "/h2", "p", "/p", "code", "/code",
        "nav", "/nav", "a", "/a", "section", "/section", "ul", "/ul", "li", "/li", "table",
        "/table", "tr", "/tr", "th", "/th", "td", "/td", "b", "/b", "br", "span", "/span",
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
        html.contains(">clusters</a>: <span class=\"warn\">waiting for the upstream</span>"),
        "{html}"
    );
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no external assets"
    );
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
