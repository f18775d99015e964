//! A retry budget's rule, validated once and evaluated in exact integers.

use crate::ConfigError;
use std::fmt;
use std::time::Duration;

/// Parts per million: the unit of the ratio.
const PPM: u128 = 1_000_000;
/// Largest accepted ratio (retries per first attempt).
const MAX_RATIO: f64 = 1000.0;
/// Shortest accepted window: ten slots of at least one millisecond.
const MIN_WINDOW: Duration = Duration::from_millis(10);
/// Longest accepted window. Longer, the budget answers to load long gone.
const MAX_WINDOW: Duration = Duration::from_secs(3600);

/// A refused [`RetryBudget::new`](super::RetryBudget::new) setting.
fn refused(setting: &'static str, problem: String) -> ConfigError {
    ConfigError::new("retry budget", setting, problem)
}

/// A [`RetryBudget`](super::RetryBudget)'s rule: a retry is granted iff
/// `withdrawn + 1 <= ratio × deposited + min_per_sec × window_secs`,
/// evaluated in exact integers. A [`BudgetStore`](super::BudgetStore) that
/// holds the counts elsewhere applies the same rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetRule {
    ratio_ppm: u32,
    min_per_sec: u32,
    window: Duration,
}

impl BudgetRule {
    /// 20% extra load plus 10 retries a second, over 10 seconds.
    pub(super) const DEFAULT: BudgetRule = BudgetRule {
        ratio_ppm: 200_000,
        min_per_sec: 10,
        window: Duration::from_secs(10),
    };

    /// The rule of [`RetryBudget::new`](super::RetryBudget::new), checked
    /// the same way.
    pub fn new(ratio: f64, min_per_sec: u32, window: Duration) -> Result<BudgetRule, ConfigError> {
        // NaN is in no range, so it is refused here too.
        if !(0.0..=MAX_RATIO).contains(&ratio) {
            return Err(refused(
                "ratio",
                format!("{ratio} is out of range: it must be between 0 and 1000"),
            ));
        }
        let ppm = (ratio * 1e6).round();
        // Exactly the ratios written with at most six decimals survive the
        // round trip; 0.1 + 0.2 does not.
        if ppm / 1e6 != ratio {
            return Err(refused("ratio", format!("{ratio} is not a whole number of parts per million: use at most six decimal places")));
        }
        let whole_ms = window.subsec_nanos() % 1_000_000 == 0;
        if !whole_ms || !(MIN_WINDOW..=MAX_WINDOW).contains(&window) {
            return Err(refused(
                "window",
                format!("{window:?} must be a whole number of milliseconds between 10 ms and 1 h"),
            ));
        }
        Ok(BudgetRule {
            // In 0..=1e9 and integral: the cast is exact.
            ratio_ppm: ppm as u32,
            min_per_sec,
            window,
        })
    }

    /// The window the counts slide over (whole milliseconds).
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The ratio in parts per million (200 000 for 20%).
    pub fn ratio_ppm(&self) -> u32 {
        self.ratio_ppm
    }

    /// Retries a second granted whatever the first attempts.
    pub fn min_per_sec(&self) -> u32 {
        self.min_per_sec
    }

    /// The same rule with another floor of retries a second (the ratio and
    /// window, already valid, kept).
    pub fn with_min_per_sec(self, min_per_sec: u32) -> BudgetRule {
        BudgetRule {
            min_per_sec,
            ..self
        }
    }

    /// `ratio × deposited + min_per_sec × window_secs`, in millionths.
    pub fn allowance_ppm(&self, deposited: u64) -> u128 {
        let window_ms = self.window.as_millis();
        u128::from(self.ratio_ppm) * u128::from(deposited)
            + u128::from(self.min_per_sec) * window_ms * 1000
    }

    /// Whether one more withdrawal fits; no rounding anywhere.
    pub fn grants(&self, withdrawn: u64, deposited: u64) -> bool {
        (u128::from(withdrawn) + 1) * PPM <= self.allowance_ppm(deposited)
    }

    /// How many more withdrawals would be granted now: `grants` holds for
    /// exactly `available` further withdrawals.
    pub fn available(&self, withdrawn: u64, deposited: u64) -> u64 {
        let whole = self.allowance_ppm(deposited) / PPM;
        let left = whole.saturating_sub(u128::from(withdrawn));
        u64::try_from(left).unwrap_or(u64::MAX)
    }
}

/// `20% + 10/s`
impl fmt::Display for BudgetRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_decimal(f, u128::from(self.ratio_ppm), 4)?;
        write!(f, "% + {}/s", self.min_per_sec)
    }
}

