//! Errors from a guarded stream: before content (retryable by the policy's
//! word) and after it (never replayed).

use crate::classify::{Classification, ProviderError, Reported};
use crate::error::BoxError;
use http::{HeaderMap, StatusCode};
use std::error::Error;
use std::fmt;

/// A streamed response failed before any content reached the caller; the
/// attempt is uncommitted, so the retry policy may try again.
///
/// It carries its own classification ([`Reported`]): an `overloaded_error`
/// first event counts as an overload, a `rate_limit_error` as a rate limit;
/// and the response head it arrived with, whose headers (`x-should-retry`,
/// `retry-after`) count as on any failed response.
pub struct PreContentError {
    class: Classification,
    provider: Option<ProviderError>,
    reason: PreContentReason,
    head: Option<Box<(StatusCode, HeaderMap)>>,
    /// The provider had begun its answer (an event other than a ping came
    /// before the failure): the request may have been executed.
    begun: bool,
    source: Option<BoxError>,
}

/// What went wrong before content: the error's `Display` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PreContentReason {
    /// The stream's first decisive event was an error.
    ErrorEvent,
    /// The stream ended (or sent `[DONE]`) before any content.
    EndedBeforeContent,
    /// The connection failed before any content.
    BodyFailed,
}

/// The head's header values are never printed: they may carry cookies,
/// organisation ids and the like. Only their names are.
impl fmt::Debug for PreContentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = self.head.as_deref().map(|(status, headers)| {
            let names: Vec<&str> = headers.keys().map(|name| name.as_str()).collect();
            (*status, names)
        });
        f.debug_struct("PreContentError")
            .field("class", &self.class)
            .field("provider", &self.provider)
            .field("reason", &self.reason)
            .field("head", &head)
            .field("source", &self.source)
            .finish()
    }
}

impl PreContentError {
    pub(super) fn new(
        class: Classification,
        provider: Option<ProviderError>,
        reason: PreContentReason,
        source: Option<BoxError>,
    ) -> PreContentError {
        PreContentError {
            class,
            provider,
            reason,
            head: None,
            begun: false,
            source,
        }
    }

    /// The same failure, after the provider had begun its answer.
    pub(super) fn after_begin(mut self, begun: bool) -> PreContentError {
        self.begun = begun;
        self
    }

    /// Whether the provider had begun its answer (a `message_start`, a
    /// `response.created`, a `content_block_start`) before the failure: the
    /// request may then have been executed, though nothing reached the caller.
    pub fn after_begin_of_answer(&self) -> bool {
        self.begun
    }

    /// The same failure, carried by a response with this status and headers.
    pub(super) fn with_head(mut self, status: StatusCode, headers: HeaderMap) -> PreContentError {
        self.head = Some(Box::new((status, headers)));
        self
    }

    /// How the retry policy should see this failure.
    pub fn classification(&self) -> &Classification {
        &self.class
    }

    /// The provider error carried by the error event, if any.
    pub fn provider_error(&self) -> Option<&ProviderError> {
        self.provider.as_ref()
    }
}

impl fmt::Display for PreContentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            PreContentReason::ErrorEvent => match &self.provider {
                Some(p) => write!(f, "stream sent an error event before any content: {p}"),
                None => f.write_str("stream sent an error event before any content"),
            },
            PreContentReason::EndedBeforeContent => f.write_str("stream ended before any content"),
            PreContentReason::BodyFailed => f.write_str("stream failed before any content"),
        }
    }
}

impl Error for PreContentError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

impl Reported for PreContentError {
    fn classification(&self) -> Classification {
        self.class.clone()
    }

    fn provider_error(&self) -> Option<&ProviderError> {
        self.provider.as_ref()
    }

    fn response_head(&self) -> Option<(StatusCode, &HeaderMap)> {
        self.head
            .as_deref()
            .map(|(status, headers)| (*status, headers))
    }

    fn may_have_executed(&self) -> bool {
        self.begun
    }
}

/// A streamed response failed after content reached the caller. The
/// attempt is committed and is never replayed; the bytes already forwarded
/// are all the caller will get from it.
#[derive(Debug)]
pub struct StreamInterrupted {
    bytes_forwarded: u64,
    source: BoxError,
}

impl StreamInterrupted {
    pub(super) fn new(bytes_forwarded: u64, source: BoxError) -> StreamInterrupted {
        StreamInterrupted {
            bytes_forwarded,
            source,
        }
    }

    /// Bytes the caller received before the failure.
    pub fn bytes_forwarded(&self) -> u64 {
        self.bytes_forwarded
    }
}

impl fmt::Display for StreamInterrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stream interrupted after {} bytes reached the caller; not replayed",
            self.bytes_forwarded
        )
    }
}

impl Error for StreamInterrupted {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}

impl Reported for StreamInterrupted {
    fn classification(&self) -> Classification {
        Classification::Fatal(crate::classify::FatalKind::StreamCommitted)
    }
}
