//! [`Gateway`]: the routes, the axum router, and serving with a drain.

use crate::config::Config;
use crate::dispatch::Dispatch;
use crate::first_head::note_heads;
use crate::inflight::InFlight;
use crate::route::Route;
use crate::shared_state::SharedState;
use axum::response::{IntoResponse, Response};
use axum::Router;
use http::StatusCode;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use llm_retry::failover::Shutdown;
use metrics_exporter_prometheus::PrometheusHandle;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the accept loop's idle timer fires (see `Gateway::serve`):
/// shorter than the header-read timer hyper arms for each request (30 s
/// by default). A timer due sooner (a shorter configured timeout, a
/// retry's short sleep) still wakes the driver once: it costs that
/// syscall, nothing else.
const NEAR_WAKE: Duration = Duration::from_secs(1);

/// A gateway built from a [`Config`]: serve it with [`Gateway::serve`], or
/// mount [`Gateway::router`] in an axum app of your own.
#[derive(Debug, Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
    shutdown_grace: Duration,
    header_read_timeout: Duration,
}

/// What every request handler shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) routes: Vec<Route>,
    /// Whether a route matches on the body's `model`.
    pub(crate) routes_by_model: bool,
    pub(crate) max_body: usize,
    pub(crate) max_in_flight: usize,
    pub(crate) body_timeout: Duration,
    pub(crate) stream_idle_timeout: Duration,
    pub(crate) client_key: Option<crate::config::ClientKey>,
    pub(crate) in_flight: Arc<InFlight>,
    draining: AtomicBool,
    shutdown: Shutdown,
    metrics: std::sync::OnceLock<PrometheusHandle>,
    /// Answers given before a route was chosen (route `none`).
    pub(crate) unrouted: Arc<crate::counts::RequestCounts>,
}

impl Shared {
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }
}

/// Why a gateway could not be built.
#[derive(Debug)]
pub struct BuildError(String);

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BuildError {}

