//! The context-overflow cut: `max(floor, limit − input − margin)`.

use crate::classify::ContextOverflow;
use std::fmt;

/// How the `max_tokens` cut after a context overflow is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverflowCut {
    /// Smallest `max_tokens` the cut produces (default 3000).
    pub floor: u64,
    /// Tokens kept free below the context limit (default 1000).
    pub margin: u64,
}

impl Default for OverflowCut {
    fn default() -> Self {
        OverflowCut {
            floor: 3000,
            margin: 1000,
        }
    }
}

/// Why no cut was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CutRefused {
    /// The provider's message did not give both the input size and the limit.
    CountsUnknown,
    /// The input alone fills the context window: no `max_tokens` can help.
    InputExceedsLimit {
        /// Tokens in the prompt.
        input_tokens: u64,
        /// The model's context window.
        context_limit: u64,
    },
}

impl fmt::Display for CutRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CutRefused::CountsUnknown => f.write_str(
                "the context-overflow message did not give both the input size and the \
                 context limit, so no smaller max_tokens can be computed",
            ),
            CutRefused::InputExceedsLimit {
                input_tokens,
                context_limit,
            } => write!(
                f,
                "input of {input_tokens} tokens alone exceeds the {context_limit}-token \
                 context window; shorten the prompt, a smaller max_tokens cannot help"
            ),
        }
    }
}

impl std::error::Error for CutRefused {}

