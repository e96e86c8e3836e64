//! `GET /` on the admin listener: one HTML page for a person, answering at a
//! glance what the JSON views answer in detail: is the gateway ready (and
//! if not, why), which sessions it holds and how their upstream streams
//! stand, which REST clients are in step and which are behind or suspected
//! of a rejection (since when, and why), apart from the one-shot readers
//! (curl, scripts) whose sync state means nothing, with links to each
//! node's config and to the JSON views.
//!
//! It renders the very views `/readyz`, `/debug/sessions` and
//! `/debug/clients` serve ([`Readiness`], [`SessionsView`],
//! [`ClientsView`]), from their fields: this module decides nothing and
//! reads nothing else. Everything shown is HTML-escaped (node
//! ids, names, user agents and errors come from clients and the upstream).
//! Self-contained (inline CSS, no script); it reloads itself every
//! `?refresh=` seconds (default [`REFRESH`], `0` for never).
//!
//! Guarded like the debug views; since a browser cannot easily send a
//! bearer header, a token policy answers it with an HTTP Basic challenge:
//! the person types the admin token as the password (any user name), and
//! the browser then sends it to the linked JSON views too.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::SystemTime;

use super::views::{Readiness, SessionsView};
use super::Admin;
use crate::observe::{ClientRole, ClientView, ClientsView, SubscriptionState, SubscriptionView};
use crate::store::{Phase, Placement, Placements, ReplyKind};
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};

mod html;
use html::{config_href, escape, escape_opt, history_href};

/// Seconds between reloads unless `?refresh=` says otherwise.
const REFRESH: u64 = 5;
/// Reloads more often than this are not honoured (seconds).
const MIN_REFRESH: u64 = 1;
/// The longest `?refresh=` (a day): the bound `openapi/admin.yaml` states.
const MAX_REFRESH: u64 = 86_400;

/// `GET /`.
pub(super) async fn status(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    peer: super::Peer,
    RawQuery(query): RawQuery,
) -> Response {
    if let Err(why) = admin.details_allowed("the status page", &headers, peer) {
        return needs_login(&why);
    }
    let refresh = match refresh(query.as_deref()) {
        Ok(refresh) => refresh,
        Err(why) => return (StatusCode::BAD_REQUEST, why).into_response(),
    };
    let page = render(&Views::of(&admin, refresh));
    ([(header::CACHE_CONTROL, "no-store")], Html(page)).into_response()
}

/// `?refresh=N`: seconds between reloads, `0` for none; anything but a
/// whole number of seconds up to [`MAX_REFRESH`] is refused, saying so.
fn refresh(query: Option<&str>) -> Result<u64, String> {
    let given = query
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("refresh="));
    let Some(given) = given else {
        return Ok(REFRESH);
    };
    match given.parse::<u64>() {
        Ok(0) => Ok(0),
        Ok(n) if n <= MAX_REFRESH => Ok(n.max(MIN_REFRESH)),
        _ => Err(format!(
            "refresh={given:?}: give the seconds between reloads as a whole number from 0 \
             (none) to {MAX_REFRESH}\n"
        )),
    }
}

/// The 401 a browser turns into a login prompt, saying `why` (what would
/// open the page).
fn needs_login(why: &str) -> Response {
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
        <title>xds-gateway: admin credential needed</title></head><body>\
        <h1>Admin credential needed</h1><p>{}.</p><p>With an admin token: sign in with any user \
        name and the token as the password, or send \
        <code>Authorization: Bearer &lt;token&gt;</code>.</p></body></html>\n",
        escape(why)
    );
    let challenge = "Basic realm=\"xds-gateway-admin\", charset=\"UTF-8\"";
    let headers = [(header::WWW_AUTHENTICATE, challenge)];
    (StatusCode::UNAUTHORIZED, headers, Html(body)).into_response()
}

/// What one page shows: the views the JSON endpoints serve.
struct Views {
    readiness: Readiness,
    sessions: SessionsView,
    clients: ClientsView,
    /// When the views were taken (RFC 3339).
    now: String,
    refresh: u64,
}

