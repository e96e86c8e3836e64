//! Rotated-away secrets in the history (issue 38, smaller ones), against
//! the gateway run in process on a snapshot directory with
//! `--allow-secrets`: after a secret is rotated, `/debug/history?version=`
//! shows the version served now whole, and refuses (403) the content of
//! the version rotated away; the timeline still lists both.

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::time::Duration;

use inproc::InProcess;
use process::eventually;
use xds_gateway::config::Config;

const WITHIN: Duration = Duration::from_secs(15);
const SECRET: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";
const PATH: &str = "/v3/discovery:secrets?node=edge-1&names=app_key";

fn write_secret(dir: &std::path::Path, value: &str) {
    std::fs::write(
        dir.join("secrets.yaml"),
        format!("- '@type': {SECRET}\n  name: app_key\n  generic_secret: {{secret: {{inline_string: {value}}}}}\n"),
    )
    .unwrap();
}

async fn get(port: u16, path: &str) -> gateway::Reply {
    gateway::get_with_token(port, path, None, WITHIN)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_rotated_away_secret_is_not_shown_by_the_history() {
    let dir = tempfile::tempdir().unwrap();
    write_secret(dir.path(), "old-private-key");
    let gw = InProcess::start(Config {
        snapshot: Some(dir.path().to_owned()),
        allow_secrets: true,
        ..Config::default()
    })
    .await;
    let first = get(gw.rest_port, PATH).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let old = first.json()["versionInfo"].as_str().unwrap().to_owned();
    write_secret(dir.path(), "new-private-key");
    let port = gw.rest_port;
    let new = eventually(WITHIN, Duration::from_millis(100), || async move {
        let reply = get(port, PATH).await;
        let version = reply.json()["versionInfo"].as_str()?.to_owned();
        reply.text().contains("new-private-key").then_some(version)
    })
    .await
    .expect("the rotated secret was never served");
    let history =
        |version: &str| format!("/debug/history?node=edge-1&type=secrets&version={version}");
    let now = get(gw.admin_port, &history(&new)).await;
    assert_eq!(now.status, 200, "{}", now.text());
    assert!(now.text().contains("new-private-key"), "{}", now.text());
    let rotated = get(gw.admin_port, &history(&old)).await;
    assert_eq!(rotated.status, 403, "{}", rotated.text());
    assert!(
        !rotated.text().contains("old-private-key"),
        "{}",
        rotated.text()
    );
    assert_eq!(rotated.json()["code"], 7);
    // Nor does a diff against it.
    let diff = get(
        gw.admin_port,
        &format!("/debug/diff?node=edge-1&type=secrets&from={old}&to={new}"),
    )
    .await;
    assert_eq!(diff.status, 403, "{}", diff.text());
    assert!(!diff.text().contains("private-key"), "{}", diff.text());
    let diff = get(gw.admin_port, "/debug/diff?node=edge-1&type=secrets").await;
    assert_eq!(diff.status, 403, "{}", diff.text());
    assert!(!diff.text().contains("old-private-key"), "{}", diff.text());
    let timeline = get(gw.admin_port, "/debug/history?node=edge-1&type=secrets").await;
    assert_eq!(timeline.status, 200, "{}", timeline.text());
    assert!(
        !timeline.text().contains("private-key"),
        "{}",
        timeline.text()
    );
    gw.stop().await;
}
