//! The status-primary decision table.

use super::{Classification, FatalKind, ProviderError, RetryableKind};
use http::{HeaderMap, StatusCode};

/// The header a server (or gateway) uses to say whether a retry is welcome.
const SHOULD_RETRY: &str = "x-should-retry";

/// Reads `x-should-retry`: `Some(true)` / `Some(false)` for a value of
/// `true` / `false` (any case, surrounding whitespace ignored), `None` when
/// absent or anything else. When repeated, a valid `false` wins.
pub(crate) fn should_retry_header(headers: &HeaderMap) -> Option<bool> {
    let mut verdict = None;
    for value in headers.get_all(SHOULD_RETRY) {
        let Ok(value) = value.to_str() else { continue };
        let value = value.trim();
        if value.eq_ignore_ascii_case("false") {
            return Some(false);
        }
        if value.eq_ignore_ascii_case("true") {
            verdict = Some(true);
        }
    }
    verdict
}

/// Classifies a response from its status, headers and (when read) the provider error in its body.
///
/// Precedence, per DESIGN.md's decision table:
/// 1. Anything but 4xx/5xx is [`Classification::Success`], whatever the body
///    or headers say.
/// 2. `x-should-retry: false` is final ([`FatalKind::ServerDeclined`]).
/// 3. `x-should-retry: true` makes any failure retryable, keeping the table's
///    kind when it has one, except quota and billing errors, which stay fatal.
/// 4. The table: 429 → rate limited (quota → fatal); 529 or a 5xx
///    `overloaded_error` → overloaded; 408, 409 and 5xx but 501/505 →
///    retryable; 400 context overflow; 401 unauthorized; 402 and quota
///    bodies → quota exhausted; every other 4xx, 501 and 505 → fatal.
pub(crate) fn classify_response(
    status: StatusCode,
    headers: &HeaderMap,
    provider: Option<&ProviderError>,
) -> Classification {
    match classify_status(status, provider) {
        Classification::Success => Classification::Success,
        verdict => with_should_retry(verdict, should_retry_header(headers), status),
    }
}

/// The table alone: a response's classification from its status and
/// provider error, before the server's `x-should-retry` verdict.
pub(crate) fn classify_status(
    status: StatusCode,
    provider: Option<&ProviderError>,
) -> Classification {
    if !(status.is_client_error() || status.is_server_error()) {
        return Classification::Success;
    }
    table(status, provider)
}

/// Applies a server's `x-should-retry` verdict to a classification of a
/// failure carried by a response with `status` (its status line, or `200`
/// for a stream's error event): `false` makes it final, `true` makes it
/// retryable unless it is a quota or billing error.
pub(crate) fn with_should_retry(
    verdict: Classification,
    should_retry: Option<bool>,
    status: StatusCode,
) -> Classification {
    match should_retry {
        None => verdict,
        Some(false) => Classification::Fatal(FatalKind::ServerDeclined(status)),
        Some(true) => match verdict {
            Classification::Fatal(FatalKind::QuotaExhausted(_)) | Classification::Retryable(_) => {
                verdict
            }
            _ => Classification::Retryable(RetryableKind::ServerRequested(status)),
        },
    }
}

