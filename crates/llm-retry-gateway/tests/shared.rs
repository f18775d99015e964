//! Gateways (replicas) in one process sharing one real Redis through
//! `[shared]`: a wait a provider named to one keeps the others off that
//! target (or, with nowhere else to go, holds their sends to it), and each
//! target's budget is shared under its route's name.
#![allow(clippy::unwrap_used)]

#[path = "../../llm-retry-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use llm_retry_mock::{MockServer, Reply, Route};
use redis_support::RedisServer;
use support::{gateway, no_env, post, rate_limited, send, target, PROMPT};

/// Route `claude` over `a` (cooling down on a named wait), then `b`; with
/// `shared` as the `[shared]` table when given.
fn config(a: &MockServer, b: &MockServer, shared: Option<&str>) -> String {
    let shared = shared.map_or(String::new(), |url| {
        // Syncs are driven by the test (`sync_shared`); the tasks' own
        // are an hour apart.
        format!("[shared]\nredis_url = \"{url}\"\ntimeout = \"2s\"\nsync_interval = \"60m\"\n")
    });
    format!(
        r#"{shared}
[[route]]
name = "claude"

[[route.target]]
name = "a"
base_url = "{a}"
cooldown = true

[[route.target]]
name = "b"
base_url = "{b}"
"#,
        a = a.url(""),
        b = b.url("")
    )
}

#[tokio::test]
async fn a_wait_named_to_one_replica_keeps_the_other_off_the_target() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let a = target(Route::always(rate_limited("30"))).await;
    let b = target(Route::always(Reply::anthropic_ok("from b"))).await;
    let shared = config(&a, &b, Some(&redis.url()));
    let first = gateway(&shared, no_env).await;
    let second = gateway(&shared, no_env).await;
    let alone = gateway(&config(&a, &b, None), no_env).await;

    let (head, _) = send(post(&first.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
    assert_eq!(a.request_count(), 1);
    assert!(first.gateway.sync_shared().await);
    assert!(second.gateway.sync_shared().await);

    let (head, body) = send(post(&second.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
    assert!(String::from_utf8_lossy(&body).contains("from b"));
    assert_eq!(a.request_count(), 1, "the second replica never sent to a");
    assert_eq!(b.request_count(), 2);

    // A gateway without [shared] learns the wait only by a refusal of its own.
    let (head, _) = send(post(&alone.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
    assert_eq!(a.request_count(), 2);

    // Every replica names the same keys: the route's marks, and each
    // target's budget as `<route>/<target>`.
    let mut redis_conn = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let marks: Vec<String> = redis::cmd("HKEYS")
        .arg("{llm-retry:claude}:failover")
        .query_async(&mut redis_conn)
        .await
        .unwrap();
    // The cooldown is kept for the model the request named, under a tag.
    assert_eq!(marks.len(), 1, "{marks:?}");
    assert!(marks[0].starts_with("c:a#model:"), "{marks:?}");
    for budget in ["{llm-retry:claude/a}:budget", "{llm-retry:claude/b}:budget"] {
        let exists: bool = redis::cmd("EXISTS")
            .arg(budget)
            .query_async(&mut redis_conn)
            .await
            .unwrap();
        assert!(exists, "{budget}");
    }
}

/// With `namespace`, every key sits under it, inside the hash tag.
#[tokio::test]
async fn a_namespace_holds_every_key() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let a = target(Route::always(rate_limited("30"))).await;
    let b = target(Route::always(Reply::anthropic_ok("from b"))).await;
    let shared = config(&a, &b, Some(&redis.url()))
        .replace("[shared]\n", "[shared]\nnamespace = \"team-a\"\n");
    let replica = gateway(&shared, no_env).await;
    let (head, _) = send(post(&replica.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
    assert!(replica.gateway.sync_shared().await);
    let mut redis_conn = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut redis_conn)
        .await
        .unwrap();
    keys.sort();
    assert_eq!(
        keys,
        [
            "{team-a:claude/a}:budget",
            // The 30 s hold a's gate took from its 429.
            "{team-a:claude/a}:holds",
            "{team-a:claude/b}:budget",
            "{team-a:claude}:failover"
        ]
    );
}

/// Route `solo` with one target, `a`; shared through `url`.
fn solo(a: &MockServer, url: &str) -> String {
    format!(
        "[shared]\nredis_url = \"{url}\"\ntimeout = \"2s\"\nsync_interval = \"60m\"\n\n\
         [[route]]\nname = \"solo\"\n\n[[route.target]]\nname = \"a\"\nbase_url = \"{a}\"\n",
        a = a.url("")
    )
}

#[tokio::test]
async fn a_wait_named_to_one_replica_holds_the_others_sends_to_the_target() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let a = target(Route::sequence_then(
        [rate_limited("2")],
        Reply::anthropic_ok("from a"),
    ))
    .await;
    let config = solo(&a, &redis.url());
    let replicas = [
        gateway(&config, no_env).await,
        gateway(&config, no_env).await,
        gateway(&config, no_env).await,
    ];
    let first = tokio::spawn(send(post(&replicas[0].url("/v1/messages"), PROMPT)));
    // The first replica's gate took the 429's wait and published it.
    let mut redis_conn = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for attempt in 0.. {
        assert!(attempt < 2_000, "no hold reached Redis");
        assert!(replicas[0].gateway.sync_shared().await);
        let held: u64 = redis::cmd("HLEN")
            .arg("{llm-retry:solo/a}:holds")
            .query_async(&mut redis_conn)
            .await
            .unwrap();
        if held == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let others: Vec<_> = replicas[1..]
        .iter()
        .map(|replica| {
            let url = replica.url("/v1/messages");
            async move {
                assert!(replica.gateway.sync_shared().await);
                send(post(&url, PROMPT)).await
            }
        })
        .collect();
    for (head, body) in futures_util::future::join_all(others).await {
        assert_eq!(head.status, 200);
        assert!(String::from_utf8_lossy(&body).contains("from a"));
    }
    let (head, _) = first.await.unwrap();
    assert_eq!(head.status, 200);
    let sent = a.requests();
    assert_eq!(sent.len(), 4, "one 429, then one send a request");
    for later in &sent[1..] {
        // None before the named wait ended: a lower bound no load breaks.
        assert!(later.received_at - sent[0].received_at >= std::time::Duration::from_secs(2));
    }
}
