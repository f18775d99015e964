//! Gate holds shared through a real Redis: what one replica's gate holds
//! the other replicas' gates keep, the later end wins, ended holds go, no
//! credential reaches Redis, and a dead Redis loses nothing a replica
//! published.
#![allow(clippy::unwrap_used)]

mod support;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::rate_limit::{RateLimitLayer, SharedGate};
use llm_retry::{RetryLayer, RetryPolicy, RetryReport};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use llm_retry_redis::{RedisGate, SharedOptions, StateName};
use std::sync::Arc;
use std::time::Duration;
use support::RedisServer;
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt};

const S: fn(u64) -> Duration = Duration::from_secs;
const API_KEY: &str = "sk-ant-never-in-redis-0123456789";

fn options() -> SharedOptions {
    SharedOptions::default()
        .with_timeout(S(2))
        .with_sync_interval(S(3600))
}

fn replica(server: &RedisServer, secret: &[u8]) -> RedisGate {
    replica_of(server, secret, 1)
}

fn replica_of(server: &RedisServer, secret: &[u8], replicas: u32) -> RedisGate {
    RedisGate::start(
        server.client(),
        StateName::new("api").unwrap(),
        options().with_replicas(replicas),
        secret,
    )
    .unwrap()
}

/// Seconds left of a hold, rounded down.
fn left(until: Option<Instant>) -> Option<u64> {
    Some(until?.checked_duration_since(Instant::now())?.as_secs())
}

async fn keys(server: &RedisServer) -> Vec<String> {
    let mut connection = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut connection)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_hold_published_by_one_replica_is_read_by_another_and_the_later_wins() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (first, second) = (replica(&server, b"fleet"), replica(&server, b"fleet"));
    assert_eq!(first.key_secret(), second.key_secret());
    assert_ne!(first.key_secret(), replica(&server, b"other").key_secret());
    first.publish_hold(7, Instant::now() + S(30));
    second.publish_hold(7, Instant::now() + S(10));
    second.publish_hold(8, Instant::now() + S(20));
    assert!(first.sync().await && second.sync().await && first.sync().await);
    for store in [&first, &second] {
        // The 30 s hold, not the 10 s one: more than 20 s left, however
        // slow the machine.
        assert!(matches!(left(store.read_hold(7)), Some(21..=29)));
        assert!(matches!(left(store.read_hold(8)), Some(11..=19)));
        assert_eq!(store.read_hold(9), None);
    }
    assert_eq!(keys(&server).await, ["{llm-retry:api}:holds"]);
}

#[tokio::test]
async fn a_hold_reaches_the_other_replicas_without_waiting_for_their_interval() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // Syncs an hour apart: only the news channel can bring the hold.
    let (first, second) = (replica(&server, b"fleet"), replica(&server, b"fleet"));
    let mut connection = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for attempt in 0.. {
        assert!(attempt < 1_000, "the replicas never subscribed");
        let (_, listening): (String, u32) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("{llm-retry:api}:holds:news")
            .query_async(&mut connection)
            .await
            .unwrap();
        if listening == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.publish_hold(7, Instant::now() + S(30));
    let published = std::time::Instant::now();
    assert!(first.sync().await);
    // An hour before the interval would: news woke the sync (which waits
    // its gap, the timeout, 2 s here, then reads).
    while second.read_hold(7).is_none() {
        assert!(
            published.elapsed() < S(60),
            "the hold never reached the other replica"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    eprintln!(
        "the hold reached the other replica {:?} after it was published",
        published.elapsed()
    );
}

#[tokio::test]
async fn ended_holds_leave_the_replicas_and_redis() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (first, second) = (replica(&server, b"fleet"), replica(&server, b"fleet"));
    // Two seconds: longer than two syncs take on a loaded machine.
    let until = Instant::now() + S(2);
    first.publish_hold(1, until);
    assert!(first.sync().await && second.sync().await);
    assert!(second.read_hold(1).is_some());
    tokio::time::sleep_until(until + Duration::from_millis(50)).await;
    assert!(second.sync().await);
    assert_eq!(second.read_hold(1), None);
    assert!(
        keys(&server).await.is_empty(),
        "the hash went with its last hold"
    );
}

#[tokio::test]
async fn holds_published_while_redis_is_dead_are_sent_once_it_is_back() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let (first, second) = (replica(&server, b"fleet"), replica(&server, b"fleet"));
    server.kill();
    first.publish_hold(3, Instant::now() + S(30));
    assert!(!first.sync().await);
    assert!(first.is_degraded());
    // Its own hold still counts where it was set.
    assert!(first.read_hold(3).is_some());
    server.restart();
    assert!(first.sync().await && second.sync().await);
    assert!(matches!(left(second.read_hold(3)), Some(21..=29)));
}

