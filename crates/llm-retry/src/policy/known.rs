//! The error types the policy reads by their own classification: its
//! layers' errors, and the timers' `Elapsed` errors of tokio and tower
//! (a timeout layer under the retry layer), which `classify` does not know.

use crate::classify::{recognise, Classification, Recognise, Reported, RetryableKind};
use crate::rate_limit::GateError;
use crate::stream_guard::{PreContentError, StreamInterrupted};

/// Every error type read by its [`Reported`] classification by default.
pub(super) const LAYER_ERRORS: [Recognise; 5] = [
    recognise::<PreContentError>,
    recognise::<StreamInterrupted>,
    recognise::<GateError>,
    recognise::<tokio::time::error::Elapsed>,
    recognise::<tower::timeout::error::Elapsed>,
];

/// A timer ran out before the answer: a timeout, whatever its text says.
impl Reported for tokio::time::error::Elapsed {
    fn classification(&self) -> Classification {
        Classification::Retryable(RetryableKind::Timeout)
    }
}

/// `tower::timeout::TimeoutLayer` cut the attempt: a timeout.
impl Reported for tower::timeout::error::Elapsed {
    fn classification(&self) -> Classification {
        Classification::Retryable(RetryableKind::Timeout)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::classify::{Classification, RetryableKind};
    use crate::policy::{Outcome, RetryPolicy, RetryState};
    use crate::BoxError;
    use std::time::Duration;

    #[derive(Debug)]
    struct Wrap(BoxError);

    impl std::fmt::Display for Wrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("layer")
        }
    }

    impl std::error::Error for Wrap {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&*self.0)
        }
    }

    async fn tokio_elapsed() -> tokio::time::error::Elapsed {
        match tokio::time::timeout(Duration::ZERO, std::future::pending::<()>()).await {
            Err(elapsed) => elapsed,
            Ok(()) => unreachable!("a pending future cannot finish"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn timer_errors_are_timeouts_wherever_they_sit_in_the_chain() {
        let cases: Vec<BoxError> = vec![
            Box::new(tokio_elapsed().await),
            Box::new(Wrap(Box::new(tokio_elapsed().await))),
            Box::new(std::io::Error::other(tokio_elapsed().await)),
            Box::new(tower::timeout::error::Elapsed::new()),
            Box::new(Wrap(Box::new(tower::timeout::error::Elapsed::new()))),
        ];
        let policy = RetryPolicy::default();
        for error in cases {
            let judged = policy.judge(&RetryState::new(), Outcome::Error(&*error), Duration::ZERO);
            assert_eq!(
                judged.class,
                Classification::Retryable(RetryableKind::Timeout),
                "{error}"
            );
        }
    }
}
