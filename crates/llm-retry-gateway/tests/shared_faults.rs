//! Gateway replicas sharing through a real Redis that fails: killed, they
//! serve every request gateways without `[shared]` serve, and no answer
//! mentions Redis; hung, no send waits for it.
#![allow(clippy::unwrap_used)]

#[path = "../../llm-retry-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use bytes::Bytes;
use llm_retry_mock::{MockServer, Reply, Route};
use redis_support::RedisServer;
use std::time::{Duration, Instant};
use support::{gateway, no_env, one_target, post, rate_limited, send, target, Running, PROMPT};

const REQUESTS: usize = 8;

/// Per request, in order: a 503 then a 200 (served after one retry), or,
/// every fourth request, three 503s (given up after two retries).
fn replies() -> Vec<Reply> {
    (0..REQUESTS)
        .flat_map(|n| {
            if n % 4 == 3 {
                vec![Reply::status(503), Reply::status(503), Reply::status(503)]
            } else {
                vec![Reply::status(503), Reply::anthropic_ok("served")]
            }
        })
        .collect()
}

/// Whether `bytes` name Redis, in any case.
fn mentions_redis(bytes: &[u8]) -> bool {
    bytes.windows(5).any(|w| w.eq_ignore_ascii_case(b"redis"))
}

/// Sends request `n` to replica `n % 2` and returns its status, after
/// checking no header or byte of the answer names Redis.
async fn status_of(replicas: &[Running; 2], n: usize) -> u16 {
    let (head, body): (http::response::Parts, Bytes) =
        send(post(&replicas[n % 2].url("/v1/messages"), PROMPT)).await;
    for (name, value) in &head.headers {
        assert!(
            !mentions_redis(name.as_str().as_bytes()) && !mentions_redis(value.as_bytes()),
            "request {n}: {name}: {value:?}"
        );
    }
    assert!(!mentions_redis(&body), "request {n}: {body:?}");
    head.status.as_u16()
}

/// Two replicas with `[shared]` on `redis`, its calls bounded by 1 s (no
/// flake on a loaded machine: a dead Redis refuses at once), and two
/// without, in front of identical upstreams. Redis is killed halfway.
/// Request for request, the shared pair answers as the unshared pair does.
#[tokio::test]
async fn a_killed_redis_costs_no_request_that_unshared_replicas_serve() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let shared_upstream = target(Route::sequence(replies())).await;
    let alone_upstream = target(Route::sequence(replies())).await;
    let shared_table = format!(
        "[shared]\nredis_url = \"{}\"\ntimeout = \"1s\"\nreplicas = 2\n",
        redis.url()
    );
    let config =
        |upstream: &MockServer, top: &str| one_target(&upstream.url(""), top, "max_retries = 2");
    let shared = [
        gateway(&config(&shared_upstream, &shared_table), no_env).await,
        gateway(&config(&shared_upstream, &shared_table), no_env).await,
    ];
    let alone = [
        gateway(&config(&alone_upstream, ""), no_env).await,
        gateway(&config(&alone_upstream, ""), no_env).await,
    ];
    for replica in &shared {
        assert!(replica.gateway.sync_shared().await, "Redis answers");
    }

    // The two pairs at once: each waits out its retries' backoffs.
    let shared_run = async {
        let mut statuses = Vec::new();
        for n in 0..REQUESTS {
            if n == REQUESTS / 2 {
                redis.kill();
                for replica in &shared {
                    assert!(!replica.gateway.sync_shared().await, "Redis is dead");
                }
            }
            statuses.push(status_of(&shared, n).await);
        }
        statuses
    };
    let alone_run = async {
        let mut statuses = Vec::new();
        for n in 0..REQUESTS {
            statuses.push(status_of(&alone, n).await);
        }
        statuses
    };
    let (shared_statuses, alone_statuses) = tokio::join!(shared_run, alone_run);
    assert_eq!(shared_statuses, alone_statuses);
    let served = shared_statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(served, REQUESTS * 3 / 4, "{shared_statuses:?}");
    assert_eq!(
        shared_upstream.request_count(),
        alone_upstream.request_count()
    );
}