fn request(url: &str) -> http::Request<Full<Bytes>> {
    http::Request::post(url)
        .header("content-type", "application/json")
        .header("x-api-key", API_KEY)
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":16}"#,
        )))
        .unwrap()
}

#[tokio::test]
async fn a_wait_one_replica_was_told_holds_every_replica_s_next_send() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let upstream = refusing_once().await;
    let url = upstream.url("/v1/messages");
    // Three replicas: each its own store, gate, retry layer and client.
    let replicas: Vec<_> = (0..3).map(|_| serving_replica(&server, "api")).collect();
    let refused = replicas[0].1.clone().oneshot(request(&url)).await.unwrap();
    assert_eq!(refused.status(), 429);
    // Published, then read by the others at their next sync.
    for (holds, _) in &replicas {
        assert!(holds.sync().await);
    }
    let mut connection = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let stored: Vec<String> = redis::cmd("HKEYS")
        .arg("{llm-retry:api}:holds")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(stored.len(), 1, "one key, one model: {stored:?}");
    assert!(!stored[0].contains("sk-ant"));
    for (_, service) in &replicas[1..] {
        let served = service.clone().oneshot(request(&url)).await.unwrap();
        assert_eq!(served.status(), 200);
        assert!(
            served.extensions().get::<RetryReport>().is_none(),
            "served at its first send: nothing to report"
        );
    }
    let sent = upstream.requests();
    assert_eq!(sent.len(), 3, "no replica was refused again");
    for later in &sent[1..] {
        // Never before the hold's end: a lower bound no slow machine breaks.
        assert!(later.received_at - sent[0].received_at >= S(2));
    }
}

/// An upstream that refuses its first request, naming a 2 s wait, and
/// serves the rest.
async fn refusing_once() -> MockServer {
    MockServer::start(Script::new().route(
        "/v1/messages",
        Route::sequence_then([Reply::rate_limited(Some(2))], Reply::anthropic_ok("Hi")),
    ))
    .await
    .unwrap()
}

/// One replica: its store sharing under `name`, a gate, a retry layer that
/// does not retry, and a client.
fn serving_replica(
    server: &RedisServer,
    name: &str,
) -> (
    RedisGate,
    impl tower::Service<
            http::Request<Full<Bytes>>,
            Response = http::Response<llm_retry::RetryBody<impl Sized>>,
            Error = llm_retry::BoxError,
        > + Clone,
) {
    let holds = RedisGate::start(
        server.client(),
        StateName::new(name).unwrap(),
        options(),
        b"fleet",
    )
    .unwrap();
    let policy = RetryPolicy::builder().max_retries(0).build().unwrap();
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .layer(RateLimitLayer::learned().share_with(Arc::new(holds.clone())))
        .service(Client::builder(TokioExecutor::new()).build_http());
    (holds, service)
}

/// A hold for [`request`]'s key, as the replicas named `api` would find
/// it in Redis: drawn by a 429 from `upstream` to a replica elsewhere (the
/// same secret, so the same key fingerprint), then written into their
/// hash as a sync writes it, but with no news published. Its field.
async fn held_elsewhere(server: &RedisServer, upstream: &MockServer) -> String {
    let (told, teller) = serving_replica(server, "elsewhere");
    let refused = teller
        .oneshot(request(&upstream.url("/v1/messages")))
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    assert!(told.sync().await);
    let mut connection = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let stored: Vec<String> = redis::cmd("HGETALL")
        .arg("{llm-retry:elsewhere}:holds")
        .query_async(&mut connection)
        .await
        .unwrap();
    let [field, until] = &stored[..] else {
        panic!("one hold: {stored:?}")
    };
    let () = redis::cmd("HSET")
        .arg("{llm-retry:api}:holds")
        .arg(field)
        .arg(until)
        .query_async(&mut connection)
        .await
        .unwrap();
    field.clone()
}

