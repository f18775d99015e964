//! Errors that say for themselves what they mean for a retry.
//!
//! A layer between the retry loop and the network (the stream guard, the
//! rate-limit gate) fails an attempt with an error of its own type. Instead
//! of `classify` knowing those types, each implements [`Reported`], and the
//! caller names the types it knows as [`Recognise`] functions; [`find`]
//! walks the error's `source()` chain once and returns the outermost link
//! that one of them recognises.

use super::{Classification, ProviderError};
use http::{HeaderMap, StatusCode};
use std::error::Error;
use std::time::Duration;

/// An attempt's failure that knows its own classification.
///
/// Implemented by the library's own layer errors; implement it for a layer
/// of yours and register it with
/// [`RetryPolicyBuilder::recognise`](crate::RetryPolicyBuilder::recognise).
pub trait Reported: Error + 'static {
    /// How the retry policy should see this failure.
    fn classification(&self) -> Classification;

    /// The provider error the failure carried (a stream's error event), if any.
    fn provider_error(&self) -> Option<&ProviderError> {
        None
    }

    /// The head of the response that carried the failure, when a response
    /// arrived (a `200` stream whose first event is an error). Its headers
    /// count as on any failed response: `x-should-retry` beats the
    /// classification, and the waits it names are honoured.
    fn response_head(&self) -> Option<(StatusCode, &HeaderMap)> {
        None
    }

    /// A wait the failure itself names, beside any in the head: the gate's
    /// hold on the key that refused a send.
    fn named_wait(&self) -> Option<Duration> {
        None
    }

    /// Whether the attempt reached the upstream. A send refused locally
    /// before it left (`false`) is not counted as a send.
    fn reached_upstream(&self) -> bool {
        true
    }

    /// Whether the provider may have executed the request before the
    /// failure, though it reports a rejection: a stream whose error event
    /// came after the answer had begun. Such a failure is never a
    /// rejection a failover acts on.
    fn may_have_executed(&self) -> bool {
        false
    }
}

/// Recognises one [`Reported`] type on a link of an error chain.
pub(crate) type Recognise = for<'a> fn(&'a (dyn Error + 'static)) -> Option<&'a dyn Reported>;

/// The [`Recognise`] function for the type `T`.
pub(crate) fn recognise<'a, T: Reported>(
    link: &'a (dyn Error + 'static),
) -> Option<&'a dyn Reported> {
    link.downcast_ref::<T>().map(|t| t as &dyn Reported)
}

/// The outermost link of `error`'s chain that one of `known` recognises.
pub(crate) fn find<'a>(
    error: &'a (dyn Error + 'static),
    known: &[Recognise],
) -> Option<&'a dyn Reported> {
    if known.is_empty() {
        return None;
    }
    super::transport::chain(error).find_map(|link| known.iter().find_map(|r| r(link)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::RetryableKind;
    use std::fmt;

    /// A layer error that says only how it classifies.
    #[derive(Debug)]
    struct Throttled;

    impl fmt::Display for Throttled {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("throttled by a layer")
        }
    }

    impl Error for Throttled {}

    impl Reported for Throttled {
        fn classification(&self) -> Classification {
            Classification::Retryable(RetryableKind::RateLimited)
        }
    }

    /// Wraps an error as its source, as layers above it do.
    #[derive(Debug)]
    struct Outer(Throttled);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("outer")
        }
    }

    impl Error for Outer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn an_error_that_says_only_its_classification_claims_nothing_else() {
        let error = Outer(Throttled);
        let found = find(&error, &[recognise::<Throttled>]).expect("found on the chain");
        assert_eq!(
            found.classification(),
            Classification::Retryable(RetryableKind::RateLimited)
        );
        assert!(found.provider_error().is_none());
        assert!(found.response_head().is_none());
        assert_eq!(found.named_wait(), None);
        assert!(found.reached_upstream());
        assert!(!found.may_have_executed());
        assert!(find(&error, &[]).is_none());
    }
}
