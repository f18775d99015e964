//! Provider error bodies: Anthropic's and OpenAI's JSON envelopes.

use serde_json::Value;
use std::fmt;

/// The error object a provider put in its response body.
///
/// Anthropic: `{"type":"error","error":{"type":"overloaded_error","message":"…"}}`.
/// OpenAI: `{"error":{"message":"…","type":"insufficient_quota","code":"insufficient_quota"}}`.
/// OpenAI-compatible gateways: `{"error":"rate limited"}` (a message only).
///
/// `Display` prints the kind (or the code) only, never the message, which can
/// be long; read it through [`ProviderError::message`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProviderError {
    /// `error.type` (e.g. `overloaded_error`, `rate_limit_error`, `invalid_request_error`).
    pub kind: Option<String>,
    /// `error.code` (OpenAI; e.g. `insufficient_quota`, `context_length_exceeded`).
    /// A numeric code is kept as its decimal string.
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

/// `error.type` / `error.code` values that mean the account cannot pay.
const QUOTA_NAMES: &[&str] = &[
    "insufficient_quota",
    "enforced_spend_limit_reached",
    "billing_hard_limit_reached",
    "billing_not_active",
];

/// Message phrases (lowercase) that mean the account cannot pay. Deliberately
/// narrow: OpenAI's rate-limit messages mention "billing" too.
const QUOTA_PHRASES: &[&str] = &["credit balance", "exceeded your current quota"];

impl ProviderError {
    /// Parses a provider error envelope; `None` when the body is not one.
    ///
    /// Accepts an object `error` (Anthropic, OpenAI) or a non-empty string
    /// `error` (gateways). Anything else — not JSON, not UTF-8, empty,
    /// nested too deeply, `"error": null` — is `None`. Never panics.
    pub fn parse(body: &[u8]) -> Option<ProviderError> {
        let body = body.strip_prefix("\u{feff}".as_bytes()).unwrap_or(body);
        // serde_json bounds recursion depth, so hostile nesting is an error.
        let value: Value = serde_json::from_slice(body).ok()?;
        match value.as_object()?.get("error")? {
            Value::Object(error) => Some(ProviderError {
                kind: error.get("type").and_then(non_empty_str),
                code: error.get("code").and_then(code_string),
                message: error.get("message").and_then(non_empty_str),
            }),
            Value::String(message) if !message.is_empty() => Some(ProviderError {
                message: Some(message.clone()),
                ..ProviderError::default()
            }),
            _ => None,
        }
    }

    /// `error.type`, when present.
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    /// `error.code`, when present.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// `error.message`, as sent (may be long; not part of `Display`).
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    /// Whether `error.type` or `error.code` equals `name`.
    pub fn is(&self, name: &str) -> bool {
        self.kind() == Some(name) || self.code() == Some(name)
    }

    /// `overloaded_error`: the provider is out of capacity (Anthropic 529).
    pub fn is_overloaded(&self) -> bool {
        self.is("overloaded_error")
    }

    /// `rate_limit_error` (Anthropic) or `rate_limit_exceeded` (OpenAI).
    pub fn is_rate_limit(&self) -> bool {
        self.is("rate_limit_error") || self.is("rate_limit_exceeded")
    }

    /// Quota, spend-limit or billing failure: waiting will not fix it.
    ///
    /// Conservative: a known code (`insufficient_quota`,
    /// `enforced_spend_limit_reached`, `billing_*`), a kind or code that
    /// names billing, or a message about the credit balance or an exceeded
    /// quota. An explicit rate-limit kind or code is never a quota error.
    pub fn is_quota(&self) -> bool {
        let names = [self.kind(), self.code()];
        let names = names.iter().flatten();
        if names
            .clone()
            .any(|n| QUOTA_NAMES.contains(n) || n.contains("billing"))
        {
            return true;
        }
        if self.is_rate_limit() {
            return false;
        }
        self.message().is_some_and(|m| {
            let m = m.to_ascii_lowercase();
            QUOTA_PHRASES.iter().any(|p| m.contains(p))
        })
    }

    /// The token counts of a "prompt plus `max_tokens` exceeds the context
    /// window" error, or `None` when this is not one.
    ///
    /// Recognised from OpenAI's `context_length_exceeded` code or the
    /// providers' phrases; counts the message lacks (or that overflow `u64`)
    /// are `None` fields.
    pub fn context_overflow(&self) -> Option<ContextOverflow> {
        super::context::parse(self)
    }
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind().or(self.code()).unwrap_or("provider error"))
    }
}

fn non_empty_str(value: &Value) -> Option<String> {
    value.as_str().filter(|s| !s.is_empty()).map(str::to_owned)
}

