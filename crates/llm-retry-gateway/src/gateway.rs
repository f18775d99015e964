//! [`Gateway`]: the routes, the axum router, and serving with a drain.

use crate::config::Config;
use crate::inflight::InFlight;
use crate::proxy;
use crate::route::Route;
use axum::routing::{any, get};
use axum::Router;
use http::StatusCode;
use llm_retry::failover::Shutdown;
use metrics_exporter_prometheus::PrometheusHandle;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;

/// A gateway built from a [`Config`]: serve it with [`Gateway::serve`], or
/// mount [`Gateway::router`] in an axum app of your own.
#[derive(Debug, Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
    shutdown_grace: Duration,
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
    /// Builds every route's targets and failover.
    pub fn new(config: &Config) -> Result<Gateway, BuildError> {
        let connector = crate::upstream::connector().map_err(BuildError)?;
        let shutdown = Shutdown::new();
        let routes = config
            .routes
            .iter()
            .map(|route| Route::build(route, &connector, &shutdown, config.max_body))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| BuildError(e.to_string()))?;
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
            }),
            shutdown_grace: config.shutdown_grace,
        })
    }

    /// Serves `/metrics` from `handle` (a Prometheus recorder the caller
    /// installed), for this gateway and every clone of it. A second handle
    /// is ignored.
    pub fn with_metrics(self, handle: PrometheusHandle) -> Gateway {
        let _ = self.shared.metrics.set(handle);
        self
    }

    /// The gateway's routes as an axum router: `/healthz`, `/metrics`, and
    /// every other path through the routes.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/healthz", get(healthz))
            .route("/metrics", get(metrics))
            .fallback(any(proxy::forward))
            .with_state(Arc::clone(&self.shared))
            .layer(TraceLayer::new_for_http())
            .layer(SetSensitiveRequestHeadersLayer::new([
                http::header::AUTHORIZATION,
                http::HeaderName::from_static("x-api-key"),
                http::HeaderName::from_static("api-key"),
                http::header::COOKIE,
            ]))
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
    /// in flight get up to the configured grace period to finish.
    pub async fn serve<F>(self, listener: tokio::net::TcpListener, signal: F) -> std::io::Result<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let router = self.router();
        let (drain_ended, ended) = tokio::sync::oneshot::channel::<()>();
        let drain = {
            let gateway = self.clone();
            async move {
                signal.await;
                tracing::info!(in_flight = gateway.in_flight(), "draining");
                gateway.start_draining();
                let idle = gateway.shared.in_flight.idle();
                let _ = tokio::time::timeout(gateway.shutdown_grace, idle).await;
                let _ = drain_ended.send(());
            }
        };
        // Streams are many small writes: without TCP_NODELAY each event
        // after the first can wait out a delayed ACK.
        let listener =
            axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
                if let Err(error) = tcp.set_nodelay(true) {
                    tracing::debug!(%error, "TCP_NODELAY not set on an accepted connection");
                }
            });
        let server = axum::serve(listener, router).with_graceful_shutdown(drain);
        tokio::select! {
            result = server => result,
            // Connections still busy once the drain ended get a last
            // second, then are cut.
            () = async {
                if ended.await.is_ok() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                } else {
                    std::future::pending::<()>().await;
                }
            } => Ok(()),
        }
    }
}

async fn healthz(
    axum::extract::State(shared): axum::extract::State<Arc<Shared>>,
) -> (StatusCode, &'static str) {
    if shared.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining")
    } else {
        (StatusCode::OK, "ok")
    }
}

async fn metrics(
    axum::extract::State(shared): axum::extract::State<Arc<Shared>>,
) -> (StatusCode, String) {
    match shared.metrics.get() {
        Some(handle) => (StatusCode::OK, handle.render()),
        None => (StatusCode::NOT_FOUND, "metrics are not enabled".to_owned()),
    }
}
