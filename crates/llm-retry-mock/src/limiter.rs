//! A running [`Limit`]: quota levels, windows and requests in flight on the
//! tokio clock, and the headers each answer carries.
//!
//! Bucket levels are kept in nano-units (one unit = 10⁹), so a refill of
//! `elapsed_ns × per_second` is exact for every rate: no float, no drift,
//! no rounding in anyone's favour. The only rounding is in the wait told
//! to a refused request, which is rounded *up* to the nanosecond, so a
//! client that waits exactly that long finds its units (unless another
//! request took them first). [`Route::capacity`](crate::Route::capacity)
//! is a request bucket stated [`Shape::Exact`]ly.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::limit::{Limit, Quota, Shape};
use crate::reply::Reply;

const UNIT: u128 = 1_000_000_000;

/// One quota's state.
#[derive(Debug)]
enum Level {
    Bucket {
        per_second: u128,
        capacity: u128,
        /// Nano-units at `at`.
        level: u128,
        at: Instant,
    },
    Window {
        limit: u64,
        length: Duration,
        start: Instant,
        used: u64,
    },
}

impl Level {
    fn new(quota: Quota, spent: bool, now: Instant) -> Level {
        match quota {
            Quota::Bucket { per_second, burst } => {
                let capacity = u128::from(burst.max(1)) * UNIT;
                Level::Bucket {
                    per_second: u128::from(per_second),
                    capacity,
                    level: if spent { 0 } else { capacity },
                    at: now,
                }
            }
            Quota::Window { limit, length } => Level::Window {
                limit,
                length: length.max(Duration::from_millis(1)),
                start: now,
                used: if spent { limit } else { 0 },
            },
        }
    }

    /// Brings the level to `now`: refill, or a new window.
    fn advance(&mut self, now: Instant) {
        match self {
            Level::Bucket {
                per_second,
                capacity,
                level,
                at,
            } => {
                if now > *at {
                    let refill = now
                        .duration_since(*at)
                        .as_nanos()
                        .saturating_mul(*per_second);
                    *level = level.saturating_add(refill).min(*capacity);
                    *at = now;
                }
            }
            Level::Window {
                length,
                start,
                used,
                ..
            } => {
                let elapsed = now.saturating_duration_since(*start);
                if elapsed >= *length {
                    let windows = elapsed.as_nanos() / length.as_nanos();
                    let step = length.as_nanos().saturating_mul(windows);
                    *start += Duration::from_nanos(u64::try_from(step).unwrap_or(u64::MAX));
                    *used = 0;
                }
            }
        }
    }

    /// Whole units left.
    fn remaining(&self) -> u64 {
        match self {
            Level::Bucket { level, .. } => u64::try_from(level / UNIT).unwrap_or(u64::MAX),
            Level::Window { limit, used, .. } => limit.saturating_sub(*used),
        }
    }

    /// The most the quota ever holds.
    fn limit(&self) -> u64 {
        match self {
            Level::Bucket { capacity, .. } => u64::try_from(capacity / UNIT).unwrap_or(u64::MAX),
            Level::Window { limit, .. } => *limit,
        }
    }

    /// The quota per minute, as providers state it in their `limit` headers.
    fn per_minute(&self) -> u64 {
        match self {
            Level::Bucket { per_second, .. } => {
                u64::try_from(per_second.saturating_mul(60)).unwrap_or(u64::MAX)
            }
            Level::Window { limit, length, .. } => {
                let per_minute = u128::from(*limit) * 60_000 / length.as_millis().max(1);
                u64::try_from(per_minute).unwrap_or(u64::MAX)
            }
        }
    }

    /// Until the quota is full again (a bucket refilled, a window reset).
    fn reset_in(&self, now: Instant) -> Duration {
        match self {
            Level::Bucket {
                per_second,
                capacity,
                level,
                ..
            } => match *per_second {
                0 => Duration::ZERO,
                rate => nanos((capacity - level).div_ceil(rate)),
            },
            Level::Window { length, start, .. } => {
                (*start + *length).saturating_duration_since(now)
            }
        }
    }

    /// Until `cost` units are there, if ever (zero when they are now).
    fn wait_for(&self, cost: u64, now: Instant) -> Option<Duration> {
        if cost > self.limit() {
            return None;
        }
        match self {
            Level::Bucket {
                per_second, level, ..
            } => {
                let need = u128::from(cost) * UNIT;
                match (need.saturating_sub(*level), *per_second) {
                    (0, _) => Some(Duration::ZERO),
                    (_, 0) => None,
                    (missing, rate) => Some(nanos(missing.div_ceil(rate))),
                }
            }
            Level::Window { limit, used, .. } => {
                if used.saturating_add(cost) <= *limit {
                    Some(Duration::ZERO)
                } else {
                    Some(self.reset_in(now))
                }
            }
        }
    }

