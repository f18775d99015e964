//! [`tower::retry::Policy`] for [`RetryPolicy`], so a plain
//! `tower::retry::RetryLayer::new(RetryPolicy::default())` works.
//!
//! A thin adapter over the same [`Account`] as
//! [`RetryLayer`](crate::RetryLayer): the same judgement, the same budget
//! spending, the same max_tokens cut and model fallback (applied to the
//! stored request), the same hooks, and a [`RetryReport`](crate::RetryReport)
//! on the final response (or a [`RetryError`] carrying it). What tower's
//! loop does not let it do:
//!
//! - read a failed response's body: it classifies on status and headers
//!   (provider error bodies and "try again in" phrases are read by
//!   `RetryLayer` only);
//! - refresh credentials asynchronously: tower sends the stored request
//!   before a hook's future could finish, so a hook that does not answer at
//!   once ends the request with [`StopReason::RecoveryFailed`];
//! - bound the attempt in flight by the deadline or by `attempt_timeout`
//!   (put a timeout layer under it, or under the gate so that the time
//!   queued there does not count);
//! - tag the first attempt: tower sends the caller's request itself, so a
//!   rate-limit gate below hears from the second attempt on, the
//!   [attempt header](crate::RetryPolicyBuilder::attempt_header) starts at
//!   the first resend, and a body that cannot be cloned is sent once
//!   without a report;
//! - report a failure of the service to become ready for a resend: tower
//!   returns that error as it is, without a report or `on_give_up`, and
//!   the resend it was readying is already counted.

use super::account::{fails_even_with_response, Account, Resend, Step};
use crate::budget::WaitPermit;
use crate::error::{BoxError, RetryError};
use crate::policy::{Outcome, RetryPolicy};
use crate::rate_limit::Head;
use crate::replay::ReplayBody;
use crate::report::StopReason;
use http::{HeaderMap, Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The wait between attempts under tower's retry layer.
#[derive(Debug)]
pub struct PolicySleep {
    sleep: Pin<Box<tokio::time::Sleep>>,
    /// A place among the shared budget's waiting retries, held while asleep.
    _permit: Option<WaitPermit>,
}

impl Future for PolicySleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.sleep.as_mut().poll(cx)
    }
}

impl<B> Resend<B> for Request<ReplayBody<B>> {
    fn body(&self) -> &ReplayBody<B> {
        Request::body(self)
    }

    fn set_body(&mut self, body: ReplayBody<B>) {
        *self.body_mut() = body;
    }

    fn headers_mut(&mut self) -> &mut HeaderMap {
        Request::headers_mut(self)
    }

    fn head(&self) -> Head<'_> {
        Head {
            uri: self.uri(),
            headers: self.headers(),
            extensions: self.extensions(),
        }
    }
}

