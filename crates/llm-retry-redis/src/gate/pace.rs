//! A send's wait in the fleet: one script call a send reads the key's hold
//! and takes its turns in the key's paces from the hold's end; while Redis
//! does not answer, the replica's own answer from the holds it knows and
//! the shared quotas divided among the replicas.

use super::store::Inner;
use super::sync::Holds;
use crate::ends::{lock, Entry};
use crate::task::bounded;
use llm_retry::rate_limit::SharedPace;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// At most this many paces of this replica's own are kept.
const MAX_LOCAL: usize = 4096;

/// After a send's call failed, sends answer from the replica's own state
/// for this long before one asks Redis again: in an outage or a hang, one
/// send in this span pays the timeout, not every send; once Redis is back,
/// sends share again within it.
const PAUSE_AFTER_FAILURE: Duration = Duration::from_millis(500);

/// One pace a send takes a turn in, as the script reads it (whole µs): what
/// the send adds to the key's theoretical arrival time, and how far past
/// now that may run before a send waits (the burst's worth).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Step {
    increment: Duration,
    tolerance: Duration,
}

impl Step {
    /// One send under a request `pace`.
    pub(super) fn request(pace: SharedPace) -> Step {
        Step::new(
            pace.interval,
            pace.interval.saturating_mul(pace.burst.max(1)),
        )
    }

    /// A send of `cost` tokens under a token `pace`.
    pub(super) fn tokens(pace: SharedPace, cost: u32) -> Step {
        Step::new(
            pace.interval.saturating_mul(cost),
            pace.interval.saturating_mul(pace.burst.max(1)),
        )
    }

    fn new(increment: Duration, tolerance: Duration) -> Step {
        let whole = |d: Duration| Duration::from_micros(micros(d));
        Step {
            increment: whole(increment),
            tolerance: whole(tolerance),
        }
    }
}

/// Theoretical arrival times of the paces this replica kept alone: each
/// key's request pace (`false`) and token pace (`true`).
#[derive(Debug, Default)]
pub(super) struct LocalPaces(HashMap<(u64, bool), Instant>);

impl LocalPaces {
    /// The wait for a send at `now` under its request and token paces
    /// (`steps`), no earlier than `floor` (the end of a hold that keeps
    /// it), its turns taken; or the wait past `max_wait`, none taken: the
    /// arithmetic of the shared script (GCRAs handing out slots in arrival
    /// order; a send that costs more than a pace's burst waits for what it
    /// lacks).
    pub(super) fn wait(
        &mut self,
        key: u64,
        steps: [Option<Step>; 2],
        now: Instant,
        floor: Instant,
        max_wait: Option<Duration>,
    ) -> Result<Duration, Duration> {
        let floor = floor.max(now);
        let paces: Vec<_> = steps
            .into_iter()
            .zip([false, true])
            .filter_map(|(step, tokens)| Some(((key, tokens), step?)))
            .collect();
        let known = paces.iter().all(|(at, _)| self.0.contains_key(at));
        if self.0.len() + paces.len() > MAX_LOCAL && !known {
            // Paces whose bucket is full again carry nothing.
            self.0.retain(|_, tat| *tat > now);
            if self.0.len() + paces.len() > MAX_LOCAL {
                return within(floor - now, max_wait);
            }
        }
        let mut slot = floor;
        for (at, step) in &paces {
            let base = self.0.get(at).map_or(now, |tat| (*tat).max(now));
            let due = later(base, step.increment);
            slot = slot.max(due.checked_sub(step.tolerance).unwrap_or(slot));
        }
        let wait = within(slot - now, max_wait)?;
        for (at, step) in paces {
            let start = self.0.get(&at).map_or(slot, |tat| (*tat).max(slot));
            self.0.insert(at, later(start, step.increment));
        }
        Ok(wait)
    }
}

