//! Helpers shared by the targets (each includes this file as a module).

#![allow(dead_code)]

use http::{HeaderMap, HeaderName, HeaderValue};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A clock reading from eight input bytes (little-endian): the top 40 bits
/// are seconds since 1970 (up to about the year 36,800), the low 24 bits a
/// fraction of a second.
pub fn now_from(bytes: [u8; 8]) -> SystemTime {
    let reading = u64::from_le_bytes(bytes);
    let fraction = u32::try_from(reading & 0xff_ffff).expect("24 bits") * 59;
    UNIX_EPOCH + Duration::new(reading >> 24, fraction)
}

/// A header map holding `value` under each of `names`, or `None` when the
/// bytes are not a valid header value (such an answer cannot arrive).
pub fn headers(names: &[&'static str], value: &[u8]) -> Option<HeaderMap> {
    let value = HeaderValue::from_bytes(value).ok()?;
    let mut map = HeaderMap::new();
    for name in names {
        map.append(HeaderName::from_static(name), value.clone());
    }
    Some(map)
}

/// The value as an ASCII string with surrounding spaces and tabs removed,
/// as every hint parser reads it.
pub fn trimmed(value: &[u8]) -> Option<&str> {
    std::str::from_utf8(value)
        .ok()
        .map(|s| s.trim_matches([' ', '\t']))
}

/// Whether `s` is one or more ASCII digits and nothing else.
pub fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}
