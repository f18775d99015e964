//! A retry budget shared through a real Redis: the fleet's bound, and what
//! happens when Redis dies, comes back or hangs.
#![allow(clippy::unwrap_used)]

mod support;

use llm_retry::budget::{BudgetStore, RetryBudget, WindowCounts};
use llm_retry_redis::{FailureMode, RedisBudgetStore, SharedOptions, StateName};
use std::sync::Arc;
use std::time::Duration;
use support::RedisServer;

const S: fn(u64) -> Duration = Duration::from_secs;

/// Generous bounds: the tests count decisions and never time Redis, except
/// to check a hang costs at most the timeout plus slack.
fn options() -> SharedOptions {
    SharedOptions::default()
        .with_timeout(S(2))
        // Syncs are driven by the tests; the task adds its own, harmlessly.
        .with_sync_interval(S(3600))
        .with_reserve(4)
}

/// A 60 s window: no slot of it expires while a test runs.
fn budget() -> RetryBudget {
    RetryBudget::new(0.2, 1, S(60)).unwrap()
}

fn replica(
    server: &RedisServer,
    name: &str,
    options: SharedOptions,
) -> (RetryBudget, RedisBudgetStore) {
    let budget = budget();
    let store = RedisBudgetStore::start(
        server.client(),
        StateName::new(name).unwrap(),
        budget.rule(),
        options,
    )
    .unwrap();
    (budget.with_store(Arc::new(store.clone())), store)
}

fn drain(budget: &RetryBudget) -> u64 {
    let mut granted = 0;
    while budget.try_withdraw().is_ok() {
        granted += 1;
        assert!(granted <= 100_000, "the budget never ran out");
    }
    granted
}

/// Three replicas take 50 first attempts each, then retry until refused:
/// together they get exactly the retries one process gets for 150 first
/// attempts (20% of 150 + 1/s over 60 s = 90), none more, none stranded.
#[tokio::test]
async fn three_replicas_are_held_to_the_rule_of_one() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let fleet: Vec<_> = (0..3)
        .map(|_| replica(&server, "fleet", options()))
        .collect();
    for (budget, store) in &fleet {
        assert!(store.sync().await, "Redis answers");
        (0..50).for_each(|_| budget.deposit());
    }
    let mut granted = 0;
    for round in 0.. {
        assert!(round < 1000, "the fleet kept granting");
        let mut this_round = 0;
        for (budget, store) in &fleet {
            this_round += drain(budget);
            assert!(store.sync().await);
            this_round += drain(budget);
        }
        granted += this_round;
        if this_round == 0 {
            break;
        }
    }
    let alone = budget();
    (0..150).for_each(|_| alone.deposit());
    assert_eq!(granted, drain(&alone));
    assert_eq!(granted, 90);
    // Each replica reads the fleet's counts as of its own last sync.
    for (_, store) in &fleet {
        assert!(store.sync().await);
    }
    for (budget, store) in &fleet {
        assert!(!store.is_degraded());
        let level = budget.level();
        assert_eq!((level.deposited, level.withdrawn), (150, 90));
        assert!(budget.try_withdraw().is_err());
    }
}

/// The budget lives under one hash-tagged key with a TTL.
#[tokio::test]
async fn the_key_is_hash_tagged_and_expires() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (budget, store) = replica(&server, "claude/primary", options());
    budget.deposit();
    assert!(store.sync().await);
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
    assert_eq!(keys, ["{llm-retry:claude/primary}:budget"]);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&keys[0])
        .query_async(&mut connection)
        .await
        .unwrap();
    // The window (60 s) plus the reservation's 1 s.
    assert!((1..=61_000).contains(&ttl), "{ttl} ms");
}

