//! Applying a [`Recovery`] to the next attempt: body rewrites and fresh
//! credentials. No credential value is ever logged or passed to a hook.

use super::attempt::{AttemptCtx, Step};
use crate::classify::Classification;
use crate::hooks::RecoveryEvent;
use crate::policy::{Recovery, RecoveryAction};
use crate::recover::{rewrite_body, BodyEdit};
use crate::report::StopReason;
use http::{header, HeaderMap, StatusCode};
use std::time::Duration;

impl<B> AttemptCtx<B> {
    /// Starts a recovery decided by the policy.
    pub(super) fn recover(
        &mut self,
        recovery: Recovery,
        class: &Classification,
        status: Option<StatusCode>,
    ) -> Step {
        self.state.record_recovery(&recovery);
        let reason = match status {
            Some(status) => format!("{class:?} on status {}", status.as_u16()),
            None => format!("{class:?}"),
        };
        match recovery {
            Recovery::CutMaxTokens { to } => self.rewrite(
                BodyEdit::MaxTokens(to),
                RecoveryAction::CutMaxTokens,
                reason,
            ),
            Recovery::FallbackModel { model } => self.rewrite(
                BodyEdit::Model(model),
                RecoveryAction::FallbackModel,
                reason,
            ),
            Recovery::RefreshCredentials => {
                let Some(hook) = self.policy.credentials().cloned() else {
                    return self
                        .recovery_failed(RecoveryAction::RefreshCredentials, "no hook".into());
                };
                self.announce(RecoveryEvent {
                    action: RecoveryAction::RefreshCredentials,
                    reason,
                    old: None,
                    new: None,
                });
                if let Err(stop) = self.policy.spend_budget(Duration::ZERO) {
                    return Step::Finish(self.finish(stop));
                }
                hook.clear_token_cache();
                Step::Refresh(hook.refresh())
            }
        }
    }

    /// Rewrites the request body for every later attempt and resends at once.
    fn rewrite(&mut self, edit: BodyEdit, action: RecoveryAction, reason: String) -> Step {
        let Some(body) = self.template.buffered() else {
            let why = "the request body was not fully buffered".to_owned();
            return self.recovery_failed(action, why);
        };
        let (rewritten, applied) = match rewrite_body(&body, &edit) {
            Ok(done) => done,
            Err(error) => return self.recovery_failed(action, error.to_string()),
        };
        self.template = self.template.replaced_with(rewritten);
        // The length changed; the client derives the new one from the body.
        self.parts.headers.remove(header::CONTENT_LENGTH);
        self.announce(RecoveryEvent {
            action,
            reason,
            old: Some(applied.old),
            new: Some(applied.new),
        });
        if let Err(stop) = self
            .prepare_next()
            .and_then(|()| self.policy.spend_budget(Duration::ZERO))
        {
            self.next = None;
            return Step::Finish(self.finish(stop));
        }
        Step::Wait(Duration::ZERO, None)
    }

    /// Puts fresh credentials on every later attempt.
    pub(super) fn apply_credentials(&mut self, fresh: HeaderMap) -> Result<(), StopReason> {
        for name in fresh.keys() {
            self.parts.headers.remove(name);
        }
        for (name, value) in &fresh {
            let mut value = value.clone();
            value.set_sensitive(true);
            self.parts.headers.append(name.clone(), value);
        }
        tracing::info!(headers = fresh.len(), "llm-retry: credentials refreshed");
        self.prepare_next()
    }

    /// Ends the request because a recovery could not be applied.
    pub(super) fn recovery_failed(&self, action: RecoveryAction, reason: String) -> Step {
        Step::Finish(self.finish(StopReason::RecoveryFailed { action, reason }))
    }

    fn announce(&self, event: RecoveryEvent) {
        tracing::warn!(
            action = %event.action,
            reason = %event.reason,
            old = event.old.as_deref(),
            new = event.new.as_deref(),
            "llm-retry: recovering"
        );
        crate::observe::recovery(event.action);
        self.hooks.0.on_recover(&event);
    }
}