#[tokio::test]
async fn a_hold_in_redis_keeps_every_replica_s_next_send_before_any_sync_or_news() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let upstream = refusing_once().await;
    let url = upstream.url("/v1/messages");
    // The fleet's replicas, synced once, an hour before their next sync.
    let fleet = [
        serving_replica(&server, "api"),
        serving_replica(&server, "api"),
    ];
    for (holds, _) in &fleet {
        assert!(holds.sync().await);
    }
    let field = held_elsewhere(&server, &upstream).await;
    let key = u64::from_str_radix(&field, 16).unwrap();
    for (holds, _) in &fleet {
        assert_eq!(holds.read_hold(key), None, "not known before the send");
    }
    let sends = fleet
        .iter()
        .map(|(_, service)| service.clone().oneshot(request(&url)));
    for served in futures_util::future::join_all(sends).await {
        assert_eq!(served.unwrap().status(), 200);
    }
    for (holds, _) in &fleet {
        assert!(holds.read_hold(key).is_some(), "known once read");
    }
    let sent = upstream.requests();
    assert_eq!(sent.len(), 3, "no replica of the fleet was refused");
    for later in &sent[1..] {
        // Never before the hold's end: a lower bound no slow machine breaks.
        assert!(later.received_at - sent[0].received_at >= S(2));
    }
}

/// Three replicas, each its own store, gate (told the key's quota: 600 a
/// minute, one at a time), retry layer and client, in front of one
/// upstream: their sends share the quota's pace.
async fn paced_replicas(server: &RedisServer) -> Vec<Paced> {
    let quota = llm_retry::rate_limit::Quotas::none().requests_per_minute_with_burst(600, 1);
    replicas_under(server, quota).await
}

/// Three replicas as [`paced_replicas`], each gate told `quota`.
async fn replicas_under(server: &RedisServer, quota: llm_retry::rate_limit::Quotas) -> Vec<Paced> {
    let mut replicas = Vec::new();
    for _ in 0..3 {
        let gate = replica_of(server, b"fleet", 3);
        // Connected and loaded, as a replica that synced at start (a
        // loaded machine may take a few tries; a dead Redis fails here).
        let mut tries = 0;
        while !gate.sync().await {
            tries += 1;
            assert!(tries < 100, "Redis never answered");
        }
        let service = ServiceBuilder::new()
            .layer(RetryLayer::new(
                RetryPolicy::builder().max_retries(0).build().unwrap(),
            ))
            .layer(
                RateLimitLayer::new(quota)
                    .unwrap()
                    .share_with(Arc::new(gate)),
            )
            .service(Client::builder(TokioExecutor::new()).build_http())
            .map_response(|answer: http::Response<_>| answer.status());
        replicas.push(Paced::new(service));
    }
    replicas
}

/// A replica of [`paced_replicas`].
type Paced = tower::util::BoxCloneSyncService<
    http::Request<Full<Bytes>>,
    http::StatusCode,
    llm_retry::BoxError,
>;

/// An upstream that serves every request.
async fn serving() -> MockServer {
    MockServer::start(Script::new().route("/v1/messages", Route::always(Reply::anthropic_ok("Hi"))))
        .await
        .unwrap()
}

/// Sends `each` requests through every one of `replicas`, all at once, and
/// checks each is served: how long the upstream took to receive them all.
async fn span_of(replicas: &[Paced], each: usize, upstream: &MockServer) -> Duration {
    span_of_costed(replicas, each, upstream, None).await
}

