//! Reading header values: first valid value, text, a known zero.

use super::number::Decimal;
use http::{HeaderMap, HeaderValue};

/// The value as trimmed text, or `None` if it holds non-visible-ASCII bytes.
pub(crate) fn text(value: &HeaderValue) -> Option<&str> {
    let s = value.to_str().ok()?;
    Some(s.trim_matches(|c| c == ' ' || c == '\t'))
}

/// The first value of header `name` that `parse` accepts.
pub(crate) fn first_valid<T, K: http::header::AsHeaderName>(
    headers: &HeaderMap,
    name: K,
    parse: impl FnMut(&HeaderValue) -> Option<T>,
) -> Option<T> {
    headers.get_all(name).iter().find_map(parse)
}

/// Whether the first well-formed value of a `*-remaining` header is zero.
///
/// A well-formed value is a non-negative decimal number; anything else is
/// skipped, and an absent or malformed header is not "known zero".
pub(crate) fn known_zero(headers: &HeaderMap, name: &str) -> bool {
    first_valid(headers, name, |value| {
        Decimal::parse(text(value)?.as_bytes())
    })
    .is_some_and(Decimal::is_zero)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(name: &'static str, values: &[&[u8]]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            if let Ok(v) = HeaderValue::from_bytes(v) {
                headers.append(name, v);
            }
        }
        headers
    }

    #[test]
    fn known_zero_table() {
        let cases: &[(&[&[u8]], bool)] = &[
            (&[b"0"], true),
            (&[b" 00 "], true),
            (&[b"0.0"], true),
            (&[b"1"], false),
            (&[b"-0"], false),
            (&[b""], false),
            (&[b"x", b"0"], true),
            (&[b"5", b"0"], false),
            (&[b"\xff\x30"], false),
            (&[], false),
        ];
        for (values, want) in cases {
            let headers = map("x-ratelimit-remaining-requests", values);
            let got = known_zero(&headers, "x-ratelimit-remaining-requests");
            assert_eq!(got, *want, "values {values:?}");
        }
    }
}
