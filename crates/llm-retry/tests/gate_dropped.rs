//! A request dropped before it went leaves the gate as if it never came:
//! each gate scenario runs with and without the dropped request, and the
//! request after it is sent at the same instant. One more test checks the
//! retry budget's waiting place the same way, by its count.
#![allow(clippy::unwrap_used)]

mod gate_support;

use gate_support::*;
use llm_retry::rate_limit::{Quotas, RateLimitLayer};
use llm_retry::RetryLayer;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

const LONG: Duration = Duration::from_secs(60);

/// Past a spent window of unknown reset, `/probe` goes and stays in flight
/// (no news). `/dropped` queues for the next probe turn and (if `drop_it`)
/// is dropped 500 ms in, before its turn. When `/next`, arriving at 600 ms,
/// is sent (ms).
async fn next_probe_after(drop_it: bool) -> u128 {
    let upstream = Upstream::timed(|seen| match seen.path.as_str() {
        "/first" => (Duration::ZERO, window(0)),
        _ => (LONG, ok()),
    });
    let gate = RateLimitLayer::new(Quotas::none()).unwrap();
    let svc = stack(once(), &gate, &upstream);
    svc.clone().oneshot(post("/first")).await.unwrap();
    let mut calls = spawn_all(&svc, &["/probe"]).await;
    if drop_it {
        let dropped = spawn_all(&svc, &["/dropped"]).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        dropped[0].abort();
        settle().await;
    } else {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    calls.extend(spawn_all(&svc, &["/next"]).await);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(upstream.sent_to("/dropped").is_empty());
    let at = upstream.sent_to("/next");
    for call in calls {
        call.abort();
    }
    *at.first().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_probe_turn_given_up_before_it_came_is_there_for_the_next_send() {
    let kept_out = next_probe_after(false).await;
    let dropped = next_probe_after(true).await;
    assert_eq!(
        dropped, kept_out,
        "a send dropped while queued for a probe turn delays the next send"
    );
}

/// The stated request quota's room: `/first` says 60 a minute, 2 left
/// (OpenAI's headers), on a learned gate. `/taken` is let through in that
/// room but its service is not ready; (if `drop_it`) it is dropped there.
/// Then `/a` and `/b`: when each is sent (ms after `/first`).
async fn room_after(drop_it: bool) -> Vec<u128> {
    let upstream = Upstream::timed(|seen| match seen.path.as_str() {
        "/first" => (
            Duration::ZERO,
            answer(
                200,
                &[
                    ("x-ratelimit-limit-requests", "60".into()),
                    ("x-ratelimit-remaining-requests", "2".into()),
                    ("x-ratelimit-reset-requests", "1s".into()),
                ],
            ),
        ),
        _ => (Duration::ZERO, ok()),
    });
    let opens_at = Arc::new(Mutex::new(Instant::now()));
    let valve = Valve::new(upstream.service(), Arc::clone(&opens_at));
    let svc =
        RetryLayer::new(once().build().unwrap()).layer(RateLimitLayer::learned().layer(valve));
    svc.clone().oneshot(post("/first")).await.unwrap();
    if drop_it {
        *opens_at.lock().unwrap() = Instant::now() + LONG;
        let mut taken = Box::pin(svc.clone().oneshot(post("/taken")));
        assert!(tokio::time::timeout(Duration::ZERO, &mut taken)
            .await
            .is_err());
        *opens_at.lock().unwrap() = Instant::now();
        drop(taken);
    }
    let calls = spawn_all(&svc, &["/a", "/b"]).await;
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert!(upstream.sent_to("/taken").is_empty());
    ["/a", "/b"]
        .iter()
        .map(|p| upstream.sent_to(p)[0] - upstream.sent_to("/first")[0])
        .collect()
}

#[tokio::test(start_paused = true)]
async fn room_a_dropped_send_took_under_a_stated_quota_comes_back() {
    let kept_out = room_after(false).await;
    let dropped = room_after(true).await;
    assert_eq!(
        dropped, kept_out,
        "a send dropped before it went used up the stated quota's room"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_dropped_mid_wait_gives_its_budget_place_back() {
    use llm_retry::backoff::Jitter;
    use llm_retry::budget::RetryBudget;
    use llm_retry::RetryPolicy;
    let upstream = Upstream::new(|seen| if seen.nth < 2 { answer(503, &[]) } else { ok() });
    let budget = RetryBudget::default().with_max_waiting(1);
    let policy = RetryPolicy::builder()
        .budget(budget.clone())
        .max_retries(1)
        .initial_backoff(Duration::from_secs(1))
        .max_backoff(Duration::from_secs(1))
        .jitter(Jitter::None);
    let svc = RetryLayer::new(policy.build().unwrap()).layer(upstream.service());
    let dropped = tokio::time::timeout(Duration::from_millis(500), svc.clone().oneshot(post("/a")));
    assert!(dropped.await.is_err());
    assert_eq!(budget.waiting(), 0);
    let res = svc.oneshot(post("/b")).await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
}

/// Past a spent window of unknown reset, `/probe` is let through as the
/// window's probe but its service is not ready; (if `drop_it`) it is
/// dropped there, 500 ms in. When `/next` (arriving at 500 ms) is sent.
async fn next_after_a_probe_let_through(drop_it: bool) -> u128 {
    let upstream = Upstream::timed(|seen| match seen.path.as_str() {
        "/first" => (Duration::ZERO, window(0)),
        _ => (LONG, ok()),
    });
    let opens_at = Arc::new(Mutex::new(Instant::now()));
    let valve = Valve::new(upstream.service(), Arc::clone(&opens_at));
    let svc = RetryLayer::new(once().build().unwrap())
        .layer(RateLimitLayer::new(Quotas::none()).unwrap().layer(valve));
    svc.clone().oneshot(post("/first")).await.unwrap();
    if drop_it {
        *opens_at.lock().unwrap() = Instant::now() + LONG;
        let through = tokio::spawn(svc.clone().oneshot(post("/probe")));
        tokio::time::sleep(Duration::from_millis(500)).await;
        *opens_at.lock().unwrap() = Instant::now();
        through.abort();
        settle().await;
    } else {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let calls = spawn_all(&svc, &["/next"]).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(upstream.sent_to("/probe").is_empty());
    for call in calls {
        call.abort();
    }
    upstream.sent_to("/next")[0]
}

#[tokio::test(start_paused = true)]
async fn a_probe_let_through_but_never_sent_leaves_the_probe_to_the_next_send() {
    let kept_out = next_after_a_probe_let_through(false).await;
    let dropped = next_after_a_probe_let_through(true).await;
    assert_eq!(
        dropped, kept_out,
        "the probe that never went holds the next send back"
    );
}
