//! Replicas sharing through a real Redis over TLS (`rediss://`), its
//! certificate checked against the roots the process trusts.
//!
//! The only test of its binary: it points the process's roots
//! (`SSL_CERT_FILE`) at the test's own CA.
#![allow(clippy::unwrap_used)]

#[path = "../../llm-retry-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use llm_retry_mock::{MockServer, Reply, Route};
use redis_support::RedisServer;
use support::{gateway, no_env, post, rate_limited, send, target, PROMPT};

/// Route `claude` over `a` (cooling down on a named wait, its mark shared)
/// then `b`, sharing through `url`.
fn config(a: &MockServer, b: &MockServer, url: &str) -> String {
    format!(
        r#"
[shared]
redis_url = "{url}"
timeout = "2s"
sync_interval = "60m"

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
async fn a_wait_named_to_one_replica_reaches_the_other_over_tls() {
    let Some(redis) = RedisServer::start_tls() else {
        return;
    };
    // Before any TLS client is built: the roots are read per connection.
    std::env::set_var("SSL_CERT_FILE", redis.ca_file());
    let a = target(Route::always(rate_limited("30"))).await;
    let b = target(Route::always(Reply::anthropic_ok("from b"))).await;
    let shared = config(&a, &b, &redis.tls_url());
    let first = gateway(&shared, no_env).await;
    let second = gateway(&shared, no_env).await;

    let (head, _) = send(post(&first.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
    assert!(first.gateway.sync_shared().await, "Redis answers over TLS");
    assert!(second.gateway.sync_shared().await, "Redis answers over TLS");
    let (head, _) = send(post(&second.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
    assert_eq!(a.request_count(), 1, "the second replica never sent to a");

    // A CA the process does not trust: the handshake fails, the replica
    // says Redis did not answer, and still serves.
    std::env::set_var("SSL_CERT_FILE", "/nonexistent/ca.crt");
    let untrusting = gateway(&shared, no_env).await;
    assert!(!untrusting.gateway.sync_shared().await);
    let (head, _) = send(post(&untrusting.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
}
