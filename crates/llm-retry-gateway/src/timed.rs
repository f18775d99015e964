//! A target's calls timed: per answer for the metrics, and summed per
//! request for the gateway's own time.

use metrics::Histogram;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The time one request spent in its targets' calls (to each answer's
/// head; for a stream under the stream guard, its first content), summed
/// over its attempts: what the gateway's own time excludes. Its targets'
/// calls find it in their task while [`UpstreamTime::timing`] runs the
/// request, not in the request's extensions, which every attempt would
/// copy.
#[derive(Debug, Clone, Default)]
pub(crate) struct UpstreamTime(Arc<AtomicU64>);

tokio::task_local! {
    /// The upstream time of the request whose failover this task runs.
    static SPENT: UpstreamTime;
}

impl UpstreamTime {
    /// `future` (a request's failover), with every target call it makes
    /// timed into this.
    pub(crate) fn timing<F: Future>(&self, future: F) -> impl Future<Output = F::Output> {
        SPENT.scope(self.clone(), future)
    }

    fn add(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The time summed so far.
    pub(crate) fn total(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

/// `llm_retry_gateway_target_seconds` for one target, its handle looked up
/// at the first answer (from the recorder installed then), not at every one.
#[derive(Debug)]
pub(crate) struct TargetSeconds {
    route: String,
    target: String,
    handle: OnceLock<Histogram>,
}

impl TargetSeconds {
    pub(crate) fn new(route: &str, target: &str) -> TargetSeconds {
        TargetSeconds {
            route: route.to_owned(),
            target: target.to_owned(),
            handle: OnceLock::new(),
        }
    }

    fn record(&self, took: Duration) {
        self.handle
            .get_or_init(|| {
                metrics::histogram!(
                    "llm_retry_gateway_target_seconds",
                    "route" => self.route.clone(),
                    "target" => self.target.clone()
                )
            })
            .record(took.as_secs_f64());
    }
}

/// A target's service, each call timed: the call goes to the service that
/// was made ready, not to a clone of it.
#[derive(Debug, Clone)]
pub(crate) struct Timed<S> {
    inner: S,
    seconds: Arc<TargetSeconds>,
}

impl<S> Timed<S> {
    pub(crate) fn new(inner: S, seconds: TargetSeconds) -> Timed<S> {
        Timed {
            inner,
            seconds: Arc::new(seconds),
        }
    }
}

impl<S, B> tower::Service<http::Request<B>> for Timed<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = TimedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let spent = SPENT.try_with(UpstreamTime::clone).ok();
        TimedFuture {
            inner: self.inner.call(request),
            started: Instant::now(),
            seconds: Arc::clone(&self.seconds),
            spent,
        }
    }
}

pin_project! {
    /// A target's call in flight, timed when it ends. A call dropped before
    /// it ends (cut by a first-content timeout or the route's deadline) is
    /// still the target's time, not the gateway's; only answers are in the
    /// histogram.
    pub(crate) struct TimedFuture<F> {
        #[pin]
        inner: F,
        started: Instant,
        seconds: Arc<TargetSeconds>,
        spent: Option<UpstreamTime>,
    }

    impl<F> PinnedDrop for TimedFuture<F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(spent) = this.spent.take() {
                spent.add(this.started.elapsed());
            }
        }
    }
}

impl<F: Future> Future for TimedFuture<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let output = std::task::ready!(this.inner.poll(cx));
        let took = this.started.elapsed();
        this.seconds.record(took);
        if let Some(spent) = this.spent.take() {
            spent.add(took);
        }
        Poll::Ready(output)
    }
}
