//! Waits inside a target count against the route: a named wait longer
//! than the target's `max_server_wait` moves the failover on at once, and
//! when every target is out the give-up comes at once with the soonest
//! wait; no target waits past what the route's deadline has left; rounds
//! without a named wait back off, and the default send count stays the
//! SDK's own.
#![allow(clippy::unwrap_used)]

mod support;

use llm_retry_mock::{MockServer, Reply, Route};
use std::time::Duration;
use support::{gateway, no_env, post, rate_limited, send, target, PROMPT};

/// A route over `a` then `b` with every target setting left to its
/// default, and `extra` lines in the route's table.
fn defaults(a: &MockServer, b: &MockServer, extra: &str) -> String {
    format!(
        "[[route]]\nname = \"r\"\n{extra}\n[[route.target]]\nname = \"a\"\nbase_url = \"{}\"\n[[route.target]]\nname = \"b\"\nbase_url = \"{}\"\n",
        a.url(""),
        b.url("")
    )
}

#[tokio::test(start_paused = true)]
async fn when_every_target_names_a_long_wait_the_give_up_is_at_once_with_the_soonest() {
    for extra in [
        "",
        "exhaustion_retry = { max_rounds = 1, max_wait = \"2s\" }",
    ] {
        let a = target(Route::always(rate_limited("30"))).await;
        let b = target(Route::always(rate_limited("20"))).await;
        let gw = gateway(&defaults(&a, &b, extra), no_env).await;
        let started = tokio::time::Instant::now();
        let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
        let took = started.elapsed();
        assert_eq!(head.status, 429, "{extra}");
        assert_eq!(head.headers["x-should-retry"], "false");
        assert_eq!(head.headers["retry-after"], "20", "{extra}");
        assert_eq!((a.request_count(), b.request_count()), (1, 1), "{extra}");
        assert!(took < Duration::from_secs(1), "{extra}: {took:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_named_wait_longer_than_max_server_wait_moves_the_failover_on_at_once() {
    let a = target(Route::always(rate_limited("5"))).await;
    let b = target(Route::always(Reply::anthropic_ok("b"))).await;
    let toml = format!(
        "[[route]]\nname = \"r\"\n[[route.target]]\nname = \"a\"\nbase_url = \"{}\"\nmax_retries = 2\nmax_server_wait = \"3s\"\n[[route.target]]\nname = \"b\"\nbase_url = \"{}\"\n",
        a.url(""),
        b.url("")
    );
    let gw = gateway(&toml, no_env).await;
    let started = tokio::time::Instant::now();
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_named_wait_within_max_server_wait_is_waited_out_by_the_target() {
    let a = target(Route::sequence([
        rate_limited("1"),
        Reply::anthropic_ok("a, later"),
    ]))
    .await;
    let toml = format!(
        "[[route]]\nname = \"r\"\n[[route.target]]\nname = \"a\"\nbase_url = \"{}\"\n",
        a.url("")
    );
    let gw = gateway(&toml, no_env).await;
    let started = tokio::time::Instant::now();
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
    assert_eq!(a.request_count(), 2);
    assert!(started.elapsed() >= Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn with_defaults_every_target_overloaded_costs_no_more_sends_than_the_sdk_alone() {
    let a = target(Route::always(Reply::overloaded())).await;
    let b = target(Route::always(Reply::overloaded())).await;
    let gw = gateway(&defaults(&a, &b, ""), no_env).await;
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 529);
    assert_eq!(head.headers["x-should-retry"], "false");
    let sends = a.request_count() + b.request_count();
    assert!(sends <= 3, "{sends} sends");
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn rounds_over_overloaded_targets_stay_within_the_send_budget() {
    let a = target(Route::always(Reply::overloaded())).await;
    let b = target(Route::always(Reply::overloaded())).await;
    let extra = "max_upstream_sends = 5\nexhaustion_retry = { max_rounds = 3, max_wait = \"5s\" }";
    let gw = gateway(&defaults(&a, &b, extra), no_env).await;
    let started = tokio::time::Instant::now();
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 529);
    assert_eq!(a.request_count() + b.request_count(), 5);
    // Round waits of 0.5 s then 1 s (each up to a fifth more), not 42 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_target_waits_only_within_what_the_route_deadline_has_left() {
    // a stalls past its 6 s first-content timeout; b's 5 s named wait is
    // within its own max_server_wait but not within the 4 s the route has
    // left, so b's 429 is the answer at 6 s, not a 504 at the deadline.
    let a = target(Route::always(
        Reply::anthropic_ok("late").delay(Duration::from_secs(60)),
    ))
    .await;
    let b = target(Route::always(rate_limited("5"))).await;
    let toml = format!(
        "[[route]]\nname = \"r\"\ndeadline = \"10s\"\n[[route.target]]\nname = \"a\"\nbase_url = \"{}\"\nfirst_content_timeout = \"6s\"\n[[route.target]]\nname = \"b\"\nbase_url = \"{}\"\nmax_retries = 2\nmax_server_wait = \"8s\"\n",
        a.url(""),
        b.url("")
    );
    let gw = gateway(&toml, no_env).await;
    let started = tokio::time::Instant::now();
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    let took = started.elapsed();
    assert_eq!(head.status, 429);
    assert_eq!(head.headers["x-should-retry"], "false");
    assert_eq!(b.request_count(), 1, "b did not resend");
    assert!(
        took >= Duration::from_secs(6) && took < Duration::from_secs(7),
        "{took:?}"
    );
}
