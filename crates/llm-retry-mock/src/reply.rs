//! What the mock sends back for one request: [`Reply`] and its builders.
//!
//! Provider-shaped presets (Anthropic and OpenAI bodies, errors, streams)
//! live in `canned.rs`; this file holds the generic pieces.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use crate::sse::SseEvent;

/// One scripted answer to one request.
///
/// Build replies through the constructors ([`Reply::status`],
/// [`Reply::json`], [`Reply::anthropic_ok`], [`Reply::sse`],
/// [`Reply::reset_before_headers`]…) and refine them with the by-value
/// builders ([`Reply::header`], [`Reply::delay`],
/// [`Reply::reset_after_bytes`]…).
///
/// ```
/// use std::time::Duration;
/// use llm_retry_mock::Reply;
///
/// let reply = Reply::rate_limited(Some(2))
///     .header("x-should-retry", "true")
///     .delay(Duration::from_millis(50));
/// assert!(reply.expected_body().is_some());
/// assert!(Reply::reset_before_headers().expected_body().is_none());
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Reply {
    /// Send an HTTP response: status, headers, then a body that is sent
    /// whole, streamed, or cut short.
    Response(ResponseReply),
    /// Read the request, wait `delay`, then reset the connection (TCP RST)
    /// without sending a single response byte.
    #[non_exhaustive]
    ResetBeforeHeaders {
        /// The wait between reading the request and the reset.
        delay: Duration,
    },
}

/// The response half of a [`Reply`]; built through [`Reply`]'s constructors.
#[derive(Debug, Clone)]
pub struct ResponseReply {
    pub(crate) status: StatusCode,
    pub(crate) content_type: Option<HeaderValue>,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) payload: Payload,
    pub(crate) delay: Duration,
    pub(crate) reset_after: Option<usize>,
}

/// How the body is produced.
#[derive(Debug, Clone)]
pub(crate) enum Payload {
    /// One chunk with an exact `content-length`.
    Whole(Bytes),
    /// One chunk per event, chunked transfer encoding, flushed one by one.
    Events(Vec<SseEvent>),
}

impl ResponseReply {
    /// The status line this response sends.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The headers this response sends, `content-type` included (hyper adds
    /// `date` and the framing headers).
    pub fn headers(&self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.headers.len() + 1);
        if let Some(ct) = &self.content_type {
            map.insert(CONTENT_TYPE, ct.clone());
        }
        for (name, value) in &self.headers {
            map.append(name.clone(), value.clone());
        }
        map
    }

    /// The wait before the status line is sent.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// The byte count after which the connection is aborted, if any.
    pub fn reset_after(&self) -> Option<usize> {
        self.reset_after
    }

    /// Every body byte, in order, as if the body completed.
    pub(crate) fn full_body(&self) -> Bytes {
        match &self.payload {
            Payload::Whole(bytes) => bytes.clone(),
            Payload::Events(events) => {
                let len = events.iter().map(|e| e.bytes.len()).sum();
                let mut buf = BytesMut::with_capacity(len);
                for event in events {
                    buf.extend_from_slice(&event.bytes);
                }
                buf.freeze()
            }
        }
    }
}

impl Reply {
    fn response(status: StatusCode, content_type: Option<&'static str>, payload: Payload) -> Reply {
        Reply::Response(ResponseReply {
            status,
            content_type: content_type.map(HeaderValue::from_static),
            headers: Vec::new(),
            payload,
            delay: Duration::ZERO,
            reset_after: None,
        })
    }

    /// A response with status `code` and an empty body.
    ///
    /// A code outside `100..=999` cannot be sent and becomes 500 (with a
    /// `tracing` warning). hyper itself turns a final 1xx into 500.
    pub fn status(code: u16) -> Reply {
        Reply::response(status_or_500(code), None, Payload::Whole(Bytes::new()))
    }

    /// A response with status `code`, `content-type: application/json` and
    /// `body` serialised compactly.
    pub fn json(code: u16, body: serde_json::Value) -> Reply {
        let bytes = Bytes::from(body.to_string());
        Reply::response(
            status_or_500(code),
            Some("application/json"),
            Payload::Whole(bytes),
        )
    }

