//! The handler every LLM request goes through: read, route, fail over,
//! answer; and the gateway's own answers when no upstream answer can be
//! handed over.

use crate::gateway::Shared;
use crate::inflight::Counted;
use crate::route::StateBound;
use crate::upstream::HOP_BY_HOP;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use http_body_util::Full;
use llm_retry::downstream::mark_give_up;
use llm_retry::failover::{FailoverError, FailoverErrorKind, FailoverReport, FailoverStop};
use llm_retry::RetryReport;
use serde::Deserialize;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tower::ServiceExt;

/// What the gateway reads of a request body: the model, and whether the
/// request continues provider-side state (OpenAI's Responses API).
#[derive(Deserialize, Default)]
struct Peek {
    model: Option<String>,
    previous_response_id: Option<serde_json::Value>,
    conversation: Option<serde_json::Value>,
}

pub(crate) async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let guard = shared.in_flight.start();
    if shared.is_draining() {
        return draining();
    }
    let (mut parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, shared.max_body).await {
        Ok(body) => body,
        Err(_) => {
            return error(
                &parts.uri,
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large or unreadable",
                false,
            )
        }
    };
    let peek: Peek = serde_json::from_slice(&body).unwrap_or_default();
    let path = parts.uri.path().to_owned();
    let Some(route) = shared
        .routes
        .iter()
        .find(|r| r.matches(&path, peek.model.as_deref()))
    else {
        return error(
            &parts.uri,
            StatusCode::NOT_FOUND,
            "no route for this path and model",
            false,
        );
    };
    let bound_by_header = route
        .config
        .state_bound_header
        .as_ref()
        .is_some_and(|name| parts.headers.contains_key(name));
    let bound_by_body = peek.previous_response_id.is_some_and(|v| !v.is_null())
        || peek.conversation.is_some_and(|v| !v.is_null());
    if bound_by_header || bound_by_body {
        parts.extensions.insert(StateBound);
    }
    let uri = parts.uri.clone();
    let request = http::Request::from_parts(parts, Full::new(body));
    let route_name = route.config.name.clone();
    // Boxed as a plain `Send` future: the handler's own future then holds
    // no service type whose `Send` the compiler cannot prove in general.
    let sent: Pin<Box<dyn Future<Output = Result<Response<_>, llm_retry::BoxError>> + Send>> =
        Box::pin(route.failover.clone().oneshot(request));
    let answer = match sent.await {
        Ok(mut response) => {
            // An exhausted failover marked its answer with the wait left;
            // a target that gave up on its own is marked here.
            let exhausted = response
                .extensions()
                .get::<FailoverReport>()
                .is_some_and(|r| r.stop == FailoverStop::Exhausted);
            if let (false, Some(report)) = (
                exhausted,
                response.extensions().get::<RetryReport>().cloned(),
            ) {
                mark_give_up(&report, response.headers_mut());
            }
            for name in &HOP_BY_HOP {
                response.headers_mut().remove(name);
            }
            response.map(|body| Body::new(Counted::new(body, guard)))
        }
        Err(failure) => failed(&uri, &failure),
    };
    let class = match answer.status().as_u16() {
        200..=299 => "2xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    };
    metrics::counter!("llm_retry_gateway_requests_total", "route" => route_name, "status" => class)
        .increment(1);
    answer
}

/// The gateway's answer when the failover could hand over no upstream
/// answer: final, so the caller's SDK does not retry what the gateway
/// already did.
fn failed(uri: &http::Uri, failure: &llm_retry::BoxError) -> Response {
    let Some(failure) = failure.downcast_ref::<FailoverError>() else {
        return error(uri, StatusCode::BAD_GATEWAY, "upstream failed", true);
    };
    let (status, message) = match failure.kind() {
        FailoverErrorKind::Deadline => (StatusCode::GATEWAY_TIMEOUT, "the route's deadline passed"),
        FailoverErrorKind::BodyTooLarge { .. } => {
            (StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
        }
        FailoverErrorKind::BodyFailed => {
            (StatusCode::BAD_REQUEST, "request body could not be read")
        }
        FailoverErrorKind::Exhausted => (
            StatusCode::SERVICE_UNAVAILABLE,
            "every upstream turned the request away",
        ),
        _ => (StatusCode::BAD_GATEWAY, "upstream failed"),
    };
    tracing::info!(report = %failure.report(), "request not answered");
    error(uri, status, message, true)
}

/// Answers while the gateway drains: try again (elsewhere) shortly.
fn draining() -> Response {
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
    response
        .headers_mut()
        .insert("retry-after", HeaderValue::from_static("1"));
    response
        .headers_mut()
        .insert("connection", HeaderValue::from_static("close"));
    response
}

/// An error in the shape of the API the path belongs to.
fn error(uri: &http::Uri, status: StatusCode, message: &str, final_answer: bool) -> Response {
    let body = if uri.path().starts_with("/v1/messages") {
        serde_json::json!({"type": "error", "error": {"type": "api_error", "message": message}})
    } else {
        serde_json::json!({"error": {"message": message, "type": "api_error", "code": null}})
    };
    let mut response = (
        status,
        [("content-type", "application/json")],
        Bytes::from(body.to_string()),
    )
        .into_response();
    if final_answer {
        response
            .headers_mut()
            .insert("x-should-retry", HeaderValue::from_static("false"));
    }
    response
}