/// `at + by`, or a year on when that is past what an `Instant` holds.
fn later(at: Instant, by: Duration) -> Instant {
    at.checked_add(by)
        .or_else(|| at.checked_add(Duration::from_secs(365 * 86_400)))
        .unwrap_or(at)
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

/// The script's wait: for turns taken, or (negative) for ones too late to
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

/// A pace's two arguments as the script reads them: increment and
/// tolerance in µs, or two empty ones for none.
fn push_step(call: &mut redis::ScriptInvocation<'_>, step: Option<Step>) {
    match step {
        Some(step) => call.arg(micros(step.increment)).arg(micros(step.tolerance)),
        None => call.arg("").arg(""),
    };
}

/// What a send wants of the fleet, as [`SharedGate::turn`](llm_retry::rate_limit::SharedGate::turn)
/// gives it: its paces and its bounds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Wanted {
    pub(super) pace: Option<SharedPace>,
    pub(super) tokens: Option<(SharedPace, u32)>,
    pub(super) max_wait: Option<Duration>,
    pub(super) max_hold: Option<Duration>,
}

impl Wanted {
    /// Its turns as one of `replicas` sending each its share (1: the
    /// fleet's own paces).
    fn steps(&self, replicas: u32) -> [Option<Step>; 2] {
        [
            self.pace.map(|pace| Step::request(divided(pace, replicas))),
            self.tokens
                .map(|(pace, cost)| Step::tokens(divided(pace, replicas), cost)),
        ]
    }
}

/// What a send asks, as one call of the turn script: the keys of `field`
/// (a key's fingerprint) under `prefix` (its paces) and `holds` (the holds'
/// hash), its `steps` (request and token paces), its bounds, and `now` in
/// µs for a test (`None`: the server's clock).
pub(super) struct Ask<'a> {
    pub(super) prefix: &'a str,
    pub(super) holds: &'a str,
    pub(super) field: &'a str,
    pub(super) steps: [Option<Step>; 2],
    pub(super) now: Option<u64>,
    pub(super) max_wait: Option<Duration>,
    pub(super) max_hold: Option<Duration>,
}

impl Ask<'_> {
    /// The script call, its keys and arguments in the script's order.
    pub(super) fn invocation<'s>(&self, script: &'s redis::Script) -> redis::ScriptInvocation<'s> {
        let mut call = script.key(format!("{}:{}", self.prefix, self.field));
        call.key(self.holds)
            .key(format!("{}:{}:tokens", self.prefix, self.field))
            .arg(self.field);
        push_step(&mut call, self.steps[0]);
        call.arg(self.now.map_or_else(String::new, |now| now.to_string()))
            .arg(optional_micros(self.max_wait))
            .arg(optional_micros(self.max_hold));
        push_step(&mut call, self.steps[1]);
        call
    }
}

impl Inner {
    /// The wait before a send to `key`: for a hold on the key it honours
    /// (`max_hold`), then for its turns in the fleet's request `pace` and
    /// token pace (with the send's cost), asked in one script call bounded
    /// by the timeout; past it, or on an error, the replica's own answer.
    /// After a failed call the replica answers alone for a while, then one
    /// send asks again while the others still answer alone.
    pub(super) async fn turn(&self, key: u64, wanted: Wanted) -> Result<Duration, Duration> {
        let timeout = self.holds.options.timeout;
        let probing = {
            let mut paused = lock(&self.turns_paused);
            let now = Instant::now();
            match *paused {
                Some(until) if now < until => None,
                // The first ask since the pause: the others wait for it
                // no longer than its timeout.
                Some(_) => {
                    *paused = now.checked_add(timeout);
                    Some(true)
                }
                None => Some(false),
            }
        };
        let Some(probing) = probing else {
            return self.own_turn(key, wanted);
        };
        let field = format!("{key:016x}");
        let ask = Ask {
            prefix: &self.pace_prefix,
            holds: &self.holds.key,
            field: &field,
            steps: wanted.steps(1),
            now: None,
            max_wait: wanted.max_wait,
            max_hold: wanted.max_hold,
        };
        let mut connection = self.turns.clone();
        let call = ask.invocation(&self.turn_script);
        let answer = bounded(timeout, call.invoke_async::<(i64, i64)>(&mut connection));
        match answer.await {
            Ok((wait, held)) => {
                self.turn_health.succeeded();
                if probing {
                    *lock(&self.turns_paused) = None;
                }
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
                self.own_turn(key, wanted)
            }
        }
    }

