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

/// The last attempt's own [`reqwest::Error`], if the request ended with
/// one: what `is_timeout()`, `is_connect()`, `status()` and `url()` are
/// asked of. The middleware's error is the [`RetryError`] (see
/// [`retry_error`]); this walks its chain to reqwest's.
///
/// ```
/// # fn show(error: &reqwest_middleware::Error) {
/// if llm_retry_reqwest::reqwest_error(error).is_some_and(reqwest::Error::is_timeout) {
///     eprintln!("the last attempt timed out");
/// }
/// # }
/// ```
pub fn reqwest_error(error: &reqwest_middleware::Error) -> Option<&reqwest::Error> {
    let mut link: Option<&(dyn std::error::Error + 'static)> = match error {
        reqwest_middleware::Error::Reqwest(error) => return Some(error),
        reqwest_middleware::Error::Middleware(error) => Some(error.as_ref()),
    };
    // Bounded: an error chain is short, but a cyclic one must not spin.
    for _ in 0..32 {
        let current = link?;
        if let Some(found) = current.downcast_ref::<reqwest::Error>() {
            return Some(found);
        }
        if let Some(reqwest_middleware::Error::Reqwest(found)) =
            current.downcast_ref::<reqwest_middleware::Error>()
        {
            return Some(found);
        }
        link = current.source();
    }
    None
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
