//! A learned rate (`RateLimitLayer::learned`) seen from outside: the rate
//! a burst of 429s teaches paces the key's queue first in, first out; a
//! rise moves the waiting sends up from the last send, a hold moves them
//! back, and a send refused or dropped leaves no gap and lets no one
//! through sooner than the rate. The retry layer over the gate over a
//! scripted upstream, on tokio's paused clock.
#![allow(clippy::unwrap_used)]

mod gate_support;

use gate_support::*;
use llm_retry::rate_limit::{GateError, RateLimitLayer, TokenCost};
use llm_retry::RetryError;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

const LONG: Duration = Duration::from_secs(60);

/// A burst's sends are all out before the first answer comes back.
const BURST_LATENCY: Duration = Duration::from_millis(10);

/// The gate under a retry layer that resends nothing (`svc`), and under
/// one that would resend its refusals (`teacher`): a request that ends
/// at a refusal caps the key's rate there, one that goes on does not.
struct Gated {
    upstream: Upstream,
    svc: ValvedStack,
    teacher: ValvedStack,
}

type ValvedStack = llm_retry::Retry<llm_retry::rate_limit::RateLimit<Valve<UpstreamService>>>;

fn gated() -> Gated {
    gated_behind(Arc::new(Mutex::new(Instant::now())))
}

/// [`gated`], its upstream behind a [`Valve`] opening at `opens_at`.
fn gated_behind(opens_at: Arc<Mutex<Instant>>) -> Gated {
    let upstream = Upstream::timed(script);
    let gated = RateLimitLayer::learned().layer(Valve::new(upstream.service(), opens_at));
    Gated {
        svc: over(once(), gated.clone()),
        teacher: over(
            llm_retry::RetryPolicy::builder().no_budget().max_retries(3),
            gated,
        ),
        upstream,
    }
}

/// The paths the scripted upstream knows: `/nowait` is refused naming no
/// wait, `/tenth` naming 100 ms, `/busy` naming 10 s after 500 ms;
/// `/slowN` answers after N ms (others at once); `/tokens` states a token quota of 60,000
/// a minute with none left; `/hang…` answers after a minute.
fn script(seen: &Seen) -> (Duration, http::Response<http_body_util::Full<bytes::Bytes>>) {
    let path = seen.path.as_str();
    if let Some(ms) = path.strip_prefix("/slow") {
        return (Duration::from_millis(ms.parse().unwrap()), ok());
    }
    match path {
        "/nowait" => (BURST_LATENCY, answer(429, &[])),
        "/tenth" => (BURST_LATENCY, refused_for_ms(100)),
        "/busy" => (Duration::from_millis(500), refused_for_ms(10_000)),
        "/late" | "/other" => (Duration::ZERO, answer(429, &[])),
        "/late3000" => (Duration::from_secs(3), answer(429, &[])),
        "/tokens" => (
            Duration::ZERO,
            answer(
                200,
                &[
                    ("x-ratelimit-limit-tokens", "60000".into()),
                    ("x-ratelimit-remaining-tokens", "0".into()),
                    // Token quotas are read only beside a request window.
                    ("x-ratelimit-remaining-requests", "999999".into()),
                    ("x-ratelimit-reset-requests", "0ms".into()),
                ],
            ),
        ),
        p if p.starts_with("/hang") => (LONG, ok()),
        _ => (Duration::ZERO, ok()),
    }
}

