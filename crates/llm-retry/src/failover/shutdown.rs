//! [`Shutdown`]: tells failovers that the process is draining.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// A shutdown signal shared by every failover built with it: once
/// [`trigger`](Shutdown::trigger)ed, no request starts a further round,
/// and requests waiting between rounds stop waiting and return their last
/// answer at once. Requests in flight are left to finish.
#[derive(Debug, Clone, Default)]
pub struct Shutdown(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    started: AtomicBool,
    notify: Notify,
}

impl Shutdown {
    /// A signal not yet triggered.
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Starts the shutdown: wakes every waiting round.
    pub fn trigger(&self) {
        self.0.started.store(true, Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    /// Whether the shutdown has started.
    pub fn is_started(&self) -> bool {
        self.0.started.load(Ordering::SeqCst)
    }

    /// Resolves once the shutdown has started (at once if it has).
    pub(super) async fn started(&self) {
        let notified = self.0.notify.notified();
        tokio::pin!(notified);
        // Registered before the flag is read, so a trigger in between wakes it.
        notified.as_mut().enable();
        if self.is_started() {
            return;
        }
        notified.await;
    }
}