/// Writes `value / 10^digits` with no trailing zeros: `(25_000, 4)` → `2.5`.
pub(super) fn write_decimal(f: &mut fmt::Formatter<'_>, value: u128, digits: u32) -> fmt::Result {
    let scale = 10u128.pow(digits);
    let (whole, frac) = (value / scale, value % scale);
    if frac == 0 {
        return write!(f, "{whole}");
    }
    let frac = format!("{frac:0width$}", width = digits as usize);
    write!(f, "{whole}.{}", frac.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn configurations_are_checked_when_built() {
        let window = Duration::from_secs(10);
        let ratios: [(f64, Option<u32>); 12] = [
            (0.0, Some(0)),
            (-0.0, Some(0)),
            (0.2, Some(200_000)),
            (0.6, Some(600_000)),
            (0.000_001, Some(1)),
            (1000.0, Some(1_000_000_000)),
            (0.123_456_7, None),
            (0.1 + 0.2, None),
            (-0.1, None),
            (1_000.000_001, None),
            (f64::NAN, None),
            (f64::INFINITY, None),
        ];
        for (ratio, ppm) in ratios {
            let got = BudgetRule::new(ratio, 10, window).map(|c| c.ratio_ppm);
            assert_eq!(got.ok(), ppm, "ratio {ratio}");
        }
        let windows: [(Duration, bool); 7] = [
            (MS(10), true),
            (MS(1001), true),
            (Duration::from_secs(3600), true),
            (MS(9), false),
            (Duration::ZERO, false),
            (Duration::from_secs(3601), false),
            (Duration::from_micros(10_500), false),
        ];
        for (window, ok) in windows {
            assert_eq!(BudgetRule::new(0.2, 10, window).is_ok(), ok, "{window:?}");
        }
    }

    #[test]
    fn errors_say_what_to_change() {
        let e = BudgetRule::new(0.1 + 0.2, 0, MS(1000)).unwrap_err();
        assert_eq!(e.setting(), "ratio");
        let text = e.to_string();
        assert!(text.starts_with("invalid retry budget: ratio: "), "{text}");
        assert!(text.contains("six decimal places"), "{text}");
        let e = BudgetRule::new(f64::NAN, 0, MS(1000)).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        let e = BudgetRule::new(0.2, 0, MS(5)).unwrap_err();
        assert_eq!(e.setting(), "window");
    }

    /// (ratio, min/s, window ms, deposited, withdrawn) → granted, available.
    #[test]
    fn the_rule_is_exact() {
        let cases: [(f64, u32, u64, u64, u64, bool, u64); 12] = [
            // A 0.6 ratio: one deposit is worth 0.6 of a retry, not one.
            (0.6, 0, 1000, 1, 0, false, 0),
            (0.6, 0, 1000, 2, 0, true, 1),
            (0.6, 0, 1000, 5, 2, true, 1),
            (0.6, 0, 1000, 5, 3, false, 0),
            // 20% + 10/s over 10 s: 100 free, then one per five requests.
            (0.2, 10, 10_000, 0, 99, true, 1),
            (0.2, 10, 10_000, 0, 100, false, 0),
            (0.2, 10, 10_000, 4, 100, false, 0),
            (0.2, 10, 10_000, 5, 100, true, 1),
            // The floor scales with the window, fractions of a second too.
            (0.0, 3, 1500, 0, 3, true, 1),
            (0.0, 3, 1500, 0, 4, false, 0),
            // Overdrawn (deposits expired): nothing left, no underflow.
            (0.5, 0, 1000, 0, 7, false, 0),
            (
                1000.0,
                u32::MAX,
                3_600_000,
                u64::MAX,
                u64::MAX,
                true,
                u64::MAX,
            ),
        ];
        for (ratio, min, window, dep, wd, granted, available) in cases {
            let c = BudgetRule::new(ratio, min, MS(window)).unwrap();
            let case = format!("{ratio} + {min}/s over {window} ms, {wd}/{dep}");
            assert_eq!(c.grants(wd, dep), granted, "{case}");
            assert_eq!(c.available(wd, dep), available, "{case}");
        }
    }

    #[test]
    fn displays_the_rule_in_percent() {
        let shown = |ratio, min| BudgetRule::new(ratio, min, MS(1000)).unwrap().to_string();
        assert_eq!(BudgetRule::DEFAULT.to_string(), "20% + 10/s");
        assert_eq!(shown(0.6, 0), "60% + 0/s");
        assert_eq!(shown(0.125, 1), "12.5% + 1/s");
        assert_eq!(shown(0.000_001, 1), "0.0001% + 1/s");
        assert_eq!(shown(2.5, 1), "250% + 1/s");
    }
}
