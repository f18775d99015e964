//! Redis restarted (on the same port, empty): the stores' own sync tasks,
//! with no sync forced, share again, and a mark published after the
//! restart reaches the other replica.
#![allow(clippy::unwrap_used)]

mod support;

use llm_retry::budget::RetryBudget;
use llm_retry::failover::{Mark, MarkKind, SharedMarks};
use llm_retry_redis::{RedisBudgetStore, RedisTargetMarks, SharedOptions, StateName};
use std::time::Duration;
use support::RedisServer;
use tokio::time::Instant;

/// The default sync interval (100 ms); calls bounded by 500 ms, so that a
/// loaded machine does not fail a healthy call.
fn options() -> SharedOptions {
    SharedOptions::default().with_timeout(Duration::from_millis(500))
}

/// Longest wait for the sync tasks: a hundred intervals. Generous on
/// purpose (a loaded machine); the time taken is printed, not asserted.
const PATIENCE: Duration = Duration::from_secs(10);

/// Waits, looking every 5 ms, until `done`; how long it took.
async fn until(what: &str, done: impl Fn() -> bool) -> Duration {
    let started = std::time::Instant::now();
    while !done() {
        assert!(
            started.elapsed() < PATIENCE,
            "{what}: not within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed()
}

#[tokio::test]
async fn sharing_resumes_after_a_restart_from_the_sync_tasks_alone() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let marks = |server: &RedisServer| {
        RedisTargetMarks::start(
            server.client(),
            StateName::new("gateway").unwrap(),
            options(),
        )
        .unwrap()
    };
    let (first, second) = (marks(&server), marks(&server));
    let budget = RedisBudgetStore::start(
        server.client(),
        StateName::new("claude/primary").unwrap(),
        RetryBudget::default().rule(),
        options(),
    )
    .unwrap();
    let shared = || !first.is_degraded() && !second.is_degraded() && !budget.is_degraded();
    until("shared at start", shared).await;

    server.kill();
    // Degraded for sure: each store's own call fails.
    assert!(!first.sync().await && !second.sync().await && !budget.sync().await);
    assert!(!shared());

    server.restart();
    let mark = Mark {
        until: Instant::now() + Duration::from_secs(30),
        rate_limited: true,
    };
    first.publish("primary", MarkKind::Cooldown, mark);
    let resumed = until("shared again", shared).await;
    let seen = until("the mark reached the other replica", || {
        second.read("primary", MarkKind::Cooldown).is_some()
    })
    .await;
    println!(
        "after the restart: every store shared again in {resumed:?}, \
         the mark seen by the other replica {seen:?} later (sync interval 100 ms)"
    );
}
