//! Request windows a provider states (`x-ratelimit-remaining-requests`,
//! `x-ratelimit-reset-requests`), seen from outside: a spent window holds
//! the key until its reset; past a spent window whose reset is unknown one
//! send probes and the rest wait for its news; a share taken by a send
//! that never went comes back. The retry layer over `RateLimitLayer` over
//! a scripted upstream, on tokio's paused clock.
#![allow(clippy::unwrap_used)]

mod gate_support;

use gate_support::*;
use llm_retry::rate_limit::{GateError, Quotas, RateLimitLayer};
use llm_retry::{RetryError, RetryLayer};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

const LONG: Duration = Duration::from_secs(60);

/// An answer stating `remaining` requests left until a reset `reset` away.
fn window_resetting(
    remaining: u64,
    reset: &str,
) -> http::Response<http_body_util::Full<bytes::Bytes>> {
    answer(
        200,
        &[
            ("x-ratelimit-remaining-requests", remaining.to_string()),
            ("x-ratelimit-reset-requests", reset.to_owned()),
        ],
    )
}

fn no_quota() -> RateLimitLayer {
    RateLimitLayer::new(Quotas::none()).unwrap()
}

fn one_a_second() -> RateLimitLayer {
    RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(60, 1)).unwrap()
}

#[tokio::test(start_paused = true)]
async fn sends_past_an_exhausted_window_leave_paced_by_the_quota() {
    // The first answer says nothing more until a reset 10 s away: the
    // next three go from the reset, one a second, not all at once.
    let upstream = Upstream::new(|seen| {
        if seen.nth == 0 {
            window_resetting(0, "10s")
        } else {
            ok()
        }
    });
    let svc = stack(once(), &one_a_second(), &upstream);
    svc.clone().oneshot(post("/first")).await.unwrap();
    for call in spawn_all(&svc, &["/a", "/b", "/c"]).await {
        call.await.unwrap().unwrap();
    }
    assert_eq!(
        upstream.sends(),
        [
            ("/first".into(), 0),
            ("/a".into(), 10_000),
            ("/b".into(), 11_000),
            ("/c".into(), 12_000)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_window_share_taken_by_a_queued_send_that_never_went_comes_back() {
    // One share left until a reset 10 s away. A send queued for the
    // quota's next slot (1 s) takes it and is dropped before it goes: the
    // share and the slot are there for the next send; the one after waits
    // for the reset.
    let upstream = Upstream::new(|seen| {
        if seen.nth == 0 {
            window_resetting(1, "10s")
        } else {
            ok()
        }
    });
    let svc = stack(once(), &one_a_second(), &upstream);
    svc.clone().oneshot(post("/first")).await.unwrap();
    let taken = spawn_all(&svc, &["/taken"]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    taken[0].abort();
    settle().await;
    for call in spawn_all(&svc, &["/next", "/after"]).await {
        call.await.unwrap().unwrap();
    }
    assert_eq!(
        upstream.sends(),
        [
            ("/first".into(), 0),
            ("/next".into(), 1_000),
            ("/after".into(), 10_000)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn news_of_a_window_lets_the_sends_waiting_for_it_go() {
    // The first answer says the window is spent, with no reset. One send
    // probes; the next waits for its news, which comes with its answer
    // 100 ms later, not for its fallback turn a second on.
    let upstream = Upstream::slow(Duration::from_millis(100), |seen| {
        match seen.path.as_str() {
            "/first" => window(0),
            _ => window(5),
        }
    });
    let svc = stack(once(), &no_quota(), &upstream);
    svc.clone().oneshot(post("/first")).await.unwrap();
    for call in spawn_all(&svc, &["/probe", "/waiting"]).await {
        call.await.unwrap().unwrap();
    }
    assert_eq!(
        upstream.sends(),
        [
            ("/first".into(), 0),
            ("/probe".into(), 100),
            ("/waiting".into(), 200)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn past_a_spent_window_of_unknown_reset_one_send_probes_and_the_rest_wait_for_its_news() {
    // `/first` and `/old` go together; `/first`'s answer says the window
    // is spent, with no reset. `/probe` goes; three more wait for its
    // news, one with a deadline (500 ms) sooner than its fallback turn.
    // `/old`'s answer (200 ms) says the same as `/first`'s: no news,
    // nothing goes. `/probe`'s (300 ms) states a new window: all three go.
    let upstream = Upstream::timed(|seen| match seen.path.as_str() {
        "/first" => (Duration::ZERO, window(0)),
        "/old" => (Duration::from_millis(200), window(0)),
        "/probe" => (Duration::from_millis(300), window(5)),
        _ => (LONG, ok()),
    });
    let gated = no_quota().layer(upstream.service());
    let svc = over(once(), gated.clone());
    let hurried = over(once().max_elapsed(Duration::from_millis(500)), gated);
    let old = spawn_all(&svc, &["/old"]).await;
    svc.clone().oneshot(post("/first")).await.unwrap();
    let mut calls = spawn_all(&svc, &["/probe"]).await;
    calls.push(tokio::spawn(hurried.oneshot(post("/soon"))));
    settle().await;
    calls.extend(spawn_all(&svc, &["/later", "/last"]).await);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        upstream.sends(),
        [
            ("/old".into(), 0),
            ("/first".into(), 0),
            ("/probe".into(), 0),
            ("/soon".into(), 300),
            ("/later".into(), 300),
            ("/last".into(), 300)
        ]
    );
    for call in old.into_iter().chain(calls) {
        call.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn without_news_a_send_waiting_for_a_probe_is_refused_only_at_its_deadline() {
    let upstream = Upstream::timed(|seen| match seen.path.as_str() {
        "/first" => (Duration::ZERO, window(0)),
        _ => (LONG, ok()),
    });
    let gated = no_quota().layer(upstream.service());
    let svc = over(once(), gated.clone());
    let hurried = over(once().max_elapsed(Duration::from_millis(500)), gated);
    svc.clone().oneshot(post("/first")).await.unwrap();
    let probe = spawn_all(&svc, &["/probe"]).await;
    let start = Instant::now();
    let err = hurried
        .oneshot(post("/waiting"))
        .await
        .unwrap_err()
        .downcast::<RetryError>()
        .unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    assert_eq!(err.report().attempts, 0, "{err}");
    let source = std::error::Error::source(&*err).unwrap();
    assert!(
        matches!(
            source.downcast_ref::<GateError>(),
            Some(GateError::PastDeadline { .. })
        ),
        "{err}"
    );
    assert_eq!(upstream.sent_to("/waiting"), Vec::<u128>::new());
    probe[0].abort();
}

#[tokio::test(start_paused = true)]
async fn a_probe_s_429_naming_the_window_s_end_holds_the_key_until_then_and_the_window_is_new_past_it(
) {
    let upstream = Upstream::new(|seen| match seen.path.as_str() {
        "/first" => window(0),
        "/probe" => refused_for_ms(1_500),
        _ => ok(),
    });
    let svc = stack(once(), &no_quota(), &upstream);
    svc.clone().oneshot(post("/first")).await.unwrap();
    let calls = spawn_all(&svc, &["/probe", "/waiting"]).await;
    for call in calls {
        call.await.unwrap().unwrap();
    }
    // Past the hold the window is a new one: sends go at once, none waits
    // for a probe's news.
    let after = spawn_all(&svc, &["/a", "/b"]).await;
    for call in after {
        call.await.unwrap().unwrap();
    }
    assert_eq!(
        upstream.sends(),
        [
            ("/first".into(), 0),
            ("/probe".into(), 0),
            ("/waiting".into(), 1_500),
            ("/a".into(), 1_500),
            ("/b".into(), 1_500)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiting_send_given_up_is_not_counted_against_the_next_window() {
    // Spent, no reset: `/probe` goes, three wait for its news and two of
    // them give up. The probe's answer states 2 more: the one still
    // waiting takes one and the next send the other; then one more
    // probes and the next waits (for its fallback turn, a second on).
    let upstream = Upstream::timed(|seen| match seen.path.as_str() {
        "/first" => (Duration::ZERO, window(0)),
        "/probe" => (Duration::from_millis(100), window(2)),
        _ => (LONG, ok()),
    });
    let svc = stack(once(), &no_quota(), &upstream);
    svc.clone().oneshot(post("/first")).await.unwrap();
    let waiting = spawn_all(&svc, &["/probe", "/w0", "/w1", "/w2"]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    waiting[1].abort();
    waiting[2].abort();
    tokio::time::sleep(Duration::from_millis(50)).await;
    settle().await;
    let next = spawn_all(&svc, &["/n1", "/n2", "/n3"]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        upstream.sends(),
        [
            ("/first".into(), 0),
            ("/probe".into(), 0),
            ("/w2".into(), 100),
            ("/n1".into(), 100),
            ("/n2".into(), 100),
            ("/n3".into(), 1_100)
        ]
    );
    for call in waiting.into_iter().chain(next) {
        call.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn a_bogus_window_reset_holds_the_key_no_longer_than_the_longest_wait() {
    // A reset 9,999 hours away: the key is held for the request's longest
    // honoured wait (120 s by default), not for 9,999 hours.
    let upstream = Upstream::new(|seen| {
        if seen.nth == 0 {
            window_resetting(0, "35996400s")
        } else {
            ok()
        }
    });
    let svc = stack(once(), &no_quota(), &upstream);
    svc.clone().oneshot(post("/first")).await.unwrap();
    svc.clone().oneshot(post("/next")).await.unwrap();
    assert_eq!(
        upstream.sends(),
        [("/first".into(), 0), ("/next".into(), 120_000)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_send_let_through_but_never_sent_gives_its_window_share_back() {
    // One share left, no reset. A send is let through but its service is
    // not ready, and it is dropped there: the share returns, so the next
    // send takes it and the one after goes as the window's probe; only
    // the third waits.
    let upstream = Upstream::timed(|seen| match seen.path.as_str() {
        "/first" => (Duration::ZERO, window(1)),
        _ => (LONG, ok()),
    });
    let opens_at = Arc::new(Mutex::new(Instant::now()));
    let valve = Valve::new(upstream.service(), Arc::clone(&opens_at));
    let svc = RetryLayer::new(once().build().unwrap()).layer(no_quota().layer(valve));
    svc.clone().oneshot(post("/first")).await.unwrap();
    *opens_at.lock().unwrap() = Instant::now() + LONG;
    let through = tokio::spawn(svc.clone().oneshot(post("/through")));
    tokio::time::sleep(Duration::from_millis(500)).await;
    *opens_at.lock().unwrap() = Instant::now();
    through.abort();
    settle().await;
    let mut calls = Vec::new();
    for path in ["/next", "/probe", "/waits"] {
        calls.push(tokio::spawn(svc.clone().oneshot(post(path))));
        settle().await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        upstream.sends(),
        [
            ("/first".into(), 0),
            ("/next".into(), 500),
            ("/probe".into(), 500),
            ("/waits".into(), 1_500)
        ]
    );
    for call in calls {
        call.abort();
    }
}
