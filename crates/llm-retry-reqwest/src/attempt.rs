//! [`NextAttempt`]: one attempt, as a tower service over the rest of the
//! middleware chain.

use crate::convert;
use bytes::Bytes;
use http::Extensions;
use http_body::Body;
use reqwest_middleware::Next;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tower::Service;

/// Sends each attempt down the rest of the reqwest-middleware chain.
///
/// The retry engine above it may clone it and call it once per attempt.
/// Each attempt gets its own copy of the caller's middleware extensions
/// (the chain below may write into them), and the copy of the attempt that
/// ran last is kept in `last`, for the caller to receive at the end.
#[derive(Clone)]
pub(crate) struct NextAttempt<'a> {
    next: Next<'a>,
    extensions: Arc<Extensions>,
    last: Arc<Mutex<Option<Extensions>>>,
}

impl<'a> NextAttempt<'a> {
    pub(crate) fn new(next: Next<'a>, extensions: Extensions) -> NextAttempt<'a> {
        NextAttempt {
            next,
            extensions: Arc::new(extensions),
            last: Arc::new(Mutex::new(None)),
        }
    }

    /// The extensions of the attempt that ran last, if any ran.
    pub(crate) fn take_last_extensions(&self) -> Option<Extensions> {
        self.last.lock().map(|mut last| last.take()).unwrap_or(None)
    }
}

impl<'a, B> Service<http::Request<B>> for NextAttempt<'a>
where
    B: Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<reqwest::Body>;
    type Error = reqwest_middleware::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'a>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The chain below has no readiness of its own: `Next::run` takes
        // every request it is given.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let next = self.next.clone();
        let mut extensions = Extensions::clone(&self.extensions);
        let last = Arc::clone(&self.last);
        Box::pin(async move {
            let request = convert::to_reqwest(request)?;
            let result = next.run(request, &mut extensions).await;
            if let Ok(mut slot) = last.lock() {
                *slot = Some(extensions);
            }
            result.map(convert::from_reqwest)
        })
    }
}
