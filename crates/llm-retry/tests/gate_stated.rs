//! What a provider's answers state, seen from outside: a whole-second
//! `retry-after` on a key paced at a stated quota holds only the seconds
//! past the first; a stated token quota books only the sends that cost
//! something and can fit; a refusal holds its key unless the tokens a send
//! booked ran short. The retry layer over `RateLimitLayer::learned` over a
//! scripted upstream, on tokio's paused clock.
#![allow(clippy::unwrap_used)]

mod gate_support;

use bytes::Bytes;
use gate_support::*;
use http_body_util::Full;
use llm_retry::rate_limit::{RateLimitLayer, TokenCost};
use std::time::Duration;
use tokio::time::Instant;
use tower::ServiceExt;

const LONG: Duration = Duration::from_secs(60);

/// OpenAI's request head, 600 a minute, none left until a reset a second
/// away.
fn requests_600_spent() -> Vec<(&'static str, String)> {
    vec![
        ("x-ratelimit-limit-requests", "600".into()),
        ("x-ratelimit-remaining-requests", "0".into()),
        ("x-ratelimit-reset-requests", "1s".into()),
    ]
}

/// A request window with room to spare (a token quota is read only
/// beside one), and a token quota of `per_minute` with `left` left.
fn tokens(per_minute: u64, left: u64) -> Vec<(&'static str, String)> {
    vec![
        ("x-ratelimit-remaining-requests", "999999".into()),
        ("x-ratelimit-reset-requests", "0ms".into()),
        ("x-ratelimit-limit-tokens", per_minute.to_string()),
        ("x-ratelimit-remaining-tokens", left.to_string()),
    ]
}

fn costing(path: &str, cost: u64) -> http::Request<Full<Bytes>> {
    let mut req = post(path);
    req.extensions_mut().insert(TokenCost(cost));
    req
}

/// When the send to `path` arrived, in ms after `since`.
fn sent_at(upstream: &Upstream, path: &str, since: Instant) -> u128 {
    let seen = upstream.seen().into_iter().find(|s| s.path == path);
    (upstream.start() + seen.unwrap().at - since).as_millis()
}

/// Sends `req` through `svc`; returns when its answer came.
async fn answered(svc: &Stack, req: http::Request<Full<Bytes>>) -> Instant {
    let _ = svc.clone().oneshot(req).await.unwrap();
    Instant::now()
}

#[tokio::test(start_paused = true)]
async fn a_whole_second_wait_holds_a_key_with_no_rate_for_all_of_it() {
    let upstream = Upstream::new(|seen| match seen.path.as_str() {
        "/refused" => refused_for(1),
        _ => ok(),
    });
    let svc = stack(once(), &RateLimitLayer::learned(), &upstream);
    let refused = answered(&svc, post("/refused")).await;
    svc.clone().oneshot(post("/next")).await.unwrap();
    assert_eq!(sent_at(&upstream, "/next", refused), 1_000);
}

