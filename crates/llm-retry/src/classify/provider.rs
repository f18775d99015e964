//! Provider error bodies: Anthropic's and OpenAI's JSON envelopes.

/// The error object a provider put in its response body.
///
/// Anthropic: `{"type":"error","error":{"type":"overloaded_error","message":"…"}}`.
/// OpenAI: `{"error":{"message":"…","type":"insufficient_quota","code":"insufficient_quota"}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProviderError {
    /// `error.type` (e.g. `overloaded_error`, `rate_limit_error`, `invalid_request_error`).
    pub kind: Option<String>,
    /// `error.code` (OpenAI; e.g. `insufficient_quota`, `context_length_exceeded`).
    pub code: Option<String>,
    /// `error.message`, as sent.
    pub message: Option<String>,
}

/// Token counts read from a context-overflow message, when the provider gave them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ContextOverflow {
    /// Tokens in the prompt.
    pub input_tokens: Option<u64>,
    /// The `max_tokens` that was requested.
    pub max_tokens: Option<u64>,
    /// The model's context window.
    pub context_limit: Option<u64>,
}

impl ProviderError {
    /// Parses a provider error envelope; `None` when the body is not one.
    pub fn parse(_body: &[u8]) -> Option<ProviderError> {
        None
    }
}
