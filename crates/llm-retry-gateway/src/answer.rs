//! The answers the gateway makes itself, in the error shape of the API
//! the request's path belongs to: Anthropic's for `/v1/messages`,
//! OpenAI's otherwise, so a client's SDK reads them as it reads the
//! provider's own.

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use llm_retry::downstream::GiveUpHeadersLayer;
use std::time::Duration;

/// Whose error shape an answer takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `{"type":"error","error":{"type":…,"message":…}}`
    Anthropic,
    /// `{"error":{"message":…,"type":…,"code":…}}`
    OpenAi,
}

impl Shape {
    fn of(uri: &http::Uri) -> Shape {
        if crate::route::prefix_takes("/v1/messages", uri.path()) {
            Shape::Anthropic
        } else {
            Shape::OpenAi
        }
    }

    /// The body of an error with `status` and `message`, typed as this
    /// provider types that status.
    fn body(self, status: StatusCode, message: &str) -> serde_json::Value {
        match self {
            Shape::Anthropic => serde_json::json!({
                "type": "error",
                "error": {"type": anthropic_type(status), "message": message},
            }),
            Shape::OpenAi => {
                let (kind, code) = openai_type(status);
                serde_json::json!({
                    "error": {"message": message, "type": kind, "param": null, "code": code},
                })
            }
        }
    }
}

/// Anthropic's `error.type` for a status.
fn anthropic_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        408 | 504 => "timeout_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

/// OpenAI's `error.type` and `error.code` for a status.
fn openai_type(status: StatusCode) -> (&'static str, Option<&'static str>) {
    match status.as_u16() {
        401 => ("invalid_request_error", Some("invalid_api_key")),
        404 => ("invalid_request_error", Some("not_found")),
        408 => ("invalid_request_error", Some("timeout")),
        413 => ("invalid_request_error", Some("request_too_large")),
        429 => ("requests", Some("rate_limit_exceeded")),
        504 => ("server_error", Some("timeout")),
        400..=499 => ("invalid_request_error", None),
        _ => ("server_error", None),
    }
}

/// A JSON error answer for the request to `uri`, its `x-should-retry` as
/// given.
fn json(uri: &http::Uri, status: StatusCode, message: &str, retry: bool) -> Response {
    let body = Shape::of(uri).body(status, message);
    let mut response = (
        status,
        [("content-type", "application/json")],
        Bytes::from(body.to_string()),
    )
        .into_response();
    let retry = HeaderValue::from_static(if retry { "true" } else { "false" });
    response.headers_mut().insert("x-should-retry", retry);
    response
}

/// A final error: the gateway already did what retrying could do, so the
/// client's SDK is told not to retry (`x-should-retry: false`).
pub(crate) fn final_error(uri: &http::Uri, status: StatusCode, message: &str) -> Response {
    json(uri, status, message, false)
}

/// A 503 the client may retry in a second, on a new connection (another
/// replica may serve it): while draining, or past `max_in_flight`.
pub(crate) fn retry_soon(uri: &http::Uri, message: &str) -> Response {
    let mut response = json(uri, StatusCode::SERVICE_UNAVAILABLE, message, true);
    let headers = response.headers_mut();
    GiveUpHeadersLayer::set_wait_headers(headers, Duration::from_secs(1));
    headers.insert("connection", HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(response: Response) -> serde_json::Value {
        let body = futures_body(response);
        serde_json::from_slice(&body).expect("JSON")
    }

    fn futures_body(response: Response) -> Bytes {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            axum::body::to_bytes(response.into_body(), 1 << 16)
                .await
                .expect("body")
        })
    }

    #[test]
    fn messages_answers_take_anthropics_shape_and_others_openais() {
        let uri: http::Uri = "/v1/messages".parse().expect("uri");
        let body = read(final_error(
            &uri,
            StatusCode::TOO_MANY_REQUESTS,
            "slow down",
        ));
        assert_eq!(
            body,
            serde_json::json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
        );
        let uri: http::Uri = "/v1/chat/completions".parse().expect("uri");
        let body = read(final_error(
            &uri,
            StatusCode::TOO_MANY_REQUESTS,
            "slow down",
        ));
        assert_eq!(
            body,
            serde_json::json!({"error": {"message": "slow down", "type": "requests", "param": null, "code": "rate_limit_exceeded"}})
        );
        let uri: http::Uri = "/v1/messagesX".parse().expect("uri");
        assert!(
            read(final_error(&uri, StatusCode::NOT_FOUND, "x"))["error"]["code"] == "not_found"
        );
    }

    #[test]
    fn retry_soon_is_retryable_json_with_a_wait() {
        let uri: http::Uri = "/v1/messages".parse().expect("uri");
        let response = retry_soon(&uri, "draining");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        let headers = response.headers();
        assert_eq!(headers["x-should-retry"], "true");
        assert_eq!(headers["retry-after"], "1");
        assert_eq!(headers["retry-after-ms"], "1000");
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(read(response)["error"]["type"], "api_error");
    }
}
