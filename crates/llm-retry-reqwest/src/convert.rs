//! Conversions between reqwest's request and response types and `http`'s.

use crate::last_uri::LastUri;
use bytes::Bytes;
use http_body::Body;
use llm_retry::ReplayBody;
use reqwest::ResponseBuilderExt;
use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::Duration;

/// The request body as the engine holds it for every attempt.
pub(crate) type AttemptBody = ReplayBody<reqwest::Body>;

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
pub(crate) fn to_reqwest_response<B>(response: http::Response<B>) -> reqwest::Response
where
    B: Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    reqwest::Response::from(response.map(reqwest::Body::wrap))
}
