//! Exact, saturating decimal arithmetic for waits.
//!
//! Numbers from the network are parsed as `digits [. digits]` with integer
//! arithmetic (no floats, no exponents, no signs), so `"0.1"` is exactly
//! 100 ms and a 35-digit value saturates instead of overflowing.

use std::time::Duration;

/// The longest wait a hint can report: 10⁹ seconds (about 31.7 years).
///
/// Any larger (but well-formed) value saturates to this ceiling. It is far
/// above any sensible retry limit, so a caller comparing a hint with its own
/// limit can still say "server asked for N s", and small enough that
/// `Instant::now() + MAX_HINT` does not overflow.
pub const MAX_HINT: Duration = Duration::from_secs(1_000_000_000);

/// Nanoseconds per second.
pub(crate) const NANOS_PER_SEC: u64 = 1_000_000_000;
/// Nanoseconds per millisecond.
pub(crate) const NANOS_PER_MILLI: u64 = 1_000_000;

/// Fraction digits kept; later ones are validated and then ignored.
const MAX_FRAC_DIGITS: u32 = 18;

/// Turns a nanosecond count into a [`Duration`], capped at [`MAX_HINT`].
pub(crate) fn saturating_nanos(nanos: u128) -> Duration {
    let cap = MAX_HINT.as_nanos();
    u64::try_from(nanos.min(cap)).map_or(MAX_HINT, Duration::from_nanos)
}

/// A non-negative decimal number: `whole + frac / scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decimal {
    /// Integer part, saturated at `u64::MAX`.
    whole: u64,
    /// Kept fraction digits as an integer.
    frac: u64,
    /// `10^(kept fraction digits)`.
    scale: u64,
}

impl Decimal {
    /// Parses a whole byte string as `digits [. digits]`; at least one digit.
    pub(crate) fn parse(bytes: &[u8]) -> Option<Self> {
        match Self::parse_prefix(bytes) {
            Some((d, [])) => Some(d),
            _ => None,
        }
    }

    /// Parses the longest decimal prefix of `bytes`; returns it and the rest.
    pub(crate) fn parse_prefix(bytes: &[u8]) -> Option<(Self, &[u8])> {
        let (whole_digits, rest) = split_digits(bytes);
        let (frac_digits, rest) = match rest.split_first() {
            Some((b'.', after)) => split_digits(after),
            _ => (&[][..], rest),
        };
        if whole_digits.is_empty() && frac_digits.is_empty() {
            return None;
        }
        let whole = whole_digits.iter().fold(0u64, |acc, d| {
            acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
        });
        let (mut frac, mut scale) = (0u64, 1u64);
        for d in frac_digits.iter().take(MAX_FRAC_DIGITS as usize) {
            frac = frac * 10 + u64::from(d - b'0');
            scale *= 10;
        }
        Some((Self { whole, frac, scale }, rest))
    }

    /// The value in nanoseconds, when one unit is `unit_nanos` nanoseconds.
    pub(crate) fn nanos(self, unit_nanos: u64) -> u128 {
        let unit = u128::from(unit_nanos);
        u128::from(self.whole) * unit + u128::from(self.frac) * unit / u128::from(self.scale)
    }

    /// The value as a [`Duration`] of `unit_nanos`-long units, saturated.
    pub(crate) fn duration(self, unit_nanos: u64) -> Duration {
        saturating_nanos(self.nanos(unit_nanos))
    }

    /// Whether the value is exactly zero.
    pub(crate) fn is_zero(self) -> bool {
        self.whole == 0 && self.frac == 0
    }
}

/// Splits `bytes` after its leading ASCII digits.
fn split_digits(bytes: &[u8]) -> (&[u8], &[u8]) {
    let n = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    bytes.split_at(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn decimal_seconds_table() {
        let cases: &[(&str, Option<Duration>)] = &[
            ("0", Some(Duration::ZERO)),
            ("1", Some(Duration::from_secs(1))),
            ("0.5", Some(500 * MS)),
            ("2.75", Some(2750 * MS)),
            ("0.1", Some(100 * MS)),
            (".5", Some(500 * MS)),
            ("1.", Some(Duration::from_secs(1))),
            ("0.0000000019", Some(Duration::from_nanos(1))),
            ("99999999999999999999999999999999999", Some(MAX_HINT)),
            ("1000000000", Some(MAX_HINT)),
            ("999999999.5", Some(Duration::new(999_999_999, 500_000_000))),
            ("", None),
            (".", None),
            ("-1", None),
            ("+5", None),
            ("1e300", None),
            ("inf", None),
            ("NaN", None),
            ("1.2.3", None),
            (" 1", None),
            ("１０", None),
        ];
        for (input, want) in cases {
            let got = Decimal::parse(input.as_bytes()).map(|d| d.duration(NANOS_PER_SEC));
            assert_eq!(got, *want, "input {input:?}");
        }
    }

    #[test]
    fn prefix_leaves_rest() {
        let (d, rest) = Decimal::parse_prefix(b"1.5ms").expect("a number");
        assert_eq!(d.duration(NANOS_PER_MILLI), Duration::from_micros(1500));
        assert_eq!(rest, b"ms");
        assert!(Decimal::parse_prefix(b"ms").is_none());
        assert!(Decimal::parse(b"0.000").is_some_and(Decimal::is_zero));
        assert!(!Decimal::parse(b"0.001").is_some_and(Decimal::is_zero));
    }

    #[test]
    fn nanos_saturate() {
        assert_eq!(saturating_nanos(u128::MAX), MAX_HINT);
        assert_eq!(saturating_nanos(7), Duration::from_nanos(7));
    }
}