    /// `200 text/event-stream` (with `cache-control: no-cache`) whose body is
    /// `events`, each sent as its own chunk and flushed before the next one,
    /// after that event's [`SseEvent::after`] delay.
    pub fn sse(events: impl IntoIterator<Item = SseEvent>) -> Reply {
        Reply::response(
            StatusCode::OK,
            Some("text/event-stream"),
            Payload::Events(events.into_iter().collect()),
        )
        .header("cache-control", "no-cache")
    }

    /// Reads the request, then resets the connection (TCP RST, `SO_LINGER`
    /// 0) without sending anything: the client sees "connection reset"
    /// before any response byte.
    ///
    /// The request is recorded first. Over HTTP/2 the whole connection is
    /// reset, with every stream on it.
    pub fn reset_before_headers() -> Reply {
        Reply::ResetBeforeHeaders {
            delay: Duration::ZERO,
        }
    }

    /// Replaces the body with `body`, sent as one chunk with an exact
    /// `content-length`. Leaves the status and headers as they are; no-op on
    /// [`Reply::reset_before_headers`].
    pub fn body(mut self, body: impl Into<Bytes>) -> Reply {
        if let Reply::Response(r) = &mut self {
            r.payload = Payload::Whole(body.into());
        }
        self
    }

    /// Adds a response header (see [`Reply::header_bytes`]).
    pub fn header(self, name: &str, value: &str) -> Reply {
        self.header_bytes(name, value.as_bytes())
    }

    /// Adds a response header whose value is arbitrary bytes (non-UTF-8
    /// included, as `obs-text`).
    ///
    /// Headers are appended, so repeating a name sends it several times,
    /// except `content-type`, which replaces the constructor's. A name or
    /// value that HTTP cannot carry (empty or invalid name; CR, LF or NUL in
    /// the value) is left out with a `tracing` warning: never a panic. No-op
    /// on [`Reply::reset_before_headers`].
    pub fn header_bytes(mut self, name: &str, value: &[u8]) -> Reply {
        let Reply::Response(r) = &mut self else {
            return self;
        };
        let parsed = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        );
        match parsed {
            (Ok(name), Ok(value)) if name == CONTENT_TYPE => r.content_type = Some(value),
            (Ok(name), Ok(value)) => r.headers.push((name, value)),
            _ => tracing::warn!(header = name, "llm-retry-mock: invalid header left out"),
        }
        self
    }

    /// Waits `before_headers` (on the tokio clock, so a paused-clock test
    /// drives it) after the request was read and recorded, before the status
    /// line is sent — or before the reset of [`Reply::reset_before_headers`].
    /// Calling it again replaces the previous delay.
    pub fn delay(mut self, before_headers: Duration) -> Reply {
        match &mut self {
            Reply::Response(r) => r.delay = before_headers,
            Reply::ResetBeforeHeaders { delay } => *delay = before_headers,
        }
        self
    }

    /// Sends the status line, the headers and the first `n` body bytes, then
    /// closes the connection without ending the body: the client always
    /// receives exactly `min(n, body length)` body bytes, then an
    /// incomplete-body error.
    ///
    /// The body goes out with chunked encoding (no `content-length`) and
    /// never gets its terminating chunk, so even `n` ≥ the body length ends
    /// in an error. The close is a FIN sent after the `n` bytes were
    /// flushed, which guarantees their delivery (an RST could discard
    /// unsent bytes). Guaranteed for HTTP/1.1; over HTTP/2 the whole
    /// connection closes and the prefix is delivered on a best-effort basis.
    /// No-op on [`Reply::reset_before_headers`].
    pub fn reset_after_bytes(mut self, n: usize) -> Reply {
        if let Reply::Response(r) = &mut self {
            r.reset_after = Some(n);
        }
        self
    }

    /// Adds the wait headers for `wait`, each unless the reply already has
    /// it: `Retry-After` in whole seconds, and with `with_ms`
    /// `retry-after-ms` (both rounded up, at least 1).
    pub(crate) fn with_wait(self, wait: Option<Duration>, with_ms: bool) -> Reply {
        let Some(wait) = wait else { return self };
        let nanos = wait.as_nanos();
        let mut reply = self;
        if with_ms && !reply.has_header("retry-after-ms") {
            let ms = nanos.div_ceil(1_000_000).max(1);
            reply = reply.header("retry-after-ms", &ms.to_string());
        }
        if !reply.has_header("retry-after") {
            let secs = nanos.div_ceil(1_000_000_000).max(1);
            reply = reply.header("retry-after", &secs.to_string());
        }
        reply
    }

    /// Whether the reply already sends a header called `name` (any case);
    /// always `false` for [`Reply::reset_before_headers`].
    pub(crate) fn has_header(&self, name: &str) -> bool {
        match self {
            Reply::Response(r) => {
                (name.eq_ignore_ascii_case(CONTENT_TYPE.as_str()) && r.content_type.is_some())
                    || r.headers
                        .iter()
                        .any(|(n, _)| n.as_str().eq_ignore_ascii_case(name))
            }
            Reply::ResetBeforeHeaders { .. } => false,
        }
    }

    /// The exact body bytes this reply sends when it completes, for
    /// byte-identical comparisons; `None` for both kinds of reset.
    pub fn expected_body(&self) -> Option<Bytes> {
        match self {
            Reply::Response(r) if r.reset_after.is_none() => Some(r.full_body()),
            _ => None,
        }
    }

    /// The body bytes a client receives before the reply ends or is cut:
    /// [`Reply::expected_body`] for complete replies, the first `n` bytes for
    /// [`Reply::reset_after_bytes`], `None` for
    /// [`Reply::reset_before_headers`].
    pub fn delivered_body(&self) -> Option<Bytes> {
        match self {
            Reply::Response(r) => {
                let mut body = r.full_body();
                if let Some(n) = r.reset_after {
                    body.truncate(n);
                }
                Some(body)
            }
            Reply::ResetBeforeHeaders { .. } => None,
        }
    }
}

