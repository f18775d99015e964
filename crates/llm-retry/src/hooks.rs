//! Observing the retry loop: one trait, no-op by default.
//!
//! Hooks run inline on the request's task; keep them quick (record a metric,
//! send to a channel). They never see request headers, so no secret can
//! reach them.

use crate::classify::Classification;
use crate::report::RecoveryAction;
use crate::report::RetryReport;
use http::StatusCode;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Fired before each wait: what failed and what happens next.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RetryEvent {
    /// The retry about to happen (1 for the first retry).
    pub retry: u32,
    /// The configured maximum number of retries.
    pub max_retries: u32,
    /// How long the request will wait first: asleep, or, for a rate
    /// limit's named wait under a pacing gate, queued in the gate.
    pub delay: Duration,
    /// The wait the server named (`retry-after`, a rate-limit reset, a
    /// delay in the error body) behind `delay`, if any.
    pub server_wait: Option<Duration>,
    /// The failed attempt's status, if a response arrived.
    pub status: Option<StatusCode>,
    /// The failed attempt's error text, if no response arrived, with any
    /// URL's query string and userinfo (where clients put keys) cut out.
    pub error: Option<String>,
    /// How the failure was classified.
    pub class: Classification,
}

/// Fired when a request is changed before it is resent.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecoveryEvent {
    /// Which recovery.
    pub action: RecoveryAction,
    /// Why it was applied.
    pub reason: String,
    /// The value before (never a credential).
    pub old: Option<String>,
    /// The value after (never a credential).
    pub new: Option<String>,
}

/// Callbacks on the retry loop. Every method defaults to doing nothing.
///
/// Hooks run inline on the request's task: keep them quick (record a
/// metric, send to a channel). They never see request headers, so no
/// secret can reach them. Set them with
/// [`RetryLayer::with_hooks`](crate::RetryLayer::with_hooks) or
/// [`RetryPolicy::with_hooks`](crate::RetryPolicy::with_hooks); both retry
/// paths call the same ones.
pub trait RetryHooks: Send + Sync + 'static {
    /// Before each wait (`api_retry_start`).
    fn on_retry(&self, _event: &RetryEvent) {}
    /// When a recovery changes the request before it is resent.
    fn on_recover(&self, _event: &RecoveryEvent) {}
    /// After a success that needed at least one retry (`api_retry_end`).
    fn on_recovered(&self, _report: &RetryReport) {}
    /// When the loop stops without success.
    fn on_give_up(&self, _report: &RetryReport) {}
}

/// Hooks that do nothing: the default.
#[derive(Debug, Clone, Copy, Default)]
struct NoHooks;

impl RetryHooks for NoHooks {}

/// Shared, type-erased hooks as the layer stores them.
#[derive(Clone)]
pub(crate) struct SharedHooks(pub(crate) Arc<dyn RetryHooks>);

impl fmt::Debug for SharedHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RetryHooks")
    }
}

impl Default for SharedHooks {
    fn default() -> Self {
        SharedHooks(Arc::new(NoHooks))
    }
}

/// Hooks built from a closure called on every retry.
///
/// ```
/// let hooks = llm_retry::on_retry(|event: &llm_retry::RetryEvent| {
///     eprintln!("retry {} in {:?}", event.retry, event.delay);
/// });
/// assert!(format!("{hooks:?}").starts_with("OnRetry"));
/// ```
pub fn on_retry<F>(f: F) -> impl RetryHooks + fmt::Debug
where
    F: Fn(&RetryEvent) + Send + Sync + 'static,
{
    OnRetry(f)
}

/// The hooks [`on_retry`] builds.
#[derive(Clone, Copy)]
struct OnRetry<F>(F);

impl<F> fmt::Debug for OnRetry<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OnRetry")
    }
}

impl<F> RetryHooks for OnRetry<F>
where
    F: Fn(&RetryEvent) + Send + Sync + 'static,
{
    fn on_retry(&self, event: &RetryEvent) {
        (self.0)(event)
    }
}
