//! One client polling a new set of thousands of names
//! each time (or from a new session each time) holds a bounded amount of
//! the gateway: read from the gateway's own accounting (the client book,
//! the parsed-request memo, the `?changes` history), not from RSS.

use super::*;

/// Names in the pool, and per request (a random-looking half of the pool).
const POOL: usize = 4_000;
const PER_REQUEST: usize = 2_000;
const REQUESTS: usize = 60;

fn body(node: &str, i: usize) -> String {
    // A distinct window of the pool per request.
    let names: Vec<String> = (0..PER_REQUEST)
        .map(|n| format!("cluster-{:05}", (i * 37 + n) % POOL))
        .collect();
    serde_json::json!({"node": {"id": node}, "resource_names": names}).to_string()
}

#[tokio::test]
async fn one_client_polling_new_name_sets_holds_a_bounded_amount() {
    let gw = demo_gateway(Config::default());
    for i in 0..REQUESTS {
        let (status, text) = send(
            gw.clone(),
            "POST",
            "/v3/discovery:clusters",
            body("edge-1", i),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&text));
    }
    // Every request named ~2,000 names: ~110 KB each in the client book.
    let book = gw.clients.held_by("edge-1");
    assert!(
        book.bytes <= 4 * 1024 * 1024,
        "one client keeps at most 4 MiB of subscriptions: {book:?}"
    );
    assert!(book.entries < REQUESTS as u64, "{book:?}");
    // The memo weighs each entry by its parse (names included), not by its
    // body (~30 KB): what it holds is counted at its size.
    let memo = gw.parsed.held();
    let names_bytes = (PER_REQUEST * "cluster-00000".len()) as u64;
    assert!(
        memo.bytes >= memo.entries * 3 * names_bytes,
        "entries weigh their parsed names: {memo:?}"
    );
    // The history counts the names each answer was served for.
    let history = gw.answer_log.held();
    assert!(
        history.bytes >= history.entries * PER_REQUEST as u64,
        "answers weigh their names: {history:?}"
    );
}
