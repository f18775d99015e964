//! [`RecoveryAction`]: which kind of change a recovery made to a request,
//! as reports, events and metrics name it.

use std::fmt;

/// The recoveries the policy may apply, for reports and hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecoveryAction {
    /// A smaller `max_tokens`.
    CutMaxTokens,
    /// A fallback model.
    FallbackModel,
    /// Fresh credentials.
    RefreshCredentials,
}

impl RecoveryAction {
    /// A short, fixed name for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            RecoveryAction::CutMaxTokens => "cut_max_tokens",
            RecoveryAction::FallbackModel => "fallback_model",
            RecoveryAction::RefreshCredentials => "refresh_credentials",
        }
    }
}

impl fmt::Display for RecoveryAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecoveryAction::CutMaxTokens => "max_tokens cut",
            RecoveryAction::FallbackModel => "fallback model",
            RecoveryAction::RefreshCredentials => "credential refresh",
        })
    }
}
