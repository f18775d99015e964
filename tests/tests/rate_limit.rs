//! The shared gate on loopback: a wait one request learned holds the key
//! for every other request, and the retry deadline bounds the gate's waits.
#![allow(clippy::unwrap_used)]

mod support;

use http::StatusCode;
use llm_retry::rate_limit::{Quotas, RateLimitLayer};
use llm_retry::{ClientLayer, RetryLayer, RetryReport};
use llm_retry_mock::{Limit, MockServer, Quota, Reply, Route, Script, Shape};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use support::{client, fast_policy, messages_request};
use tower::{Layer, ServiceBuilder, ServiceExt};

#[tokio::test(start_paused = true)]
async fn a_learned_wait_holds_requests_that_never_saw_the_429() {
    let script = Script::new().route(
        "/v1/messages",
        Route::sequence([Reply::rate_limited(Some(1)), Reply::anthropic_ok("ok")]),
    );
    let mock = MockServer::start(script).await.unwrap();
    let gate = RateLimitLayer::new(Quotas::none()).unwrap();
    // The first caller does not retry: it only teaches the gate.
    let teacher = ServiceBuilder::new()
        .layer(RetryLayer::new(
            fast_policy().max_retries(0).build().unwrap(),
        ))
        .layer(gate.clone())
        .service(client());
    let learner = ServiceBuilder::new()
        .layer(RetryLayer::new(fast_policy().build().unwrap()))
        .layer(gate)
        .service(client());
    taught_then_held(teacher, learner, &mock, Duration::from_secs(1), || ()).await;
}

/// `teacher`'s request is refused naming `wait`; after `between`, the
/// `learner`'s is served at its first attempt, sent no sooner than `wait`
/// after the refused one.
async fn taught_then_held<T, L, B, C>(
    teacher: T,
    learner: L,
    mock: &MockServer,
    wait: Duration,
    between: impl FnOnce(),
) where
    T: tower::Service<
        http::Request<http_body_util::Full<bytes::Bytes>>,
        Response = http::Response<B>,
    >,
    L: tower::Service<
        http::Request<http_body_util::Full<bytes::Bytes>>,
        Response = http::Response<C>,
    >,
    T::Error: std::fmt::Debug,
    L::Error: std::fmt::Debug,
{
    let url = mock.url("/v1/messages");
    let first = teacher.oneshot(messages_request(&url)).await.unwrap();
    assert_eq!(first.status(), StatusCode::TOO_MANY_REQUESTS);
    between();
    let second = learner.oneshot(messages_request(&url)).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(
        second
            .extensions()
            .get::<RetryReport>()
            .map_or(1, |r| r.attempts),
        1,
        "no 429 of its own"
    );
    let sent = mock.requests();
    assert_eq!(sent.len(), 2);
    assert!(sent[1].received_at - sent[0].received_at >= wait);
}

