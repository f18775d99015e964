//! How the engine's errors reach reqwest-middleware callers.

use llm_retry::{BoxError, RetryError, RetryReport};
use std::fmt;

/// The [`RetryError`] a request through [`RetryMiddleware`](crate::RetryMiddleware)
/// ended with, if `error` is one.
///
/// ```
/// # fn show(error: &reqwest_middleware::Error) {
/// if let Some(retry) = llm_retry_reqwest::retry_error(error) {
///     eprintln!("gave up after {} sends: {retry}", retry.report().attempts);
/// }
/// # }
/// ```
pub fn retry_error(error: &reqwest_middleware::Error) -> Option<&RetryError> {
    match error {
        reqwest_middleware::Error::Middleware(error) => error.downcast_ref::<RetryError>(),
        reqwest_middleware::Error::Reqwest(_) => None,
    }
}

/// The [`RetryReport`] a response through
/// [`RetryMiddleware`](crate::RetryMiddleware) carries.
pub fn report(response: &reqwest::Response) -> Option<&RetryReport> {
    response.extensions().get::<RetryReport>()
}

/// The engine's error as a reqwest-middleware error: the [`RetryError`]
/// itself, which every stop of the retry loop produces.
pub(crate) fn from_engine(error: BoxError) -> reqwest_middleware::Error {
    match error.downcast::<RetryError>() {
        Ok(retry) => reqwest_middleware::Error::middleware(*retry),
        Err(other) => reqwest_middleware::Error::middleware(Unexpected(other)),
    }
}

/// An engine error that is not a [`RetryError`]: not produced by the
/// library's stacks, kept whole rather than lost.
#[derive(Debug)]
struct Unexpected(BoxError);

impl fmt::Display for Unexpected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Unexpected {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}
