//! How long to wait when the server named no wait: exponential backoff from
//! [`initial_backoff`](crate::RetryPolicyBuilder::initial_backoff), spread
//! by the [`Jitter`] set with
//! [`RetryPolicyBuilder::jitter`](crate::RetryPolicyBuilder::jitter), and the
//! small spread added to a server-named wait.
//!
//! Pure: randomness comes from the caller's RNG, so a seeded RNG gives an
//! exact sequence in tests.

use rand::Rng;
use std::time::Duration;

/// How a computed delay is randomised.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Jitter {
    /// `delay = base + U[0, fraction)·base`. The default, with `fraction = 0.25`:
    /// never shorter than the exponential step, spread over a quarter of it.
    Proportional {
        /// Largest added share of the base, clamped to `[0, 1]`.
        fraction: f64,
    },
    /// `delay = base/2 + U[0, base/2)`: half fixed, half random.
    Equal,
    /// `delay = U[0, base)`: widest spread, may retry almost at once.
    Full,
    /// `delay = base`: deterministic (and synchronises clients; for tests).
    None,
}

impl Default for Jitter {
    fn default() -> Self {
        Jitter::Proportional { fraction: 0.25 }
    }
}

/// Exponential backoff: `base = min(initial · 2^(retry−1), max)`, then jitter.
///
/// With the defaults (500 ms, 32 s, +25 %) the steps are
/// 500 ms → 1 s → 2 s → 4 s → 8 s → 16 s → 32 s → 32 s … before jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    jitter: Jitter,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(
            Duration::from_millis(500),
            Duration::from_secs(32),
            Jitter::default(),
        )
    }
}

impl Backoff {
    /// A backoff starting at `initial`, doubling up to `max`, randomised by `jitter`.
    pub(crate) const fn new(initial: Duration, max: Duration, jitter: Jitter) -> Backoff {
        Backoff {
            initial,
            max,
            jitter,
        }
    }

    /// The first step.
    pub(crate) const fn initial(&self) -> Duration {
        self.initial
    }

    /// The largest step before jitter.
    pub(crate) const fn max(&self) -> Duration {
        self.max
    }

    /// The jitter kind.
    pub(crate) const fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The un-jittered step before retry number `retry` (1 for the first retry).
    pub(crate) fn base(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(63);
        let factor = 1u64 << doublings;
        // Saturates instead of overflowing; the cap applies afterwards.
        let nanos = (self.initial.as_nanos()).saturating_mul(u128::from(factor));
        let max = self.max.as_nanos();
        let capped = nanos.min(max);
        Duration::from_nanos(u64::try_from(capped).unwrap_or(u64::MAX))
    }

    /// The jittered delay before retry number `retry` (1 for the first retry).
    pub(crate) fn delay<R: Rng + ?Sized>(&self, retry: u32, rng: &mut R) -> Duration {
        let base = self.base(retry);
        match self.jitter {
            Jitter::None => base,
            Jitter::Proportional { fraction } => {
                let fraction = if fraction.is_finite() {
                    fraction.clamp(0.0, 1.0)
                } else {
                    0.0
                };
                base + base.mul_f64(fraction * unit(rng))
            }
            Jitter::Equal => {
                let half = base / 2;
                half + half.mul_f64(unit(rng))
            }
            Jitter::Full => base.mul_f64(unit(rng)),
        }
    }
}

/// Largest share of a server-named wait added as spread.
pub(crate) const SERVER_WAIT_JITTER_FRACTION: f64 = 0.10;
/// Largest absolute spread added to a server-named wait.
pub(crate) const SERVER_WAIT_JITTER_CAP: Duration = Duration::from_secs(1);

/// A server-named wait plus a small positive spread (≤ 10 %, ≤ 1 s), so that
/// clients that got the same hint do not all return at the same instant.
/// Never shorter than `wait`.
pub(crate) fn spread_server_wait<R: Rng + ?Sized>(wait: Duration, rng: &mut R) -> Duration {
    let room = wait
        .mul_f64(SERVER_WAIT_JITTER_FRACTION)
        .min(SERVER_WAIT_JITTER_CAP);
    wait.saturating_add(room.mul_f64(unit(rng)))
}

/// A uniform sample in `[0, 1)`.
fn unit<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    rng.random::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn default_steps_double_from_500ms_to_32s() {
        let b = Backoff::new(ms(500), Duration::from_secs(32), Jitter::None);
        let mut rng = SmallRng::seed_from_u64(1);
        let got: Vec<u64> = (1..=9)
            .map(|n| b.delay(n, &mut rng).as_millis() as u64)
            .collect();
        assert_eq!(
            got,
            [500, 1000, 2000, 4000, 8000, 16000, 32000, 32000, 32000]
        );
    }

    #[test]
    fn huge_retry_numbers_saturate_at_the_cap() {
        let b = Backoff::default();
        for n in [64, 100, u32::MAX] {
            assert_eq!(b.base(n), Duration::from_secs(32));
        }
        let huge = Backoff::new(Duration::MAX, Duration::MAX, Jitter::None);
        assert_eq!(huge.base(u32::MAX), Duration::from_nanos(u64::MAX));
    }

    #[test]
    fn jitter_kinds_stay_in_their_ranges() {
        let mut rng = SmallRng::seed_from_u64(7);
        let cases = [
            (Jitter::default(), 1000, 1250),
            (Jitter::Equal, 500, 1000),
            (Jitter::Full, 0, 1000),
        ];
        for (jitter, lo, hi) in cases {
            let b = Backoff::new(ms(1000), ms(1000), jitter);
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..1000 {
                let d = b.delay(1, &mut rng).as_millis() as u64;
                assert!((lo..hi).contains(&d) || d == lo, "{jitter:?}: {d}");
                seen.insert(d);
            }
            assert!(
                seen.len() > 50,
                "{jitter:?} should spread, saw {}",
                seen.len()
            );
        }
    }

    #[test]
    fn seeded_rng_gives_the_same_sequence() {
        let b = Backoff::default();
        let run = |seed| {
            let mut rng = SmallRng::seed_from_u64(seed);
            (1..=5).map(|n| b.delay(n, &mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }

    #[test]
    fn odd_fractions_are_clamped() {
        let mut rng = SmallRng::seed_from_u64(3);
        for fraction in [f64::NAN, f64::INFINITY, -1.0, 5.0] {
            let b = Backoff::new(ms(100), ms(100), Jitter::Proportional { fraction });
            let d = b.delay(1, &mut rng);
            assert!(d >= ms(100) && d <= ms(200), "{fraction}: {d:?}");
        }
    }

    #[test]
    fn server_waits_are_floors_with_bounded_spread() {
        let mut rng = SmallRng::seed_from_u64(9);
        for wait in [ms(0), ms(1000), Duration::from_secs(60), Duration::MAX] {
            for _ in 0..200 {
                let d = spread_server_wait(wait, &mut rng);
                assert!(d >= wait);
                assert!(d - wait <= wait.mul_f64(0.1).min(Duration::from_secs(1)));
            }
        }
    }
}