#[tokio::test(start_paused = true)]
async fn a_gate_wait_past_the_retry_deadline_ends_the_request() {
    let script = Script::new().route("/v1/messages", Route::always(Reply::rate_limited(Some(30))));
    let mock = MockServer::start(script).await.unwrap();
    let policy = fast_policy()
        .max_elapsed(Duration::from_secs(10))
        .build()
        .unwrap();
    let svc = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .layer(RateLimitLayer::new(Quotas::none()).unwrap())
        .service(client());
    let url = mock.url("/v1/messages");
    // The first answer names 30 s: the retry layer itself will not wait past
    // its 10 s deadline. Until later sends corroborate the key's hold they
    // are sent, as without a gate (the 429 might have been that request's
    // own); both are refused the same way.
    for _ in 0..3 {
        let answer = svc.clone().oneshot(messages_request(&url)).await.unwrap();
        assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    // Corroborated: the next request is refused by the gate at once.
    let start = tokio::time::Instant::now();
    let err = svc.oneshot(messages_request(&url)).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    let err = err.downcast::<llm_retry::RetryError>().unwrap();
    assert!(err.stop().is_not_retryable(), "{err}");
    assert_eq!(err.report().attempts, 0, "the refused send never left");
    let source = std::error::Error::source(&*err).unwrap().to_string();
    assert!(source.contains("past the request's deadline"), "{source}");
    assert_eq!(mock.request_count(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_window_that_states_no_reset_costs_one_probe_per_window() {
    // Azure-shaped: 10 requests per 2 s window, every answer states what is
    // left of it and none when it resets; a 429 names the window's end.
    const CLIENTS: usize = 10;
    const EACH: usize = 4;
    let limit = Limit::new(Quota::Window {
        limit: 10,
        length: Duration::from_secs(2),
    })
    .shape(Shape::Azure);
    let mock = support::mock(Route::limited(
        limit,
        Reply::rate_limited(None),
        Route::always(Reply::anthropic_ok("ok")),
    ))
    .await;
    let layer = ClientLayer::new(fast_policy().max_retries(10).build().unwrap());
    let service = layer.layer(client());
    let url = mock.url("/v1/messages");
    // Closed loop: each client sends its next request when the last ended.
    let clients = (0..CLIENTS).map(|_| {
        let service = service.clone();
        let url = url.clone();
        async move {
            let mut served = 0;
            for _ in 0..EACH {
                let response = service.clone().oneshot(messages_request(&url)).await;
                served += usize::from(response.unwrap().status() == StatusCode::OK);
            }
            served
        }
    });
    let served: usize = futures_util::future::join_all(clients).await.iter().sum();
    assert_eq!(served, CLIENTS * EACH);
    // Four windows' worth: once a window is spent, one send learns when it
    // ends and the rest wait for that, instead of one 429 per client per
    // window (10 more sends a window).
    let sends = mock.request_count();
    let probes = sends - CLIENTS * EACH;
    assert!(
        (3..=4).contains(&probes),
        "{probes} refused sends for 3 spent windows"
    );
}

/// Holds shared in memory, as a store shared through Redis would be once
/// synced: what two replicas' gates share.
#[derive(Debug, Default)]
struct InMemoryHolds(std::sync::Mutex<std::collections::HashMap<u64, tokio::time::Instant>>);

impl llm_retry::rate_limit::SharedGate for InMemoryHolds {
    fn key_secret(&self) -> [u8; 16] {
        *b"a fleet's secret"
    }

    fn publish_hold(&self, key: u64, until: tokio::time::Instant) {
        let mut holds = self.0.lock().unwrap();
        let known = holds.entry(key).or_insert(until);
        *known = (*known).max(until);
    }

    fn read_hold(&self, key: u64) -> Option<tokio::time::Instant> {
        self.0.lock().unwrap().get(&key).copied()
    }

    fn turn(
        &self,
        key: u64,
        pace: Option<llm_retry::rate_limit::SharedPace>,
        _: Option<(llm_retry::rate_limit::SharedPace, u32)>,
        _: Option<Duration>,
        max_hold: Option<Duration>,
    ) -> Pin<Box<dyn Future<Output = Result<Duration, Duration>> + Send>> {
        assert_eq!(pace, None, "no key here has a quota");
        Box::pin(std::future::ready(Ok(held_for(
            self.read_hold(key),
            max_hold,
        ))))
    }
}

/// What is left of a hold until `until`, where a send that honours
/// `max_hold` waits for it.
fn held_for(until: Option<tokio::time::Instant>, max_hold: Option<Duration>) -> Duration {
    let left = until.map_or(Duration::ZERO, |until| {
        until.saturating_duration_since(tokio::time::Instant::now())
    });
    if max_hold.is_some_and(|max| left > max) {
        Duration::ZERO
    } else {
        left
    }
}

/// One replica: `RetryLayer` with `policy` over a gate of its own that
/// shares its holds through `holds`.
fn shared_replica(
    holds: &std::sync::Arc<InMemoryHolds>,
    policy: llm_retry::RetryPolicy,
) -> impl tower::Service<
    http::Request<http_body_util::Full<bytes::Bytes>>,
    Response = http::Response<llm_retry::RetryBody<impl Sized>>,
    Error = llm_retry::BoxError,
> {
    ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .layer(
            RateLimitLayer::new(Quotas::none())
                .unwrap()
                .share_with(holds.clone()),
        )
        .service(client())
}

#[tokio::test(start_paused = true)]
async fn a_wait_one_replica_learned_holds_the_other_replicas_sends() {
    let script = Script::new().route(
        "/v1/messages",
        Route::sequence([Reply::rate_limited(Some(2)), Reply::anthropic_ok("ok")]),
    );
    let mock = MockServer::start(script).await.unwrap();
    let holds: std::sync::Arc<InMemoryHolds> = std::sync::Arc::default();
    // Two replicas: gates of their own, one store of holds.
    let replica =
        |retries| shared_replica(&holds, fast_policy().max_retries(retries).build().unwrap());
    let published = || assert_eq!(holds.0.lock().unwrap().len(), 1, "the hold was published");
    taught_then_held(
        replica(0),
        replica(3),
        &mock,
        Duration::from_secs(2),
        published,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_window_one_replica_saw_spent_holds_the_other_replicas_sends_until_its_reset() {
    // OpenAI-shaped: the first answer states no request left in the
    // window, which resets in 2 s.
    let spent = Reply::openai_ok("ok")
        .header("x-ratelimit-limit-requests", "60")
        .header("x-ratelimit-remaining-requests", "0")
        .header("x-ratelimit-reset-requests", "2s");
    let script = Script::new().route(
        "/v1/messages",
        Route::sequence([spent, Reply::anthropic_ok("ok")]),
    );
    let mock = MockServer::start(script).await.unwrap();
    let holds: std::sync::Arc<InMemoryHolds> = std::sync::Arc::default();
    let replica = || shared_replica(&holds, fast_policy().build().unwrap());
    let url = mock.url("/v1/messages");
    let first = replica().oneshot(messages_request(&url)).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        holds.0.lock().unwrap().len(),
        1,
        "the spent window was published"
    );
    // The other replica never saw that answer: it waits for the reset
    // instead of drawing a 429 of its own.
    let second = replica().oneshot(messages_request(&url)).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    let sent = mock.requests();
    assert_eq!(sent.len(), 2);
    assert!(sent[1].received_at - sent[0].received_at >= Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn another_replica_s_hold_longer_than_a_request_honours_does_not_keep_it() {
    let script = Script::new().route(
        "/v1/messages",
        Route::sequence([Reply::rate_limited(Some(60)), Reply::anthropic_ok("ok")]),
    );
    let mock = MockServer::start(script).await.unwrap();
    let holds: std::sync::Arc<InMemoryHolds> = std::sync::Arc::default();
    let replica = |max_server_wait| {
        let policy = fast_policy()
            .max_retries(0)
            .max_server_wait(max_server_wait)
            .max_elapsed(Duration::from_secs(300))
            .build()
            .unwrap();
        shared_replica(&holds, policy)
    };
    let url = mock.url("/v1/messages");
    let first = replica(Duration::from_secs(120))
        .oneshot(messages_request(&url))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(holds.0.lock().unwrap().len(), 1, "the hold was published");
    // A replica whose requests honour 5 s sends at once, as without the
    // shared hold, and learns for itself.
    let start = tokio::time::Instant::now();
    let second = replica(Duration::from_secs(5))
        .oneshot(messages_request(&url))
        .await
        .unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

/// A fleet whose pace always answers the same wait (`paced`, for a key
/// with a shared pace), and in which another replica may hold every key
/// (until `held`): what it answers a send, counted.
#[derive(Debug, Default)]
struct StandIn {
    paced: Duration,
    held: Option<tokio::time::Instant>,
    asked: std::sync::atomic::AtomicUsize,
}

impl llm_retry::rate_limit::SharedGate for StandIn {
    fn key_secret(&self) -> [u8; 16] {
        [7; 16]
    }

    fn publish_hold(&self, _: u64, _: tokio::time::Instant) {}

    fn read_hold(&self, _: u64) -> Option<tokio::time::Instant> {
        // Not known in memory: only the ask before the send finds it.
        None
    }

    fn turn(
        &self,
        _: u64,
        pace: Option<llm_retry::rate_limit::SharedPace>,
        _: Option<(llm_retry::rate_limit::SharedPace, u32)>,
        max_wait: Option<Duration>,
        max_hold: Option<Duration>,
    ) -> Pin<Box<dyn Future<Output = Result<Duration, Duration>> + Send>> {
        self.asked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let paced = if pace.is_some() {
            self.paced
        } else {
            Duration::ZERO
        };
        let wait = held_for(self.held, max_hold).max(paced);
        let fits = max_wait.is_none_or(|max| wait <= max);
        Box::pin(std::future::ready(if fits { Ok(wait) } else { Err(wait) }))
    }
}

/// Through a gate told `quotas` that shares with the fleet `fleet(wait)`
/// answers (a request with a 10 s deadline, honouring waits up to 120 s):
/// a send the fleet keeps 3 s goes after exactly 3 s, and one it would
/// keep 60 s is refused at once, unsent. How often the kept send asked.
async fn kept_by_the_fleet_within_the_deadline(
    quotas: Quotas,
    fleet: impl Fn(Duration) -> StandIn,
) -> usize {
    let script = Script::new().route("/v1/messages", Route::always(Reply::anthropic_ok("ok")));
    let mock = MockServer::start(script).await.unwrap();
    let url = mock.url("/v1/messages");
    let through = |fleet: &std::sync::Arc<StandIn>| {
        let policy = fast_policy()
            .max_elapsed(Duration::from_secs(10))
            .max_server_wait(Duration::from_secs(120))
            .build()
            .unwrap();
        ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .layer(
                RateLimitLayer::new(quotas)
                    .unwrap()
                    .share_with(fleet.clone()),
            )
            .service(client())
    };
    let kept = std::sync::Arc::new(fleet(Duration::from_secs(3)));
    let start = tokio::time::Instant::now();
    let served = through(&kept)
        .oneshot(messages_request(&url))
        .await
        .unwrap();
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    let start = tokio::time::Instant::now();
    let refused = std::sync::Arc::new(fleet(Duration::from_secs(60)));
    let err = through(&refused)
        .oneshot(messages_request(&url))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    let source = std::error::Error::source(&*err.downcast::<llm_retry::RetryError>().unwrap())
        .unwrap()
        .to_string();
    assert!(source.contains("past the request's deadline"), "{source}");
    assert_eq!(mock.request_count(), 1);
    kept.asked.load(std::sync::atomic::Ordering::Relaxed)
}

#[tokio::test(start_paused = true)]
async fn a_send_waits_for_its_turn_in_the_fleet_s_pace_within_its_deadline() {
    // Told a quota, sharing with a fleet that answers `wait` for a turn.
    let quota = Quotas::none().requests_per_minute(600);
    kept_by_the_fleet_within_the_deadline(quota, |wait| StandIn {
        paced: wait,
        ..StandIn::default()
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_hold_the_fleet_answers_keeps_the_send_until_it_ends() {
    // No quota; another replica holds the key for `hold`.
    let asked = kept_by_the_fleet_within_the_deadline(Quotas::none(), |hold| StandIn {
        held: Some(tokio::time::Instant::now() + hold),
        ..StandIn::default()
    })
    .await;
    assert_eq!(asked, 1, "asked once, before the send");
}
