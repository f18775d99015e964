//! A key's ceiling on sends in flight, seen from outside: once overloads
//! are most of a key's answers, a request overloaded under the ceiling
//! resends when a slot frees, not after a backoff, but only once in a row:
//! overloaded again, it backs off. The retry layer over
//! `RateLimitLayer::learned` over a scripted upstream, on tokio's paused
//! clock.
#![allow(clippy::unwrap_used)]

mod gate_support;

use gate_support::*;
use llm_retry::backoff::Jitter;
use llm_retry::rate_limit::RateLimitLayer;
use llm_retry::RetryPolicy;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::{Layer, ServiceExt};

/// `/hangN` is served after N ms, `/o` overloaded at once, and `/flaky`
/// overloaded on its first three sends (the first answered after 500 ms),
/// then served.
fn upstream() -> Upstream {
    let flaky = Arc::new(AtomicUsize::new(0));
    Upstream::timed(move |seen| {
        let overloaded = || answer(529, &[]);
        if let Some(ms) = seen.path.strip_prefix("/hang") {
            return (Duration::from_millis(ms.parse().unwrap()), ok());
        }
        match seen.path.as_str() {
            "/o" => (Duration::ZERO, overloaded()),
            "/flaky" => match flaky.fetch_add(1, Ordering::SeqCst) {
                0 => (Duration::from_millis(500), overloaded()),
                1 | 2 => (Duration::ZERO, overloaded()),
                _ => (Duration::ZERO, ok()),
            },
            _ => (Duration::ZERO, ok()),
        }
    })
}

/// The upstream; the gate under a retry layer that resends nothing, and
/// under one that resends overloads after 5 s.
fn stacks() -> (Upstream, Stack, Stack) {
    let upstream = upstream();
    let gated = RateLimitLayer::learned().layer(upstream.service());
    let svc = over(once(), gated.clone());
    let patient = over(
        RetryPolicy::builder()
            .no_budget()
            .max_retries(3)
            .max_consecutive_overloads(10)
            .initial_backoff(Duration::from_secs(5))
            .max_backoff(Duration::from_secs(5))
            .jitter(Jitter::None),
        gated,
    );
    (upstream, svc, patient)
}

/// Eleven overloads in a row: the key's ceiling is set.
async fn overloads(svc: &Stack) {
    for _ in 0..11 {
        let res = svc.clone().oneshot(post("/o")).await.unwrap();
        assert_eq!(res.status().as_u16(), 529);
    }
}

#[tokio::test(start_paused = true)]
async fn an_overload_under_a_ceiling_is_metered_once_in_a_row() {
    // Ten sends in flight (three end at 1 s, three at 1.5 s) and `/flaky`;
    // eleven overloads in a row set the key's ceiling at nine. `/flaky`'s
    // overload (0.5 s, sent before the ceiling) is metered: its resend
    // goes when slots free, at 1 s, not after its 5 s backoff. So is its
    // first overload under the ceiling: the next resend goes when slots
    // free again, at 1.5 s. Overloaded a second time in a row under the
    // ceiling, it backs off the 5 s.
    let (upstream, svc, patient) = stacks();
    let mut calls = spawn_all(&svc, &["/hang1000"; 3]).await;
    calls.extend(spawn_all(&svc, &["/hang1500"; 3]).await);
    calls.extend(spawn_all(&svc, &["/hang3000"; 2]).await);
    calls.extend(spawn_all(&svc, &["/hang20000"; 2]).await);
    calls.extend(spawn_all(&patient, &["/flaky"]).await);
    overloads(&svc).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(upstream.sent_to("/flaky"), [0, 1_000, 1_500, 6_500]);
    calls.into_iter().for_each(|c| c.abort());
}

#[tokio::test(start_paused = true)]
async fn a_ceiling_at_its_floor_meters_nothing() {
    // One other send in flight (ending at 2 s) when the ceiling is set: a
    // ceiling of one, where the provider is overloaded whatever we hold.
    // `/flaky`'s overload backs off its 5 s; it does not resend when the
    // slot frees.
    let (upstream, svc, patient) = stacks();
    let mut calls = spawn_all(&svc, &["/hang2000"]).await;
    calls.extend(spawn_all(&patient, &["/flaky"]).await);
    overloads(&svc).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(upstream.sent_to("/flaky"), [0, 5_500]);
    calls.into_iter().for_each(|c| c.abort());
}
