//! [`RetryMiddleware`]: the library's engine as a reqwest-middleware
//! [`Middleware`].

use crate::attempt::NextAttempt;
use crate::convert::{self, EngineBody};
use crate::error;
use crate::last_uri::LastUri;
use http::Extensions;
use llm_retry::stream_guard::StreamGuardLayer;
use llm_retry::{BoxError, ClientLayer, RetryLayer, RetryPolicy, RetryReport};
use reqwest_middleware::{Middleware, Next};
use std::sync::Arc;
use tower::{Layer, ServiceExt};

/// Retries a reqwest client's LLM API calls with the llm-retry engine.
///
/// Each request goes through the same stack a tower client would use,
/// with the rest of the middleware chain (and finally the reqwest client)
/// as the service that sends each attempt:
///
/// - [`RetryMiddleware::default()`] and [`RetryMiddleware::new`] use
///   [`ClientLayer`]: retries with a shared budget, the rate-limit gate and
///   the stream guard;
/// - [`RetryMiddleware::retry_only`] uses a [`RetryLayer`] over the stream
///   guard, with no gate.
///
/// Build it once per client: every request through the client shares its
/// budget and gate.
///
/// A request body that reqwest cannot clone (a stream) is still sent at
/// once, and kept for a replay up to the policy's
/// [`max_replay_body`](RetryPolicy::max_replay_body); past that only its
/// retry is refused, and the report says why. A streamed response is
/// handed over once its first content arrived and is never replayed
/// after that, so `bytes_stream()` never yields a byte twice.
///
/// The final response carries the [`RetryReport`] in its
/// [`extensions`](reqwest::Response::extensions), and so do the
/// middleware extensions of the call. A request that ends without a
/// response fails with a [`reqwest_middleware::Error::Middleware`] holding
/// the [`RetryError`](llm_retry::RetryError): see [`retry_error`](crate::retry_error).
///
/// ```no_run
/// use llm_retry_reqwest::RetryMiddleware;
/// use reqwest_middleware::ClientBuilder;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::default())
///     .build();
/// let response = client
///     .post("https://api.anthropic.com/v1/messages")
///     .body(r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[]}"#)
///     .send()
///     .await?;
/// let attempts = llm_retry_reqwest::report(&response).map(|r| r.attempts);
/// # let _ = attempts;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RetryMiddleware {
    stack: Stack,
    /// Shared by clones, which share the budget and gate too.
    last_uri: Arc<LastUri>,
}

#[derive(Debug, Clone)]
enum Stack {
    Client(ClientLayer),
    RetryOnly {
        retry: RetryLayer,
        stream_guard: StreamGuardLayer,
    },
}

impl Default for RetryMiddleware {
    /// [`ClientLayer::default()`]: the recommended stack.
    fn default() -> Self {
        RetryMiddleware::from(ClientLayer::default())
    }
}

impl From<ClientLayer> for RetryMiddleware {
    /// The whole stack `layer` builds, gate and stream guard included.
    fn from(layer: ClientLayer) -> Self {
        RetryMiddleware {
            stack: Stack::Client(layer),
            last_uri: Arc::default(),
        }
    }
}

impl RetryMiddleware {
    /// [`ClientLayer::new`]`(policy)`: retries by `policy` over the
    /// learning rate-limit gate and the stream guard.
    pub fn new(policy: RetryPolicy) -> RetryMiddleware {
        RetryMiddleware::from(ClientLayer::new(policy))
    }

    /// Retries by `layer`'s policy over the default stream guard, with no
    /// rate-limit gate.
    pub fn retry_only(layer: RetryLayer) -> RetryMiddleware {
        RetryMiddleware {
            stack: Stack::RetryOnly {
                // The stack is made for each request, and nothing below
                // it in this crate is a gate.
                retry: layer.no_gate_below(),
                stream_guard: StreamGuardLayer::new(),
            },
            last_uri: Arc::default(),
        }
    }

    /// The retry policy.
    pub fn policy(&self) -> &RetryPolicy {
        match &self.stack {
            Stack::Client(layer) => layer.policy(),
            Stack::RetryOnly { retry, .. } => retry.policy(),
        }
    }
}

#[async_trait::async_trait]
impl Middleware for RetryMiddleware {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let (request, origin) = convert::to_http(request, &self.last_uri)
            .map_err(reqwest_middleware::Error::middleware)?;
        let attempt = NextAttempt::new(next, origin, extensions.clone());
        let result = match &self.stack {
            Stack::Client(layer) => finish(layer.layer(attempt.clone()).oneshot(request).await),
            Stack::RetryOnly {
                retry,
                stream_guard,
            } => finish(
                retry
                    .layer(stream_guard.layer(attempt.clone()))
                    .oneshot(request)
                    .await,
            ),
        };
        if let Some(last) = attempt.take_last_extensions() {
            *extensions = last;
        }
        let report = match &result {
            Ok(response) => response.extensions().get::<RetryReport>(),
            Err(error) => error::retry_error(error).map(llm_retry::RetryError::report),
        };
        if let Some(report) = report {
            extensions.insert(report.clone());
        }
        result
    }
}

/// The engine's answer as reqwest-middleware's.
fn finish(
    result: Result<http::Response<EngineBody>, BoxError>,
) -> reqwest_middleware::Result<reqwest::Response> {
    result
        .map(convert::to_reqwest_response)
        .map_err(error::from_engine)
}
