//! A send's wait in the fleet: one script call a send reads the key's hold
//! and takes its turn in the key's pace from the hold's end; while Redis
//! does not answer, the replica's own answer from the holds it knows and
//! the configured quota divided among the replicas.

use super::store::Inner;
use super::sync::Holds;
use crate::ends::{lock, Entry};
use crate::task::bounded;
use llm_retry::rate_limit::SharedPace;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// At most this many keys keep a pace of this replica's own.
const MAX_LOCAL: usize = 4096;

/// After a send's call failed, sends answer from the replica's own state
/// for this long before one asks Redis again: in an outage or a hang, one
/// send in this span pays the timeout, not every send.
const PAUSE_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// Theoretical arrival times of the keys this replica paced alone.
#[derive(Debug, Default)]
pub(super) struct LocalPaces(HashMap<u64, Instant>);

impl LocalPaces {
    /// The wait for a send at `now` under `pace`, no earlier than `floor`
    /// (the end of a hold that keeps it), its slot taken; or the wait past
    /// `max_wait`, none taken: the arithmetic of the shared script (a GCRA
    /// handing out slots in arrival order).
    pub(super) fn wait(
        &mut self,
        key: u64,
        pace: SharedPace,
        now: Instant,
        floor: Instant,
        max_wait: Option<Duration>,
    ) -> Result<Duration, Duration> {
        let floor = floor.max(now);
        if self.0.len() >= MAX_LOCAL && !self.0.contains_key(&key) {
            // Keys whose bucket is full again carry nothing.
            self.0.retain(|_, tat| *tat > now);
            if self.0.len() >= MAX_LOCAL {
                return within(floor - now, max_wait);
            }
        }
        let interval = pace.interval;
        let tat = self.0.get(&key).copied();
        let slot = tat.map_or(floor, |tat| {
            let due = tat + interval;
            let room = interval.saturating_mul(pace.burst.max(1));
            floor.max(due.checked_sub(room).unwrap_or(floor))
        });
        let wait = within(slot - now, max_wait)?;
        let start = tat.map_or(slot, |tat| tat.max(slot));
        self.0.insert(key, start + interval);
        Ok(wait)
    }
}

/// `wait`, or refused when it is longer than `max_wait`.
fn within(wait: Duration, max_wait: Option<Duration>) -> Result<Duration, Duration> {
    if max_wait.is_some_and(|max| wait > max) {
        Err(wait)
    } else {
        Ok(wait)
    }
}

/// `pace` for one of `replicas`: each replica sends its share of the rate,
/// its share of the burst (at least one).
pub(super) fn divided(pace: SharedPace, replicas: u32) -> SharedPace {
    let replicas = replicas.max(1);
    SharedPace {
        interval: pace.interval.saturating_mul(replicas),
        burst: (pace.burst / replicas).max(1),
    }
}

