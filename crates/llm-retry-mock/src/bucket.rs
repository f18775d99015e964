//! The token bucket behind [`Route::capacity`](crate::Route::capacity):
//! exact integer arithmetic on the tokio clock.
//!
//! The level is kept in nano-tokens (one token = 10⁹ units), so a refill of
//! `elapsed_ns × per_second` units is exact for every rate: no float, no
//! drift, no rounding in anyone's favour. The only rounding is in the wait
//! reported to a refused request, which is rounded *up* to the nanosecond,
//! so a client that waits exactly that long finds a token (unless another
//! request took it first).

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Units per token.
const UNIT: u128 = 1_000_000_000;

/// A token bucket: starts full with `burst` tokens, refills at `per_second`
/// tokens per second up to `burst`.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    per_second: u128,
    /// `burst × UNIT`.
    capacity: u128,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Nano-tokens available at `at`.
    level: u128,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket as of `now`. A `burst` of 0 is taken as 1.
    pub(crate) fn new(per_second: u32, burst: u32, now: Instant) -> TokenBucket {
        let capacity = u128::from(burst.max(1)) * UNIT;
        TokenBucket {
            per_second: u128::from(per_second),
            capacity,
            state: Mutex::new(State {
                level: capacity,
                at: now,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update is a couple of integer stores; a panic elsewhere
        // cannot leave the state torn.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes one token at `now`. On refusal, returns the time until the
    /// next token, or `None` when the bucket never refills
    /// (`per_second == 0`).
    pub(crate) fn take(&self, now: Instant) -> Result<(), Option<Duration>> {
        let mut state = self.lock();
        // Instants taken before the lock may be a hair older than `at`:
        // never refill backwards.
        if now > state.at {
            let elapsed = now.duration_since(state.at).as_nanos();
            let refill = elapsed.saturating_mul(self.per_second);
            state.level = state.level.saturating_add(refill).min(self.capacity);
            state.at = now;
        }
        if state.level >= UNIT {
            state.level -= UNIT;
            return Ok(());
        }
        if self.per_second == 0 {
            return Err(None);
        }
        let missing = UNIT - state.level;
        let nanos = missing.div_ceil(self.per_second);
        Err(Some(Duration::from_nanos(
            u64::try_from(nanos).unwrap_or(u64::MAX),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn starts_full_then_refills_exactly() {
        let t0 = Instant::now();
        let bucket = TokenBucket::new(10, 3, t0);
        for _ in 0..3 {
            assert_eq!(bucket.take(t0), Ok(()));
        }
        assert_eq!(bucket.take(t0), Err(Some(ms(100))));
        assert_eq!(bucket.take(t0 + ms(40)), Err(Some(ms(60))));
        assert_eq!(bucket.take(t0 + ms(100)), Ok(()));
        assert_eq!(bucket.take(t0 + ms(100)), Err(Some(ms(100))));
        // Never above the burst, however long it rested.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(bucket.take(later), Ok(()));
        }
        assert!(bucket.take(later).is_err());
    }

    #[test]
    fn rates_that_do_not_divide_a_second_do_not_drift() {
        let t0 = Instant::now();
        let bucket = TokenBucket::new(3, 2, t0);
        assert_eq!(bucket.take(t0), Ok(()));
        assert_eq!(bucket.take(t0), Ok(()));
        // 1/3 s is 333_333_333.3… ns: the wait rounds up.
        assert_eq!(
            bucket.take(t0),
            Err(Some(Duration::from_nanos(333_333_334)))
        );
        // 3000 tokens over 1000 s, taken in 1 ms steps: exactly 3000 (the
        // level never reaches the burst, so nothing is clipped).
        let mut granted = 0;
        for step in 1..=1_000_000u64 {
            if bucket.take(t0 + ms(step)).is_ok() {
                granted += 1;
            }
        }
        assert_eq!(granted, 3000);
    }

    #[test]
    fn zero_rate_and_zero_burst() {
        let t0 = Instant::now();
        let bucket = TokenBucket::new(0, 2, t0);
        assert_eq!(bucket.take(t0), Ok(()));
        assert_eq!(bucket.take(t0 + ms(5)), Ok(()));
        assert_eq!(bucket.take(t0 + Duration::from_secs(99)), Err(None));
        let bucket = TokenBucket::new(1000, 0, t0);
        assert_eq!(bucket.take(t0), Ok(()));
        assert_eq!(bucket.take(t0), Err(Some(ms(1))));
    }

    #[test]
    fn an_older_instant_never_refills_backwards() {
        let t0 = Instant::now();
        let bucket = TokenBucket::new(1, 1, t0);
        assert_eq!(bucket.take(t0 + ms(10)), Ok(()));
        assert_eq!(bucket.take(t0), Err(Some(ms(1000))));
        assert_eq!(bucket.take(t0 + ms(1010)), Ok(()));
    }
}
