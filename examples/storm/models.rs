//! Models of other clients' retries, driven over the same connection pool
//! as the middleware: reqwest-retry's default, the official SDKs' default,
//! and no retries at all.

use crate::upstream::{request, UpstreamClient};
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;
use rand::rngs::SmallRng;
use rand::Rng;
use std::time::Duration;
use tower::ServiceExt;

/// A modelled client retry policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Model {
    /// reqwest-retry's `ExponentialBackoff::builder().build_with_max_retries(3)`.
    Naive,
    /// The Anthropic and OpenAI SDKs' defaults.
    Sdk,
    /// One send per logical request.
    NoRetry,
}

/// The final outcome of one logical request.
pub(crate) struct Outcome {
    pub(crate) ok: bool,
    /// `200`, `429 after 3 sends`, `transport error`…: for the breakdown.
    pub(crate) why: String,
}

/// What one upstream send came back with.
enum Attempt {
    Success,
    Status {
        status: StatusCode,
        headers: HeaderMap,
    },
    Transport,
}

/// Sends one attempt through `client` and reads the whole body.
async fn send_once(
    client: &UpstreamClient,
    url: &str,
    (id, draw): (u64, u64),
    model: Option<&str>,
) -> Attempt {
    let Ok(request) = request(url, id, draw, model) else {
        return Attempt::Transport;
    };
    match client.clone().oneshot(request).await {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            match body.collect().await {
                Ok(_) if parts.status.is_success() => Attempt::Success,
                Ok(_) => Attempt::Status {
                    status: parts.status,
                    headers: parts.headers,
                },
                Err(_) => Attempt::Transport,
            }
        }
        Err(_) => Attempt::Transport,
    }
}

/// The server-named wait as the SDKs read it: `retry-after-ms`, else
/// `Retry-After` in (fractional) seconds.
fn sdk_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| -> Option<f64> {
        headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
    };
    let secs = number("retry-after-ms")
        .map(|ms| ms / 1000.0)
        .or_else(|| number("retry-after"))?;
    (secs > 0.0 && secs <= 60.0).then(|| Duration::from_secs_f64(secs))
}

impl Model {
    fn max_retries(self) -> u32 {
        match self {
            Model::Naive => 3,
            Model::Sdk => 2,
            Model::NoRetry => 0,
        }
    }

    fn retryable(self, status: StatusCode, headers: &HeaderMap) -> bool {
        let code = status.as_u16();
        match self {
            // reqwest-retry's DefaultRetryableStrategy.
            Model::Naive => code == 408 || code == 429 || status.is_server_error(),
            // The SDKs' _should_retry.
            Model::Sdk => match headers.get("x-should-retry").map(|v| v.as_bytes()) {
                Some(b"true") => true,
                Some(b"false") => false,
                _ => matches!(code, 408 | 409 | 429) || code >= 500,
            },
            Model::NoRetry => false,
        }
    }

    /// The sleep before retry number `retries + 1`.
    fn delay(self, retries: u32, hint: Option<Duration>, rng: &mut SmallRng) -> Duration {
        match self {
            // ExponentialBackoff: min(1 s × 2ⁿ, 30 min) × U(0, 1).
            Model::Naive => {
                let base =
                    Duration::from_secs(1u64 << retries.min(10)).min(Duration::from_secs(1800));
                base.mul_f64(rng.random::<f64>())
            }
            Model::Sdk => hint.unwrap_or_else(|| {
                let base = (0.5 * 2f64.powi(retries as i32)).min(8.0);
                Duration::from_secs_f64(base * (1.0 - 0.25 * rng.random::<f64>()))
            }),
            Model::NoRetry => Duration::ZERO,
        }
    }

    /// Runs one logical request under this model; its body names `model`
    /// if given.
    pub(crate) async fn run(
        self,
        client: &UpstreamClient,
        url: &str,
        id: (u64, u64),
        model: Option<&str>,
        rng: &mut SmallRng,
    ) -> Outcome {
        let mut retries: u32 = 0;
        loop {
            let attempt = send_once(client, url, id, model).await;
            let sends = retries + 1;
            let (retryable, hint, why) = match &attempt {
                Attempt::Success => {
                    return Outcome {
                        ok: true,
                        why: "200".to_owned(),
                    }
                }
                Attempt::Status { status, headers } => {
                    let hint = match self {
                        Model::Sdk => sdk_retry_after(headers),
                        _ => None,
                    };
                    let why = status.as_u16().to_string();
                    (self.retryable(*status, headers), hint, why)
                }
                Attempt::Transport => (true, None, "transport error".to_owned()),
            };
            if !retryable || retries >= self.max_retries() {
                let why = if sends == 1 {
                    why
                } else {
                    format!("{why} after {sends} sends")
                };
                return Outcome { ok: false, why };
            }
            tokio::time::sleep(self.delay(retries, hint, rng)).await;
            retries += 1;
        }
    }
}
