//! The gate's send queue seen from outside: a quota's pace, first in first
//! out; holds that move the queue back; deadlines that refuse a send or
//! let it go on its turn. The retry layer over `RateLimitLayer` over a
//! scripted upstream, on tokio's paused clock: exact virtual send times.
#![allow(clippy::unwrap_used)]

mod gate_support;

use gate_support::*;
use llm_retry::rate_limit::{GateError, Quotas, RateLimitLayer};
use llm_retry::{RetryError, RetryPolicy};
use std::time::Duration;
use tower::{Layer, ServiceExt};

fn one_a_second() -> RateLimitLayer {
    RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(60, 1)).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_hold_moves_the_quota_queue_back_in_order_and_spacing() {
    // 60 a minute, one at a time. The first send is refused half a second
    // later with `retry-after: 5`; the two queued behind it (due at 1 s
    // and 2 s) move back to the hold's end (5.5 s), still a second apart
    // and with no burst (the 429 said the bucket is empty), and a send
    // arriving during the hold queues behind them, not ahead.
    let upstream = Upstream::slow(Duration::from_millis(500), |seen| {
        if seen.path == "/first" {
            refused_for(5)
        } else {
            ok()
        }
    });
    let svc = stack(once(), &one_a_second(), &upstream);
    let mut calls = Vec::new();
    for path in ["/first", "/q1", "/q2"] {
        calls.push(tokio::spawn(svc.clone().oneshot(post(path))));
        settle().await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    calls.push(tokio::spawn(svc.clone().oneshot(post("/late"))));
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert_eq!(
        upstream.sends(),
        [
            ("/first".into(), 0),
            ("/q1".into(), 5_500),
            ("/q2".into(), 6_500),
            ("/late".into(), 7_500)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_send_whose_turn_is_its_deadline_waits_for_it() {
    // One send a second and a deadline of 1 s: the second send's turn is
    // exactly its deadline. It waits and goes; it is not refused.
    let upstream = Upstream::new(|_| ok());
    let svc = stack(
        once().max_elapsed(Duration::from_secs(1)),
        &one_a_second(),
        &upstream,
    );
    let first = tokio::spawn(svc.clone().oneshot(post("/first")));
    settle().await;
    let second = svc.clone().oneshot(post("/second")).await.unwrap();
    assert_eq!(second.status(), http::StatusCode::OK);
    first.await.unwrap().unwrap();
    assert_eq!(
        upstream.sends(),
        [("/first".into(), 0), ("/second".into(), 1_000)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_gate_without_quotas_paces_nothing_and_a_quota_gate_says_what_it_paces() {
    let upstream = Upstream::new(|_| ok());
    let none = RateLimitLayer::new(Quotas::none()).unwrap();
    let svc = stack(once(), &none, &upstream);
    let calls = (0..5).map(|i| svc.clone().oneshot(post(&format!("/{i}"))));
    for res in futures_util::future::join_all(calls).await {
        res.unwrap();
    }
    assert!(
        upstream.seen().iter().all(|s| s.at.is_zero()),
        "{:?}",
        upstream.sends()
    );
    let debug = format!("{:?}", one_a_second());
    assert!(
        debug.starts_with("RateLimitLayer") && debug.contains("requests"),
        "{debug}"
    );
}

#[test]
fn every_quota_is_validated() {
    let refused = |quotas: Quotas| RateLimitLayer::new(quotas).unwrap_err();
    let e = refused(Quotas::none().requests_per_minute(0));
    assert_eq!(e.setting(), "requests_per_minute");
    assert_eq!(
        e.to_string(),
        "invalid rate-limit gate: requests_per_minute: must be positive, got 0"
    );
    assert_eq!(
        refused(Quotas::none().tokens_per_minute_with_burst(100, 0)).setting(),
        "tokens_per_minute"
    );
    assert_eq!(
        refused(Quotas::none().adaptive(5.0, 1.0)).setting(),
        "adaptive"
    );
    assert!(refused(Quotas::none().adaptive(f64::NAN, 1.0))
        .to_string()
        .starts_with("invalid rate-limit gate: adaptive:"));
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_quota_beside_a_fixed_one_is_kept() {
    // 6,000 a minute would let 100 go at once; the adaptive bound of 5 a
    // second, kept beside it, paces them from the start.
    let upstream = Upstream::new(|_| ok());
    let gate =
        RateLimitLayer::new(Quotas::none().requests_per_minute(6_000).adaptive(1.0, 5.0)).unwrap();
    let svc = stack(once(), &gate, &upstream);
    let calls = (0..3).map(|i| svc.clone().oneshot(post(&format!("/{i}"))));
    for res in futures_util::future::join_all(calls).await {
        res.unwrap();
    }
    let times: Vec<u128> = upstream.sends().into_iter().map(|(_, t)| t).collect();
    assert_eq!(times, [0, 200, 400]);
}

#[tokio::test(start_paused = true)]
async fn a_probe_turn_past_a_deadline_that_has_come_is_refused_not_sent() {
    // The provider states a spent window with no reset: one send probes,
    // the next one's turn is a second away. A request whose deadline is
    // sooner is not let through ahead of its turn: it waits for the
    // probe's news until its deadline, is refused by the gate then, and
    // sends nothing.
    let upstream = Upstream::slow(Duration::from_millis(100), |_| {
        answer(200, &[("x-ratelimit-remaining-requests", "0".into())])
    });
    let gated = RateLimitLayer::new(Quotas::none())
        .unwrap()
        .layer(upstream.service());
    let svc = over(once(), gated.clone());
    let hurried = over(once().max_elapsed(Duration::from_millis(1)), gated);
    svc.clone().oneshot(post("/first")).await.unwrap();
    let probe = tokio::spawn(svc.clone().oneshot(post("/probe")));
    settle().await;
    let start = tokio::time::Instant::now();
    let err = hurried
        .oneshot(post("/late"))
        .await
        .unwrap_err()
        .downcast::<RetryError>()
        .unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(1));
    assert_eq!(err.report().attempts, 0, "{err}");
    let source = std::error::Error::source(&*err).unwrap();
    assert!(
        matches!(
            source.downcast_ref::<GateError>(),
            Some(GateError::PastDeadline { .. })
        ),
        "{err}"
    );
    probe.await.unwrap().unwrap();
    assert_eq!(upstream.sent_to("/late"), Vec::<u128>::new());
}

#[tokio::test(start_paused = true)]
async fn a_hold_exactly_at_the_longest_wait_a_request_honours_is_waited_out() {
    // A 429 names 5 s; a request honouring exactly 5 s waits the hold out.
    let upstream = Upstream::new(|seen| match seen.path.as_str() {
        "/busy" => refused_for(5),
        _ => ok(),
    });
    let gated = RateLimitLayer::new(Quotas::none())
        .unwrap()
        .layer(upstream.service());
    over(once(), gated.clone())
        .oneshot(post("/busy"))
        .await
        .unwrap();
    over(once().max_server_wait(Duration::from_secs(5)), gated)
        .oneshot(post("/exact"))
        .await
        .unwrap();
    assert_eq!(upstream.sent_to("/exact"), [5_000]);
}

#[tokio::test(start_paused = true)]
async fn a_refused_request_resends_no_sooner_than_its_own_wait_when_the_key_serves_again() {
    // `/told` is refused with a 2 s wait; the four sends let through
    // after it are served, so the key's hold ends about 20 ms in. The
    // hold was the request's own: its resend still waits its 2 s.
    let upstream = Upstream::timed(|seen| match (seen.path.as_str(), seen.nth) {
        ("/told", 0) => (Duration::from_millis(10), refused_for_ms(2_000)),
        _ => (Duration::from_millis(20), ok()),
    });
    let svc = stack(
        RetryPolicy::builder().no_budget().max_retries(1),
        &RateLimitLayer::learned(),
        &upstream,
    );
    let calls = spawn_all(&svc, &["/told", "/a", "/b", "/c", "/d"]).await;
    for call in calls {
        call.await.unwrap().unwrap();
    }
    let told = upstream.sent_to("/told");
    assert_eq!(told.len(), 2, "refused once, then served");
    assert!(told[1] >= told[0] + 2_010, "resent at {} ms", told[1]);
    assert!(upstream.sent_to("/d")[0] < 100, "the key served the others");
}