/// The table alone, for a 4xx or 5xx status, without `x-should-retry`.
fn table(status: StatusCode, provider: Option<&ProviderError>) -> Classification {
    use Classification::{Fatal, Retryable};
    let quota = provider.is_some_and(ProviderError::is_quota);
    match status.as_u16() {
        429 if quota => Fatal(FatalKind::QuotaExhausted(status)),
        429 => Retryable(RetryableKind::RateLimited),
        529 => Retryable(RetryableKind::Overloaded),
        500..=599 if provider.is_some_and(ProviderError::is_overloaded) => {
            Retryable(RetryableKind::Overloaded)
        }
        501 | 505 => Fatal(FatalKind::Status(status)),
        408 | 409 | 500..=599 => Retryable(RetryableKind::Status(status)),
        401 => Fatal(FatalKind::Unauthorized),
        402 => Fatal(FatalKind::QuotaExhausted(status)),
        400 => match provider.and_then(ProviderError::context_overflow) {
            Some(overflow) => Fatal(FatalKind::ContextOverflow(overflow)),
            None if quota => Fatal(FatalKind::QuotaExhausted(status)),
            None => Fatal(FatalKind::Status(status)),
        },
        _ if quota => Fatal(FatalKind::QuotaExhausted(status)),
        _ => Fatal(FatalKind::Status(status)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::classify::ContextOverflow;
    use http::HeaderValue;
    use Classification::{Fatal, Retryable, Success};

    fn status(code: u16) -> StatusCode {
        StatusCode::from_u16(code).unwrap()
    }

    fn body(json: &str) -> Option<ProviderError> {
        Some(ProviderError::parse(json.as_bytes()).unwrap())
    }

    fn headers(should_retry: &[&'static str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in should_retry {
            map.append("X-Should-Retry", HeaderValue::from_static(v));
        }
        map
    }

    const OVERLOADED: &str =
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    const RATE: &str =
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
    const QUOTA: &str = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
    const CREDIT: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}"#;
    const OVERFLOW: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000"}}"#;
    const INVALID: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: field required"}}"#;

    #[test]
    fn decision_table() {
        let s = status;
        let overflow = ContextOverflow {
            input_tokens: Some(188059),
            max_tokens: Some(20000),
            context_limit: Some(200000),
        };
        let cases: Vec<(u16, &[&'static str], Option<&str>, Classification)> = vec![
            // 2xx and other non-errors: a final answer, whatever the body or headers.
            (200, &[], None, Success),
            (200, &[], Some(OVERLOADED), Success),
            (201, &["false"], Some(QUOTA), Success),
            (204, &["true"], None, Success),
            (101, &[], None, Success),
            (304, &[], None, Success),
            (302, &["false"], None, Success),
            // 429
            (429, &[], None, Retryable(RetryableKind::RateLimited)),
            (429, &[], Some(RATE), Retryable(RetryableKind::RateLimited)),
            (
                429,
                &[],
                Some(QUOTA),
                Fatal(FatalKind::QuotaExhausted(s(429))),
            ),
            (
                429,
                &[],
                Some(CREDIT),
                Fatal(FatalKind::QuotaExhausted(s(429))),
            ),
            // 529 / overloaded_error
            (529, &[], None, Retryable(RetryableKind::Overloaded)),
            (
                529,
                &[],
                Some(OVERLOADED),
                Retryable(RetryableKind::Overloaded),
            ),
            (
                503,
                &[],
                Some(OVERLOADED),
                Retryable(RetryableKind::Overloaded),
            ),
            (
                500,
                &[],
                Some(OVERLOADED),
                Retryable(RetryableKind::Overloaded),
            ),
            (400, &[], Some(OVERLOADED), Fatal(FatalKind::Status(s(400)))),
            // transient statuses
            (408, &[], None, Retryable(RetryableKind::Status(s(408)))),
            (409, &[], None, Retryable(RetryableKind::Status(s(409)))),
            (500, &[], None, Retryable(RetryableKind::Status(s(500)))),
            (502, &[], None, Retryable(RetryableKind::Status(s(502)))),
            (
                503,
                &[],
                Some(RATE),
                Retryable(RetryableKind::Status(s(503))),
            ),
            (504, &[], None, Retryable(RetryableKind::Status(s(504)))),
            (520, &[], None, Retryable(RetryableKind::Status(s(520)))),
            (599, &[], None, Retryable(RetryableKind::Status(s(599)))),
            // not transient
            (501, &[], None, Fatal(FatalKind::Status(s(501)))),
            (505, &[], None, Fatal(FatalKind::Status(s(505)))),
            // 400
            (
                400,
                &[],
                Some(OVERFLOW),
                Fatal(FatalKind::ContextOverflow(overflow)),
            ),
            (
                400,
                &[],
                Some(CREDIT),
                Fatal(FatalKind::QuotaExhausted(s(400))),
            ),
            (400, &[], Some(INVALID), Fatal(FatalKind::Status(s(400)))),
            (400, &[], None, Fatal(FatalKind::Status(s(400)))),
            // other 4xx
            (401, &[], None, Fatal(FatalKind::Unauthorized)),
            (402, &[], None, Fatal(FatalKind::QuotaExhausted(s(402)))),
            (403, &[], None, Fatal(FatalKind::Status(s(403)))),
            (
                403,
                &[],
                Some(QUOTA),
                Fatal(FatalKind::QuotaExhausted(s(403))),
            ),
            (404, &[], None, Fatal(FatalKind::Status(s(404)))),
            (413, &[], Some(OVERFLOW), Fatal(FatalKind::Status(s(413)))),
            (422, &[], None, Fatal(FatalKind::Status(s(422)))),
            (418, &[], None, Fatal(FatalKind::Status(s(418)))),
            // x-should-retry: false beats everything
            (
                503,
                &["false"],
                None,
                Fatal(FatalKind::ServerDeclined(s(503))),
            ),
            (
                429,
                &["false"],
                None,
                Fatal(FatalKind::ServerDeclined(s(429))),
            ),
            (
                529,
                &[" FALSE "],
                Some(OVERLOADED),
                Fatal(FatalKind::ServerDeclined(s(529))),
            ),
            (
                429,
                &["false"],
                Some(QUOTA),
                Fatal(FatalKind::ServerDeclined(s(429))),
            ),
            (
                400,
                &["false"],
                Some(OVERFLOW),
                Fatal(FatalKind::ServerDeclined(s(400))),
            ),
            // x-should-retry: true keeps the table's kind, else ServerRequested
            (
                400,
                &["true"],
                None,
                Retryable(RetryableKind::ServerRequested(s(400))),
            ),
            (
                401,
                &["True"],
                None,
                Retryable(RetryableKind::ServerRequested(s(401))),
            ),
            (
                501,
                &["true"],
                None,
                Retryable(RetryableKind::ServerRequested(s(501))),
            ),
            (429, &["true"], None, Retryable(RetryableKind::RateLimited)),
            (529, &["true"], None, Retryable(RetryableKind::Overloaded)),
            (
                503,
                &["true"],
                None,
                Retryable(RetryableKind::Status(s(503))),
            ),
            // ... except quota and billing errors
            (
                429,
                &["true"],
                Some(QUOTA),
                Fatal(FatalKind::QuotaExhausted(s(429))),
            ),
            (
                402,
                &["true"],
                None,
                Fatal(FatalKind::QuotaExhausted(s(402))),
            ),
            (
                400,
                &["true"],
                Some(CREDIT),
                Fatal(FatalKind::QuotaExhausted(s(400))),
            ),
            // invalid header values are ignored
            (503, &["no"], None, Retryable(RetryableKind::Status(s(503)))),
            (400, &["1"], None, Fatal(FatalKind::Status(s(400)))),
            (
                503,
                &["true", "false"],
                None,
                Fatal(FatalKind::ServerDeclined(s(503))),
            ),
        ];
        for (code, header, json, want) in cases {
            let provider = json.and_then(body);
            let got = classify_response(s(code), &headers(header), provider.as_ref());
            assert_eq!(
                got.is_retryable(),
                matches!(want, Retryable(_)),
                "{code} {header:?} {json:?}"
            );
            assert_eq!(got, want, "{code} {header:?} {json:?}");
        }
    }

    #[test]
    fn should_retry_header_values() {
        let cases: &[(&[&'static str], Option<bool>)] = &[
            (&[], None),
            (&["true"], Some(true)),
            (&["TRUE"], Some(true)),
            (&["  true\t"], Some(true)),
            (&["false"], Some(false)),
            (&["False "], Some(false)),
            (&["yes"], None),
            (&[""], None),
            (&["true, false"], None),
            (&["junk", "true"], Some(true)),
            (&["true", "false"], Some(false)),
        ];
        for (values, want) in cases {
            assert_eq!(should_retry_header(&headers(values)), *want, "{values:?}");
        }
        let mut map = HeaderMap::new();
        map.insert(SHOULD_RETRY, HeaderValue::from_bytes(b"tr\xffue").unwrap());
        assert_eq!(should_retry_header(&map), None);
    }
}
