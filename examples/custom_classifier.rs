//! A layer of your own that fails attempts with its own error type, read
//! by the retry policy through `classify::Reported`: here a client-side
//! circuit breaker whose "open" error is a retryable overload, and whose
//! "tripped for good" error is final.
//!
//! ```text
//! cargo run --example custom_classifier
//! ```

use bytes::Bytes;
use http_body_util::Full;
use llm_retry::classify::{Classification, FatalKind, Reported, RetryableKind};
use llm_retry::{BoxError, ReplayBody, RetryError, RetryLayer, RetryPolicy, RetryReport};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::{Layer, ServiceExt};

/// The breaker's verdict on a send.
#[derive(Debug)]
enum Breaker {
    /// Open for a moment: try again soon.
    Open,
    /// Tripped for good: stop.
    Tripped,
}

impl fmt::Display for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Breaker::Open => "circuit open",
            Breaker::Tripped => "circuit tripped",
        })
    }
}

impl std::error::Error for Breaker {}

/// What the error means for a retry. It never reached the upstream, so it
/// is not counted as a send.
impl Reported for Breaker {
    fn classification(&self) -> Classification {
        match self {
            Breaker::Open => Classification::Retryable(RetryableKind::Overloaded),
            Breaker::Tripped => Classification::Fatal(FatalKind::LocalRateLimit),
        }
    }

    fn named_wait(&self) -> Option<Duration> {
        matches!(self, Breaker::Open).then_some(Duration::from_millis(100))
    }

    fn reached_upstream(&self) -> bool {
        false
    }
}

type Request = http::Request<ReplayBody<Full<Bytes>>>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    // An in-process "client" behind the breaker: open twice, then it lets
    // the call through; a second request finds it tripped.
    let calls = Arc::new(AtomicUsize::new(0));
    let service = {
        let calls = Arc::clone(&calls);
        tower::service_fn(move |_: Request| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                match n {
                    0 | 1 => Err(BoxError::from(Breaker::Open)),
                    2 => Ok(http::Response::new(Full::new(Bytes::from_static(b"{}")))),
                    _ => Err(BoxError::from(Breaker::Tripped)),
                }
            }
        })
    };
    let policy = RetryPolicy::builder().recognise::<Breaker>().build()?;
    let service = RetryLayer::new(policy).layer(service);
    let request =
        || http::Request::post("http://llm.test/v1/messages").body(Full::new(Bytes::new()));

    let response = service.clone().oneshot(request()?).await?;
    let report = response
        .extensions()
        .get::<RetryReport>()
        .ok_or("a report")?;
    println!("first request: {report}");
    assert_eq!(report.attempts, 1, "the breaker's refusals are not sends");
    assert_eq!(
        report.server_waits_honoured, 2,
        "its 100 ms waits were honoured"
    );

    let error = match service.oneshot(request()?).await {
        Ok(_) => return Err("the tripped breaker must stop the request".into()),
        Err(error) => error,
    };
    let error = error
        .downcast::<RetryError>()
        .map_err(|_| "one RetryError")?;
    println!("second request: {error}");
    assert!(error.stop().is_not_retryable());
    Ok(())
}