    fn take(&mut self, cost: u64) {
        match self {
            Level::Bucket { level, .. } => {
                *level = level.saturating_sub(u128::from(cost) * UNIT);
            }
            Level::Window { used, .. } => *used = used.saturating_add(cost),
        }
    }
}

fn nanos(n: u128) -> Duration {
    Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX))
}

#[derive(Debug)]
struct State {
    requests: Level,
    tokens: Option<Level>,
}

/// A [`Limit`] in force on one server.
#[derive(Debug)]
pub(crate) struct Limiter {
    shape: Shape,
    max_in_flight: Option<u32>,
    counts_tokens: bool,
    state: Mutex<State>,
    /// Admitted requests whose answer is not over: taken under the state's
    /// lock, given back when the answer's [`InFlightSlot`] drops.
    in_flight: Arc<AtomicUsize>,
}

/// An admitted request's place under the in-flight ceiling, held until its
/// answer is over: the body sent whole, or cut, or the client gone.
#[derive(Debug)]
pub(crate) struct InFlightSlot(Arc<AtomicUsize>);

impl Drop for InFlightSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the limiter made of one request.
pub(crate) enum Verdict {
    /// Admitted: answer with the admitted route, adding these headers, and
    /// hold the slot (under a ceiling) until the answer is over.
    Admitted(Vec<(&'static str, String)>, Option<InFlightSlot>),
    /// Refused: this reply.
    Refused(Reply),
}

impl Limiter {
    pub(crate) fn new(limit: &Limit, now: Instant) -> Limiter {
        let spent = limit.first_window_spent;
        Limiter {
            shape: limit.shape,
            max_in_flight: limit.max_in_flight,
            counts_tokens: limit.tokens.is_some(),
            state: Mutex::new(State {
                requests: Level::new(limit.requests, spent, now),
                tokens: limit.tokens.map(|q| Level::new(q, spent, now)),
            }),
            in_flight: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update is a few integer stores; a panic elsewhere cannot
        // leave the state torn.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What a request with `body` costs here: its tokens when the limit
    /// counts them, else nothing (and the body is not read).
    pub(crate) fn cost(&self, body: &[u8]) -> u64 {
        if self.counts_tokens {
            token_cost(body)
        } else {
            0
        }
    }

    /// Admits or refuses a request costing `cost` tokens at `now`.
    /// `when_limited` is the 429 to send; its wait headers are added here.
    pub(crate) fn decide(&self, cost: u64, now: Instant, when_limited: &Reply) -> Verdict {
        let mut state = self.lock();
        state.requests.advance(now);
        if let Some(tokens) = &mut state.tokens {
            tokens.advance(now);
        }
        // Counted under the lock, so concurrent requests cannot all see
        // room for one; ends are counted as they happen.
        if let Some(max) = self.max_in_flight {
            let max = usize::try_from(max).unwrap_or(usize::MAX);
            if self.in_flight.load(Ordering::Acquire) >= max {
                return Verdict::Refused(Reply::overloaded());
            }
        }
        let request_wait = state.requests.wait_for(1, now);
        let token_wait = state.tokens.as_ref().map(|t| t.wait_for(cost, now));
        let wait = match (request_wait, token_wait) {
            (Some(r), None) => Some(r),
            (Some(r), Some(Some(t))) => Some(r.max(t)),
            (None, _) | (_, Some(None)) => None,
        };
        if wait != Some(Duration::ZERO) {
            let mut reply = when_limited.clone();
            for (name, value) in self.headers(&state, now) {
                reply = reply.header(name, &value);
            }
            let with_ms = !matches!(self.shape, Shape::Anthropic);
            return Verdict::Refused(reply.with_wait(wait, with_ms));
        }
        state.requests.take(1);
        if let Some(tokens) = &mut state.tokens {
            tokens.take(cost);
        }
        let slot = self.max_in_flight.map(|_| {
            self.in_flight.fetch_add(1, Ordering::AcqRel);
            InFlightSlot(Arc::clone(&self.in_flight))
        });
        Verdict::Admitted(self.headers(&state, now), slot)
    }

    /// The headers every answer carries in this shape.
    fn headers(&self, state: &State, now: Instant) -> Vec<(&'static str, String)> {
        let mut headers = Vec::new();
        let quotas = [
            (Names::of(self.shape, false), Some(&state.requests)),
            (Names::of(self.shape, true), state.tokens.as_ref()),
        ];
        for (names, level) in quotas {
            let (Some(names), Some(level)) = (names, level) else {
                continue;
            };
            if let Some(name) = names.limit {
                headers.push((name, level.per_minute().to_string()));
            }
            headers.push((names.remaining, level.remaining().to_string()));
            if let Some((name, write)) = names.reset {
                headers.push((name, write(level.reset_in(now))));
            }
        }
        headers
    }
}

/// What one provider shape calls one quota's headers.
struct Names {
    limit: Option<&'static str>,
    remaining: &'static str,
    /// The reset's header and how it is written.
    reset: Option<(&'static str, WriteReset)>,
}

/// Writes the time to a quota's reset as a shape states it.
type WriteReset = fn(Duration) -> String;

impl Names {
    /// The request quota's names (`tokens`: the token quota's) in `shape`;
    /// none for [`Shape::Exact`], which states nothing.
    fn of(shape: Shape, tokens: bool) -> Option<Names> {
        let pick =
            |requests: &'static str, token: &'static str| if tokens { token } else { requests };
        Some(match shape {
            Shape::Exact => return None,
            Shape::Anthropic => Names {
                limit: Some(pick(
                    "anthropic-ratelimit-requests-limit",
                    "anthropic-ratelimit-tokens-limit",
                )),
                remaining: pick(
                    "anthropic-ratelimit-requests-remaining",
                    "anthropic-ratelimit-tokens-remaining",
                ),
                reset: Some((
                    pick(
                        "anthropic-ratelimit-requests-reset",
                        "anthropic-ratelimit-tokens-reset",
                    ),
                    rfc3339,
                )),
            },
            Shape::OpenAi => Names {
                limit: Some(pick(
                    "x-ratelimit-limit-requests",
                    "x-ratelimit-limit-tokens",
                )),
                remaining: pick(
                    "x-ratelimit-remaining-requests",
                    "x-ratelimit-remaining-tokens",
                ),
                reset: Some((
                    pick("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"),
                    go_duration,
                )),
            },
            Shape::Azure => Names {
                limit: None,
                remaining: pick(
                    "x-ratelimit-remaining-requests",
                    "x-ratelimit-remaining-tokens",
                ),
                reset: None,
            },
        })
    }
}

/// The wall-clock instant `after` from now, as RFC 3339 (UTC, whole seconds
/// rounded up, as Anthropic sends it).
fn rfc3339(after: Duration) -> String {
    let at = SystemTime::now() + after;
    let rounded = match at.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => {
            SystemTime::UNIX_EPOCH
                + Duration::from_secs(since.as_secs() + u64::from(since.subsec_nanos() > 0))
        }
        Err(_) => at,
    };
    humantime::format_rfc3339_seconds(rounded).to_string()
}

/// A Go duration as OpenAI sends it: `120ms`, `1.5s`, `6m0s`.
fn go_duration(d: Duration) -> String {
    // Rounded up: a reset stated early would invite a send before it.
    let ms = d.as_nanos().div_ceil(1_000_000);
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (mins, rest_ms) = (ms / 60_000, ms % 60_000);
    let secs = format!("{}.{:03}", rest_ms / 1000, rest_ms % 1000);
    let secs = secs.trim_end_matches('0').trim_end_matches('.');
    if mins == 0 {
        format!("{secs}s")
    } else {
        format!("{mins}m{secs}s")
    }
}

/// What a request body costs in tokens: its output cap plus a quarter of
/// its bytes.
pub(crate) fn token_cost(body: &[u8]) -> u64 {
    let input = u64::try_from(body.len().div_ceil(4)).unwrap_or(u64::MAX);
    let output = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            ["max_tokens", "max_output_tokens", "max_completion_tokens"]
                .iter()
                .find_map(|k| v.get(k).and_then(serde_json::Value::as_u64))
        })
        .unwrap_or(0);
    input.saturating_add(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn header<'a>(headers: &'a [(&'static str, String)], name: &str) -> Option<&'a str> {
        headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    fn refused_headers(verdict: Verdict) -> http::HeaderMap {
        match verdict {
            Verdict::Refused(Reply::Response(r)) => r.headers(),
            _ => panic!("expected a refusal"),
        }
    }

    /// Takes one unit at `now`; on refusal, the wait until one is there
    /// (`None`: never).
    fn take(level: &mut Level, now: Instant) -> Result<(), Option<Duration>> {
        level.advance(now);
        match level.wait_for(1, now) {
            Some(Duration::ZERO) => {
                level.take(1);
                Ok(())
            }
            wait => Err(wait),
        }
    }

    fn bucket(per_second: u64, burst: u64, now: Instant) -> Level {
        Level::new(Quota::Bucket { per_second, burst }, false, now)
    }

    #[test]
    fn a_bucket_starts_full_then_refills_exactly() {
        let t0 = Instant::now();
        let mut b = bucket(10, 3, t0);
        for _ in 0..3 {
            assert_eq!(take(&mut b, t0), Ok(()));
        }
        assert_eq!(take(&mut b, t0), Err(Some(ms(100))));
        assert_eq!(take(&mut b, t0 + ms(40)), Err(Some(ms(60))));
        assert_eq!(take(&mut b, t0 + ms(100)), Ok(()));
        assert_eq!(take(&mut b, t0 + ms(100)), Err(Some(ms(100))));
        // Never above the burst, however long it rested.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(take(&mut b, later), Ok(()));
        }
        assert!(take(&mut b, later).is_err());
    }

    #[test]
    fn rates_that_do_not_divide_a_second_do_not_drift() {
        let t0 = Instant::now();
        let mut b = bucket(3, 2, t0);
        assert_eq!(take(&mut b, t0), Ok(()));
        assert_eq!(take(&mut b, t0), Ok(()));
        // 1/3 s is 333_333_333.3… ns: the wait rounds up.
        assert_eq!(
            take(&mut b, t0),
            Err(Some(Duration::from_nanos(333_333_334)))
        );
        // 3000 units over 1000 s, taken in 1 ms steps: exactly 3000 (the
        // level never reaches the burst, so nothing is clipped).
        let mut granted = 0;
        for step in 1..=1_000_000u64 {
            if take(&mut b, t0 + ms(step)).is_ok() {
                granted += 1;
            }
        }
        assert_eq!(granted, 3000);
    }

    #[test]
    fn zero_rate_and_zero_burst() {
        let t0 = Instant::now();
        let mut b = bucket(0, 2, t0);
        assert_eq!(take(&mut b, t0), Ok(()));
        assert_eq!(take(&mut b, t0 + ms(5)), Ok(()));
        assert_eq!(take(&mut b, t0 + Duration::from_secs(99)), Err(None));
        let mut b = bucket(1000, 0, t0);
        assert_eq!(take(&mut b, t0), Ok(()));
        assert_eq!(take(&mut b, t0), Err(Some(ms(1))));
    }

    #[test]
    fn an_older_instant_never_refills_backwards() {
        let t0 = Instant::now();
        let mut b = bucket(1, 1, t0);
        assert_eq!(take(&mut b, t0 + ms(10)), Ok(()));
        assert_eq!(take(&mut b, t0), Err(Some(ms(1000))));
        assert_eq!(take(&mut b, t0 + ms(1010)), Ok(()));
    }

    #[test]
    fn go_durations_read_like_openais() {
        assert_eq!(go_duration(ms(120)), "120ms");
        assert_eq!(go_duration(ms(0)), "0ms");
        assert_eq!(go_duration(ms(1500)), "1.5s");
        assert_eq!(go_duration(ms(1000)), "1s");
        assert_eq!(go_duration(ms(360_000)), "6m0s");
        assert_eq!(go_duration(ms(61_250)), "1m1.25s");
        assert_eq!(go_duration(Duration::from_micros(1_500)), "2ms");
    }

    #[test]
    fn token_cost_is_output_cap_plus_a_quarter_of_the_bytes() {
        let body = br#"{"max_tokens":100,"x":"aaaa"}"#;
        assert_eq!(token_cost(body), 100 + body.len().div_ceil(4) as u64);
        assert_eq!(token_cost(b"not json"), 2);
        assert_eq!(token_cost(br#"{"max_output_tokens":7}"#), 7 + 6);
    }

    #[test]
    fn a_window_resets_whole_and_names_its_end() {
        let t0 = Instant::now();
        let limit = Limit::new(Quota::Window {
            limit: 2,
            length: ms(1000),
        })
        .shape(Shape::Azure);
        let limiter = Limiter::new(&limit, t0);
        let when = Reply::rate_limited(None);
        for left in ["1", "0"] {
            match limiter.decide(0, t0 + ms(100), &when) {
                Verdict::Admitted(h, _) => {
                    assert_eq!(header(&h, "x-ratelimit-remaining-requests"), Some(left));
                }
                Verdict::Refused(_) => panic!("the window admits two"),
            }
        }
        let h = refused_headers(limiter.decide(0, t0 + ms(250), &when));
        assert_eq!(h["retry-after-ms"], "750");
        assert_eq!(h["retry-after"], "1");
        assert!(matches!(
            limiter.decide(0, t0 + ms(1000), &when),
            Verdict::Admitted(..)
        ));
    }

    #[test]
    fn a_spent_first_window_tells_everyone_the_same_reset() {
        let t0 = Instant::now();
        let limit = Limit::new(Quota::Window {
            limit: 100,
            length: ms(1000),
        })
        .first_window_spent();
        let limiter = Limiter::new(&limit, t0);
        let when = Reply::rate_limited(None);
        for at in [0, 300, 999] {
            let h = refused_headers(limiter.decide(0, t0 + ms(at), &when));
            assert_eq!(h["retry-after"], "1");
            // The same instant, to the millisecond, whenever asked.
            assert_eq!(h["retry-after-ms"], (1000 - at).to_string().as_str());
        }
        assert!(matches!(
            limiter.decide(0, t0 + ms(1000), &when),
            Verdict::Admitted(..)
        ));
    }

    #[test]
    fn anthropic_shape_rounds_the_wait_up_to_seconds_and_states_the_bucket() {
        let t0 = Instant::now();
        let limit = Limit::new(Quota::Bucket {
            per_second: 10,
            burst: 1,
        })
        .shape(Shape::Anthropic);
        let limiter = Limiter::new(&limit, t0);
        let when = Reply::rate_limited(None);
        let Verdict::Admitted(h, _) = limiter.decide(0, t0, &when) else {
            panic!("a full bucket admits");
        };
        assert_eq!(
            header(&h, "anthropic-ratelimit-requests-remaining"),
            Some("0")
        );
        // The limit is stated per minute, as providers state it.
        assert_eq!(
            header(&h, "anthropic-ratelimit-requests-limit"),
            Some("600")
        );
        assert!(header(&h, "anthropic-ratelimit-requests-reset").is_some_and(|v| v.ends_with('Z')));
        let h = refused_headers(limiter.decide(0, t0 + ms(10), &when));
        assert_eq!(h["retry-after"], "1");
        assert!(!h.contains_key("retry-after-ms"));
    }

    #[test]
    fn tokens_bind_large_requests_only() {
        let t0 = Instant::now();
        let limit = Limit::new(Quota::Bucket {
            per_second: 1000,
            burst: 1000,
        })
        .tokens(Quota::Bucket {
            per_second: 100,
            burst: 1000,
        })
        .shape(Shape::OpenAi);
        let limiter = Limiter::new(&limit, t0);
        let when = Reply::rate_limited(None);
        assert!(matches!(
            limiter.decide(900, t0, &when),
            Verdict::Admitted(..)
        ));
        let h = refused_headers(limiter.decide(900, t0, &when));
        assert_eq!(h["retry-after-ms"], "8000");
        assert_eq!(h["x-ratelimit-remaining-tokens"], "100");
        assert!(matches!(
            limiter.decide(50, t0, &when),
            Verdict::Admitted(..)
        ));
        // More than the bucket ever holds: refused with no wait named.
        let h = refused_headers(limiter.decide(5000, t0, &when));
        assert!(!h.contains_key("retry-after"));
    }

    #[test]
    fn past_the_in_flight_ceiling_the_answer_is_529() {
        let t0 = Instant::now();
        let limit = Limit::new(Quota::Bucket {
            per_second: 1000,
            burst: 1000,
        })
        .max_in_flight(1);
        let limiter = Limiter::new(&limit, t0);
        let when = Reply::rate_limited(None);
        let Verdict::Admitted(_, slot) = limiter.decide(0, t0, &when) else {
            panic!("room for one");
        };
        assert!(slot.is_some());
        match limiter.decide(0, t0 + ms(50), &when) {
            Verdict::Refused(Reply::Response(r)) => assert_eq!(r.status().as_u16(), 529),
            _ => panic!("expected 529"),
        }
        // Its answer is over (sent, or the client gone): room again.
        drop(slot);
        assert!(matches!(
            limiter.decide(0, t0 + ms(50), &when),
            Verdict::Admitted(..)
        ));
    }
}
