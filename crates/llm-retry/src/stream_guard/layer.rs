//! [`StreamGuardLayer`]: configuration only.

use super::StreamGuard;
use crate::sse::EventRules;
use std::sync::Arc;
use std::time::Duration;
use tower::Layer;

/// Default cap on the bytes held back while waiting for the first content event.
pub(crate) const DEFAULT_PREFIX_LIMIT: usize = 64 * 1024;
/// Default longest wait for the first content event before the held bytes
/// are released anyway.
pub(crate) const DEFAULT_FIRST_EVENT_TIMEOUT: Duration = Duration::from_secs(30);

/// Holds a streamed response back until its first content event, turning
/// failures before it into retryable errors. See the [module docs](crate::stream_guard).
#[derive(Debug, Clone)]
pub struct StreamGuardLayer {
    config: Arc<GuardConfig>,
}

#[derive(Debug, Clone)]
pub(super) struct GuardConfig {
    pub(super) prefix_limit: usize,
    pub(super) first_event_timeout: Duration,
    pub(super) extra_content_types: Vec<String>,
    pub(super) rules: EventRules,
}

impl Default for StreamGuardLayer {
    fn default() -> Self {
        StreamGuardLayer::new()
    }
}

impl StreamGuardLayer {
    /// Guards `text/event-stream` responses with the default limits
    /// (64 KiB held at most, 30 s to the first content event).
    pub fn new() -> StreamGuardLayer {
        StreamGuardLayer {
            config: Arc::new(GuardConfig {
                prefix_limit: DEFAULT_PREFIX_LIMIT,
                first_event_timeout: DEFAULT_FIRST_EVENT_TIMEOUT,
                extra_content_types: Vec::new(),
                rules: EventRules::default(),
            }),
        }
    }

    /// Most bytes held back before the first content event (default
    /// 64 KiB); past it the held bytes are released and the attempt commits.
    pub fn prefix_limit(mut self, bytes: usize) -> StreamGuardLayer {
        Arc::make_mut(&mut self.config).prefix_limit = bytes;
        self
    }

    /// Longest wait for the first content event (default 30 s); past it
    /// the held bytes are released and the attempt commits.
    pub fn first_event_timeout(mut self, timeout: Duration) -> StreamGuardLayer {
        Arc::make_mut(&mut self.config).first_event_timeout = timeout;
        self
    }

    /// Also guards responses of this content type (matched without
    /// parameters, case-insensitively), read as an event stream: for
    /// gateways that stream SSE under another type.
    pub fn guard_content_type(mut self, content_type: &str) -> StreamGuardLayer {
        Arc::make_mut(&mut self.config)
            .extra_content_types
            .push(content_type.trim().to_ascii_lowercase());
        self
    }

    /// Which events carry no content (default: pings and envelopes).
    pub fn event_rules(mut self, rules: EventRules) -> StreamGuardLayer {
        Arc::make_mut(&mut self.config).rules = rules;
        self
    }
}

impl<S> Layer<S> for StreamGuardLayer {
    type Service = StreamGuard<S>;

    fn layer(&self, inner: S) -> StreamGuard<S> {
        StreamGuard::new(inner, Arc::clone(&self.config))
    }
}

impl GuardConfig {
    /// Whether a response with these headers is guarded.
    pub(super) fn guards(&self, status: http::StatusCode, headers: &http::HeaderMap) -> bool {
        if !status.is_success() {
            return false;
        }
        let Some(value) = headers.get(http::header::CONTENT_TYPE) else {
            return false;
        };
        // The media type before any parameters, compared as bytes: the
        // parameters are never read, so their bytes need no checking.
        let value = value.as_bytes();
        let end = value.iter().position(|&b| b == b';').unwrap_or(value.len());
        let essence = value[..end].trim_ascii();
        essence.eq_ignore_ascii_case(b"text/event-stream")
            || self
                .extra_content_types
                .iter()
                .any(|t| essence.eq_ignore_ascii_case(t.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::StreamGuardLayer;
    use http::{HeaderMap, HeaderValue, StatusCode};

    #[test]
    fn the_media_type_alone_decides_what_is_guarded() {
        let layer = StreamGuardLayer::new().guard_content_type("application/x-ndjson");
        let cases: [(&[u8], bool); 10] = [
            (b"text/event-stream", true),
            (b"TEXT/Event-Stream", true),
            (b"text/event-stream; charset=utf-8", true),
            (b" text/event-stream ;charset=\xff", true),
            (b"application/x-ndjson", true),
            (b"application/json", false),
            (b"text/event-streams", false),
            (b"text/event", false),
            (b"", false),
            (b";text/event-stream", false),
        ];
        for (value, guarded) in cases {
            let mut headers = HeaderMap::new();
            let value = HeaderValue::from_bytes(value).expect("a valid header value");
            headers.insert(http::header::CONTENT_TYPE, value.clone());
            assert_eq!(
                layer.config.guards(StatusCode::OK, &headers),
                guarded,
                "{value:?}"
            );
            assert!(!layer.config.guards(StatusCode::BAD_GATEWAY, &headers));
        }
        assert!(!layer.config.guards(StatusCode::OK, &HeaderMap::new()));
    }
}