/// The shared window slides: once a whole window has passed, its first
/// attempts and retries no longer count, on any replica.
#[tokio::test]
async fn the_shared_window_slides() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // Long enough that the syncs below end inside it on a loaded machine.
    let window = Duration::from_secs(1);
    let rule = RetryBudget::new(0.5, 0, window).unwrap();
    let store = RedisBudgetStore::start(
        server.client(),
        StateName::new("slides").unwrap(),
        rule.rule(),
        options(),
    )
    .unwrap();
    let budget = rule.with_store(Arc::new(store.clone()));
    assert!(store.sync().await);
    (0..4).for_each(|_| budget.deposit());
    assert!(store.sync().await);
    assert_eq!(budget.level().deposited, 4);
    assert_eq!(drain(&budget), 2, "half of four");
    assert!(store.sync().await);
    assert_eq!((budget.level().deposited, budget.level().withdrawn), (4, 2));
    // At least two windows pass (more changes nothing).
    tokio::time::sleep(window * 2).await;
    assert!(store.sync().await);
    assert_eq!((budget.level().deposited, budget.level().withdrawn), (0, 0));
}

/// A reservation not renewed in time lapses on the replica too: Redis no
/// longer counts it, so the replica must not spend it.
#[tokio::test]
async fn a_lapsed_reservation_is_not_spent() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // Long enough that the spend after the sync comes inside it on a
    // loaded machine.
    let ttl = Duration::from_millis(500);
    let (budget, store) = replica(&server, "lapse", options().with_reservation_ttl(ttl));
    assert!(store.sync().await);
    assert_eq!(store.reserved(), 4);
    assert!(budget.try_withdraw().is_ok());
    // At least the TTL passes (more on a loaded machine changes nothing).
    tokio::time::sleep(ttl * 2).await;
    assert!(budget.try_withdraw().is_err(), "3 tokens held, all lapsed");
    assert!(store.sync().await);
    assert!(budget.try_withdraw().is_ok(), "renewed");
}

