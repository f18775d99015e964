//! Failover marks shared through a real Redis: what one replica publishes
//! the others read, the later end wins, ended marks go, and a dead Redis
//! loses nothing a replica published.
#![allow(clippy::unwrap_used)]

mod support;

use llm_retry::failover::{Mark, MarkKind, SharedMarks};
use llm_retry_redis::{RedisTargetMarks, SharedOptions, StateName};
use std::time::Duration;
use support::RedisServer;
use tokio::time::Instant;

const S: fn(u64) -> Duration = Duration::from_secs;

fn options() -> SharedOptions {
    SharedOptions::default()
        .with_timeout(S(2))
        .with_sync_interval(S(3600))
}

fn replica(server: &RedisServer, options: SharedOptions) -> RedisTargetMarks {
    RedisTargetMarks::start(server.client(), StateName::new("gateway").unwrap(), options).unwrap()
}

fn mark_in(secs: u64, rate_limited: bool) -> Mark {
    Mark {
        until: Instant::now() + S(secs),
        rate_limited,
    }
}

/// Seconds left of a mark, rounded down.
fn left(mark: Option<Mark>) -> Option<u64> {
    Some(
        mark?
            .until
            .checked_duration_since(Instant::now())?
            .as_secs(),
    )
}

#[tokio::test]
async fn a_mark_published_by_one_replica_is_read_by_another_and_the_later_wins() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (first, second) = (replica(&server, options()), replica(&server, options()));
    first.publish("primary", MarkKind::Cooldown, mark_in(30, true));
    second.publish("primary", MarkKind::Cooldown, mark_in(10, false));
    second.publish("backup", MarkKind::Unhealthy, mark_in(20, false));
    assert!(first.sync().await && second.sync().await && first.sync().await);
    for store in [&first, &second] {
        let cooldown = store.read("primary", MarkKind::Cooldown);
        // The 30 s mark, not the 10 s one: more than 20 s left, however
        // slow the machine.
        assert!(matches!(left(cooldown), Some(21..=29)), "{cooldown:?}");
        assert!(cooldown.unwrap().rate_limited);
        assert!(matches!(
            left(store.read("backup", MarkKind::Unhealthy)),
            Some(11..=19)
        ));
        assert_eq!(store.read("primary", MarkKind::Unhealthy), None);
        assert_eq!(store.read("backup", MarkKind::Cooldown), None);
    }
    let mut connection = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(keys, ["{llm-retry:gateway}:failover"]);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&keys[0])
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!(
        (20_001..=30_000).contains(&ttl),
        "the longest mark's: {ttl} ms"
    );
}

#[tokio::test]
async fn ended_marks_leave_the_replicas_and_redis() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (first, second) = (replica(&server, options()), replica(&server, options()));
    let soon = Mark {
        until: Instant::now() + Duration::from_secs(1),
        rate_limited: true,
    };
    first.publish("primary", MarkKind::Cooldown, soon);
    assert!(first.sync().await && second.sync().await);
    assert!(second.read("primary", MarkKind::Cooldown).is_some());
    // At least the mark's second passes (more changes nothing).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(second.sync().await);
    assert_eq!(second.read("primary", MarkKind::Cooldown), None);
    let mut connection = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

/// A mark published while Redis is dead is kept, and sent once it is back
/// (restarted, empty).
#[tokio::test]
async fn a_mark_published_during_an_outage_reaches_the_others_after_it() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let quick = options().with_timeout(Duration::from_millis(500));
    let (first, second) = (replica(&server, quick), replica(&server, quick));
    assert!(first.sync().await && second.sync().await);
    server.kill();
    first.publish("primary", MarkKind::Unhealthy, mark_in(30, false));
    assert!(!first.sync().await);
    assert!(first.is_degraded());
    // Its own mark is known at once, Redis or not.
    assert!(first.read("primary", MarkKind::Unhealthy).is_some());
    server.restart();
    let mut resumed = false;
    for _ in 0..100 {
        if first.sync().await {
            resumed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(resumed && !first.is_degraded());
    let mut seen = false;
    for _ in 0..100 {
        if second.sync().await && second.read("primary", MarkKind::Unhealthy).is_some() {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        seen,
        "the second replica reads the mark sent after the outage"
    );
}