/// Route `r` over `a` (cooling down on a named wait, its mark shared) then
/// `b`, each retried once; the shared table's calls bounded by 500 ms and
/// made every 10 ms.
fn hang_config(a: &MockServer, b: &MockServer, redis: &RedisServer) -> String {
    format!(
        r#"
[shared]
redis_url = "{url}"
timeout = "500ms"
sync_interval = "10ms"

[[route]]
name = "r"

[[route.target]]
name = "a"
base_url = "{a}"
max_retries = 1
cooldown = true

[[route.target]]
name = "b"
base_url = "{b}"
max_retries = 1
"#,
        url = redis.url(),
        a = a.url(""),
        b = b.url("")
    )
}

/// Redis held by `DEBUG SLEEP 60`: requests go on being served, retried
/// and failed over (a mark published, retries spent) while it sleeps, so
/// none waited for it to wake (a send that asks a target's gate store
/// waits at most the 500 ms timeout, and the sends after it answer alone
/// for half a second). Each request's time (one retry's backoff
/// in each) is printed against the same with Redis answering; it is not
/// asserted.
#[tokio::test]
async fn a_hung_redis_delays_a_send_by_at_most_its_timeout() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    const EACH: usize = 3;
    // Before the hang `a` answers each request with a 503, then a 200;
    // then it names a 30 s wait, so the first request in the hang goes on
    // to `b`, and so do the rest (each retried once there, as on `a`).
    let retried = |from: &'static str| {
        (0..EACH).flat_map(move |_| [Reply::status(503), Reply::anthropic_ok(from)])
    };
    let a = target(Route::sequence_then(retried("from a"), rate_limited("30"))).await;
    let b = target(Route::sequence(retried("from b"))).await;
    let replica = gateway(&hang_config(&a, &b, &redis), no_env).await;
    assert!(replica.gateway.sync_shared().await, "Redis answers");

    let time_of = |n: usize| {
        let url = replica.url("/v1/messages");
        async move {
            let started = Instant::now();
            let (head, _) = send(post(&url, PROMPT)).await;
            assert_eq!(head.status, 200, "request {n}");
            started.elapsed()
        }
    };
    let mut answering = Vec::new();
    for n in 0..EACH {
        answering.push(time_of(n).await);
    }
    let _sleeper = redis.send_without_waiting("DEBUG SLEEP 60");
    redis.wait_until_stalled(Duration::from_millis(200));
    let mut hung = Vec::new();
    for n in EACH..2 * EACH {
        hung.push(time_of(n).await);
    }
    assert!(
        redis.stalled(),
        "Redis woke before the requests ended: they may have waited for it"
    );
    assert_eq!(
        a.request_count(),
        2 * EACH + 1,
        "a cooled down after its 429"
    );
    assert_eq!(b.request_count(), 2 * EACH, "each retried once on b");
    println!("per request, Redis answering: {answering:?}; Redis hung: {hung:?}");
}

/// A Redis call may take up to `timeout` to count as failed; until then a
/// replica spends the retries it holds in reserve. Held longer than a
/// reservation lasts by default (1 s), with a timeout longer still, the
/// replica must still spend them: its retries are served, none refused
/// for a reservation that lapsed while the sync that would renew it hung.
/// (The first send also waits out the timeout once, asking the gate's
/// store for a hold; the sends after it answer alone for a while.)
#[tokio::test]
async fn a_hang_longer_than_a_reservation_refuses_no_retry() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    const RETRIED: usize = 3;
    let upstream =
        target(Route::sequence((0..RETRIED).flat_map(|_| {
            [Reply::status(503), Reply::anthropic_ok("served")]
        })))
        .await;
    // Syncs only when asked or woken; each waits up to 2 s.
    let table = format!(
        "[shared]\nredis_url = \"{}\"\ntimeout = \"2s\"\nsync_interval = \"60m\"\n",
        redis.url()
    );
    let replica = gateway(
        &one_target(&upstream.url(""), &table, "max_retries = 1"),
        no_env,
    )
    .await;
    assert!(replica.gateway.sync_shared().await, "Redis answers");
    let _sleeper = redis.send_without_waiting("DEBUG SLEEP 60");
    redis.wait_until_stalled(Duration::from_millis(200));
    // Past the default reservation's second (longer changes nothing).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    for n in 0..RETRIED {
        let (head, _) = send(post(&replica.url("/v1/messages"), PROMPT)).await;
        assert_eq!(head.status, 200, "request {n}: its retry was refused");
    }
    assert!(redis.stalled(), "Redis woke before the requests ended");
    assert_eq!(upstream.request_count(), 2 * RETRIED);
}