/// As [`span_of`], each request costing `cost` tokens if given.
async fn span_of_costed(
    replicas: &[Paced],
    each: usize,
    upstream: &MockServer,
    cost: Option<u64>,
) -> Duration {
    let url = upstream.url("/v1/messages");
    let costed = || {
        let mut request = request(&url);
        if let Some(cost) = cost {
            request
                .extensions_mut()
                .insert(llm_retry::rate_limit::TokenCost(cost));
        }
        request
    };
    let sends: Vec<_> = replicas
        .iter()
        .flat_map(|replica| (0..each).map(|_| tokio::spawn(replica.clone().oneshot(costed()))))
        .collect();
    for send in sends {
        assert_eq!(send.await.unwrap().unwrap(), 200);
    }
    let mut at: Vec<_> = upstream.requests().iter().map(|r| r.received_at).collect();
    at.sort();
    assert_eq!(at.len(), replicas.len() * each);
    at[at.len() - 1] - at[0]
}

#[tokio::test]
async fn replicas_told_a_quota_pace_their_sends_together() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let upstream = serving().await;
    let replicas = paced_replicas(&server).await;
    // Four requests through each replica, all at once. 600 a minute is one
    // send every 100 ms, fleet-wide: the twelve span 1.1 s, less what the
    // first send's way to the upstream took more than the last's. Each
    // replica alone would have sent its four within 0.3 s: the bound sits
    // between the two, far from both.
    let span = span_of(&replicas, 4, &upstream).await;
    assert!(span >= Duration::from_millis(700), "{span:?}");
}

#[tokio::test]
async fn replicas_told_a_token_quota_spend_it_together() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let upstream = serving().await;
    // 4,000 tokens a second, 500 at once; each request costs 500: one send
    // every 125 ms, fleet-wide.
    let quota = llm_retry::rate_limit::Quotas::none().tokens_per_minute_with_burst(240_000, 500);
    let replicas = replicas_under(&server, quota).await;
    // Four requests through each replica, all at once: the twelve span
    // 1.375 s together, less what the first send's way to the upstream
    // took more than the last's; each replica alone would have sent its
    // four within 0.375 s.
    let span = span_of_costed(&replicas, 4, &upstream, Some(500)).await;
    assert!(span >= Duration::from_millis(1_000), "{span:?}");
}

#[tokio::test]
async fn without_redis_each_replica_paces_its_share_of_the_quota() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let upstream = serving().await;
    let replicas = paced_replicas(&server).await;
    server.kill();
    // Three requests through one replica: alone, one of three, it sends at
    // a third of the quota (one every 300 ms: 0.6 s), and no request fails.
    // At the whole quota the three span 0.2 to 0.3 s: the bound sits
    // between.
    let span = span_of(&replicas[..1], 3, &upstream).await;
    assert!(span >= Duration::from_millis(450), "{span:?}");
}

#[tokio::test]
async fn a_send_reads_holds_again_within_a_second_of_redis_coming_back() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let upstream = MockServer::start(Script::new().route(
        "/v1/messages",
        Route::sequence_then(
            [Reply::anthropic_ok("Hi"), Reply::rate_limited(Some(2))],
            Reply::anthropic_ok("Hi"),
        ),
    ))
    .await
    .unwrap();
    let url = upstream.url("/v1/messages");
    let (holds, service) = serving_replica(&server, "api");
    assert!(holds.sync().await);
    // Redis gone: the send's ask fails, and it goes on the replica's own
    // state.
    server.kill();
    let failed = std::time::Instant::now();
    let served = service.clone().oneshot(request(&url)).await.unwrap();
    assert_eq!(served.status(), 200);
    // Back, empty; a hold stored for the key with no news, as another
    // replica's sync would write it.
    server.restart();
    held_elsewhere(&server, &upstream).await;
    // A second after the failed ask, the replica's next send reads it.
    tokio::time::sleep(Duration::from_secs(1).saturating_sub(failed.elapsed())).await;
    let served = service.oneshot(request(&url)).await.unwrap();
    assert_eq!(served.status(), 200);
    let sent = upstream.requests();
    assert_eq!(sent.len(), 3);
    // Never before the hold's end: a lower bound no slow machine breaks.
    assert!(sent[2].received_at - sent[1].received_at >= S(2));
}
