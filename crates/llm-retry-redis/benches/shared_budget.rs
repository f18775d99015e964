//! What sharing a retry budget through Redis costs.
//!
//! - `decide/local` and `decide/shared`: one first attempt and one retry
//!   (`deposit` + `try_withdraw`) on a budget with room, counted in its own
//!   window or through `RedisBudgetStore` with a reserve to spend. Both read
//!   memory only; this is what a request pays.
//! - `sync/round_trip`: one sync of the store (report, fleet counts,
//!   reserve top-up: one script call) against a `redis-server` the bench
//!   starts on 127.0.0.1. The sync task pays this every `sync_interval`,
//!   off the request path.
//! - `turn/unpaced` and `turn/paced`: what a send pays before it goes
//!   when its gate shares through `RedisGate`: one script call that reads
//!   the key's hold and, where the key's quota is shared, takes its turn in
//!   the fleet's pace.
//!
//! Run with `cargo bench -p llm-retry-redis --bench shared_budget` (needs
//! `redis-server`); see docs/benchmarks.md.

// `criterion_group!` expands to an undocumented `pub fn`.
#![allow(missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use criterion::{criterion_group, criterion_main, Criterion};
use llm_retry::budget::RetryBudget;
use llm_retry::rate_limit::{SharedGate, SharedPace};
use llm_retry_redis::{RedisBudgetStore, RedisGate, SharedOptions, StateName};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

fn shared_budget(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let _entered = rt.enter();
    let Some(server) = support::RedisServer::start() else {
        return;
    };
    // Room for every retry the bench takes: the decisions never refuse.
    let budget = RetryBudget::new(1.0, 1_000_000, Duration::from_secs(10)).expect("valid");
    let options = SharedOptions::default()
        .with_timeout(Duration::from_secs(1))
        .with_sync_interval(Duration::from_secs(3600))
        .with_reservation_ttl(Duration::from_secs(3600))
        .with_reserve(u32::MAX);
    let name = StateName::new("bench").expect("valid");
    let store =
        RedisBudgetStore::start(server.client(), name, budget.rule(), options).expect("a store");
    assert!(rt.block_on(store.sync()), "redis-server answers");
    let shared = budget.clone().with_store(Arc::new(store.clone()));

    let mut group = c.benchmark_group("decide");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (label, budget) in [("local", &budget), ("shared", &shared)] {
        group.bench_function(label, |b| {
            b.iter(|| {
                budget.deposit();
                black_box(budget.try_withdraw()).ok();
            });
        });
    }
    group.finish();

    let mut group = c.benchmark_group("sync");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    group.bench_function("round_trip", |b| {
        b.to_async(&rt).iter(|| async {
            shared.deposit();
            assert!(store.sync().await);
        });
    });
    group.finish();

    // A send's ask before it goes: the one Redis round trip a send pays
    // when its gate shares, with and without a quota's pace. A pace fast
    // enough that every turn is now (no wait): what is measured is the call.
    let gate = RedisGate::start(
        server.client(),
        StateName::new("bench").expect("valid"),
        options,
        b"bench",
    )
    .expect("a gate store");
    assert!(rt.block_on(gate.sync()), "redis-server answers");
    let pace = SharedPace {
        interval: Duration::from_nanos(1),
        burst: u32::MAX,
    };
    let mut group = c.benchmark_group("turn");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, pace) in [("unpaced", None), ("paced", Some(pace))] {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| async {
                black_box(gate.turn(7, pace, None, None, None).await).ok();
            });
        });
    }
    group.finish();

    // The CPU a turn costs, over a fixed count: this process's (the
    // replica's side) and redis-server's, from their /proc counters.
    const TURNS: u32 = 50_000;
    let server_stat = server.pid().map(|pid| format!("/proc/{pid}/stat"));
    for (name, pace) in [("unpaced", None), ("paced", Some(pace))] {
        let here = cpu_seconds("/proc/self/stat");
        let there = server_stat.as_deref().map(cpu_seconds);
        rt.block_on(async {
            for _ in 0..TURNS {
                black_box(gate.turn(7, pace, None, None, None).await).ok();
            }
        });
        let per_turn = |before: f64, after: f64| (after - before) * 1e6 / f64::from(TURNS);
        let here = per_turn(here, cpu_seconds("/proc/self/stat"));
        let there = server_stat
            .as_deref()
            .zip(there)
            .map_or(f64::NAN, |(stat, before)| {
                per_turn(before, cpu_seconds(stat))
            });
        println!("turn/{name} CPU: {here:.1} µs a turn in the replica, {there:.1} µs in redis-server ({TURNS} turns)");
    }
}

/// User and system CPU seconds of the process whose stat file is `stat`.
fn cpu_seconds(stat: &str) -> f64 {
    let text = std::fs::read_to_string(stat).unwrap_or_default();
    // After the `(comm)` field: utime and stime are fields 14 and 15.
    let rest = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse::<u64>().ok())
        .sum();
    ticks as f64 / 100.0
}

criterion_group!(benches, shared_budget);
criterion_main!(benches);
