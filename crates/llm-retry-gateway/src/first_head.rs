//! A connection's first request head, awaited within the header-read
//! timeout whatever protocol the connection begins. hyper times an HTTP/1
//! head only once it has read enough to know the connection is HTTP/1,
//! and never times HTTP/2's: a client that sent nothing, a byte, or
//! HTTP/2's preface alone would hold its connection for good.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// `inner`, telling its connection's task when a request's head came.
#[derive(Debug, Clone)]
pub(crate) struct NoteHeads<S> {
    inner: S,
    came: Arc<Notify>,
}

/// The connection's side: whether its first head came in time.
#[derive(Debug)]
pub(crate) struct FirstHead(Arc<Notify>);

/// `service` for one connection, and what tells of that connection's first
/// request head.
pub(crate) fn note_heads<S>(service: S) -> (NoteHeads<S>, FirstHead) {
    let came = Arc::new(Notify::new());
    let first = FirstHead(Arc::clone(&came));
    (
        NoteHeads {
            inner: service,
            came,
        },
        first,
    )
}

impl<S, R> hyper::service::Service<R> for NoteHeads<S>
where
    S: hyper::service::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, request: R) -> S::Future {
        // Stores a permit the first time; after that (nobody waits any
        // more) it finds the permit stored and does nothing.
        self.came.notify_one();
        self.inner.call(request)
    }
}

impl FirstHead {
    /// Whether a request's head came within `timeout`. A connection that
    /// ends first (its service dropped) never wakes this: the connection's
    /// own end is awaited beside it.
    pub(crate) async fn came_within(self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.0.notified())
            .await
            .is_ok()
    }
}
