//! `Retry-After` (seconds or HTTP-date) and `retry-after-ms`.

use super::headers::text;
use super::number::{Decimal, MAX_HINT, NANOS_PER_MILLI, NANOS_PER_SEC};
use super::{ServerWait, WaitSource};
use http::HeaderValue;
use std::time::{Duration, SystemTime};

/// Parses one `Retry-After` value against `now`.
///
/// Accepts delay-seconds, including a fraction (`"1"`, `"0.5"`, `"2.75"`;
/// source [`WaitSource::RetryAfterSeconds`]), or an HTTP-date (`"Sun, 06 Nov
/// 1994 08:49:37 GMT"`; source [`WaitSource::RetryAfterDate`]) read as the
/// time left from `now`, zero if the date has passed. Signs, exponents,
/// `inf`/`NaN`, empty and non-ASCII values give `None`; huge values saturate
/// at [`MAX_HINT`].
pub fn parse_retry_after(value: &HeaderValue, now: SystemTime) -> Option<ServerWait> {
    let s = text(value)?;
    if let Some(secs) = Decimal::parse(s.as_bytes()) {
        let duration = secs.duration(NANOS_PER_SEC);
        return Some(ServerWait {
            duration,
            source: WaitSource::RetryAfterSeconds,
            // `2` rounds up, `2.5` does not.
            whole_seconds: duration.subsec_nanos() == 0,
        });
    }
    let date = httpdate::parse_http_date(s).ok()?;
    Some(ServerWait {
        duration: until(date, now),
        source: WaitSource::RetryAfterDate,
        whole_seconds: true,
    })
}

/// Parses one `retry-after-ms` value: milliseconds, fraction allowed.
pub(crate) fn parse_retry_after_ms(value: &HeaderValue) -> Option<ServerWait> {
    let ms = Decimal::parse(text(value)?.as_bytes())?;
    Some(ServerWait {
        duration: ms.duration(NANOS_PER_MILLI),
        source: WaitSource::RetryAfterMs,
        whole_seconds: false,
    })
}

/// Time from `now` until `then`: zero if `then` has passed, at most
/// [`MAX_HINT`].
pub(crate) fn until(then: SystemTime, now: SystemTime) -> Duration {
    then.duration_since(now)
        .map_or(Duration::ZERO, |d| d.min(MAX_HINT))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    const SECS: WaitSource = WaitSource::RetryAfterSeconds;
    const DATE: WaitSource = WaitSource::RetryAfterDate;

    fn wait(ms: u64, source: WaitSource) -> Option<ServerWait> {
        Some(ServerWait {
            duration: Duration::from_millis(ms),
            source,
            whole_seconds: source != WaitSource::RetryAfterMs && ms % 1000 == 0,
        })
    }

    #[test]
    fn retry_after_table() {
        // Sun, 06 Nov 1994 08:49:37 GMT
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777);
        let cases: &[(&[u8], Option<ServerWait>)] = &[
            (b"1", wait(1000, SECS)),
            (b"0", wait(0, SECS)),
            (b"0.5", wait(500, SECS)),
            (b"2.75", wait(2750, SECS)),
            (b" 3 ", wait(3000, SECS)),
            (
                b"99999999999999999999999999999999999",
                Some(ServerWait {
                    duration: MAX_HINT,
                    source: SECS,
                    whole_seconds: true,
                }),
            ),
            (b"Sun, 06 Nov 1994 08:49:37 GMT", wait(0, DATE)),
            (b"Sun, 06 Nov 1994 08:50:07 GMT", wait(30_000, DATE)),
            (b"Sun, 06 Nov 1994 08:49:36 GMT", wait(0, DATE)),
            (b"Thu, 01 Jan 1970 00:00:00 GMT", wait(0, DATE)),
            (b"Sunday, 06-Nov-94 08:49:47 GMT", wait(10_000, DATE)),
            (b"Sun Nov  6 08:49:57 1994", wait(20_000, DATE)),
            (
                b"Fri, 31 Dec 9999 23:59:59 GMT",
                Some(ServerWait {
                    duration: MAX_HINT,
                    source: DATE,
                    whole_seconds: true,
                }),
            ),
            (b"Sun, 06 Nov 1994 08:49:37", None),
            (b"-1", None),
            (b"+5", None),
            (b"1e300", None),
            (b"inf", None),
            (b"NaN", None),
            (b"", None),
            (b"   ", None),
            (b"soon", None),
            ("１０".as_bytes(), None),
            (b"\xff\x31", None),
        ];
        for (input, want) in cases {
            let value = HeaderValue::from_bytes(input).expect("valid header bytes");
            assert_eq!(parse_retry_after(&value, now), *want, "input {input:?}");
        }
    }

    #[test]
    fn retry_after_ms_table() {
        let ms = WaitSource::RetryAfterMs;
        let cases: &[(&[u8], Option<ServerWait>)] = &[
            (b"1500", wait(1500, ms)),
            (b"0", wait(0, ms)),
            (
                b"250.5",
                Some(ServerWait {
                    duration: Duration::from_micros(250_500),
                    source: ms,
                    whole_seconds: false,
                }),
            ),
            (
                b"99999999999999999999999999999999999",
                Some(ServerWait {
                    duration: MAX_HINT,
                    source: ms,
                    whole_seconds: false,
                }),
            ),
            (b"-1", None),
            (b"+5", None),
            (b"1e300", None),
            (b"NaN", None),
            (b"", None),
            (b"\xff\x31", None),
        ];
        for (input, want) in cases {
            let value = HeaderValue::from_bytes(input).expect("valid header bytes");
            assert_eq!(parse_retry_after_ms(&value), *want, "input {input:?}");
        }
    }

    #[test]
    fn until_saturates_and_floors() {
        let now = UNIX_EPOCH + Duration::from_secs(100);
        assert_eq!(until(UNIX_EPOCH, now), Duration::ZERO);
        assert_eq!(
            until(now + Duration::from_secs(5), now),
            Duration::from_secs(5)
        );
        assert_eq!(until(now + MAX_HINT * 2, now), MAX_HINT);
    }
}
