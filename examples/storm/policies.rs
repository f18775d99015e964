//! The policies under test: which rows the report has, what each is called,
//! and how the report describes it.

use crate::config::Config;
use crate::models::Model;
use crate::stacks::Stack;

/// A client-side retry behaviour under test: the real middleware in one
/// of its configurations, or a model of another client's retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Policy {
    Middleware(Stack),
    Model(Model),
}

impl Policy {
    /// Every row, in report order.
    pub(crate) const ALL: [Policy; 6] = [
        Policy::Middleware(Stack::Defaults),
        Policy::Middleware(Stack::RetryOnly),
        Policy::Middleware(Stack::KnownQuota),
        Policy::Model(Model::Naive),
        Policy::Model(Model::Sdk),
        Policy::Model(Model::NoRetry),
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Policy::Middleware(Stack::Defaults) => "llm-retry defaults",
            Policy::Middleware(Stack::RetryOnly) => "RetryLayer alone",
            Policy::Middleware(Stack::KnownQuota) => "llm-retry + known quota",
            Policy::Model(Model::Naive) => "naive backoff (model)",
            Policy::Model(Model::Sdk) => "official SDKs (model)",
            Policy::Model(Model::NoRetry) => "no retries",
        }
    }

    /// The row's colour in the SVG.
    pub(crate) fn color(self) -> &'static str {
        match self {
            Policy::Middleware(Stack::Defaults) => "#2f855a",
            Policy::Middleware(Stack::RetryOnly) => "#2b6cb0",
            Policy::Middleware(Stack::KnownQuota) => "#b83280",
            Policy::Model(Model::Naive) => "#c05621",
            Policy::Model(Model::Sdk) => "#6b46c1",
            Policy::Model(Model::NoRetry) => "#718096",
        }
    }

    /// One markdown paragraph: what the row runs.
    pub(crate) fn describe(self, config: &Config) -> String {
        let label = self.label();
        match self {
            Policy::Middleware(stack) => format!("**{label}**: {}", stack.describe(config)),
            Policy::Model(Model::Naive) => format!(
                "**{label}** of reqwest-retry's default \
                 (`ExponentialBackoff::builder().build_with_max_retries(3)`): 3 retries of \
                 408/429/5xx and transport errors after `U(0,1) × 1 s × 2ⁿ`; `Retry-After` is \
                 never read."
            ),
            Policy::Model(Model::Sdk) => format!(
                "**{label}**, Anthropic's and OpenAI's defaults: 2 retries of 408/409/429/5xx \
                 and transport errors (`x-should-retry` overrides), after the server's \
                 `retry-after-ms` / `Retry-After` when it is in (0, 60] s, else \
                 `min(0.5 s · 2ⁿ, 8 s) × U(0.75, 1]`."
            ),
            Policy::Model(Model::NoRetry) => format!("**{label}**: one send per request."),
        }
    }
}
