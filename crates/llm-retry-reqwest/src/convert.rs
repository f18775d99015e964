//! Conversions between reqwest's request and response types and `http`'s.

use crate::last_uri::LastUri;
use bytes::Bytes;
use http_body::Body;
use llm_retry::stream_guard::GuardedBody;
use llm_retry::{ReplayBody, RetryBody};
use reqwest::ResponseBuilderExt;
use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::Duration;

/// The request body as the engine holds it for every attempt.
pub(crate) type AttemptBody = ReplayBody<reqwest::Body>;

/// The final response's body as the engine hands it back, with or without
/// the gate between its layers.
pub(crate) type EngineBody = RetryBody<GuardedBody<reqwest::Body>>;

/// What a reqwest request keeps outside `http::Request`, for rebuilding
/// each attempt as reqwest sends it: its parsed URL (parsing one costs more
/// than the rest of the conversion), its per-request timeout, and whether
/// its body was bytes (not a stream).
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    url: reqwest::Url,
    uri: http::Uri,
    timeout: Option<Duration>,
    bytes_body: bool,
}

/// A reqwest request as the retry engine sees it, and what rebuilds it.
pub(crate) fn to_http(
    mut request: reqwest::Request,
    last_uri: &LastUri,
) -> Result<(http::Request<reqwest::Body>, Origin), http::uri::InvalidUri> {
    let uri = last_uri.of(request.url())?;
    let body = request.body_mut().take().unwrap_or_default();
    // Bytes (a string, a `Vec`, JSON): reqwest can clone it. No body at
    // all is the empty bytes.
    let bytes_body = body.as_bytes().is_some();
    let mut http = http::Request::new(body);
    *http.method_mut() = request.method().clone();
    *http.uri_mut() = uri.clone();
    *http.version_mut() = request.version();
    *http.headers_mut() = std::mem::take(request.headers_mut());
    let origin = Origin {
        timeout: request.timeout().copied(),
        url: request.url().clone(),
        uri,
        bytes_body,
    };
    Ok((http, origin))
}

/// One attempt of the engine's request, as reqwest sends it: the original
/// URL unless a layer changed the URI, the original timeout, and the body
/// as bytes whenever they are all known.
pub(crate) fn to_reqwest(
    request: http::Request<AttemptBody>,
    origin: &Origin,
) -> reqwest::Result<reqwest::Request> {
    let (parts, body) = request.into_parts();
    let body = attempt_body(body, origin.bytes_body);
    if parts.uri != origin.uri {
        let request = http::Request::from_parts(parts, body);
        let mut rebuilt = reqwest::Request::try_from(request)?;
        set_timeout(&mut rebuilt, origin.timeout);
        return Ok(rebuilt);
    }
    let mut rebuilt = reqwest::Request::new(parts.method, origin.url.clone());
    *rebuilt.headers_mut() = parts.headers;
    *rebuilt.version_mut() = parts.version;
    *rebuilt.body_mut() = Some(body);
    set_timeout(&mut rebuilt, origin.timeout);
    Ok(rebuilt)
}

/// Gives `request` the caller's per-request timeout, if it had one. A
/// fresh request has none, and asking for its slot would build the
/// request's config map just to write `None` into it.
fn set_timeout(request: &mut reqwest::Request, timeout: Option<Duration>) {
    if let Some(timeout) = timeout {
        *request.timeout_mut() = Some(timeout);
    }
}

/// One attempt's body for reqwest. When every byte of it is known (the
/// caller's body was bytes, or a recovery rewrote it) it goes as those
/// bytes, shared by reference count, not copied: reqwest can clone such a
/// body, so it follows a `307`/`308` redirect and resends on an HTTP/2
/// refused stream by itself. A stream goes through the engine's replay
/// buffer, boxed once per attempt.
fn attempt_body(body: AttemptBody, bytes_body: bool) -> reqwest::Body {
    match known_bytes(&body, bytes_body) {
        Some(bytes) => reqwest::Body::from(bytes),
        None => reqwest::Body::wrap(body),
    }
}

