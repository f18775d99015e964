//! The soak's compositions with shared state through one real Redis,
//! which is killed, restarted and hung (`DEBUG SLEEP`) while the crowd
//! runs: gateway replicas sharing budgets and failover marks
//! (`gateways`), and `RetryLayer` stacks sharing a budget (`layers`).

mod gateways;
mod layers;

pub(crate) use gateways::SharedGateways;
pub(crate) use layers::SharedLayers;

use crate::redis_support::RedisServer;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Whether `bytes` name Redis, in any case: no client may read of it.
pub(crate) fn mentions_redis(bytes: &[u8]) -> bool {
    bytes
        .windows(5)
        .any(|window| window.eq_ignore_ascii_case(b"redis"))
}

/// Replicas sharing state through the Redis the faults strike.
pub(crate) trait Shared {
    /// Whether every store of every replica reached Redis now, checked
    /// with the paused clock held ([`held_clock`]).
    fn sync_all(&self) -> impl Future<Output = bool>;

    /// How many of the crowd's requests have ended.
    fn progress(&self) -> &Progress;
}

/// Requests ended so far (answered, or failed before an answer), counted
/// by the replicas' client service.
#[derive(Debug, Clone)]
pub(crate) struct Progress(Arc<watch::Sender<usize>>);

impl Default for Progress {
    fn default() -> Self {
        Progress(Arc::new(watch::Sender::new(0)))
    }
}

impl Progress {
    /// Counts one more request ended.
    pub(crate) fn one_ended(&self) {
        self.0.send_modify(|n| *n += 1);
    }

    /// Requests ended so far.
    fn now(&self) -> usize {
        *self.0.borrow()
    }

    /// Waits until `n` requests have ended (the crowd cancels fewer than a
    /// tenth before their answer, so `n` up to 0.8 of the crowd is
    /// reached). Woken by each request's end, not by the clock: requests
    /// answered without a wait end before the paused clock moves at all.
    async fn ended(&self, n: usize) -> usize {
        let mut ended = self.0.subscribe();
        let reached = ended.wait_for(|ended| *ended >= n);
        let ended = match tokio::time::timeout(Duration::from_secs(600), reached).await {
            Ok(Ok(ended)) => *ended,
            _ => panic!("{n} requests never ended"),
        };
        ended
    }
}

/// Syncs until every store reached Redis, `tries` times at most, 10 ms
/// (paused) apart; how many it took, or `None`.
async fn shared_within(replicas: &impl Shared, tries: usize) -> Option<usize> {
    for attempt in 1..=tries {
        if replicas.sync_all().await {
            return Some(attempt);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Runs `check` while holding tokio's paused clock still, for up to two
/// seconds of real time (a loaded 2-core machine may take far more than
/// the few milliseconds nine Redis syncs need): the runtime never waits
/// idle (it yields), so the
/// clock does not jump ahead while Redis answers, and the crowd gets no
/// further than its ready work meanwhile. Past that, the clock runs again
/// (a check waiting on a timer, a reconnection's backoff say, then ends).
pub(crate) async fn held_clock<F: std::future::Future>(check: F) -> F::Output {
    let started = std::time::Instant::now();
    let hold = async {
        while started.elapsed() < Duration::from_secs(2) {
            tokio::task::yield_now().await;
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        done = check => done,
        () = hold => unreachable!("the hold never ends"),
    }
}

/// What the faults did, printed with the totals.
#[derive(Debug, Default)]
pub(crate) struct FaultLog {
    /// Syncs of every store it took to share again after each restart.
    pub(crate) syncs_to_resume: Vec<usize>,
    /// Requests that ended while Redis was dead, while it slept, and while
    /// it was dead again during the crowd's tail.
    pub(crate) ended_while_dead: usize,
    pub(crate) ended_while_hung: usize,
    pub(crate) ended_while_dead_in_the_tail: usize,
}

/// While the crowd of `total` runs, Redis is killed, hung and killed again.
///
/// Requests answered without a wait end in a first burst, before the
/// paused clock moves; the others (backoffs, named waits, slow bodies)
/// end in a tail as it runs. So the faults come in steps of an eighth of
/// the crowd's requests ended (up to four fifths of the crowd, which its
/// cancellations leave reachable), and of paused seconds for the tail:
/// killed for a step, then restarted; hung (`DEBUG SLEEP`) for a step and
/// a second, then killed in its sleep and restarted; killed for a second.
/// Each fault is checked real (a dead Redis fails a sync; a hung one is
/// still asleep at its end) and sharing is checked to resume after each.
pub(crate) async fn faults(
    redis: &mut RedisServer,
    replicas: &impl Shared,
    total: usize,
) -> FaultLog {
    let step = (total / 8).max(1);
    let cap = total * 4 / 5;
    let a_step_after = |from: usize| (from + step).min(cap);
    let mut log = FaultLog::default();
    replicas.progress().ended(step.min(cap)).await;
    // On the paused clock a call can, rarely, outlast its timeout while
    // Redis answers: a few tries.
    assert!(
        shared_within(replicas, 5).await.is_some(),
        "the replicas never shared"
    );

    redis.kill();
    assert!(!replicas.sync_all().await, "a killed Redis answered");
    let killed_at = replicas.progress().now();
    log.ended_while_dead = replicas.progress().ended(a_step_after(killed_at)).await - killed_at;
    redis.restart();
    log.syncs_to_resume.push(
        shared_within(replicas, 50)
            .await
            .expect("sharing resumed after a restart"),
    );

    replicas
        .progress()
        .ended(a_step_after(replicas.progress().now()))
        .await;
    let _sleeper = redis.send_without_waiting("DEBUG SLEEP 60");
    redis.wait_until_stalled(Duration::from_millis(200));
    let hung_at = replicas.progress().now();
    replicas.progress().ended(a_step_after(hung_at)).await;
    // The tail's retries and the sync tasks' own calls meet it too.
    tokio::time::sleep(Duration::from_secs(1)).await;
    log.ended_while_hung = replicas.progress().now() - hung_at;
    assert!(
        redis.stalled(),
        "Redis woke before the requests it was to hang ended"
    );
    redis.restart();
    log.syncs_to_resume.push(
        shared_within(replicas, 50)
            .await
            .expect("sharing resumed after a hang"),
    );

    redis.kill();
    let killed_at = replicas.progress().now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    log.ended_while_dead_in_the_tail = replicas.progress().now() - killed_at;
    assert!(!replicas.sync_all().await, "a killed Redis answered");
    redis.restart();
    log.syncs_to_resume.push(
        shared_within(replicas, 50)
            .await
            .expect("sharing resumed after the last restart"),
    );
    // Requests ended in each fault. A small crowd (`SOAK_REQUESTS` under
    // 800) may end in a few bursts that pass a step at once.
    if total >= 200 {
        assert!(
            log.ended_while_dead > 0 && log.ended_while_hung > 0,
            "no request ended during a fault: {log:?}"
        );
    }
    log
}
