//! What a gateway built with this library tells its own clients when it
//! gives up, so that they do not multiply its retries.
//!
//! The official Anthropic and OpenAI SDKs retry 429, 529 and 5xx on their
//! own unless the answer carries `x-should-retry: false`, and they honour
//! `retry-after-ms` / `retry-after`. A gateway that already retried should
//! therefore mark its final failures: [`GiveUpHeadersLayer`] (over
//! [`RetryLayer`](crate::RetryLayer)) adds `x-should-retry: false` and, when
//! the upstream named a wait, that wait as `retry-after` (whole seconds,
//! rounded up) and `retry-after-ms`.

use crate::report::{RetryReport, StopReason};
use http::{HeaderMap, HeaderValue, Response};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tower::{Layer, Service};

/// Marks `headers` as a final answer when `report` says the retry loop gave up.
/// Successful reports leave the headers alone. Returns whether it marked them.
pub fn mark_give_up(report: &RetryReport, headers: &mut HeaderMap) -> bool {
    if report.stop == StopReason::Succeeded {
        return false;
    }
    headers.insert("x-should-retry", HeaderValue::from_static("false"));
    if let Some(wait) = report.last_server_wait {
        GiveUpHeadersLayer::set_wait_headers(headers, wait);
    }
    true
}

/// Applies [`mark_give_up`] to every response carrying a [`RetryReport`].
#[derive(Debug, Clone, Copy, Default)]
pub struct GiveUpHeadersLayer;

impl GiveUpHeadersLayer {
    /// The layer.
    pub const fn new() -> GiveUpHeadersLayer {
        GiveUpHeadersLayer
    }

    /// Writes a wait the way this layer does: `retry-after` in whole
    /// seconds (rounded up) and `retry-after-ms`, replacing any already
    /// there. For a server's own answers (a 503 while draining, say) that
    /// should tell clients when to come back as a give-up does.
    ///
    /// ```
    /// use llm_retry::downstream::GiveUpHeadersLayer;
    /// use std::time::Duration;
    ///
    /// let mut headers = http::HeaderMap::new();
    /// GiveUpHeadersLayer::set_wait_headers(&mut headers, Duration::from_millis(1_200));
    /// assert_eq!(headers["retry-after"], "2");
    /// assert_eq!(headers["retry-after-ms"], "1200");
    /// ```
    pub fn set_wait_headers(headers: &mut HeaderMap, wait: std::time::Duration) {
        let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        headers.insert("retry-after", HeaderValue::from(millis.div_ceil(1000)));
        headers.insert("retry-after-ms", HeaderValue::from(millis));
    }
}

impl<S> Layer<S> for GiveUpHeadersLayer {
    type Service = GiveUpHeaders<S>;

    fn layer(&self, inner: S) -> GiveUpHeaders<S> {
        GiveUpHeaders { inner }
    }
}

/// The service built by [`GiveUpHeadersLayer`].
#[derive(Debug, Clone)]
pub struct GiveUpHeaders<S> {
    inner: S,
}

impl<S, Req, B> Service<Req> for GiveUpHeaders<S>
where
    S: Service<Req, Response = Response<B>>,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = GiveUpHeadersFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        GiveUpHeadersFuture {
            inner: self.inner.call(request),
        }
    }
}

pin_project! {
    /// The future of [`GiveUpHeaders`].
    #[derive(Debug)]
    pub struct GiveUpHeadersFuture<F> {
        #[pin]
        inner: F,
    }
}

impl<F, B, E> Future for GiveUpHeadersFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut response = ready!(self.project().inner.poll(cx))?;
        if let Some(report) = response.extensions().get::<RetryReport>().cloned() {
            mark_give_up(&report, response.headers_mut());
        }
        Poll::Ready(Ok(response))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn report(stop: StopReason, wait: Option<Duration>) -> RetryReport {
        let mut report = RetryReport::new(stop);
        report.attempts = 1;
        report.last_server_wait = wait;
        report
    }

    #[test]
    fn give_ups_are_marked_final_with_the_named_wait_rounded_up() {
        let mut headers = HeaderMap::new();
        let stop = StopReason::RetriesExhausted { max_retries: 2 };
        assert!(mark_give_up(
            &report(stop, Some(Duration::from_millis(1_200))),
            &mut headers
        ));
        assert_eq!(headers["x-should-retry"], "false");
        assert_eq!(headers["retry-after"], "2");
        assert_eq!(headers["retry-after-ms"], "1200");
    }

    #[test]
    fn without_a_named_wait_no_retry_after_is_invented() {
        let mut headers = HeaderMap::new();
        assert!(mark_give_up(
            &report(StopReason::LeftToGateway, None),
            &mut headers
        ));
        assert_eq!(headers["x-should-retry"], "false");
        assert!(headers.get("retry-after").is_none());
    }

    #[test]
    fn successes_are_left_alone() {
        let mut headers = HeaderMap::new();
        assert!(!mark_give_up(
            &report(StopReason::Succeeded, None),
            &mut headers
        ));
        assert!(headers.is_empty());
    }
}
