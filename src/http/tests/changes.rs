//! `?changes`, in process against scripted sessions: a poll presenting a
//! version gets the resources added or modified since and the names
//! removed; an unknown or empty version gets the whole state saying so; a
//! watch's events say what changed since the previous one. A version is
//! compared only against what was served to the node presenting it.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use super::scripted;
use crate::config::Config;
use crate::http::{router, Gateway};
use crate::xds::ResourceType;

const CDS: ResourceType = ResourceType::Clusters;

fn cluster(name: &str, timeout: &str) -> Value {
    json!({"@type": CDS.type_url(), "name": name, "connect_timeout": timeout})
}

async fn get(gw: &Arc<Gateway>, path: &str) -> (StatusCode, Value) {
    let response = router(gw.clone())
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|r| r.get("name").unwrap_or(r).as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_poll_with_a_version_gets_what_changed_since() {
    let (gw, script) = scripted(Config::default());
    script
        .set(
            CDS,
            "v1",
            &[cluster("a", "1s"), cluster("b", "1s"), cluster("c", "1s")],
        )
        .await;
    let (_, first) = get(&gw, "/v3/discovery:clusters?node=n").await;
    let v1 = first["versionInfo"].as_str().unwrap().to_owned();
    script
        .set(
            CDS,
            "v2",
            &[cluster("a", "1s"), cluster("b", "2s"), cluster("d", "1s")],
        )
        .await;

    let (status, delta) = get(
        &gw,
        &format!("/v3/discovery:clusters?node=n&changes&version={v1}"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{delta}");
    assert_eq!(names(&delta["resources"]), ["b", "d"]);
    assert_eq!(delta["resources"][0]["resource"]["connectTimeout"], "2s");
    assert_eq!(delta["resources"][0]["resource"]["@type"], CDS.type_url());
    assert_eq!(names(&delta["removedResources"]), ["c"]);
    assert_eq!(delta["fullState"], false);
    let v2 = delta["systemVersionInfo"].as_str().unwrap().to_owned();
    assert!(v2.starts_with("v2~"), "{delta}");

    // The same version as a plain poll: the same served version.
    let (_, full) = get(&gw, &format!("/v3/discovery:clusters?node=n&version={v1}")).await;
    assert_eq!(full["versionInfo"], v2.as_str());
    // Current: 304, as for a poll.
    let (status, _) = get(
        &gw,
        &format!("/v3/discovery:clusters?node=n&changes&version={v2}"),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    // Unknown or empty: the whole state, saying so.
    for version in ["v0~000000000000", ""] {
        let (status, delta) = get(
            &gw,
            &format!("/v3/discovery:clusters?node=n&changes&version={version}"),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(names(&delta["resources"]), ["a", "b", "d"], "{version}");
        assert!(names(&delta["removedResources"]).is_empty());
        assert_eq!(delta["fullState"], true, "{version}");
    }
    let (status, body) = get(&gw, "/v3/discovery:clusters?node=n&changes=maybe").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

/// Node B presenting the version node A was served
/// learns nothing of A's names: it gets its whole state, saying so.
#[tokio::test(start_paused = true)]
async fn another_nodes_version_gets_the_full_state_and_none_of_its_names() {
    let (gw, script) = scripted(Config::default());
    script
        .set(
            CDS,
            "v1",
            &[cluster("a-only", "1s"), cluster("shared", "1s")],
        )
        .await;
    let (_, first) = get(&gw, "/v3/discovery:clusters?node=a&cluster=c").await;
    let v1 = first["versionInfo"].as_str().unwrap().to_owned();
    script.set(CDS, "v2", &[cluster("shared", "2s")]).await;
    // A itself still gets what changed since.
    let (_, own) = get(
        &gw,
        &format!("/v3/discovery:clusters?node=a&cluster=c&changes&version={v1}"),
    )
    .await;
    assert_eq!(own["fullState"], false, "{own}");
    assert_eq!(names(&own["removedResources"]), ["a-only"]);

    for other in ["node=b&cluster=c", "node=a&cluster=d", "cluster=c"] {
        let (status, delta) = get(
            &gw,
            &format!("/v3/discovery:clusters?{other}&changes&version={v1}"),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{other}: {delta}");
        assert_eq!(delta["fullState"], true, "{other}: {delta}");
        assert!(
            names(&delta["removedResources"]).is_empty(),
            "{other}: {delta}"
        );
        assert_eq!(names(&delta["resources"]), ["shared"], "{other}");
        assert!(!delta.to_string().contains("a-only"), "{other}: {delta}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_watch_with_changes_sends_what_changed_since_its_last_event() {
    let (gw, script) = scripted(Config::default());
    script
        .set(CDS, "v1", &[cluster("a", "1s"), cluster("b", "1s")])
        .await;
    let response = router(gw.clone())
        .oneshot(
            Request::get("/v3/discovery:clusters?node=n&watch&changes&format=sse")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let mut next = async || {
        let frame = tokio::time::timeout(Duration::from_secs(1), body.frame())
            .await
            .expect("a frame")
            .unwrap()
            .unwrap();
        String::from_utf8(frame.into_data().unwrap().to_vec()).unwrap()
    };
    assert!(next().await.starts_with("retry:"));
    let event = |frame: String| -> Value {
        assert!(frame.contains("\nevent: changes\n"), "{frame}");
        let data = frame
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap();
        serde_json::from_str(data).unwrap()
    };
    let first = event(next().await);
    assert_eq!(first["fullState"], true);
    assert_eq!(names(&first["resources"]), ["a", "b"]);

    script
        .set(CDS, "v2", &[cluster("b", "1s"), cluster("c", "1s")])
        .await;
    let second = event(next().await);
    assert_eq!(second["fullState"], false);
    assert_eq!(names(&second["resources"]), ["c"]);
    assert_eq!(names(&second["removedResources"]), ["a"]);
    script
        .set(CDS, "v3", &[cluster("b", "3s"), cluster("c", "1s")])
        .await;
    let third = event(next().await);
    assert_eq!(names(&third["resources"]), ["b"]);
    assert!(names(&third["removedResources"]).is_empty());
}