    /// The wait this replica gives a send alone: to the end of a hold it
    /// knows in memory that the send honours, then for its share of the
    /// paces.
    fn own_turn(&self, key: u64, wanted: Wanted) -> Result<Duration, Duration> {
        let now = Instant::now();
        let known = self.holds.known().get(&key).copied();
        let floor = known
            .filter(|until| {
                let left = until.saturating_duration_since(now);
                !left.is_zero() && wanted.max_hold.is_none_or(|max| left <= max)
            })
            .unwrap_or(now);
        let steps = wanted.steps(self.holds.options.replicas);
        lock(&self.local).wait(key, steps, now, floor, wanted.max_wait)
    }
}

#[cfg(test)]
#[path = "../../tests/support/mod.rs"]
mod support;

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A request pace alone: one send every `interval`, `burst` at once.
    fn requests(interval: Duration, burst: u32) -> [Option<Step>; 2] {
        [Some(Step::request(SharedPace { interval, burst })), None]
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_bucket_goes_at_once_and_the_rest_a_pace_apart() {
        let steps = requests(Duration::from_millis(20), 3);
        let mut local = LocalPaces::default();
        let now = Instant::now();
        let waits: Vec<_> = (0..5)
            .map(|_| {
                local
                    .wait(1, steps, now, now, None)
                    .expect("no bound")
                    .as_millis()
            })
            .collect();
        assert_eq!(waits, [0, 0, 0, 20, 40]);
        // A send that cannot wait for its turn takes none.
        let short = Some(Duration::from_millis(59));
        assert_eq!(
            local.wait(1, steps, now, now, short),
            Err(Duration::from_millis(60))
        );
        assert_eq!(
            local.wait(1, steps, now, now, None),
            Ok(Duration::from_millis(60))
        );
        // Another key has its own bucket.
        assert_eq!(local.wait(2, steps, now, now, None), Ok(Duration::ZERO));
        // A turn exactly at what the send can afford is taken.
        let exact = Some(Duration::from_millis(80));
        assert_eq!(
            local.wait(1, steps, now, now, exact),
            Ok(Duration::from_millis(80))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_map_makes_room_from_full_buckets_and_else_lets_a_new_key_go_unpaced() {
        let steps = requests(Duration::from_secs(1), 1);
        let mut local = LocalPaces::default();
        let now = Instant::now();
        // Every key's next turn a second on: the map is full.
        for key in 0..MAX_LOCAL as u64 {
            assert_eq!(local.wait(key, steps, now, now, None), Ok(Duration::ZERO));
        }
        assert_eq!(local.0.len(), MAX_LOCAL);
        // A key it holds still waits its turn; a new one goes, unpaced and
        // unkept, however often.
        assert_eq!(
            local.wait(0, steps, now, now, None),
            Ok(Duration::from_secs(1))
        );
        for _ in 0..3 {
            assert_eq!(
                local.wait(u64::MAX, steps, now, now, None),
                Ok(Duration::ZERO)
            );
        }
        assert_eq!(local.0.len(), MAX_LOCAL);
        // Unpaced, it still waits out a hold, and its bound holds.
        let floor = now + Duration::from_millis(300);
        assert_eq!(
            local.wait(
                u64::MAX,
                steps,
                now,
                floor,
                Some(Duration::from_millis(200))
            ),
            Err(Duration::from_millis(300))
        );
        // Once the buckets are full again, their keys make room.
        let later_on = now + Duration::from_secs(3);
        assert_eq!(
            local.wait(u64::MAX, steps, later_on, later_on, None),
            Ok(Duration::ZERO)
        );
        assert_eq!(local.0.len(), 1);
        assert_eq!(
            local.wait(u64::MAX, steps, later_on, later_on, None),
            Ok(Duration::from_secs(1)),
            "kept now"
        );
    }

    /// After an ask that outlasted the timeout, the store's sends answer
    /// alone (at once) for the pause; then one asks Redis again. A server
    /// that accepts and never answers, on tokio's paused clock.
    #[tokio::test(start_paused = true)]
    async fn after_a_failed_ask_sends_answer_alone_for_the_pause_then_ask_again() {
        use llm_retry::rate_limit::SharedGate;
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = silent.local_addr().expect("address");
        tokio::spawn(async move {
            let mut kept = Vec::new();
            while let Ok((socket, _)) = silent.accept().await {
                kept.push(socket);
            }
        });
        let timeout = Duration::from_secs(2);
        let gate = super::super::RedisGate::start(
            redis::Client::open(format!("redis://{address}")).expect("url"),
            crate::StateName::new("silent").expect("name"),
            crate::SharedOptions::default()
                .with_timeout(timeout)
                .with_sync_interval(Duration::from_secs(3600)),
            b"fleet",
        )
        .expect("store");
        let ask = || async {
            let start = Instant::now();
            let wait = gate.turn(7, None, None, None, None).await;
            (wait, start.elapsed())
        };
        assert_eq!(
            ask().await,
            (Ok(Duration::ZERO), timeout),
            "the first waits it out"
        );
        assert_eq!(ask().await, (Ok(Duration::ZERO), Duration::ZERO), "paused");
        // Alone, a send waits for a hold the replica knows, if it honours
        // it.
        let s = Duration::from_secs;
        gate.publish_hold(7, Instant::now() + s(10));
        assert_eq!(gate.turn(7, None, None, None, Some(s(20))).await, Ok(s(10)));
        assert_eq!(
            gate.turn(7, None, None, None, Some(s(5))).await,
            Ok(Duration::ZERO)
        );
        assert_eq!(
            gate.turn(8, None, None, None, None).await,
            Ok(Duration::ZERO)
        );
        // Past the pause, one of two sends asks again; the other answers
        // alone while it does.
        tokio::time::sleep(PAUSE_AFTER_FAILURE).await;
        let (first, second) = tokio::join!(ask(), ask());
        let mut took = [first.1, second.1];
        took.sort();
        assert_eq!(took, [Duration::ZERO, timeout], "one asked again");
    }

    /// A send's ask makes the replica know a hold it found, and no other.
    #[tokio::test]
    async fn an_ask_that_finds_a_hold_makes_it_known_and_one_that_does_not_does_not() {
        use llm_retry::rate_limit::SharedGate;
        let Some((server, mut connection)) = redis_of_its_own().await else {
            return;
        };
        let gate = super::super::RedisGate::start(
            server.client(),
            crate::StateName::new("asks").expect("name"),
            crate::SharedOptions::default()
                .with_timeout(Duration::from_secs(2))
                .with_sync_interval(Duration::from_secs(3600)),
            b"fleet",
        )
        .expect("store");
        assert!(gate.sync().await);
        assert_eq!(
            gate.turn(7, None, None, None, None).await,
            Ok(Duration::ZERO)
        );
        assert_eq!(gate.read_hold(7), None, "nothing found, nothing known");
        let time: (String, String) = redis::cmd("TIME")
            .query_async(&mut connection)
            .await
            .expect("time");
        let now_ms = time.0.parse::<u64>().expect("s") * 1000;
        let () = redis::cmd("HSET")
            .arg("{llm-retry:asks}:holds")
            .arg(format!("{:016x}", 7))
            .arg(now_ms + 60_000)
            .query_async(&mut connection)
            .await
            .expect("hset");
        let wait = gate
            .turn(7, None, None, None, None)
            .await
            .expect("no bound");
        assert!(wait > Duration::from_secs(50), "{wait:?}");
        assert!(gate.read_hold(7).is_some(), "known once found");
    }

    #[tokio::test(start_paused = true)]
    async fn the_map_makes_room_only_past_its_bound() {
        let step = |secs| requests(Duration::from_secs(secs), 1);
        let mut local = LocalPaces::default();
        let t0 = Instant::now();
        // One key whose bucket is full again a second on, the rest ten.
        local.wait(0, step(1), t0, t0, None).expect("no bound");
        for key in 1..MAX_LOCAL as u64 - 1 {
            local.wait(key, step(10), t0, t0, None).expect("no bound");
        }
        let t1 = t0 + Duration::from_secs(2);
        // Exactly at the bound once kept: no sweep yet.
        local
            .wait(u64::MAX, step(10), t1, t1, None)
            .expect("no bound");
        assert_eq!(local.0.len(), MAX_LOCAL);
        // Past it: the full bucket makes room for exactly one more, kept.
        local
            .wait(u64::MAX - 1, step(10), t1, t1, None)
            .expect("no bound");
        assert_eq!(local.0.len(), MAX_LOCAL);
        assert_eq!(
            local.wait(u64::MAX - 1, step(10), t1, t1, None),
            Ok(Duration::from_secs(10)),
            "kept"
        );
    }

    #[test]
    fn a_time_past_what_an_instant_holds_is_a_year_on() {
        let now = Instant::now();
        assert_eq!(
            later(now, Duration::MAX),
            now + Duration::from_secs(365 * 86_400)
        );
        assert_eq!(
            later(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_send_waits_for_the_slower_of_its_request_and_token_turns() {
        let ms = Duration::from_millis;
        // Ten sends a second at most, five at once; 1,000 tokens a second,
        // 2,000 at once.
        let requests = SharedPace {
            interval: ms(100),
            burst: 5,
        };
        let tokens = SharedPace {
            interval: Duration::from_millis(1),
            burst: 2_000,
        };
        let mut local = LocalPaces::default();
        let now = Instant::now();
        let send = |local: &mut LocalPaces, cost| {
            let steps = [
                Some(Step::request(requests)),
                Some(Step::tokens(tokens, cost)),
            ];
            local.wait(1, steps, now, now, None).expect("no bound")
        };
        // Two sends of 1,000 tokens empty the token bucket; the third
        // waits a second for its tokens, though requests have room.
        assert_eq!(send(&mut local, 1_000), ms(0));
        assert_eq!(send(&mut local, 1_000), ms(0));
        assert_eq!(send(&mut local, 1_000), ms(1_000));
        // A hold's end is the floor of both.
        let floor = now + ms(5_000);
        let steps = [Some(Step::request(requests)), Some(Step::tokens(tokens, 1))];
        assert_eq!(local.wait(2, steps, now, floor, None), Ok(ms(5_000)));
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

    /// A `redis-server` of the test's own (kept running while the first
    /// is held), and a connection to it.
    async fn redis_of_its_own() -> Option<(
        super::support::RedisServer,
        redis::aio::MultiplexedConnection,
    )> {
        let server = super::support::RedisServer::start()?;
        let connection = server
            .client()
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        Some((server, connection))
    }

    /// A random pace: one send or token every 1 µs to 200 ms, 1 to 12 at
    /// once.
    fn random_pace(rng: &mut rand::rngs::StdRng) -> SharedPace {
        SharedPace {
            interval: Duration::from_micros(rng.random_range(1..200_000)),
            burst: rng.random_range(1..12),
        }
    }

    /// The script, against a real Redis, hands out the same slots as the
    /// replica's own paces, to the microsecond, over random arrivals,
    /// request and token paces, costs and holds (the script told the time,
    /// as the replica is).
    #[tokio::test]
    async fn the_shared_script_and_the_local_pace_agree_on_every_slot() {
        let Some((_server, mut connection)) = redis_of_its_own().await else {
            return;
        };
        let script = redis::Script::new(include_str!("turn.lua"));
        let mut rng = rand::rngs::StdRng::seed_from_u64(2026);
        // Far enough into the epoch that µs need all of a double's 53 bits.
        let epoch_us: u64 = 1_796_000_000_000_000;
        let (mut holds, mut refused, mut both) = (0, 0, 0);
        for sequence in 0..80_u32 {
            // A request pace, a token pace, or both.
            let kind = rng.random_range(0..3);
            let requests = (kind != 1).then(|| random_pace(&mut rng));
            let tokens = (kind != 0).then(|| {
                let mut pace = random_pace(&mut rng);
                pace.interval /= 100;
                pace.burst *= 100;
                pace
            });
            let field = format!("{sequence:016x}");
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
                    2 => rng.random_range(0..400_000),
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
                let cost = rng.random_range(1..400);
                let steps = [
                    requests.map(Step::request),
                    tokens.map(|pace| Step::tokens(pace, cost)),
                ];
                let ask = Ask {
                    prefix: "{t}:pace",
                    holds: "{t}:holds",
                    field: &field,
                    steps,
                    now: Some(now_us),
                    max_wait,
                    max_hold,
                };
                let (shared, held): (i64, i64) = ask
                    .invocation(&script)
                    .invoke_async(&mut connection)
                    .await
                    .expect("script");
                // The keys' TTLs run on the server's real clock, this
                // test's `now` on its own: kept, so a slow machine does not
                // expire a turn the test's clock has not reached.
                for key in [
                    format!("{{t}}:pace:{field}"),
                    format!("{{t}}:pace:{field}:tokens"),
                ] {
                    let _: i64 = redis::cmd("PERSIST")
                        .arg(key)
                        .query_async(&mut connection)
                        .await
                        .expect("persist");
                }
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
                let own = local.wait(0, steps, at, floor, max_wait);
                refused += usize::from(own.is_err());
                both += usize::from(kind == 2);
                let case = format!(
                    "sequence {sequence}, arrival {arrival}, {steps:?}, {max_wait:?}, {max_hold:?}"
                );
                assert_eq!(from_script(shared), own, "{case}");
                assert_eq!(held, if honoured { left as i64 } else { 0 }, "{case}");
            }
        }
        // The sequences hold, refuse and pace both ways often enough to
        // mean something.
        assert!(
            holds > 100 && refused > 50 && both > 500,
            "{holds} held, {refused} refused, {both} under both paces"
        );
    }

    /// The script's holds: one the send honours keeps it to its end, and a
    /// pace counts from there; one longer than the send honours, or over,
    /// does not; a wait past what the send can afford takes no turn.
    #[tokio::test]
    async fn the_script_keeps_a_send_to_the_end_of_a_hold_it_honours() {
        let Some((_server, mut connection)) = redis_of_its_own().await else {
            return;
        };
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
        // One send a second, one at once.
        let pace = Some(Step::request(SharedPace {
            interval: s(1),
            burst: 1,
        }));
        // One call of the script, at `at_us`.
        let call = |field: &'static str,
                    steps: [Option<Step>; 2],
                    at_us: u64,
                    max_wait: Option<Duration>,
                    max_hold: Option<Duration>| {
            let call = Ask {
                prefix: "{t}:pace",
                holds: "{t}:holds",
                field,
                steps,
                now: Some(at_us),
                max_wait,
                max_hold,
            }
            .invocation(&script);
            let mut connection = connection.clone();
            async move {
                call.invoke_async::<(i64, i64)>(&mut connection)
                    .await
                    .expect("script")
            }
        };
        let ask = |field, max_wait, max_hold| call(field, [pace, None], now_us, max_wait, max_hold);
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
        // A send costing 800 µs of a pace whose burst is 500 µs waits the
        // 300 µs it lacks: on a fresh key, on one whose turn is long past,
        // and on one whose key expired.
        let tokens = Some(Step::new(
            Duration::from_micros(800),
            Duration::from_micros(500),
        ));
        let big = |at_us| call("34", [None, tokens], at_us, None, None);
        assert_eq!(big(now_us).await, (300, 0));
        assert_eq!(big(now_us + 5_000_000).await, (300, 0));
        let _: i64 = redis::cmd("DEL")
            .arg("{t}:pace:34:tokens")
            .query_async(&mut connection.clone())
            .await
            .expect("del");
        assert_eq!(big(now_us + 10_000_000).await, (300, 0));
    }
}