/// Teaches the key one send a second, as a user's traffic would: five
/// successes a second apart, then a burst of 40 refusals naming no wait.
/// Returns when the key's next send may go: a second after the burst.
async fn one_per_second(gated: &Gated) -> Instant {
    for _ in 0..5 {
        gated.svc.clone().oneshot(post("/")).await.unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    burst(gated, "/nowait").await
}

/// 40 requests to `path` at once, each refused, given up while they wait
/// to be resent. Returns when the key's next send may go.
async fn burst(gated: &Gated, path: &str) -> Instant {
    let sent = Instant::now();
    let calls: Vec<_> = (0..40)
        .map(|_| tokio::spawn(gated.teacher.clone().oneshot(post(path))))
        .collect();
    tokio::time::sleep(BURST_LATENCY * 2).await;
    for call in calls {
        call.abort();
    }
    settle().await;
    let refused = gated
        .upstream
        .seen()
        .iter()
        .filter(|s| s.path == path)
        .count();
    assert_eq!(refused, 40, "{:?}", gated.upstream.sends());
    sent + Duration::from_secs(1)
}

/// When each send to `paths` arrived, in ms after `start`.
fn sent_after(upstream: &Upstream, start: Instant, paths: &[&str]) -> Vec<u128> {
    upstream
        .seen()
        .iter()
        .filter(|s| paths.contains(&s.path.as_str()))
        .map(|s| (upstream.start() + s.at - start).as_millis())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_learned_rate_paces_the_queue_first_in_first_out() {
    let gated = gated();
    let (upstream, svc) = (&gated.upstream, &gated.svc);
    let start = one_per_second(&gated).await;
    let calls = spawn_all(svc, &["/hang1", "/hang2", "/hang3"]).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let sent: Vec<(String, u128)> = upstream
        .seen()
        .into_iter()
        .filter(|s| s.path.starts_with("/hang"))
        .map(|s| (s.path, (upstream.start() + s.at - start).as_millis()))
        .collect();
    assert_eq!(
        sent,
        [
            ("/hang1".into(), 0),
            ("/hang2".into(), 1_000),
            ("/hang3".into(), 2_000)
        ]
    );
    calls.into_iter().for_each(|c| c.abort());
}

#[tokio::test(start_paused = true)]
async fn a_rising_learned_rate_paces_from_the_last_send_not_from_history() {
    // One a second, learned. Five sends go at that rate (the first is
    // answered 4 s later, the rest not yet) while three more queue. The
    // success raises the rate: the three go on from the last send at the
    // new rate, not all at once (from the schedule's start, the new rate
    // would put all three in the past).
    let gated = gated();
    let (upstream, svc) = (&gated.upstream, &gated.svc);
    let start = one_per_second(&gated).await;
    let mut calls = spawn_all(svc, &["/slow4000", "/hang", "/hang", "/hang", "/hang"]).await;
    tokio::time::sleep_until(start + Duration::from_millis(3_500)).await;
    calls.extend(spawn_all(svc, &["/hang_w1", "/hang_w2", "/hang_w3"]).await);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let went = sent_after(upstream, start, &["/slow4000", "/hang"]);
    assert_eq!(went, [0, 1_000, 2_000, 3_000, 4_000]);
    let waiting = sent_after(upstream, start, &["/hang_w1", "/hang_w2", "/hang_w3"]);
    assert_eq!(waiting, [4_800, 5_600, 6_400]);
    calls.into_iter().for_each(|c| c.abort());
}

#[tokio::test(start_paused = true)]
async fn a_rise_lets_the_waiting_sends_go_sooner() {
    // One a second, learned. A send is served after half a second: the
    // rate rises, and the send queued for 1 s goes before it.
    let gated = gated();
    let (upstream, svc) = (&gated.upstream, &gated.svc);
    let start = one_per_second(&gated).await;
    let calls = spawn_all(svc, &["/slow500", "/hang"]).await;
    tokio::time::sleep_until(start + Duration::from_secs(2)).await;
    let sent = sent_after(upstream, start, &["/hang"]);
    assert_eq!(sent.len(), 1);
    assert!(sent[0] > 500 && sent[0] < 1_000, "{sent:?}");
    calls.into_iter().for_each(|c| c.abort());
}

#[tokio::test(start_paused = true)]
async fn a_hold_moves_a_learned_queue_back_in_order() {
    // One a second, learned. The first of three is refused after half a
    // second naming 10 s: the two behind it wait for the hold, in order.
    let gated = gated();
    let (upstream, svc) = (&gated.upstream, &gated.svc);
    let start = one_per_second(&gated).await;
    let calls = spawn_all(svc, &["/busy", "/q1", "/q2"]).await;
    for call in calls {
        call.await.unwrap().unwrap();
    }
    let sent = sent_after(upstream, start, &["/busy", "/q1", "/q2"]);
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[0], 0);
    assert!(sent[1] >= 10_500, "{sent:?}");
    assert!(sent[2] > sent[1], "{sent:?}");
    let order: Vec<String> = upstream
        .seen()
        .into_iter()
        .filter(|s| s.path.starts_with("/q"))
        .map(|s| s.path)
        .collect();
    assert_eq!(order, ["/q1", "/q2"]);
}

#[tokio::test(start_paused = true)]
async fn a_send_refused_for_its_deadline_leaves_no_gap_in_a_learned_schedule() {
    // 429s naming 100 ms to the next token: a send every 100 ms. Of three
    // sends queued together the middle one's turn is past its deadline:
    // refused by the gate, it gives its place back, and the third goes
    // 100 ms after the first.
    let gated = gated();
    let (upstream, svc) = (&gated.upstream, &gated.svc);
    let hurried = over(
        once().max_elapsed(Duration::from_millis(50)),
        gated.svc.get_ref().clone(),
    );
    svc.clone().oneshot(post("/")).await.unwrap();
    burst(&gated, "/tenth").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut calls = spawn_all(svc, &["/hang"]).await;
    let err = hurried
        .oneshot(post("/hurried"))
        .await
        .unwrap_err()
        .downcast::<RetryError>()
        .unwrap();
    let source = std::error::Error::source(&*err).unwrap();
    assert!(
        matches!(
            source.downcast_ref::<GateError>(),
            Some(GateError::PastDeadline { .. })
        ),
        "{err}"
    );
    assert_eq!(err.report().attempts, 0, "{err}");
    calls.extend(spawn_all(svc, &["/third"]).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let first = upstream.seen().into_iter().find(|s| s.path == "/hang");
    let third = upstream.seen().into_iter().find(|s| s.path == "/third");
    assert_eq!(
        third.unwrap().at - first.unwrap().at,
        Duration::from_millis(100)
    );
    calls.into_iter().for_each(|c| c.abort());
}

/// A send every 100 ms (a little faster after the success that states a
/// token quota with none left). A large send waits a second for its
/// tokens, past its turn; one that costs nothing takes the next turn. The
/// large one is dropped (`drop_large`) 50 ms after that, or never, and
/// then a second one that costs nothing comes: how long after the first
/// it went.
async fn gap_behind_a_large_send(drop_large: bool) -> Duration {
    let gated = gated();
    let (upstream, svc) = (&gated.upstream, &gated.svc);
    svc.clone().oneshot(post("/")).await.unwrap();
    burst(&gated, "/tenth").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    svc.clone().oneshot(post("/tokens")).await.unwrap();
    let mut large = post("/hang_large");
    large.extensions_mut().insert(TokenCost(1_000));
    let large = tokio::spawn(svc.clone().oneshot(large));
    settle().await;
    let mut calls = spawn_all(svc, &["/hang_first"]).await;
    let first = loop {
        if let Some(first) = upstream
            .seen()
            .into_iter()
            .find(|s| s.path == "/hang_first")
        {
            break first.at;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    tokio::time::sleep_until(upstream.start() + first + Duration::from_millis(50)).await;
    if drop_large {
        large.abort();
    }
    settle().await;
    calls.extend(spawn_all(svc, &["/hang_second"]).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let large_sent = upstream.sent_to("/hang_large");
    assert_eq!(large_sent.len(), usize::from(!drop_large), "{large_sent:?}");
    let second = upstream
        .seen()
        .into_iter()
        .find(|s| s.path == "/hang_second");
    if let Some(large) = large_sent.first() {
        let second = second.as_ref().unwrap().at.as_millis();
        assert!(*large > second, "the large one waited for its tokens");
    }
    calls.into_iter().for_each(|c| c.abort());
    large.abort();
    second.unwrap().at - first
}

#[tokio::test(start_paused = true)]
async fn a_send_dropped_past_its_turn_lets_no_one_behind_it_go_sooner_than_the_rate() {
    let kept = gap_behind_a_large_send(false).await;
    let dropped = gap_behind_a_large_send(true).await;
    assert!(kept > Duration::from_millis(50), "{kept:?}");
    assert_eq!(dropped, kept);
}

/// Ten a second, learned. `/late`'s turn comes first, but its service is
/// ready only 3 s later (`ready_late`), or it goes on its turn and is
/// answered 3 s later; `/other`, on the next turn, is refused at once (a
/// decrease); `/late` is refused at 3 s. Then two sends queue: how far
/// apart they went.
async fn gap_after_a_late_refusal(ready_late: bool) -> Duration {
    let opens_at = Arc::new(Mutex::new(Instant::now()));
    let gated = gated_behind(Arc::clone(&opens_at));
    let (upstream, svc) = (&gated.upstream, &gated.svc);
    svc.clone().oneshot(post("/")).await.unwrap();
    burst(&gated, "/tenth").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start = Instant::now();
    let late = if ready_late {
        *opens_at.lock().unwrap() = start + Duration::from_secs(3);
        "/late"
    } else {
        "/late3000"
    };
    let mut calls = spawn_all(svc, &[late]).await;
    *opens_at.lock().unwrap() = start;
    calls.extend(spawn_all(svc, &["/other"]).await);
    tokio::time::sleep_until(start + Duration::from_millis(3_500)).await;
    let refused = sent_after(upstream, start, &[late, "/other"]);
    assert_eq!(refused.len(), 2, "{:?}", upstream.sends());
    calls.extend(spawn_all(svc, &["/hang_a", "/hang_b"]).await);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let went = sent_after(upstream, start, &["/hang_a", "/hang_b"]);
    calls.into_iter().for_each(|c| c.abort());
    Duration::from_millis((went[1] - went[0]) as u64)
}

#[tokio::test(start_paused = true)]
async fn a_send_let_through_is_dated_by_its_turn_not_by_its_service_s_readiness() {
    // Dated by its turn, `/late` went before the decrease `/other` drew:
    // its refusal belongs to that congestion event and cuts the rate no
    // further, whether it went on its turn or waited for its service.
    let on_turn = gap_after_a_late_refusal(false).await;
    let ready_late = gap_after_a_late_refusal(true).await;
    // One cut from ten a second.
    assert_eq!(on_turn, Duration::from_millis(125));
    assert_eq!(ready_late, on_turn);
}
