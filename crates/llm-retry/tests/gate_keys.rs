//! The gate's keys seen from outside: keys are paced apart, and a key
//! whose state still reaches past now (a hold, a queued send, a stated
//! window) keeps it through the sweeps that drop idle keys once thousands
//! of keys were used. The retry layer over `RateLimitLayer` over a
//! scripted upstream, on tokio's paused clock.
#![allow(clippy::unwrap_used)]

mod gate_support;

use gate_support::*;
use llm_retry::rate_limit::{Quotas, RateKey, RateLimitLayer};
use tokio::time::Instant;
use tower::ServiceExt;

/// Enough keys for the gate to sweep its map more than once.
const MANY: u64 = 9_000;

fn keyed(path: &str, key: u64) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let mut req = post(path);
    req.extensions_mut().insert(RateKey(key));
    req
}

/// One send on each of [`MANY`] other keys.
async fn use_many_keys(svc: &Stack) {
    for key in 0..MANY {
        svc.clone().oneshot(keyed("/other", key)).await.unwrap();
    }
}

/// When the sends to `path` arrived, in ms after `since`.
fn sent_after(upstream: &Upstream, path: &str, since: Instant) -> Vec<u128> {
    upstream
        .seen()
        .into_iter()
        .filter(|s| s.path == path)
        .map(|s| (upstream.start() + s.at - since).as_millis())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn keys_are_paced_apart() {
    let upstream = Upstream::new(|_| ok());
    let gate = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(60, 1)).unwrap();
    let svc = stack(once(), &gate, &upstream);
    let (a, b) = tokio::join!(
        svc.clone().oneshot(keyed("/a", u64::MAX)),
        svc.clone().oneshot(keyed("/b", u64::MAX - 1))
    );
    a.unwrap();
    b.unwrap();
    assert_eq!(upstream.sends(), [("/a".into(), 0), ("/b".into(), 0)]);
}

#[tokio::test(start_paused = true)]
async fn a_held_key_keeps_its_hold_through_the_sweeps() {
    let upstream = Upstream::new(|seen| match seen.path.as_str() {
        "/busy" => refused_for(60),
        _ => ok(),
    });
    let svc = stack(
        once(),
        &RateLimitLayer::new(Quotas::none()).unwrap(),
        &upstream,
    );
    let start = Instant::now();
    svc.clone().oneshot(keyed("/busy", u64::MAX)).await.unwrap();
    use_many_keys(&svc).await;
    svc.clone().oneshot(keyed("/next", u64::MAX)).await.unwrap();
    assert_eq!(sent_after(&upstream, "/next", start), [60_000]);
}

#[tokio::test(start_paused = true)]
async fn a_key_with_a_send_queued_keeps_its_place_through_the_sweeps() {
    // One a second per key: the key's second send is queued for 1 s, and
    // a third, after thousands of other keys, for 2 s.
    let upstream = Upstream::new(|_| ok());
    let gate = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(60, 1)).unwrap();
    let svc = stack(once(), &gate, &upstream);
    let start = Instant::now();
    svc.clone()
        .oneshot(keyed("/first", u64::MAX))
        .await
        .unwrap();
    let second = tokio::spawn(svc.clone().oneshot(keyed("/second", u64::MAX)));
    settle().await;
    use_many_keys(&svc).await;
    svc.clone()
        .oneshot(keyed("/third", u64::MAX))
        .await
        .unwrap();
    second.await.unwrap().unwrap();
    assert_eq!(sent_after(&upstream, "/second", start), [1_000]);
    assert_eq!(sent_after(&upstream, "/third", start), [2_000]);
}

#[tokio::test(start_paused = true)]
async fn a_key_s_stated_window_stands_through_the_sweeps() {
    // The key's answer states nothing left until a reset 10 s away.
    let upstream = Upstream::new(|seen| match seen.path.as_str() {
        "/first" => answer(
            200,
            &[
                ("x-ratelimit-remaining-requests", "0".into()),
                ("x-ratelimit-reset-requests", "10s".into()),
            ],
        ),
        _ => ok(),
    });
    let svc = stack(
        once(),
        &RateLimitLayer::new(Quotas::none()).unwrap(),
        &upstream,
    );
    let start = Instant::now();
    svc.clone()
        .oneshot(keyed("/first", u64::MAX))
        .await
        .unwrap();
    use_many_keys(&svc).await;
    svc.clone().oneshot(keyed("/next", u64::MAX)).await.unwrap();
    assert_eq!(sent_after(&upstream, "/next", start), [10_000]);
}

#[tokio::test(start_paused = true)]
async fn a_learned_key_with_sends_booked_ahead_keeps_its_schedule_through_the_sweeps() {
    // The key's answer states 60 a minute, none left: the learned rate
    // paces it at one a second. Its second send is booked for 1 s; a third,
    // after thousands of other keys, goes a second after that, not at once.
    let upstream = Upstream::new(|seen| match seen.path.as_str() {
        "/first" => answer(
            200,
            &[
                ("x-ratelimit-limit-requests", "60".into()),
                ("x-ratelimit-remaining-requests", "0".into()),
                ("x-ratelimit-reset-requests", "1s".into()),
            ],
        ),
        _ => ok(),
    });
    let svc = stack(once(), &RateLimitLayer::learned(), &upstream);
    let start = Instant::now();
    svc.clone()
        .oneshot(keyed("/first", u64::MAX))
        .await
        .unwrap();
    let second = tokio::spawn(svc.clone().oneshot(keyed("/second", u64::MAX)));
    settle().await;
    use_many_keys(&svc).await;
    svc.clone()
        .oneshot(keyed("/third", u64::MAX))
        .await
        .unwrap();
    second.await.unwrap().unwrap();
    assert_eq!(sent_after(&upstream, "/second", start), [1_000]);
    assert_eq!(sent_after(&upstream, "/third", start), [2_000]);
}
