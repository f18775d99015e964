//! Overload answers that move a request to the next target without being
//! certified rejections: a provider's overload or a proxy's 5xx answered
//! with a status, so before any content reached the caller.
//!
//! Such an answer may come after the upstream began work, so it is no
//! proof the request was not executed, and it lets no further round
//! begin. Sending the request to another target is no less safe than the
//! resend the target's own retry stack already makes for the same answer.

use super::operation::Ready;
use crate::classify::ProviderError;
use crate::hint::{named_wait, Signals};
use http::{HeaderMap, StatusCode};
use std::time::SystemTime;
use tokio::time::Instant;

/// What an answer's status says about moving on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// An overload or a gateway's 5xx whatever the body says: 502, 503,
    /// 504, 529.
    Overload,
    /// A 500: an overload only when its body says so (`server_error`,
    /// `overloaded_error`).
    ReadTheBody,
    /// Anything else is the answer.
    Answer,
}

/// The shape of an answer with `status`.
pub(super) fn shape(status: StatusCode) -> Shape {
    match status.as_u16() {
        502..=504 | 529 => Shape::Overload,
        500 => Shape::ReadTheBody,
        _ => Shape::Answer,
    }
}

/// Whether a 500's `body` names an overload or a server-side error the
/// provider means to be retried (OpenAI's `server_error`).
pub(super) fn body_names_overload(body: &[u8]) -> bool {
    ProviderError::parse(body)
        .is_some_and(|error| error.is_overloaded() || error.is("server_error"))
}

/// When a target that answered an overload takes requests again, when
/// its answer named a wait (`retry-after-ms`, `Retry-After`): the
/// exhausted request's give-up then tells it.
pub(super) fn named_ready(headers: &HeaderMap) -> Option<Ready> {
    let wait = named_wait(headers, None, SystemTime::now(), Signals::RetryAfter)?;
    let at = Instant::now().checked_add(wait.duration)?;
    (!wait.duration.is_zero()).then_some(Ready {
        at,
        named: true,
        rate_limited: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        for (status, expected) in [
            (502, Shape::Overload),
            (503, Shape::Overload),
            (504, Shape::Overload),
            (529, Shape::Overload),
            (500, Shape::ReadTheBody),
            (501, Shape::Answer),
            (505, Shape::Answer),
            (429, Shape::Answer),
            (200, Shape::Answer),
            (400, Shape::Answer),
        ] {
            let status = StatusCode::from_u16(status).expect("valid");
            assert_eq!(shape(status), expected, "{status}");
        }
    }

    #[test]
    fn bodies() {
        let openai = br#"{"error":{"message":"x","type":"server_error","param":null,"code":null}}"#;
        let anthropic = br#"{"type":"error","error":{"type":"overloaded_error","message":"x"}}"#;
        let api_error = br#"{"type":"error","error":{"type":"api_error","message":"x"}}"#;
        assert!(body_names_overload(openai));
        assert!(body_names_overload(anthropic));
        assert!(!body_names_overload(api_error));
        assert!(!body_names_overload(b"<html>500</html>"));
        assert!(!body_names_overload(b""));
    }
}
