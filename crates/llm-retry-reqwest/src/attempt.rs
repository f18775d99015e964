//! [`NextAttempt`]: one attempt, as a tower service over the rest of the
//! middleware chain.

use crate::convert::{self, AttemptBody, Origin};
use http::Extensions;
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
/// ran last is kept, for the caller to receive at the end.
#[derive(Clone)]
pub(crate) struct NextAttempt<'a> {
    next: Next<'a>,
    shared: Arc<Shared>,
}

/// What every attempt of one request shares: one allocation per request.
struct Shared {
    origin: Origin,
    extensions: Extensions,
    last: Mutex<Option<Extensions>>,
}

impl<'a> NextAttempt<'a> {
    pub(crate) fn new(next: Next<'a>, origin: Origin, extensions: Extensions) -> NextAttempt<'a> {
        NextAttempt {
            next,
            shared: Arc::new(Shared {
                origin,
                extensions,
                last: Mutex::new(None),
            }),
        }
    }

    /// The extensions of the attempt that ran last, if any ran.
    pub(crate) fn take_last_extensions(&self) -> Option<Extensions> {
        self.shared
            .last
            .lock()
            .map(|mut last| last.take())
            .unwrap_or(None)
    }
}

impl<'a> Service<http::Request<AttemptBody>> for NextAttempt<'a> {
    type Response = http::Response<reqwest::Body>;
    type Error = reqwest_middleware::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'a>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The chain below has no readiness of its own: `Next::run` takes
        // every request it is given.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<AttemptBody>) -> Self::Future {
        let next = self.next.clone();
        let shared = Arc::clone(&self.shared);
        let request = convert::to_reqwest(request, &shared.origin);
        Box::pin(async move {
            let mut extensions = shared.extensions.clone();
            let result = next.run(request?, &mut extensions).await;
            if let Ok(mut last) = shared.last.lock() {
                *last = Some(extensions);
            }
            result.map(convert::from_reqwest)
        })
    }
}