fn code_string(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) => Some(n.to_string()),
        other => non_empty_str(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pe(kind: Option<&str>, code: Option<&str>, message: Option<&str>) -> ProviderError {
        ProviderError {
            kind: kind.map(str::to_owned),
            code: code.map(str::to_owned),
            message: message.map(str::to_owned),
        }
    }

    #[test]
    fn parse_table() {
        let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let deep_error = format!(r#"{{"error":{}1{}}}"#, "[".repeat(5000), "]".repeat(5000));
        let cases: &[(&[u8], Option<ProviderError>)] = &[
            (
                br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                Some(pe(Some("overloaded_error"), None, Some("Overloaded"))),
            ),
            (
                br#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
                Some(pe(
                    Some("insufficient_quota"),
                    Some("insufficient_quota"),
                    Some("You exceeded your current quota"),
                )),
            ),
            (
                br#"{"error":{"message":"m","type":"tokens","code":429}}"#,
                Some(pe(Some("tokens"), Some("429"), Some("m"))),
            ),
            (
                br#"{"error":{"message":"m","type":null,"code":null}}"#,
                Some(pe(None, None, Some("m"))),
            ),
            (
                br#"{"error":"rate limited"}"#,
                Some(pe(None, None, Some("rate limited"))),
            ),
            (
                b"\xef\xbb\xbf{\"error\":\"bom\"}",
                Some(pe(None, None, Some("bom"))),
            ),
            (br#"{"error":{}}"#, Some(ProviderError::default())),
            (br#"{"error":{"type":7,"code":true}}"#, Some(ProviderError::default())),
            (br#"{"error":null}"#, None),
            (br#"{"error":""}"#, None),
            (br#"{"error":[1,2]}"#, None),
            (br#"{"type":"overloaded_error","message":"Overloaded"}"#, None),
            (br#"{"id":"msg_1","content":[]}"#, None),
            (br#"["error"]"#, None),
            (b"", None),
            (b"   ", None),
            (b"<html>502 Bad Gateway</html>", None),
            (b"\xff\xfe{\"error\":\"x\"}", None),
            (b"{\"error\":\"\xff\"}", None),
            (br#"{"error":{"type":"overloaded_error""#, None),
            (nested.as_bytes(), None),
            (deep_error.as_bytes(), None),
        ];
        for (body, want) in cases {
            let got = ProviderError::parse(body);
            assert_eq!(&got, want, "body {:?}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn predicates_table() {
        let credit = "Your credit balance is too low to access the Anthropic API.";
        let openai_rl = "Rate limit reached for gpt-4 ... add a payment method at \
                         https://platform.openai.com/account/billing.";
        // (error, overloaded, rate limit, quota)
        let cases = [
            (pe(Some("overloaded_error"), None, None), true, false, false),
            (pe(Some("rate_limit_error"), None, None), false, true, false),
            (
                pe(Some("tokens"), Some("rate_limit_exceeded"), Some(openai_rl)),
                false,
                true,
                false,
            ),
            (pe(None, None, Some(openai_rl)), false, false, false),
            (
                pe(Some("insufficient_quota"), Some("insufficient_quota"), None),
                false,
                false,
                true,
            ),
            (
                pe(None, Some("enforced_spend_limit_reached"), None),
                false,
                false,
                true,
            ),
            (
                pe(None, Some("billing_hard_limit_reached"), None),
                false,
                false,
                true,
            ),
            (
                pe(Some("billing_not_active"), None, None),
                false,
                false,
                true,
            ),
            (pe(Some("billing_error"), None, None), false, false, true),
            (
                pe(Some("invalid_request_error"), None, Some(credit)),
                false,
                false,
                true,
            ),
            (
                pe(Some("invalid_request_error"), None, Some("bad input")),
                false,
                false,
                false,
            ),
            (
                pe(Some("rate_limit_error"), None, Some(credit)),
                false,
                true,
                false,
            ),
            (ProviderError::default(), false, false, false),
        ];
        for (err, overloaded, rate_limit, quota) in cases {
            assert_eq!(err.is_overloaded(), overloaded, "{err:?}");
            assert_eq!(err.is_rate_limit(), rate_limit, "{err:?}");
            assert_eq!(err.is_quota(), quota, "{err:?}");
        }
    }

    #[test]
    fn display_is_kind_or_code_only() {
        let cases = [
            (
                pe(Some("overloaded_error"), None, Some("Overloaded")),
                "overloaded_error",
            ),
            (
                pe(Some("invalid_request_error"), Some("x"), Some("long")),
                "invalid_request_error",
            ),
            (
                pe(None, Some("insufficient_quota"), Some("long")),
                "insufficient_quota",
            ),
            (pe(None, None, Some("rate limited")), "provider error"),
        ];
        for (err, want) in cases {
            assert_eq!(err.to_string(), want);
        }
        let err = pe(None, None, Some("rate limited"));
        assert_eq!(err.message(), Some("rate limited"));
    }
}
