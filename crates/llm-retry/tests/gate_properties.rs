//! The quota queue's invariants under random traffic, seen from outside:
//! under 600 a minute in bursts of one, sends leave in arrival order,
//! never two within 100 ms, and sends dropped or refused for their
//! deadline leave no slot behind. Requests (some with deadlines, some
//! answered 429 naming a wait) arrive, wait, and are dropped, through the
//! retry layer over `RateLimitLayer` over a scripted upstream, each case on
//! its own paused clock.
#![allow(clippy::unwrap_used)]

mod gate_support;

use gate_support::*;
use llm_retry::rate_limit::{Quotas, RateLimitLayer};
use proptest::prelude::*;
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

const PERIOD: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
enum Op {
    /// A request arrives, with a deadline this far away (or none).
    Arrive(Option<u64>),
    /// Time passes.
    Advance(u64),
    /// A waiting request is dropped.
    Cancel(usize),
    /// A request arrives that the upstream refuses naming this wait.
    Hold(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => proptest::option::of(1u64..3_000).prop_map(Op::Arrive),
        4 => (1u64..400).prop_map(Op::Advance),
        2 => (0usize..64).prop_map(Op::Cancel),
        1 => (1u64..2_000).prop_map(Op::Hold),
    ]
}

/// The upstream: `/hold/<ms>/<n>` is refused naming `ms`, the rest served.
fn upstream() -> Upstream {
    Upstream::new(|seen| {
        let mut parts = seen.path.split('/').skip(1);
        match (parts.next(), parts.next()) {
            (Some("hold"), Some(ms)) => refused_for_ms(ms.parse().unwrap()),
            _ => ok(),
        }
    })
}

/// The arrival index a path names (its last segment).
fn arrival(path: &str) -> usize {
    path.rsplit('/').next().unwrap().parse().unwrap()
}

async fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let upstream = upstream();
    let gated = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(600, 1))
        .unwrap()
        .layer(upstream.service());
    let svc = over(once(), gated.clone());
    let start = Instant::now();
    let mut calls: Vec<(usize, Call)> = Vec::new();
    let mut held_until = start;
    let mut holds = Vec::new();
    for op in ops {
        let n = calls.len();
        match op {
            Op::Arrive(deadline) => {
                let svc = match deadline {
                    Some(ms) => over(once().max_elapsed(Duration::from_millis(ms)), gated.clone()),
                    None => svc.clone(),
                };
                calls.push((n, tokio::spawn(svc.oneshot(post(&format!("/{n}"))))));
            }
            Op::Hold(ms) => {
                holds.push((n, ms));
                let req = post(&format!("/hold/{ms}/{n}"));
                calls.push((n, tokio::spawn(svc.clone().oneshot(req))));
            }
            Op::Advance(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            Op::Cancel(k) => {
                let sent: Vec<usize> = upstream.seen().iter().map(|s| arrival(&s.path)).collect();
                let waiting: Vec<&(usize, Call)> = calls
                    .iter()
                    .filter(|(i, call)| !call.is_finished() && !sent.contains(i))
                    .collect();
                if !waiting.is_empty() {
                    waiting[k % waiting.len()].1.abort();
                }
            }
        }
        settle().await;
    }
    // Every send left in arrival order, at most one a period.
    let seen = upstream.seen();
    for pair in seen.windows(2) {
        prop_assert!(
            arrival(&pair[0].path) < arrival(&pair[1].path),
            "first in, first out: {pair:?}"
        );
        prop_assert!(pair[1].at - pair[0].at >= PERIOD, "one a period: {pair:?}");
    }
    // After a 429's hold the key is free again: the next send goes when it
    // ends (the hold leaves no burst), within one period of it.
    for (n, ms) in holds {
        if let Some(sent) = seen.iter().find(|s| arrival(&s.path) == n) {
            held_until = held_until.max(start + sent.at + Duration::from_millis(ms) + PERIOD);
        }
    }
    // Drop every request still waiting: the next one then goes a period
    // after the last send (or when a hold ends), not behind ghosts.
    for (_, call) in &calls {
        call.abort();
    }
    settle().await;
    let now = Instant::now();
    let next = calls.len();
    svc.oneshot(post(&format!("/{next}"))).await.unwrap();
    let went = start + upstream.seen().last().unwrap().at;
    if let Some(last) = seen.last() {
        let free_at = (start + last.at + PERIOD).max(now).max(held_until);
        prop_assert!(
            went <= free_at,
            "a dropped send left its slot behind: next at {:?}, free at {:?}",
            went - start,
            free_at - start
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn sends_leave_in_order_at_the_quota_and_return_their_slots(
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
            .block_on(run(ops))?;
    }
}

/// A case the property once failed on: three sends queued, and time to
/// send the first two.
#[test]
fn three_queued_and_two_periods_pass() {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(run(vec![
            Op::Arrive(None),
            Op::Arrive(None),
            Op::Arrive(None),
            Op::Advance(200),
        ]))
        .unwrap();
}
