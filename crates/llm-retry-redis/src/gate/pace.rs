//! The fleet's pace of a key: one script call a send, and the replica's
//! own pace (the configured quota divided among the replicas) while Redis
//! does not answer.

use super::store::Inner;
use crate::ends::lock;
use crate::task::bounded;
use llm_retry::rate_limit::SharedPace;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// At most this many keys keep a pace of this replica's own.
const MAX_LOCAL: usize = 4096;

/// Theoretical arrival times of the keys this replica paced alone.
#[derive(Debug, Default)]
pub(super) struct LocalPaces(HashMap<u64, Instant>);

impl LocalPaces {
    /// The wait for a send at `now` under `pace`, its slot taken, or the
    /// wait past `max_wait` and none taken: the arithmetic of the shared
    /// script (a GCRA handing out slots in arrival order).
    pub(super) fn wait(
        &mut self,
        key: u64,
        pace: SharedPace,
        now: Instant,
        max_wait: Option<Duration>,
    ) -> Result<Duration, Duration> {
        if self.0.len() >= MAX_LOCAL && !self.0.contains_key(&key) {
            // Keys whose bucket is full again carry nothing.
            self.0.retain(|_, tat| *tat > now);
            if self.0.len() >= MAX_LOCAL {
                return Ok(Duration::ZERO);
            }
        }
        let interval = pace.interval;
        let tat = self.0.get(&key).copied();
        let slot = tat.map_or(now, |tat| {
            let due = tat + interval;
            let room = interval.saturating_mul(pace.burst.max(1));
            now.max(due.checked_sub(room).unwrap_or(now))
        });
        let wait = slot - now;
        if max_wait.is_some_and(|max| wait > max) {
            return Err(wait);
        }
        let start = tat.map_or(slot, |tat| tat.max(slot));
        self.0.insert(key, start + interval);
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

/// The script's answer: the wait for a turn taken, or (negative) for one
/// too late to take.
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

impl Inner {
    /// The wait before a send to `key` under the fleet's `pace`, bounded
    /// by the timeout; past it, or on an error, this replica's share of
    /// the pace.
    pub(super) async fn pace(
        &self,
        key: u64,
        pace: SharedPace,
        max_wait: Option<Duration>,
    ) -> Result<Duration, Duration> {
        let mut connection = self.pacing.clone();
        let mut call = self
            .pace_script
            .key(format!("{}:{key:016x}", self.pace_prefix));
        call.arg(micros(pace.interval))
            .arg(pace.burst.max(1))
            .arg("")
            .arg(max_wait.map_or_else(String::new, |max| micros(max).to_string()));
        let answer = bounded(
            self.holds.options.timeout,
            call.invoke_async::<i64>(&mut connection),
        );
        match answer.await {
            Ok(answer) => {
                self.pace_health.succeeded();
                from_script(answer)
            }
            Err(failure) => {
                self.pace_health.failed(failure);
                let own = divided(pace, self.holds.options.replicas);
                lock(&self.local).wait(key, own, Instant::now(), max_wait)
            }
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
                    .wait(1, pace, now, None)
                    .expect("no bound")
                    .as_millis()
            })
            .collect();
        assert_eq!(waits, [0, 0, 0, 20, 40]);
        // A send that cannot wait for its turn takes none.
        let short = Some(Duration::from_millis(59));
        assert_eq!(
            local.wait(1, pace, now, short),
            Err(Duration::from_millis(60))
        );
        assert_eq!(
            local.wait(1, pace, now, None),
            Ok(Duration::from_millis(60))
        );
        // Another key has its own bucket.
        assert_eq!(local.wait(2, pace, now, None), Ok(Duration::ZERO));
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
    /// replica's own pace, to the microsecond, over random arrivals and
    /// paces (the script told the time, as the replica is).
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
        let script = redis::Script::new(include_str!("pace.lua"));
        let mut rng = rand::rngs::StdRng::seed_from_u64(2026);
        // Far enough into the epoch that µs need all of a double's 53 bits.
        let epoch_us: u64 = 1_796_000_000_000_000;
        for sequence in 0..60_u32 {
            let pace = SharedPace {
                interval: Duration::from_micros(rng.random_range(1..200_000)),
                burst: rng.random_range(1..12),
            };
            let key = format!("{{t}}:pace:{sequence}");
            let mut local = LocalPaces::default();
            let start = Instant::now();
            let mut offset_us = 0_u64;
            for arrival in 0..50 {
                // Bursts, pauses and everything between.
                offset_us += match rng.random_range(0..4) {
                    0 => 0,
                    1 => rng.random_range(0..1_000),
                    2 => rng.random_range(0..pace.interval.as_micros() as u64 * 2),
                    _ => rng.random_range(0..2_000_000),
                };
                // Now and then a send that can afford only a short wait.
                let max_wait = (rng.random_range(0..4) == 0)
                    .then(|| Duration::from_micros(rng.random_range(0..300_000)));
                let shared: i64 = script
                    .key(&key)
                    .arg(micros(pace.interval))
                    .arg(pace.burst)
                    .arg(epoch_us + offset_us)
                    .arg(max_wait.map_or_else(String::new, |max| micros(max).to_string()))
                    .invoke_async(&mut connection)
                    .await
                    .expect("script");
                let at = start + Duration::from_micros(offset_us);
                assert_eq!(
                    from_script(shared),
                    local.wait(0, pace, at, max_wait),
                    "sequence {sequence}, arrival {arrival}, {pace:?}, {max_wait:?}"
                );
            }
        }
    }
}
