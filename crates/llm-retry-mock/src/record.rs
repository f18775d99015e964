//! What the mock saw: [`RecordedRequest`] and the shared log behind
//! [`MockServer::requests`](crate::MockServer::requests).

use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use http::{HeaderMap, Method};
use tokio::time::Instant;

use crate::reply::Reply;

/// One request as the server received it, recorded before it was answered
/// (resets included).
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The request method.
    pub method: Method,
    /// The URI path, without the query string.
    pub path: String,
    /// Every request header, as received (secrets included: this is a test
    /// fixture, never log it).
    pub headers: HeaderMap,
    /// The full body; cut at [`Script::max_request_body`](crate::Script::max_request_body)
    /// when it was larger (and answered 413), or what arrived before the
    /// client went away.
    pub body: Bytes,
    /// When the request head arrived, on the tokio clock (paused clocks
    /// included).
    pub received_at: Instant,
    /// The reply played for it (its [`Reply::expected_body`] and
    /// [`Reply::delivered_body`] say what the client can have received);
    /// `None` when the request body failed and nothing was answered.
    pub reply: Option<Reply>,
}

impl RecordedRequest {
    /// The header `name` as UTF-8, if present and valid.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body parsed as JSON, if it is JSON.
    pub fn body_json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// The request log, shared by every connection of one server. The lock is
/// only ever held for a push or a copy, never across an await.
#[derive(Debug, Default)]
pub(crate) struct Records {
    log: Mutex<Vec<RecordedRequest>>,
}

impl Records {
    fn lock(&self) -> MutexGuard<'_, Vec<RecordedRequest>> {
        // A panic elsewhere cannot leave a Vec half-pushed; keep going.
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn push(&self, request: RecordedRequest) {
        self.lock().push(request);
    }

    pub(crate) fn snapshot(&self) -> Vec<RecordedRequest> {
        self.lock().clone()
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn count_path(&self, path: &str) -> usize {
        self.lock().iter().filter(|r| r.path == path).count()
    }

    pub(crate) fn clear(&self) {
        self.lock().clear();
    }
}
