//! Errors reported inside a stream, mapped through the HTTP decision table.

use crate::classify::{classify_response, Classification, ProviderError};
use http::{HeaderMap, StatusCode};
use serde_json::{Map, Value};

/// The HTTP status each known error `type` or `code` stands for.
const STATUS_BY_NAME: &[(&str, u16)] = &[
    // Anthropic `error.type`.
    ("invalid_request_error", 400),
    ("authentication_error", 401),
    ("billing_error", 402),
    ("permission_error", 403),
    ("not_found_error", 404),
    ("request_too_large", 413),
    ("rate_limit_error", 429),
    ("api_error", 500),
    ("timeout_error", 504),
    ("overloaded_error", 529),
    // OpenAI `error.code` / `error.type` and Responses `response.error.code`.
    ("context_length_exceeded", 400),
    ("invalid_api_key", 401),
    ("model_not_found", 404),
    ("rate_limit_exceeded", 429),
    ("insufficient_quota", 429),
    ("enforced_spend_limit_reached", 429),
    ("billing_hard_limit_reached", 429),
    ("billing_not_active", 429),
    ("server_error", 500),
    ("internal_server_error", 500),
    ("internal_error", 500),
    ("service_unavailable", 503),
    ("overloaded", 529),
    ("server_is_overloaded", 529),
];

/// Classifies an error reported inside a stream (`event: error`, an in-band
/// `{"error":…}`, `response.failed`) as the HTTP table would classify the
/// status that error stands for.
///
/// The status comes from the error's `code`, else its `type` (kind):
///
/// | name | status | classification |
/// | --- | --- | --- |
/// | `overloaded_error`, `overloaded`, `server_is_overloaded` | 529 | retryable, overloaded |
/// | `rate_limit_error`, `rate_limit_exceeded` | 429 | retryable, rate limited (fatal quota exhausted if the error is a quota one) |
/// | `insufficient_quota`, `billing_*` quota codes | 429 | fatal, quota exhausted |
/// | `billing_error` | 402 | fatal, quota exhausted |
/// | `api_error`, `server_error`, `internal_server_error`, `internal_error` | 500 | retryable |
/// | `service_unavailable`, `timeout_error` | 503, 504 | retryable |
/// | `invalid_request_error`, `context_length_exceeded`, any `invalid_*` | 400 | fatal (context overflow or quota when the message says so) |
/// | `authentication_error`, `invalid_api_key` | 401 | fatal, unauthorized |
/// | `permission_error` | 403 | fatal |
/// | `not_found_error`, `model_not_found` | 404 | fatal |
/// | `request_too_large` | 413 | fatal |
/// | a numeric code from 400 to 599 | that code | as the HTTP table |
///
/// Anything else, or no parsable error at all (`None`), is a server fault:
/// 500, retryable — unless the error is a quota one (its message says so),
/// which is 429 and fatal.
pub fn classify_stream_error(provider: Option<&ProviderError>) -> Classification {
    let status = provider.map_or(500, status_of);
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    classify_response(status, &HeaderMap::new(), provider)
}

/// The status `error` stands for (see [`classify_stream_error`]).
fn status_of(error: &ProviderError) -> u16 {
    [error.code(), error.kind()]
        .into_iter()
        .flatten()
        .find_map(status_of_name)
        .unwrap_or(if error.is_quota() { 429 } else { 500 })
}

fn status_of_name(name: &str) -> Option<u16> {
    if let Some((_, status)) = STATUS_BY_NAME.iter().find(|(n, _)| *n == name) {
        return Some(*status);
    }
    if let Ok(status @ 400..=599) = name.parse::<u16>() {
        return Some(status);
    }
    name.starts_with("invalid_").then_some(400)
}

/// The provider error in an error event's data, in any of its shapes:
///
/// - `{"error":{…}}`, `{"type":"error","error":{…}}` (Anthropic, Chat
///   Completions): [`ProviderError::parse`];
/// - `{"type":"error","code":…,"message":…}` (Responses, fields at the top);
/// - `{"type":"response.failed","response":{"error":{"code":…}}}`.
///
/// `None` when the data is none of these.
pub(super) fn provider_error(data: &str) -> Option<ProviderError> {
    if let Some(error) = ProviderError::parse(data.as_bytes()) {
        return Some(error);
    }
    let value: Value = serde_json::from_str(data).ok()?;
    let object = value.as_object()?;
    match object.get("type").and_then(Value::as_str) {
        Some("response.failed") => failed_response_error(object),
        _ => error_fields(object),
    }
}

/// `response.error` of a `response.failed` event.
pub(super) fn failed_response_error(object: &Map<String, Value>) -> Option<ProviderError> {
    error_fields(object.get("response")?.get("error")?.as_object()?)
}

/// `type` (unless it is the envelope's `"error"`), `code` and `message` of
/// an object; `None` when it has none of them.
pub(super) fn error_fields(object: &Map<String, Value>) -> Option<ProviderError> {
    let text = |key: &str| {
        object
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let code = match object.get("code") {
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => text("code"),
    };
    let error = ProviderError {
        kind: text("type").filter(|kind| kind != "error"),
        code,
        message: text("message"),
    };
    (error != ProviderError::default()).then_some(error)
}

#[cfg(test)]
#[path = "stream_error_tests.rs"]
mod tests;
