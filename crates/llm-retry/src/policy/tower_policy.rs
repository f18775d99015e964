//! [`tower::retry::Policy`] for [`RetryPolicy`], so a plain
//! `tower::retry::RetryLayer::new(RetryPolicy::default())` works.
//!
//! tower's policy sees the response but cannot read its body, so this path
//! classifies on status and headers alone (provider error bodies and body
//! phrases are read by [`RetryLayer`](crate::RetryLayer) only), and a
//! decision to recover (rewrite the body, refresh credentials) ends the
//! loop here instead: those need the layer. Shared budgets and their
//! admission limit apply on both paths. The per-request account travels in
//! the stored request clone's extensions.

use super::{Decision, Outcome, RetryPolicy, RetryState};
use crate::error::BoxError;
use crate::rate_limit::link::GateLink;
use crate::replay::ReplayBody;
use http::{Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The wait between attempts under tower's retry layer.
#[derive(Debug)]
pub struct PolicySleep {
    sleep: Pin<Box<tokio::time::Sleep>>,
    /// A place among the shared budget's waiting retries, held while asleep.
    _permit: Option<crate::budget::WaitPermit>,
}

impl Future for PolicySleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.sleep.as_mut().poll(cx)
    }
}

impl<B, ResBody> tower::retry::Policy<Request<ReplayBody<B>>, Response<ResBody>, BoxError>
    for RetryPolicy
{
    type Future = PolicySleep;

    fn retry(
        &mut self,
        req: &mut Request<ReplayBody<B>>,
        result: &mut Result<Response<ResBody>, BoxError>,
    ) -> Option<PolicySleep> {
        let status = result.as_ref().ok().map(|r| r.status());
        let sent = req
            .extensions()
            .get::<GateLink>()
            .and_then(GateLink::take_sent);
        let limit = self.limits().max_server_wait;
        let decision = {
            let state = req.extensions_mut().get_mut::<RetryState>()?;
            state.set_gate_paced(sent.as_ref().is_some_and(|sent| sent.paced()));
            let outcome = match result {
                Ok(res) => Outcome::Response {
                    status: res.status(),
                    headers: res.headers(),
                    body: None,
                },
                Err(e) => Outcome::Error(&**e),
            };
            let judgement = self.judge(state, outcome, state.elapsed());
            if let Some(sent) = sent {
                sent.report(judgement.key, tokio::time::Instant::now(), limit);
            }
            state.record_outcome(status, &judgement);
            judgement.decision
        };
        let Decision::Retry {
            delay,
            server_wait,
            charged,
            ..
        } = decision
        else {
            return None;
        };
        if req.body().is_capped() {
            return None;
        }
        let permit = if charged {
            self.spend_budget(delay).ok()?
        } else {
            None
        };
        let state = req.extensions_mut().get_mut::<RetryState>()?;
        state.record_wait(delay, server_wait.is_some());
        state.record_send();
        tracing::info!(
            retry = state.attempts() - 1,
            delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            status = status.map(|s| s.as_u16()),
            "llm-retry: retrying"
        );
        Some(PolicySleep {
            sleep: Box::pin(tokio::time::sleep(delay)),
            _permit: permit,
        })
    }

    fn clone_request(&mut self, req: &Request<ReplayBody<B>>) -> Option<Request<ReplayBody<B>>> {
        let body = req.body().try_clone()?;
        let mut clone = Request::new(body);
        *clone.method_mut() = req.method().clone();
        *clone.uri_mut() = req.uri().clone();
        *clone.version_mut() = req.version();
        *clone.headers_mut() = req.headers().clone();
        *clone.extensions_mut() = req.extensions().clone();
        if clone.extensions().get::<RetryState>().is_none() {
            if let Some(budget) = self.budget() {
                budget.deposit();
            }
            let mut state = RetryState::new();
            state.record_send();
            clone.extensions_mut().insert(state);
            let limits = self.limits();
            let deadline = tokio::time::Instant::now().checked_add(limits.max_elapsed);
            clone
                .extensions_mut()
                .insert(GateLink::new(limits, deadline));
        }
        Some(clone)
    }
}