/// The new `max_tokens` for a request that overflowed, or why none helps.
///
/// `max(floor, limit − input − margin)`, every step saturating (no overflow
/// or wrap for any counts, `u64::MAX` included). Refused with
/// [`CutRefused::CountsUnknown`] when the message lacked the input size or the
/// limit, and with [`CutRefused::InputExceedsLimit`] when `input ≥ limit`.
///
/// The floor wins even when it is larger than the room left in the window
/// (`limit − input`): this mirrors the reference client, which then relies
/// on the provider's next answer. The requested `max_tokens` is not
/// consulted, so the result can be larger than what was asked for.
pub fn overflow_max_tokens(
    overflow: &ContextOverflow,
    cut: &OverflowCut,
) -> Result<u64, CutRefused> {
    let (Some(input_tokens), Some(context_limit)) = (overflow.input_tokens, overflow.context_limit)
    else {
        return Err(CutRefused::CountsUnknown);
    };
    if input_tokens >= context_limit {
        return Err(CutRefused::InputExceedsLimit {
            input_tokens,
            context_limit,
        });
    }
    let room = context_limit
        .saturating_sub(input_tokens)
        .saturating_sub(cut.margin);
    Ok(room.max(cut.floor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::ProviderError;

    fn counts(input: Option<u64>, limit: Option<u64>) -> ContextOverflow {
        ContextOverflow {
            input_tokens: input,
            max_tokens: None,
            context_limit: limit,
        }
    }

    fn exceeds(input_tokens: u64, context_limit: u64) -> Result<u64, CutRefused> {
        Err(CutRefused::InputExceedsLimit {
            input_tokens,
            context_limit,
        })
    }

    /// Parses a provider message the way the classifier does.
    fn parsed(kind: &str, code: Option<&str>, message: &str) -> ContextOverflow {
        let error = serde_json::json!({
            "error": { "type": kind, "code": code, "message": message }
        });
        ProviderError::parse(error.to_string().as_bytes())
            .and_then(|e| e.context_overflow())
            .unwrap_or_else(|| panic!("not an overflow: {message}"))
    }

    #[test]
    fn cut_table_from_provider_messages() {
        let ire = "invalid_request_error";
        let cle = Some("context_length_exceeded");
        let cases = [
            (
                parsed(
                    ire,
                    None,
                    "input length and `max_tokens` exceed context limit: 188059 + 20000 \
                     > 200000, decrease input length or `max_tokens` and try again",
                ),
                Ok(10941),
            ),
            (
                parsed(
                    ire,
                    None,
                    "prompt is too long: 208310 tokens > 200000 maximum",
                ),
                exceeds(208310, 200000),
            ),
            (
                parsed(
                    ire,
                    cle,
                    "This model's maximum context length is 8192 tokens. However, you \
                     requested 8227 tokens (4227 in the messages, 4000 in the completion).",
                ),
                // 8192 − 4227 − 1000 = 2965, below the floor.
                Ok(3000),
            ),
            (
                parsed(
                    ire,
                    cle,
                    "This model's maximum context length is 128000 tokens. However, you \
                     requested 130000 tokens (100000 in the messages, 30000 in the completion).",
                ),
                Ok(27000),
            ),
            (
                parsed(ire, cle, "Your input exceeds the context window."),
                Err(CutRefused::CountsUnknown),
            ),
        ];
        for (overflow, want) in cases {
            assert_eq!(
                overflow_max_tokens(&overflow, &OverflowCut::default()),
                want,
                "{overflow:?}"
            );
        }
    }

    #[test]
    fn cut_table_from_counts() {
        let d = OverflowCut::default();
        let max = u64::MAX;
        let cases = [
            // OpenAI "your messages resulted in 8227 tokens" against 8192.
            (counts(Some(8227), Some(8192)), d, exceeds(8227, 8192)),
            (counts(Some(8192), Some(8192)), d, exceeds(8192, 8192)),
            // Tiny remainder: the floor wins.
            (counts(Some(199_500), Some(200_000)), d, Ok(3000)),
            (counts(Some(196_001), Some(200_000)), d, Ok(3000)),
            (counts(Some(195_000), Some(200_000)), d, Ok(4000)),
            (counts(Some(0), Some(200_000)), d, Ok(199_000)),
            (
                counts(None, Some(200_000)),
                d,
                Err(CutRefused::CountsUnknown),
            ),
            (counts(Some(5), None), d, Err(CutRefused::CountsUnknown)),
            (counts(None, None), d, Err(CutRefused::CountsUnknown)),
            // Saturation at the edges of u64.
            (counts(Some(max), Some(max)), d, exceeds(max, max)),
            (counts(Some(max - 1), Some(max)), d, Ok(3000)),
            (counts(Some(0), Some(max)), d, Ok(max - 1000)),
            (
                counts(Some(0), Some(max)),
                OverflowCut {
                    floor: 0,
                    margin: 0,
                },
                Ok(max),
            ),
            (
                counts(Some(10), Some(20)),
                OverflowCut {
                    floor: max,
                    margin: max,
                },
                Ok(max),
            ),
            (
                counts(Some(10), Some(20)),
                OverflowCut {
                    floor: 0,
                    margin: max,
                },
                Ok(0),
            ),
        ];
        for (overflow, cut, want) in cases {
            assert_eq!(
                overflow_max_tokens(&overflow, &cut),
                want,
                "{overflow:?} {cut:?}"
            );
        }
    }

    #[test]
    fn refusals_explain_themselves() {
        let exceeds = CutRefused::InputExceedsLimit {
            input_tokens: 208310,
            context_limit: 200000,
        };
        assert!(exceeds
            .to_string()
            .contains("input of 208310 tokens alone exceeds the 200000-token context window"));
        assert!(CutRefused::CountsUnknown
            .to_string()
            .contains("did not give both the input size and the context limit"));
    }
}

#[cfg(test)]
mod doc_examples {
    //! The examples this module's documentation carried while it was public.
    #![allow(clippy::unwrap_used)]

    #[test]
    fn example_1() {
        use crate::classify::ProviderError;
        use crate::recover::{overflow_max_tokens, OverflowCut};

        let body = br#"{"type":"error","error":{"type":"invalid_request_error",
          "message":"input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000"}}"#;
        let overflow = ProviderError::parse(body)
            .and_then(|e| e.context_overflow())
            .expect("a context overflow");
        assert_eq!(
            overflow_max_tokens(&overflow, &OverflowCut::default()),
            Ok(10941)
        );
    }
}