fn status_or_500(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or_else(|_| {
        tracing::warn!(code, "llm-retry-mock: invalid status code, sending 500");
        StatusCode::INTERNAL_SERVER_ERROR
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(reply: &Reply) -> &ResponseReply {
        match reply {
            Reply::Response(r) => r,
            Reply::ResetBeforeHeaders { .. } => panic!("not a response"),
        }
    }

    #[test]
    fn invalid_headers_are_left_out() {
        let reply = Reply::status(200)
            .header("bad name", "x")
            .header("", "x")
            .header("x-nl", "a\r\nb")
            .header_bytes("x-nul", b"a\0b")
            .header_bytes("x-bin", b"\xff\xfe1")
            .header("x-ok", "1");
        let headers = parts(&reply).headers();
        assert_eq!(headers.len(), 2);
        assert_eq!(headers["x-bin"].as_bytes(), b"\xff\xfe1");
        assert_eq!(headers["x-ok"], "1");
    }

    #[test]
    fn content_type_replaces_and_others_append() {
        let reply = Reply::json(200, serde_json::json!({}))
            .header("Content-Type", "text/plain")
            .header("x-a", "1")
            .header("x-a", "2");
        let headers = parts(&reply).headers();
        assert_eq!(headers.get_all(CONTENT_TYPE).iter().count(), 1);
        assert_eq!(headers[CONTENT_TYPE], "text/plain");
        assert_eq!(headers.get_all("x-a").iter().count(), 2);
    }

    #[test]
    fn invalid_status_becomes_500() {
        for code in [0, 99, 1000, u16::MAX] {
            assert_eq!(parts(&Reply::status(code)).status(), 500);
        }
        assert_eq!(parts(&Reply::status(529)).status(), 529);
    }

    #[test]
    fn expected_and_delivered_bodies() {
        let sse = Reply::sse([SseEvent::new(None, "a"), SseEvent::raw("xyz")]);
        assert_eq!(
            sse.expected_body(),
            Some(Bytes::from_static(b"data: a\n\nxyz"))
        );
        let cut = sse.clone().reset_after_bytes(4);
        assert_eq!(cut.expected_body(), None);
        assert_eq!(cut.delivered_body(), Some(Bytes::from_static(b"data")));
        let long = sse.reset_after_bytes(1000);
        assert_eq!(
            long.delivered_body(),
            Some(Bytes::from_static(b"data: a\n\nxyz"))
        );
        let reset = Reply::reset_before_headers()
            .header("x", "y")
            .reset_after_bytes(1);
        assert!(reset.expected_body().is_none() && reset.delivered_body().is_none());
    }

    #[test]
    fn delay_applies_to_both_kinds() {
        let d = Duration::from_secs(3);
        assert_eq!(parts(&Reply::status(200).delay(d)).delay(), d);
        assert!(matches!(
            Reply::reset_before_headers().delay(d),
            Reply::ResetBeforeHeaders { delay } if delay == d
        ));
    }
}
