//! What the gate's behaviour tests at the service boundary
//! (`tests/gate_*.rs`) cannot see: the cost of many held keys, how often a
//! rise of the learned rate wakes the waiting sends, and what a link's
//! `Debug` shows.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::RetryPolicy;
use bytes::Bytes;
use std::time::Duration;
use tokio::time::Instant;

/// A hold put by no send of the key's: nothing answered later contests it.
/// A hold no send of these tests put: nothing they send contests it.
const NO_SEND: u64 = u64::MAX;

/// Key 1's sends that went at `sent` are refused at `now`, enough of them
/// to be evidence that the key is sent faster than it admits.
fn refused_burst(gate: &gate::Gate, sent: Instant, now: Instant, wait: Option<Duration>) {
    for _ in 0..40 {
        gate.throttled(1, sent, now, wait, false);
    }
}

#[tokio::test(start_paused = true)]
async fn many_held_keys_cost_a_send_no_scan_and_the_map_stays_bounded() {
    let gate = RateLimitLayer::new(Quotas::none()).unwrap().gate;
    let now = Instant::now();
    let limit = Duration::from_secs(120);
    // 20,000 keys, every one held: nothing is idle, nothing can be swept.
    for key in 0..20_000 {
        gate.hold(key, NO_SEND, now, Duration::from_secs(60), limit, false);
    }
    let (held, sweeps) = gate.key_stats();
    assert_eq!(held, 20_000);
    // Sweeps only when the map doubled: a handful, not one per send.
    assert!(sweeps <= 4, "{sweeps} sweeps for 20,000 keys");
    for key in 20_000..21_000 {
        gate.reserve(key, 0, now, gate::Bounds::default()).unwrap();
    }
    let (_, after) = gate.key_stats();
    assert!(after <= sweeps + 1, "{after} sweeps after 1,000 more sends");
    // Past the hard cap the least recently used keys go: memory is bounded.
    for key in 21_000..200_000 {
        gate.hold(key, NO_SEND, now, Duration::from_secs(60), limit, false);
    }
    let (kept, total_sweeps) = gate.key_stats();
    assert!(kept <= super::keys::HARD_CAP, "{kept} keys kept");
    assert!(total_sweeps <= 20, "{total_sweeps} sweeps for 200,000 keys");
}

#[tokio::test(start_paused = true)]
async fn a_learned_rate_wakes_the_waiting_sends_only_when_it_rose_a_tenth() {
    use futures_util::FutureExt;
    let gate = RateLimitLayer::learned().gate;
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    gate.reserve(1, 0, t0, gate::Bounds::default()).unwrap();
    // A 429 naming 100 ms to the next token: 10 sends a second.
    refused_burst(&gate, t0, t0 + ms(100), Some(ms(100)));
    let woken = gate.woken(1).unwrap();
    let mut small = std::pin::pin!(woken.notified());
    small.as_mut().enable();
    gate.succeeded(1, t0 + ms(110));
    assert!(small.now_or_never().is_none(), "a rise of a few per cent");
    let mut large = std::pin::pin!(woken.notified());
    large.as_mut().enable();
    let mut t = t0 + ms(110);
    for _ in 0..100 {
        t += ms(10);
        gate.succeeded(1, t);
    }
    assert!(large.now_or_never().is_some(), "a second of successes");
}

#[test]
fn a_link_shows_its_bounds_and_nothing_of_the_request() {
    let policy = RetryPolicy::builder()
        .max_server_wait(Duration::from_secs(7))
        .build()
        .unwrap();
    let bounds = super::offer::LinkBounds::new(policy.limits(), None);
    let link = link::GateLink::new(bounds, Some(Bytes::from_static(b"secret prompt")));
    let debug = format!("{link:?}");
    assert!(
        debug.starts_with("GateLink") && debug.contains("max_server_wait: 7s"),
        "{debug}"
    );
    assert!(!debug.contains("secret"), "{debug}");
}