#[tokio::test(start_paused = true)]
async fn only_the_whole_seconds_past_the_first_hold_a_key_paced_at_a_stated_quota() {
    // 600 a minute, stated: a rounded-up second is the rate's to pace, a
    // 3 s wait holds the key for its first 2 s, and a wait named to the
    // millisecond holds it for all of it.
    let upstream = Upstream::new(|seen| match seen.path.as_str() {
        "/stating" => answer(200, &requests_600_spent()),
        "/1s" => refused_for(1),
        "/3s" => refused_for(3),
        "/3500ms" => refused_for_ms(3_500),
        _ => ok(),
    });
    let svc = stack(once(), &RateLimitLayer::learned(), &upstream);
    svc.clone().oneshot(post("/stating")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let refused = answered(&svc, post("/1s")).await;
    svc.clone().oneshot(post("/after1s")).await.unwrap();
    // One interval of the stated rate, cut once by the refusal (10 a
    // second × 0.8): paced, not held for the second.
    let next = sent_at(&upstream, "/after1s", refused);
    assert!(next <= 125, "{next} ms");

    tokio::time::sleep(Duration::from_secs(5)).await;
    let refused = answered(&svc, post("/3s")).await;
    svc.clone().oneshot(post("/after3s")).await.unwrap();
    let held = sent_at(&upstream, "/after3s", refused);
    assert!((2_000..3_000).contains(&held), "{held} ms");

    tokio::time::sleep(Duration::from_secs(5)).await;
    let refused = answered(&svc, post("/3500ms")).await;
    svc.clone().oneshot(post("/after3500ms")).await.unwrap();
    let held = sent_at(&upstream, "/after3500ms", refused);
    assert!(held >= 3_500, "{held} ms");
}

#[tokio::test(start_paused = true)]
async fn a_provider_that_counts_room_left_is_believed_over_the_estimates() {
    // 1,000 tokens a minute, and every answer says all 1,000 are left
    // (the provider counts fewer than each send's estimate of 600): one
    // send after another, none waits. Keeping the estimates booked
    // instead, the second would go 12 s in (for the 200 missing), and
    // each later one 36 s after the one before.
    let upstream = Upstream::timed(|_| (Duration::ZERO, answer(200, &tokens(1_000, 1_000))));
    let svc = stack(once(), &RateLimitLayer::learned(), &upstream);
    let start = answered(&svc, post("/stating")).await;
    for n in 0..5 {
        svc.clone()
            .oneshot(costing(&format!("/{n}"), 600))
            .await
            .unwrap();
    }
    let at = |n: usize| sent_at(&upstream, &format!("/{n}"), start);
    assert_eq!((0..5).map(at).collect::<Vec<_>>(), [0; 5]);
}

#[tokio::test(start_paused = true)]
async fn a_stated_token_quota_books_only_sends_that_cost_something_and_can_fit() {
    // 1,000 tokens a minute, all left. 600 are booked; 5,000 (more than
    // the quota ever holds: the provider answers it) and nothing book
    // nothing and go at once; the next 600 wait for the 200 missing, 12 s.
    let upstream = Upstream::timed(|seen| match seen.path.as_str() {
        "/stating" => (Duration::ZERO, answer(200, &tokens(1_000, 1_000))),
        _ => (LONG, ok()),
    });
    let svc = stack(once(), &RateLimitLayer::learned(), &upstream);
    let start = answered(&svc, post("/stating")).await;
    let mut calls = Vec::new();
    for (path, cost) in [
        ("/600", 600),
        ("/5000", 5_000),
        ("/free", 0),
        ("/600more", 600),
    ] {
        calls.push(tokio::spawn(svc.clone().oneshot(costing(path, cost))));
        settle().await;
    }
    tokio::time::sleep(Duration::from_secs(20)).await;
    let at = |path| sent_at(&upstream, path, start);
    assert_eq!(
        [at("/600"), at("/5000"), at("/free"), at("/600more")],
        [0, 0, 0, 12_000]
    );
    calls.into_iter().for_each(|c| c.abort());
}

/// An upstream stating a quota of 60,000 tokens a minute, all left, on
/// `/stating`, and refusing `/refused` naming 2 s, its answer stating
/// `left` tokens left (if it says) and whether the request rate ran out
/// too; the gate under a retry layer that resends nothing.
fn refusing(rate: bool, left: Option<u64>) -> (Upstream, Stack) {
    let upstream = Upstream::timed(move |seen| match seen.path.as_str() {
        "/stating" => (Duration::ZERO, answer(200, &tokens(60_000, 60_000))),
        "/refused" => {
            let mut headers = vec![
                ("retry-after-ms", "2000".to_owned()),
                (
                    "x-ratelimit-remaining-requests",
                    if rate { "0" } else { "500" }.to_owned(),
                ),
            ];
            if let Some(left) = left {
                headers.push(("x-ratelimit-limit-tokens", "60000".into()));
                headers.push(("x-ratelimit-remaining-tokens", left.to_string()));
            }
            (Duration::ZERO, answer(429, &headers))
        }
        _ => (LONG, ok()),
    });
    let svc = stack(once(), &RateLimitLayer::learned(), &upstream);
    (upstream, svc)
}

/// Whether a refusal of a send booking `cost` tokens (see [`refusing`])
/// holds its key: whether a send that costs nothing, coming next, waits.
async fn refusal_holds_the_key(cost: u64, rate: bool, left: Option<u64>) -> bool {
    let (upstream, svc) = refusing(rate, left);
    svc.clone().oneshot(post("/stating")).await.unwrap();
    let refused = answered(&svc, costing("/refused", cost)).await;
    let next = tokio::spawn(svc.clone().oneshot(post("/next")));
    tokio::time::sleep(Duration::from_secs(3)).await;
    next.abort();
    let waited = sent_at(&upstream, "/next", refused);
    assert!(waited == 0 || waited >= 2_000, "{waited} ms");
    waited > 0
}

#[tokio::test(start_paused = true)]
async fn a_refusal_holds_its_key_unless_the_tokens_a_send_booked_ran_short() {
    // The request rate ran out: the key is held, whatever the send booked,
    // when its tokens are all there, exactly enough, or not stated.
    assert!(refusal_holds_the_key(5_000, true, Some(60_000)).await);
    assert!(refusal_holds_the_key(5_000, true, Some(5_000)).await);
    assert!(refusal_holds_the_key(5_000, true, None).await);
    // Fewer left than it booked: the tokens ran out, and it holds itself.
    assert!(!refusal_holds_the_key(5_000, true, Some(4_999)).await);
    // Only the tokens ran out: a send that booked them holds only itself,
    // one that booked none holds the key for the wait.
    assert!(!refusal_holds_the_key(5_000, false, Some(0)).await);
    assert!(refusal_holds_the_key(0, false, Some(0)).await);
}

#[tokio::test(start_paused = true)]
async fn a_send_refused_with_fewer_tokens_left_than_it_booked_holds_only_itself() {
    // A send books 5,000 tokens and is refused with 100 left, naming 2 s.
    // The key is not held: a send with no cost goes at once, and one
    // costing 1,000 waits for the 900 tokens it lacks (0.9 s), not 2 s. A
    // costed send dropped before its turn gives its tokens back.
    let (upstream, svc) = refusing(true, Some(100));
    svc.clone().oneshot(post("/stating")).await.unwrap();
    let refused = answered(&svc, costing("/refused", 5_000)).await;
    let free = tokio::spawn(svc.clone().oneshot(post("/free")));
    settle().await;
    let dropped = tokio::spawn(svc.clone().oneshot(costing("/dropped", 1_000)));
    settle().await;
    dropped.abort();
    settle().await;
    let costly = tokio::spawn(svc.clone().oneshot(costing("/costly", 1_000)));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(sent_at(&upstream, "/free", refused), 0);
    assert_eq!(sent_at(&upstream, "/costly", refused), 900);
    assert!(upstream.sent_to("/dropped").is_empty());
    free.abort();
    costly.abort();
}