impl<B, ResBody> tower::retry::Policy<Request<ReplayBody<B>>, Response<ResBody>, BoxError>
    for RetryPolicy
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: Into<BoxError>,
{
    type Future = PolicySleep;

    fn retry(
        &mut self,
        req: &mut Request<ReplayBody<B>>,
        result: &mut Result<Response<ResBody>, BoxError>,
    ) -> Option<PolicySleep> {
        // Out of the request while it is judged: a recovery rewrites it.
        let mut account = req.extensions_mut().remove::<Account>()?;
        let outcome = match result {
            Ok(res) => Outcome::Response {
                status: res.status(),
                headers: res.headers(),
                body: None,
            },
            Err(e) => Outcome::Error(&**e),
        };
        let sleep = match settle(&mut account, outcome, req) {
            Settled::Wait(delay, permit) => {
                account.record_resend();
                account.stamp_attempt(req.headers_mut());
                Some(PolicySleep {
                    sleep: Box::pin(tokio::time::sleep(delay)),
                    _permit: permit,
                })
            }
            Settled::Finish(None) => {
                if let Err(error) = result {
                    let source = std::mem::replace(error, Box::new(NoError));
                    let report = account.finish(crate::report::StopReason::Succeeded);
                    *error = Box::new(RetryError::new(report, Some(source)));
                }
                None
            }
            Settled::Finish(Some(report)) => {
                match result {
                    Ok(response) => match fails_even_with_response(&report) {
                        Some(error) => *result = Err(error),
                        None => {
                            response.extensions_mut().insert(report);
                        }
                    },
                    Err(error) => {
                        let source = std::mem::replace(error, Box::new(NoError));
                        *error = Box::new(RetryError::new(report, Some(source)));
                    }
                }
                None
            }
        };
        req.extensions_mut().insert(account);
        sleep
    }

    fn clone_request(&mut self, req: &Request<ReplayBody<B>>) -> Option<Request<ReplayBody<B>>> {
        let body = req.body().try_clone()?;
        let mut clone = Request::new(body);
        *clone.method_mut() = req.method().clone();
        *clone.uri_mut() = req.uri().clone();
        *clone.version_mut() = req.version();
        *clone.headers_mut() = req.headers().clone();
        *clone.extensions_mut() = req.extensions().clone();
        if clone.extensions().get::<Account>().is_none() {
            // The caller's request is the first send: open its account.
            let mut account =
                Account::open(self.clone(), req.method(), req.uri(), req.extensions());
            account.know_body(req.body().fill_ready());
            let link = account.ensure_link().clone();
            clone.extensions_mut().insert(link);
            clone.extensions_mut().insert(account);
        }
        Some(clone)
    }
}

/// A [`Step`] as tower's loop can carry it out: no credential future to
/// await between attempts.
// Every request ends with `Finish`: boxing the report would add an
// allocation to each one that has one to shrink the rarer variants.
#[allow(clippy::large_enum_variant)]
enum Settled {
    Wait(std::time::Duration, Option<WaitPermit>),
    /// `None`: served at the first attempt, nothing to report.
    Finish(Option<crate::RetryReport>),
}

/// Judges `outcome`; a credential refresh is applied when the hook answers
/// at once, and ends the request otherwise.
fn settle<B>(
    account: &mut Account,
    outcome: Outcome<'_>,
    req: &mut Request<ReplayBody<B>>,
) -> Settled {
    let (credentials, reason) = match account.judge(outcome, req, &mut None) {
        Step::Wait(delay, permit) => return Settled::Wait(delay, permit),
        Step::Served => return Settled::Finish(None),
        Step::Finish(report) => return Settled::Finish(Some(report)),
        Step::Refresh(credentials, reason) => (credentials, reason),
    };
    let stop = match answered_at_once(credentials) {
        Some(Ok(fresh)) => match account.apply_credentials(fresh, reason, req) {
            Ok(()) => return Settled::Wait(std::time::Duration::ZERO, None),
            Err(stop) => stop,
        },
        Some(Err(error)) => refresh_failed(error.to_string()),
        None => refresh_failed(
            "under tower's retry loop the hook must answer at once; use RetryLayer".to_owned(),
        ),
    };
    Settled::Finish(Some(account.finish(stop)))
}

fn refresh_failed(reason: String) -> StopReason {
    StopReason::RecoveryFailed {
        action: crate::policy::RecoveryAction::RefreshCredentials,
        reason,
    }
}

/// The credential hook's answer if it has one without waiting.
fn answered_at_once(
    mut credentials: crate::policy::CredentialsFuture,
) -> Option<Result<HeaderMap, BoxError>> {
    let waker = crate::noop_waker::noop_waker();
    match credentials.as_mut().poll(&mut Context::from_waker(&waker)) {
        Poll::Ready(answer) => Some(answer),
        Poll::Pending => None,
    }
}

/// A placeholder while an error is moved into the [`RetryError`] that wraps it.
#[derive(Debug)]
struct NoError;

impl std::fmt::Display for NoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no error")
    }
}

impl std::error::Error for NoError {}