/// The script's wait: for a turn taken, or (negative) for one too late to
/// take.
fn from_script(answer: i64) -> Result<Duration, Duration> {
    let wait = |us: i64| Duration::from_micros(u64::try_from(us).unwrap_or(0));
    if answer >= 0 {
        Ok(wait(answer))
    } else {
        Err(wait((-1_i64).saturating_sub(answer)))
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// A bound as the script reads it: µs, or empty for none.
fn optional_micros(bound: Option<Duration>) -> String {
    bound.map_or_else(String::new, |bound| micros(bound).to_string())
}

impl Inner {
    /// The wait before a send to `key`: for a hold on the key it honours
    /// (`max_hold`) and its turn in the fleet's `pace` from the hold's end,
    /// asked in one script call bounded by the timeout; past it, or on an
    /// error, the replica's own answer.
    pub(super) async fn turn(
        &self,
        key: u64,
        pace: Option<SharedPace>,
        max_wait: Option<Duration>,
        max_hold: Option<Duration>,
    ) -> Result<Duration, Duration> {
        if lock(&self.turns_paused).is_some_and(|until| Instant::now() < until) {
            return self.own_turn(key, pace, max_wait, max_hold);
        }
        let mut connection = self.turns.clone();
        let field = format!("{key:016x}");
        let mut call = self
            .turn_script
            .key(format!("{}:{field}", self.pace_prefix));
        call.key(&self.holds.key)
            .arg(field)
            .arg(optional_micros(pace.map(|pace| pace.interval)))
            .arg(pace.map_or(1, |pace| pace.burst.max(1)))
            .arg("")
            .arg(optional_micros(max_wait))
            .arg(optional_micros(max_hold));
        let answer = bounded(
            self.holds.options.timeout,
            call.invoke_async::<(i64, i64)>(&mut connection),
        );
        match answer.await {
            Ok((wait, held)) => {
                self.turn_health.succeeded();
                let held = u64::try_from(held).ok().filter(|held| *held > 0);
                if let Some(until) =
                    held.and_then(|held| Instant::now().checked_add(Duration::from_micros(held)))
                {
                    // Known in memory too: the replica's next sends are
                    // booked behind it.
                    Holds::know(&mut self.holds.known(), &key, until);
                }
                from_script(wait)
            }
            Err(failure) => {
                self.turn_health.failed(failure);
                *lock(&self.turns_paused) = Instant::now().checked_add(PAUSE_AFTER_FAILURE);
                self.own_turn(key, pace, max_wait, max_hold)
            }
        }
    }

    /// The wait this replica gives a send alone: to the end of a hold it
    /// knows in memory that the send honours, and its share of the pace
    /// from then.
    fn own_turn(
        &self,
        key: u64,
        pace: Option<SharedPace>,
        max_wait: Option<Duration>,
        max_hold: Option<Duration>,
    ) -> Result<Duration, Duration> {
        let now = Instant::now();
        let known = self.holds.known().get(&key).copied();
        let floor = known
            .filter(|until| {
                let left = until.saturating_duration_since(now);
                !left.is_zero() && max_hold.is_none_or(|max| left <= max)
            })
            .unwrap_or(now);
        match pace {
            Some(pace) => {
                let own = divided(pace, self.holds.options.replicas);
                lock(&self.local).wait(key, own, now, floor, max_wait)
            }
            None => within(floor - now, max_wait),
        }
    }
}

#[cfg(test)]
#[path = "../../tests/support/mod.rs"]
mod support;

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[tokio::test(start_paused = true)]
    async fn a_full_bucket_goes_at_once_and_the_rest_a_pace_apart() {
        let pace = SharedPace {
            interval: Duration::from_millis(20),
            burst: 3,
        };
        let mut local = LocalPaces::default();
        let now = Instant::now();
        let waits: Vec<_> = (0..5)
            .map(|_| {
                local
                    .wait(1, pace, now, now, None)
                    .expect("no bound")
                    .as_millis()
            })
            .collect();
        assert_eq!(waits, [0, 0, 0, 20, 40]);
        // A send that cannot wait for its turn takes none.
        let short = Some(Duration::from_millis(59));
        assert_eq!(
            local.wait(1, pace, now, now, short),
            Err(Duration::from_millis(60))
        );
        assert_eq!(
            local.wait(1, pace, now, now, None),
            Ok(Duration::from_millis(60))
        );
        // Another key has its own bucket.
        assert_eq!(local.wait(2, pace, now, now, None), Ok(Duration::ZERO));
    }

    #[test]
    fn a_replica_alone_sends_its_share() {
        let pace = SharedPace {
            interval: Duration::from_millis(20),
            burst: 50,
        };
        assert_eq!(
            divided(pace, 3),
            SharedPace {
                interval: Duration::from_millis(60),
                burst: 16
            }
        );
        assert_eq!(divided(pace, 0), pace);
        assert_eq!(divided(SharedPace { burst: 1, ..pace }, 3).burst, 1);
    }

    /// The script, against a real Redis, hands out the same slots as the
    /// replica's own pace, to the microsecond, over random arrivals,
    /// paces and holds (the script told the time, as the replica is).
    #[tokio::test]
    async fn the_shared_script_and_the_local_pace_agree_on_every_slot() {
        let Some(server) = super::support::RedisServer::start() else {
            return;
        };
        let mut connection = server
            .client()
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        let script = redis::Script::new(include_str!("turn.lua"));
        let mut rng = rand::rngs::StdRng::seed_from_u64(2026);
        // Far enough into the epoch that µs need all of a double's 53 bits.
        let epoch_us: u64 = 1_796_000_000_000_000;
        let (mut holds, mut refused) = (0, 0);
        for sequence in 0..60_u32 {
            let pace = SharedPace {
                interval: Duration::from_micros(rng.random_range(1..200_000)),
                burst: rng.random_range(1..12),
            };
            let field = format!("{sequence:016x}");
            let key = format!("{{t}}:pace:{field}");
            let mut local = LocalPaces::default();
            let start = Instant::now();
            let mut offset_us = 0_u64;
            // The key's hold, as its end in ms on the script's clock.
            let mut hold_ms: Option<u64> = None;
            for arrival in 0..50 {
                // Bursts, pauses and everything between.
                offset_us += match rng.random_range(0..4) {
                    0 => 0,
                    1 => rng.random_range(0..1_000),
                    2 => rng.random_range(0..pace.interval.as_micros() as u64 * 2),
                    _ => rng.random_range(0..2_000_000),
                };
                let now_us = epoch_us + offset_us;
                // Now and then a replica holds the key for a while.
                if rng.random_range(0..8) == 0 {
                    let until = now_us / 1000 + rng.random_range(0..600);
                    let () = redis::cmd("HSET")
                        .arg("{t}:holds")
                        .arg(&field)
                        .arg(until)
                        .query_async(&mut connection)
                        .await
                        .expect("hset");
                    hold_ms = Some(until);
                }
                // Now and then a send that can afford only a short wait,
                // or honours only a short hold.
                let mut bound = |one_in| {
                    (rng.random_range(0..one_in) == 0)
                        .then(|| Duration::from_micros(rng.random_range(0..300_000)))
                };
                let (max_wait, max_hold) = (bound(4), bound(3));
                let (shared, held): (i64, i64) = script
                    .key(&key)
                    .key("{t}:holds")
                    .arg(&field)
                    .arg(micros(pace.interval))
                    .arg(pace.burst)
                    .arg(now_us)
                    .arg(optional_micros(max_wait))
                    .arg(optional_micros(max_hold))
                    .invoke_async(&mut connection)
                    .await
                    .expect("script");
                let at = start + Duration::from_micros(offset_us);
                let left = hold_ms.map_or(0, |until| (until * 1000).saturating_sub(now_us));
                let honoured =
                    left > 0 && max_hold.is_none_or(|max| Duration::from_micros(left) <= max);
                let floor = if honoured {
                    holds += 1;
                    at + Duration::from_micros(left)
                } else {
                    at
                };
                let own = local.wait(0, pace, at, floor, max_wait);
                refused += usize::from(own.is_err());
                let case = format!(
                    "sequence {sequence}, arrival {arrival}, {pace:?}, {max_wait:?}, {max_hold:?}"
                );
                assert_eq!(from_script(shared), own, "{case}");
                assert_eq!(held, if honoured { left as i64 } else { 0 }, "{case}");
            }
        }
        // The sequences hold and refuse often enough to mean something.
        assert!(
            holds > 100 && refused > 50,
            "{holds} held, {refused} refused"
        );
    }

    /// The script's holds: one the send honours keeps it to its end, and a
    /// pace counts from there; one longer than the send honours, or over,
    /// does not; a wait past what the send can afford takes no turn.
    #[tokio::test]
    async fn the_script_keeps_a_send_to_the_end_of_a_hold_it_honours() {
        let Some(server) = super::support::RedisServer::start() else {
            return;
        };
        let mut connection = server
            .client()
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        let script = redis::Script::new(include_str!("turn.lua"));
        let now_us: u64 = 1_796_000_000_000_000;
        // Three keys held for 2 s from `now`.
        for field in ["ab", "cd", "ef"] {
            let () = redis::cmd("HSET")
                .arg("{t}:holds")
                .arg(field)
                .arg(now_us / 1000 + 2_000)
                .query_async(&mut connection)
                .await
                .expect("hset");
        }
        let s = Duration::from_secs;
        let ask = |field: &'static str, max_wait: Option<Duration>, max_hold: Option<Duration>| {
            let mut call = script.key(format!("{{t}}:pace:{field}"));
            call.key("{t}:holds")
                .arg(field)
                .arg(1_000_000)
                .arg(1)
                .arg(now_us)
                .arg(optional_micros(max_wait))
                .arg(optional_micros(max_hold));
            let mut connection = connection.clone();
            async move {
                call.invoke_async::<(i64, i64)>(&mut connection)
                    .await
                    .expect("script")
            }
        };
        // Held: the first turn at the hold's end, the next a pace later.
        assert_eq!(ask("ab", None, None).await, (2_000_000, 2_000_000));
        assert_eq!(ask("ab", None, Some(s(2))).await, (3_000_000, 2_000_000));
        // A hold longer than the send honours does not keep it.
        assert_eq!(ask("cd", None, Some(s(1))).await, (0, 0));
        // Past what the send can afford: refused, and no turn taken.
        assert_eq!(ask("ef", Some(s(1)), None).await, (-2_000_001, 2_000_000));
        assert_eq!(ask("ef", None, Some(s(1))).await, (0, 0));
        // Never held.
        assert_eq!(ask("12", None, None).await, (0, 0));
    }
}