/// Redis killed mid-run: no call fails, the replica decides from its own
/// window, which already holds what it did while shared; Redis back (empty),
/// sharing resumes and the retries granted meanwhile are reported.
#[tokio::test]
async fn a_dead_redis_falls_back_to_local_counts_and_sharing_resumes() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let (budget, store) = replica(
        &server,
        "outage",
        options().with_timeout(Duration::from_millis(500)),
    );
    assert!(store.sync().await);
    (0..10).for_each(|_| budget.deposit());
    // Shared: four reserved retries, spent without a round trip.
    assert_eq!(store.reserved(), 4);
    assert_eq!(drain(&budget), 4);

    server.kill();
    assert!(!store.sync().await);
    assert!(store.is_degraded());
    // Alone: 20% of its 10 first attempts + 60 = 62, of which 4 are spent.
    assert_eq!(budget.level(), local_level(10, 4));
    assert_eq!(drain(&budget), 58);
    budget.deposit();
    assert_eq!(budget.level().deposited, 11);

    server.restart();
    let mut resumed = false;
    for _ in 0..100 {
        if store.sync().await {
            resumed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(resumed, "sharing resumed once Redis answered");
    assert!(!store.is_degraded());
    // The fresh Redis is told of every retry not yet reported (the 4 spent
    // from the reserve and the 58 granted alone) and of no first attempt
    // (those of the failed call and of the outage are dropped, never
    // counted late): 62 retries against the floor of 60, nothing left.
    let level = budget.level();
    assert_eq!((level.deposited, level.withdrawn), (0, 62));
    assert_eq!(store.reserved(), 0);
    assert!(budget.try_withdraw().is_err());
}

/// An outage longer than the window: the retries granted alone are past
/// it by the time Redis answers, and are not reported (reported at once,
/// they would refuse the fleet's retries for a whole window).
#[tokio::test]
async fn retries_granted_alone_longer_ago_than_the_window_are_not_reported() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let budget = RetryBudget::new(0.2, 10, Duration::from_millis(500)).unwrap();
    let store = RedisBudgetStore::start(
        server.client(),
        StateName::new("long-outage").unwrap(),
        budget.rule(),
        options().with_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    let budget = budget.with_store(Arc::new(store.clone()));
    assert!(store.sync().await);
    server.kill();
    assert!(!store.sync().await);
    // Alone: the floor, 10/s over half a second.
    assert_eq!(drain(&budget), 5);
    // More than a window later (a loaded machine only makes it longer).
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    server.restart();
    let mut resumed = false;
    for _ in 0..100 {
        if store.sync().await {
            resumed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(resumed, "sharing resumed once Redis answered");
    assert_eq!(budget.level().withdrawn, 0, "nothing stale reported");
    assert!(budget.try_withdraw().is_ok(), "the fleet may retry at once");
}

fn local_level(deposited: u64, withdrawn: u64) -> llm_retry::budget::BudgetLevel {
    let rule = budget().rule();
    let counts = WindowCounts::new(deposited, withdrawn);
    let store = llm_retry::budget::LocalWindow::new(rule.window());
    (0..counts.deposited).for_each(|_| store.deposit(tokio::time::Instant::now()));
    let probe = budget().with_store(Arc::new(store));
    (0..counts.withdrawn).for_each(|_| probe.try_withdraw().unwrap());
    probe.level()
}

/// A Redis that hangs (`DEBUG SLEEP`) costs a sync at most its timeout, and
/// no decision waits for it.
#[tokio::test]
async fn a_hanging_redis_costs_at_most_the_timeout() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let timeout = Duration::from_millis(50);
    let (budget, store) = replica(&server, "hang", options().with_timeout(timeout));
    // Connected and shared, with a generous first call.
    let mut shared = false;
    for _ in 0..20 {
        shared = store.sync().await;
        if shared {
            break;
        }
    }
    assert!(shared);
    let _sleeper = server.send_without_waiting("DEBUG SLEEP 2");
    // Asleep once a PING goes unanswered for 200 ms: more than 1.5 s of
    // its sleep is left.
    server.wait_until_stalled(Duration::from_millis(200));
    assert!(!store.sync().await);
    // The sync gave up while the server still slept: bounded by its own
    // timeout, not by the server's sleep (an ordering, not a clock).
    assert!(server.stalled(), "the sync outlasted the server's sleep");
    assert!(store.is_degraded());
    // Failing open, the replica grants from its own window meanwhile.
    assert!(budget.try_withdraw().is_ok());
}

/// Failing closed, no retry is granted while Redis has not answered; first
/// attempts are still counted.
#[tokio::test]
async fn failing_closed_grants_no_retry_without_redis() {
    let port = support::free_port();
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let budget = budget();
    let closed = options()
        .with_timeout(Duration::from_millis(200))
        .with_failure_mode(FailureMode::FailClosed);
    let store = RedisBudgetStore::start(
        client.clone(),
        StateName::new("closed").unwrap(),
        budget.rule(),
        closed,
    )
    .unwrap();
    let budget = budget.with_store(Arc::new(store.clone()));
    assert!(!store.sync().await);
    budget.deposit();
    assert!(budget.try_withdraw().is_err());
    assert_eq!(budget.level().deposited, 1);
    // The same, failing open: the local window grants.
    let open = RedisBudgetStore::start(
        client,
        StateName::new("open").unwrap(),
        budget.rule(),
        options().with_timeout(Duration::from_millis(200)),
    )
    .unwrap();
    assert!(!open.sync().await);
    let budget = self::budget().with_store(Arc::new(open));
    assert!(budget.try_withdraw().is_ok());
}

/// With no Redis to reach, each of three replicas grants alone the rule's
/// ratio of its own first attempts and a third of the floor (rounded down):
/// 20% of 50 + ⌊10/3⌋ = 3 a second over 10 s = 40, not the 110 of one
/// replica, so the fleet's floor stays within the rule's.
#[tokio::test]
async fn without_redis_the_floor_is_divided_among_the_replicas() {
    let nowhere =
        redis::Client::open(format!("redis://127.0.0.1:{}/", support::free_port())).unwrap();
    let budget = RetryBudget::new(0.2, 10, S(10)).unwrap();
    let store = RedisBudgetStore::start(
        nowhere,
        StateName::new("divided").unwrap(),
        budget.rule(),
        options().with_replicas(3),
    )
    .unwrap();
    let budget = budget.with_store(Arc::new(store.clone()));
    for _ in 0..50 {
        budget.deposit();
    }
    assert!(store.is_degraded());
    assert_eq!(drain(&budget), 10 + 30);
}
