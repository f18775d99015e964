//! Durations in the config file: `500ms`, `2s`, `1.5s`, `3m`.

use std::time::Duration;

/// Parses `<number><unit>` with unit `ms`, `s` or `m`; the number may have
/// a fraction. Anything else (no unit, a negative number, a value past a
/// day) is refused with the reason.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{text:?} has no unit (use ms, s or m)"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a number"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => {
            return Err(format!(
                "{text:?} has an unknown unit {unit:?} (use ms, s or m)"
            ))
        }
    };
    if !(0.0..=86_400.0).contains(&seconds) {
        return Err(format!("{text:?} is not between 0 and a day"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// [`parse`], and zero refused: a timeout or deadline of nothing.
pub(crate) fn parse_positive(text: &str) -> Result<Duration, String> {
    match parse(text)? {
        d if d.is_zero() => Err("must be more than 0".to_owned()),
        d => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_written_and_nonsense_is_refused() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("3m"), Ok(Duration::from_secs(180)));
        for bad in ["", "5", "s", "-1s", "2h", "1e9s", "99999m", "1..2s"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the text, an answer and no panic; an accepted one is
        /// within a day.
        #[test]
        fn any_text_is_read_or_refused(text in "\\\\PC{0,24}") {
            if let Ok(duration) = parse(&text) {
                prop_assert!(duration <= Duration::from_secs(86_400));
            }
        }

        #[test]
        fn whole_milliseconds_read_back(ms in 0u64..86_400_000) {
            prop_assert_eq!(parse(&format!("{ms}ms")), Ok(Duration::from_millis(ms)));
        }
    }
}