/// The whole body, if it is known or, for a body that was bytes, can be
/// read at once.
fn known_bytes(body: &AttemptBody, bytes_body: bool) -> Option<Bytes> {
    if let Some(bytes) = body.buffered() {
        return Some(bytes);
    }
    if !bytes_body {
        // Reading a stream here could wait, or cross the replay cap.
        return None;
    }
    // Bytes yield themselves whole on the first poll, never pending; read
    // through a clone, they stay kept for every later attempt, and `body`
    // itself stays unread should they not be.
    let mut reader = body.try_clone()?;
    let mut cx = Context::from_waker(Waker::noop());
    let _ = Pin::new(&mut reader).poll_frame(&mut cx);
    body.buffered()
}

/// A reqwest response as the engine sees it. The response's URL rides in
/// its extensions, where [`to_reqwest_response`] finds it again.
pub(crate) fn from_reqwest(response: reqwest::Response) -> http::Response<reqwest::Body> {
    let url = response.url().clone();
    let mut response = http::Response::<reqwest::Body>::from(response);
    insert_url(response.extensions_mut(), url);
    response
}

/// Puts `url` where reqwest looks for a response's URL: an extension of a
/// private type, which only reqwest's response builder can insert. The
/// builder is lent `extensions` to insert it into, so it adds one entry to
/// the map the response already has instead of building a map to merge.
fn insert_url(extensions: &mut http::Extensions, url: reqwest::Url) {
    let mut builder = http::Response::builder();
    let Some(lent) = builder.extensions_mut() else {
        return; // a fresh builder holds no error: not reached
    };
    std::mem::swap(lent, extensions);
    // `url` inserts an extension into a builder without an error: `body`
    // then succeeds, and the extensions come back with the URL among them.
    if let Ok(carrier) = builder.url(url).body(()) {
        *extensions = carrier.into_parts().0.extensions;
    }
}

/// The engine's final response, as reqwest hands it to the caller: with its
/// URL, its status and headers, and the report in its extensions.
pub(crate) fn to_reqwest_response(response: http::Response<EngineBody>) -> reqwest::Response {
    reqwest::Response::from(response.map(reqwest_body))
}

/// The engine's body as reqwest's. When no layer read any of it (an answer
/// that passed straight through, as every first-try success of a
/// non-streamed call does) it is the attempt's own body again, so reading
/// it crosses no wrapper of the engine's and it is boxed no further;
/// otherwise the engine's body, boxed once.
fn reqwest_body(body: EngineBody) -> reqwest::Body {
    match body.into_inner().map(GuardedBody::into_inner) {
        Ok(Ok(own)) => own,
        Ok(Err(guarded)) => reqwest::Body::wrap(guarded),
        Err(read) => reqwest::Body::wrap(read),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use http_body_util::BodyExt;
    use llm_retry::stream_guard::StreamGuardLayer;
    use llm_retry::{BoxError, RetryLayer, RetryPolicy};
    use tower::{service_fn, Layer, ServiceExt};

    /// The engine's answer to one request, from an upstream whose answer
    /// has `status` and a body of bytes.
    async fn through_engine(status: u16) -> http::Response<EngineBody> {
        let upstream = service_fn(
            move |_: http::Request<ReplayBody<reqwest::Body>>| async move {
                let mut response = http::Response::new(reqwest::Body::from("the answer"));
                *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
                Ok::<_, BoxError>(response)
            },
        );
        let policy = RetryPolicy::builder().max_retries(0).build().unwrap();
        let stack = RetryLayer::new(policy).layer(StreamGuardLayer::new().layer(upstream));
        let request = http::Request::new(reqwest::Body::from("{}"));
        stack.oneshot(request).await.unwrap()
    }

    #[tokio::test]
    async fn an_answer_no_layer_read_reaches_reqwest_as_the_attempt_s_own_body() {
        let body = reqwest_body(through_engine(200).await.into_body());
        // Bytes stay bytes only when nothing wrapped them on the way.
        assert_eq!(body.as_bytes(), Some(&b"the answer"[..]));
    }

    #[tokio::test]
    async fn an_answer_read_to_classify_it_is_read_through_whole() {
        let body = reqwest_body(through_engine(500).await.into_body());
        assert_eq!(
            body.as_bytes(),
            None,
            "the engine's body, not the attempt's"
        );
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(bytes, "the answer");
    }
}