impl Gateway {
    /// Builds every route's targets and failover. With a `[shared]`
    /// table, starts the stores shared through Redis (connecting lazily:
    /// Redis may be down), which needs a tokio runtime.
    pub fn new(config: &Config) -> Result<Gateway, BuildError> {
        let connector = crate::upstream::connector().map_err(BuildError)?;
        let shutdown = Shutdown::new();
        let shared = config
            .shared
            .as_ref()
            .map(SharedState::new)
            .transpose()
            .map_err(BuildError)?;
        let routes = config
            .routes
            .iter()
            .map(|route| {
                Route::build(
                    route,
                    &connector,
                    &shutdown,
                    config.max_body,
                    shared.as_ref(),
                )
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(BuildError)?;
        Ok(Gateway {
            shared: Arc::new(Shared {
                routes_by_model: config.routes.iter().any(|r| !r.models.is_empty()),
                routes,
                max_body: config.max_body,
                max_in_flight: config.max_in_flight,
                body_timeout: config.body_timeout,
                stream_idle_timeout: config.stream_idle_timeout,
                client_key: config.client_key.clone(),
                in_flight: Arc::new(InFlight::default()),
                draining: AtomicBool::new(false),
                shutdown,
                metrics: std::sync::OnceLock::new(),
                unrouted: Arc::new(crate::counts::RequestCounts::new("none")),
            }),
            shutdown_grace: config.shutdown_grace,
            header_read_timeout: config.header_read_timeout,
        })
    }

    /// Serves `/metrics` from `handle` (a Prometheus recorder the caller
    /// installed, e.g. from [`prometheus`](crate::prometheus)), for this
    /// gateway and every clone of it. A second handle is ignored. Install
    /// the recorder before the gateway answers its first request: each
    /// route and target looks its metric handles up once, at its first
    /// answer.
    pub fn with_metrics(self, handle: PrometheusHandle) -> Gateway {
        let _ = self.shared.metrics.set(handle);
        self
    }

    /// Syncs every store shared through Redis now (the stores sync on their
    /// own every `sync_interval`), each call bounded by `[shared].timeout`:
    /// a replica that calls this before it serves starts with the fleet's
    /// failover marks. Says whether Redis answered every call; `true`
    /// without `[shared]`.
    pub async fn sync_shared(&self) -> bool {
        let mut answered = true;
        for store in self.shared.routes.iter().flat_map(|route| &route.shared) {
            answered &= store.sync().await;
        }
        answered
    }

    /// The gateway's routes as an axum router: `/healthz`, `/metrics`, and
    /// every other path through the routes; the same service
    /// [`serve`](Gateway::serve) runs.
    pub fn router(&self) -> Router {
        Router::new().fallback_service(Dispatch::new(Arc::clone(&self.shared)))
    }

    /// Starts draining: new requests get `503` with `retry-after`, waiting
    /// failover rounds end at once, requests in flight go on.
    pub fn start_draining(&self) {
        self.shared.draining.store(true, Ordering::SeqCst);
        self.shared.shutdown.trigger();
    }

    /// Requests in flight (their answers' bodies not yet ended).
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.count()
    }

    /// Serves on `listener` until `signal` resolves, then drains: requests
    /// in flight get up to the configured grace period to finish (new ones
    /// are answered `503` meanwhile), then connections still busy get a
    /// last second before they are cut. A client that has not sent a
    /// request's head within the header-read timeout is disconnected: on a
    /// new connection whatever protocol it begins, and between the
    /// requests of an HTTP/1 connection.
    pub async fn serve<F>(self, listener: tokio::net::TcpListener, signal: F) -> std::io::Result<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let service = Dispatch::new(Arc::clone(&self.shared));
        let mut connections = auto::Builder::new(TokioExecutor::new());
        connections
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_read_timeout);
        let graceful = GracefulShutdown::new();
        let drain = async {
            signal.await;
            tracing::info!(in_flight = self.in_flight(), "draining");
            self.start_draining();
            let idle = self.shared.in_flight.idle();
            if tokio::time::timeout(self.shutdown_grace, idle)
                .await
                .is_err()
            {
                tracing::warn!(
                    cut = self.in_flight(),
                    grace = ?self.shutdown_grace,
                    "the shutdown grace period ended: requests still in flight get a last second, then are cut"
                );
            }
        };
        let mut drain = std::pin::pin!(drain);
        // Every connection's task, so those still busy at the end are cut
        // (not left running after `serve` returns); finished ones are
        // reaped as the loop goes.
        let mut tasks = tokio::task::JoinSet::new();
        // A timer always due within a second keeps the runtime's next wake
        // near. hyper arms a header-read timer for every request; one due
        // sooner than the runtime's next wake (none, when nothing else is
        // pending) makes tokio wake its driver through the eventfd: a
        // `write` and an extra `epoll_wait` a request, one at a time.
        let mut near_wake = tokio::time::interval(NEAR_WAKE);
        near_wake.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let tcp = tokio::select! {
                () = &mut drain => break,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
                _ = near_wake.tick() => continue,
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(error) => {
                        accept_failed(&error).await;
                        continue;
                    }
                },
            };
            // Streams are many small writes: without TCP_NODELAY each event
            // after the first can wait out a delayed ACK.
            if let Err(error) = tcp.set_nodelay(true) {
                tracing::debug!(%error, "TCP_NODELAY not set on an accepted connection");
            }
            let (service, first_head) = note_heads(service.clone());
            let connections = connections.clone();
            let watcher = graceful.watcher();
            let header_read_timeout = self.header_read_timeout;
            tasks.spawn(async move {
                let connection = connections.serve_connection(TokioIo::new(tcp), service);
                let mut connection = std::pin::pin!(watcher.watch(connection));
                let ended = tokio::select! {
                    ended = &mut connection => Some(ended),
                    came = first_head.came_within(header_read_timeout) => {
                        if !came {
                            tracing::debug!("no request head within the header-read timeout: connection closed");
                            return;
                        }
                        None
                    }
                };
                let ended = match ended {
                    Some(ended) => ended,
                    None => connection.await,
                };
                if let Err(error) = ended {
                    tracing::debug!(%error, "connection ended with an error");
                }
            });
        }
        drop(listener);
        // Connections still busy once the drain ended get a last second.
        let _ = tokio::time::timeout(Duration::from_secs(1), graceful.shutdown()).await;
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        Ok(())
    }
}

/// After a failed accept: a connection that went away before it was taken
/// is nothing; anything else (out of file descriptors, say) is waited out
/// for a second, so the loop does not spin.
async fn accept_failed(error: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::warn!(%error, "accepting a connection failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// `/healthz`: `ok`, or `503` once draining.
pub(crate) fn healthz(shared: &Shared) -> Response {
    if shared.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response()
    } else {
        (StatusCode::OK, "ok").into_response()
    }
}

/// `/metrics`: the Prometheus text, when a recorder was handed over.
pub(crate) fn metrics(shared: &Shared) -> Response {
    match shared.metrics.get() {
        Some(handle) => (StatusCode::OK, handle.render()).into_response(),
        None => (StatusCode::NOT_FOUND, "metrics are not enabled").into_response(),
    }
}