impl Views {
    /// The admin's views now, for a page reloading every `refresh` seconds.
    fn of(admin: &Admin, refresh: u64) -> Views {
        Views {
            readiness: admin.readiness(),
            sessions: admin.sessions_view(),
            clients: admin.clients.view(),
            now: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            refresh,
        }
    }
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{margin:0 0 .3em}h2{margin-top:1.5em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;width:100%}th,td{border:1px solid #ddd;padding:.3em .5em;\
text-align:left;vertical-align:top}th{background:#f4f4f4}code{font-size:90%}\
.ok{color:#176d17}.bad{color:#b00020;font-weight:600}.warn{color:#9a5b00;font-weight:600}\
#readiness{font-size:120%}.muted{color:#777}nav a{margin-right:1em}ul{margin:.2em 0;padding-left:1.2em}";

fn render(views: &Views) -> String {
    let mut out = String::with_capacity(8 * 1024);
    out.push_str("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    out.push_str("<title>xds-gateway status</title>");
    let refresh = views.refresh;
    if refresh > 0 {
        let _ = write!(out, "<meta http-equiv=\"refresh\" content=\"{refresh}\">");
    }
    let _ = writeln!(out, "<style>{STYLE}</style></head><body>");
    header_section(&mut out, views);
    problems_section(&mut out, views);
    sessions_section(&mut out, &views.sessions);
    clients_section(&mut out, &views.clients);
    out.push_str("</body></html>\n");
    out
}

fn header_section(out: &mut String, views: &Views) {
    let readiness = &views.readiness;
    let (class, word) = match (readiness.ready, readiness.draining) {
        (_, true) => ("bad", "draining (shutting down)"),
        (true, _) => ("ok", "ready"),
        _ => ("bad", "not ready"),
    };
    let _ = write!(
        out,
        "<header><h1>xds-gateway</h1><p id=\"readiness\" class=\"{class}\">{word}</p>\
         <p>Source: <code>{}</code> · {} sessions ({} waiting, {} stale, {} on a failover, \
         {} refusing upstream answers) · {} upstream streams open</p>",
        escape(&readiness.source),
        readiness.sessions,
        readiness.waiting_sessions,
        readiness.stale_sessions,
        readiness.failed_over_sessions,
        readiness.refusing_sessions,
        readiness.upstream_streams_open,
    );
    let refresh = views.refresh;
    let refresh = if refresh > 0 {
        format!("reloads every {refresh} s (<a href=\"/?refresh=0\">stop</a>)")
    } else {
        format!("does not reload (<a href=\"/?refresh={REFRESH}\">reload every {REFRESH} s</a>)")
    };
    let _ = write!(
        out,
        "<p class=\"muted\">As of {} · {refresh}</p><nav>JSON: ",
        escape(&views.now)
    );
    for href in [
        "/readyz",
        "/debug/sessions?pretty",
        "/debug/clients?pretty",
        "/debug/client_status?pretty",
        "/metrics",
    ] {
        let label = href.trim_end_matches("?pretty");
        let _ = write!(out, "<a href=\"{href}\">{label}</a>");
    }
    out.push_str("</nav></header>\n");
}

/// Readiness problems, failed streams, NACKs sent, errors the upstream
/// reported for single resources, suspected rejections.
fn problems_section(out: &mut String, views: &Views) {
    let readiness = &views.readiness;
    let mut problems: Vec<String> = Vec::new();
    if !readiness.ready && !readiness.draining {
        problems.push(
            "Not ready: the source has not answered yet (see the sessions below).".to_owned(),
        );
    }
    let listed = readiness.problems.iter().chain(&readiness.session_errors);
    problems.extend(listed.map(|p| escape(p)));
    problems.extend(
        readiness
            .failovers
            .iter()
            .map(|f| format!("On a failover upstream: {}", escape(f))),
    );
    for row in &views.sessions.sessions {
        let session = &row.session;
        for (kind, view) in &session.types {
            if view.resource_error_count > 0 {
                let listed: Vec<String> = view
                    .resource_errors
                    .iter()
                    .map(|e| {
                        format!(
                            "<code>{}</code> (code {}): {}",
                            escape(&e.name),
                            e.code,
                            escape(&e.message)
                        )
                    })
                    .collect();
                problems.push(format!(
                    "Node <code>{}</code>: the upstream reports errors for {} {} resource(s): {}",
                    escape(&session.node_id),
                    view.resource_error_count,
                    escape(kind),
                    listed.join("; "),
                ));
            }
            let nack = view
                .last_reply
                .as_ref()
                .filter(|r| r.kind == ReplyKind::Nack);
            if let Some(reply) = nack {
                let looping = match reply.in_a_row {
                    1 => String::new(),
                    n => format!(" ({n} NACKs in a row: a NACK loop)"),
                };
                problems.push(format!(
                    "Node <code>{}</code>: NACK of {} version <code>{}</code> sent upstream{looping}: {}",
                    escape(&session.node_id),
                    escape(kind),
                    escape(&reply.version),
                    escape_opt(reply.error_detail.as_deref()),
                ));
            }
        }
    }
    for client in &views.clients.clients {
        for (kind, view) in &client.types {
            for sub in &view.detail {
                let what = match sub.state {
                    SubscriptionState::Suspected => "suspected rejection",
                    SubscriptionState::Rejected => "NACK",
                    _ => continue,
                };
                problems.push(format!(
                    "Node <code>{}</code> ({}): {what} of {}: {}",
                    escape(&client.node_id),
                    escape_opt(client.remote.as_deref()),
                    escape(kind),
                    escape_opt(sub.why.as_deref()),
                ));
            }
        }
    }
    out.push_str("<section id=\"problems\"><h2>Problems</h2>");
    if problems.is_empty() {
        out.push_str("<p class=\"ok\">None.</p>");
    } else {
        out.push_str("<ul class=\"bad\">");
        for problem in problems {
            let _ = write!(out, "<li>{problem}</li>");
        }
        out.push_str("</ul>");
    }
    out.push_str("</section>\n");
}

fn sessions_section(out: &mut String, sessions: &SessionsView) {
    let list = &sessions.sessions;
    let _ = write!(
        out,
        "<section id=\"sessions\"><h2>Sessions ({})</h2>",
        list.len()
    );
    if list.is_empty() {
        out.push_str("<p class=\"muted\">None yet: a session opens when a client first polls.</p></section>\n");
        return;
    }
    out.push_str(
        "<table><tr><th>Node</th><th>Upstream stream</th><th>REST clients</th>\
         <th>Per type: version, resources, last reply</th></tr>",
    );
    for row in list {
        let session = &row.session;
        let node = &session.node_id;
        let stream = match &session.stream {
            // A snapshot: no stream, what feeds the session instead.
            None => format!("<span class=\"muted\">{}</span>", escape(&session.source)),
            Some(stream) => {
                let class = if stream.phase == Phase::Open {
                    "ok"
                } else {
                    "warn"
                };
                let mut cell = format!(
                    "<span class=\"{class}\">{}</span> since {}",
                    stream.phase.name(),
                    escape(&stream.since)
                );
                if let Some(stale_since) = &stream.stale_since {
                    let _ = write!(
                        cell,
                        "<br><span class=\"bad\">stale since {}</span>",
                        escape(stale_since)
                    );
                }
                if let Some(error) = &stream.last_error {
                    let _ = write!(
                        cell,
                        "<br>last error ({}): <code>{}</code>",
                        escape(&error.at),
                        escape(&error.error)
                    );
                }
                if let Some(placements) = &stream.placement {
                    cell.push_str(&placements_cell(placements));
                }
                cell
            }
        };
        let stream = match &session.serves {
            Some(serves) => format!("{stream}<br>serves the names of <b>{}</b>", escape(serves)),
            None => stream,
        };
        let _ = write!(
            out,
            "<tr class=\"session\" data-node=\"{}\"><td><b>{}</b><br>cluster {}<br>\
             <a href=\"{}\">config</a></td><td>{stream}</td><td>{}</td><td><ul>",
            escape(node),
            escape(node),
            escape(&session.cluster),
            config_href(node, None),
            row.clients,
        );
        for (kind, view) in &session.types {
            let reply = match &view.last_reply {
                Some(reply) if reply.kind == ReplyKind::Nack => format!(
                    "<span class=\"bad\">NACK</span> of {}: {}",
                    escape(&reply.version),
                    escape_opt(reply.error_detail.as_deref())
                ),
                Some(reply) => format!("{} of {}", reply.kind.name(), escape(&reply.version)),
                None => String::new(),
            };
            let _ = write!(
                out,
                "<li><a href=\"{}\">{}</a> (<a href=\"{}\">history</a>): {}{}{}</li>",
                config_href(node, Some(kind)),
                escape(kind),
                history_href(node, &session.cluster, kind),
                match &view.version {
                    Some(version) => format!(
                        "version <code>{}</code>, {} resources",
                        escape(version),
                        view.resources.map(|n| n.to_string()).unwrap_or_default()
                    ),
                    None => "<span class=\"warn\">waiting for the upstream</span>".to_owned(),
                },
                if reply.is_empty() { "" } else { ", " },
                reply,
            );
        }
        out.push_str("</ul></td></tr>");
    }
    out.push_str("</table></section>\n");
}

fn clients_section(out: &mut String, clients: &ClientsView) {
    let list = &clients.clients;
    let _ = write!(
        out,
        "<section id=\"clients\"><h2>REST clients ({}: {} subscribers, {} one-shot readers)</h2>",
        list.len(),
        clients.subscribers,
        clients.readers,
    );
    if list.is_empty() {
        out.push_str("<p class=\"muted\">None seen recently.</p></section>\n");
        return;
    }
    let (subscribers, readers): (Vec<&ClientView>, Vec<&ClientView>) =
        list.iter().partition(|c| c.role == ClientRole::Subscriber);
    if subscribers.is_empty() {
        out.push_str(
            "<p class=\"muted\">No subscriber (an Envoy that polls presenting its version, \
             a long poll, a watch) seen recently.</p>",
        );
    } else {
        clients_table(out, &subscribers, false);
    }
    if !readers.is_empty() {
        clients_table(out, &readers, true);
    }
    out.push_str("</section>\n");
}

/// One table of clients: the subscribers, whose sync state matters (in
/// step, or not and why), or the `readers` that never presented a version,
/// watched nor POSTed as an Envoy (curl, scripts): what they last read, in
/// no colour (never in step is how they work).
fn clients_table(out: &mut String, list: &[&ClientView], readers: bool) {
    let (class, last) = if readers {
        out.push_str(
            "<h3 id=\"readers\">One-shot readers</h3><p class=\"muted\">Clients that never presented a \
             version, watched nor POSTed as an Envoy (curl, scripts): each answer is a fresh read, \
             so \"in step\" does not apply to them.</p>\
             <table><tr><th>Node</th><th>Client</th><th>Type</th><th>Reads</th>\
             <th>Last read: names, version served</th></tr>",
        );
        ("reader", "read")
    } else {
        out.push_str(
            "<h3 id=\"subscribers\">Subscribers</h3>\
             <table><tr><th>Node</th><th>Client</th><th>Type</th><th>In step</th>\
             <th>Subscriptions not in step (every one when it has one): names, state, versions, why</th></tr>",
        );
        ("client", "poll")
    };
    for client in list {
        let node = escape(&client.node_id);
        for (kind, view) in &client.types {
            let kind = escape(kind);
            let _ = write!(
                out,
                "<tr class=\"{class}\" data-node=\"{node}\" data-type=\"{kind}\"><td><b>{node}</b><br>\
                 cluster {}</td><td>{} from {}<br>last {last} {}</td><td>{kind}</td>",
                escape(&client.cluster),
                escape(&client.user_agent),
                escape_opt(client.remote.as_deref()),
                escape_opt(view.last_poll.as_deref()),
            );
            if readers {
                let reads = view.detail.iter().map(|s| s.polls).sum::<u64>();
                let _ = write!(out, "<td>{reads}</td><td><ul>");
                for sub in &view.detail {
                    let _ = write!(
                        out,
                        "<li>{}: served <code>{}</code> (upstream version <code>{}</code>)</li>",
                        names_of(sub),
                        escape(&sub.current),
                        escape(&sub.upstream_version),
                    );
                }
            } else {
                let in_step = view.in_step == view.subscriptions;
                let _ = write!(
                    out,
                    "<td class=\"{}\">{} of {}</td><td><ul>",
                    if in_step { "ok" } else { "bad" },
                    view.in_step,
                    view.subscriptions,
                );
                for sub in &view.detail {
                    subscription(out, sub);
                }
            }
            out.push_str("</ul></td></tr>");
        }
    }
    out.push_str("</table>");
}

/// A subscription's names as shown: the first few and how many more.
fn names_of(sub: &SubscriptionView) -> String {
    if sub.wildcard {
        return "(wildcard)".to_owned();
    }
    let shown: Vec<String> = sub.names.iter().map(|n| escape(n)).collect();
    let more = sub.name_count.saturating_sub(shown.len());
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// One subscription of a client, as a list item.
fn subscription(out: &mut String, sub: &SubscriptionView) {
    let names = names_of(sub);
    let state = sub.state.name();
    let class = match sub.state {
        SubscriptionState::InStep => "ok",
        SubscriptionState::CatchingUp => "warn",
        SubscriptionState::Behind | SubscriptionState::Suspected | SubscriptionState::Rejected => {
            "bad"
        }
    };
    let _ = write!(
        out,
        "<li class=\"subscription\" data-state=\"{state}\">{names}: <span class=\"{class}\">{state}</span>, \
         presents <code>{}</code>, served <code>{}</code> (upstream version <code>{}</code>)",
        escape(&sub.presented),
        escape(&sub.current),
        escape(&sub.upstream_version),
    );
    if let Some(out_of_step_for) = &sub.out_of_step_for {
        let _ = write!(out, " for {}", escape(out_of_step_for));
    }
    if let Some(why) = &sub.why {
        let _ = write!(out, "<br>{}", escape(why));
    }
    out.push_str("</li>");
}

#[cfg(test)]
mod tests;

/// Which upstream each stream of a session is on, since when and why (with
/// a failover configured): warned while on a failover.
fn placements_cell(placements: &Placements) -> String {
    let one = |lane: Option<&str>, p: &Placement| {
        let class = if p.on_failover() { "warn" } else { "ok" };
        format!(
            "<br>{}on <span class=\"{class}\">{}</span> since {} ({})",
            lane.map(|l| format!("{} ", escape(l))).unwrap_or_default(),
            escape(&p.upstream),
            escape(&p.since),
            escape(&p.reason)
        )
    };
    match placements {
        Placements::Aggregated(p) => one(None, p),
        Placements::PerStream(lanes) => lanes.iter().map(|(lane, p)| one(Some(lane), p)).collect(),
    }
}
