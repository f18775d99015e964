//! Context-overflow messages: "prompt plus `max_tokens` exceeds the window".
//!
//! Anthropic: "input length and `max_tokens` exceed context limit: 188059 +
//! 20000 > 200000" and "prompt is too long: 210000 tokens > 200000 maximum".
//! OpenAI (`code: context_length_exceeded`) and compatible servers: "This
//! model's maximum context length is 128000 tokens. However, you requested
//! 130000 tokens (100000 in the messages, 30000 in the completion)."
//!
//! Numbers are read digit by digit with checked arithmetic: one too large for
//! `u64` is `None`, never a panic and never a wrapped value.

use super::{ContextOverflow, ProviderError};

/// The OpenAI code (some gateways put it in `type`).
const CODE: &str = "context_length_exceeded";

/// Reads the overflow from `error`, or `None` when it is not one.
pub(super) fn parse(error: &ProviderError) -> Option<ContextOverflow> {
    let msg = error.message().unwrap_or_default().to_ascii_lowercase();
    let by_code = error.is(CODE);
    if let Some(at) = find_end(&msg, "exceed context limit:") {
        // "{input} + {max_tokens} > {limit}"
        let (input_tokens, rest) = leading_number(&msg[at..]);
        let (max_tokens, rest) = after_symbol(rest, '+');
        let (context_limit, _) = after_symbol(rest, '>');
        return Some(ContextOverflow {
            input_tokens,
            max_tokens,
            context_limit,
        });
    }
    if let Some(at) = find_end(&msg, "prompt is too long:") {
        // "{input} tokens > {limit} maximum"
        let (input_tokens, rest) = leading_number(&msg[at..]);
        let rest = rest.trim_start();
        let rest = rest.strip_prefix("tokens").unwrap_or(rest);
        let (context_limit, _) = after_symbol(rest, '>');
        return Some(ContextOverflow {
            input_tokens,
            max_tokens: None,
            context_limit,
        });
    }
    if by_code || msg.contains("maximum context length") {
        return Some(ContextOverflow {
            input_tokens: number_before(&msg, "in the messages")
                .or_else(|| number_before(&msg, "in your prompt"))
                .or_else(|| number_after(&msg, "your request has"))
                .or_else(|| number_after(&msg, "your messages resulted in")),
            max_tokens: number_before(&msg, "in the completion")
                .or_else(|| number_before(&msg, "for the completion")),
            context_limit: number_after(&msg, "maximum context length is"),
        });
    }
    None
}

/// The byte offset just past the first `marker` in `hay`.
fn find_end(hay: &str, marker: &str) -> Option<usize> {
    hay.find(marker).map(|at| at + marker.len())
}

/// Parses a run of ASCII digits; `None` if empty or over `u64::MAX`.
fn parse_digits(digits: &str) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.bytes().try_fold(0u64, |acc, b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// Skips whitespace, then reads the digit run that starts `s`.
/// Returns the number (if valid) and what follows the run.
fn leading_number(s: &str) -> (Option<u64>, &str) {
    let s = s.trim_start();
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    (parse_digits(&s[..end]), &s[end..])
}

/// Reads "`symbol` {number}" at the start of `s` (whitespace allowed).
fn after_symbol(s: &str, symbol: char) -> (Option<u64>, &str) {
    match s.trim_start().strip_prefix(symbol) {
        Some(rest) => leading_number(rest),
        None => (None, s),
    }
}

/// The number right after the first `marker`.
fn number_after(hay: &str, marker: &str) -> Option<u64> {
    leading_number(&hay[find_end(hay, marker)?..]).0
}

/// The number right before the first `marker` ("100000 in the messages").
fn number_before(hay: &str, marker: &str) -> Option<u64> {
    let head = hay[..hay.find(marker)?].trim_end();
    // Byte positions: the byte after a non-digit's last byte is always a
    // char boundary, even when that character is multi-byte.
    let start = head
        .as_bytes()
        .iter()
        .rposition(|b| !b.is_ascii_digit())
        .map_or(0, |i| i + 1);
    parse_digits(head.get(start..)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overflow(kind: &str, code: Option<&str>, message: &str) -> Option<ContextOverflow> {
        ProviderError {
            kind: Some(kind.to_owned()),
            code: code.map(str::to_owned),
            message: Some(message.to_owned()),
        }
        .context_overflow()
    }

    fn co(input: Option<u64>, max: Option<u64>, limit: Option<u64>) -> Option<ContextOverflow> {
        Some(ContextOverflow {
            input_tokens: input,
            max_tokens: max,
            context_limit: limit,
        })
    }

    #[test]
    fn overflow_table() {
        let big = "1234567890123456789012345678901234567890";
        let ire = "invalid_request_error";
        let cle = Some(CODE);
        let openai = "This model's maximum context length is 128000 tokens. However, you \
                      requested 130000 tokens (100000 in the messages, 30000 in the \
                      completion). Please reduce the length of the messages or completion.";
        let legacy = "This model's maximum context length is 4097 tokens, however you \
                      requested 4200 tokens (200 in your prompt; 4000 for the completion).";
        let vllm = "'max_tokens' is too large: 5000. This model's maximum context length \
                    is 8192 tokens and your request has 4000 input tokens.";
        let anthropic_sum = "input length and `max_tokens` exceed context limit: \
                             188059 + 20000 > 200000, decrease input length or `max_tokens`";
        let messages_only = "This model's maximum context length is 8192 tokens. However, your \
                             messages resulted in 8227 tokens. Please reduce the length of the messages.";
        let cases = [
            (
                ire,
                cle,
                messages_only.to_owned(),
                co(Some(8227), None, Some(8192)),
            ),
            (
                ire,
                None,
                anthropic_sum.to_owned(),
                co(Some(188059), Some(20000), Some(200000)),
            ),
            (
                ire,
                None,
                "Prompt is too long: 210000 tokens > 200000 maximum".to_owned(),
                co(Some(210000), None, Some(200000)),
            ),
            (
                ire,
                cle,
                openai.to_owned(),
                co(Some(100000), Some(30000), Some(128000)),
            ),
            (
                ire,
                None,
                openai.to_owned(),
                co(Some(100000), Some(30000), Some(128000)),
            ),
            (
                ire,
                cle,
                legacy.to_owned(),
                co(Some(200), Some(4000), Some(4097)),
            ),
            (ire, None, vllm.to_owned(), co(Some(4000), None, Some(8192))),
            (
                ire,
                cle,
                "Your input exceeds the context window.".to_owned(),
                co(None, None, None),
            ),
            (
                ire,
                None,
                format!("input length and `max_tokens` exceed context limit: {big} + 1 > 2"),
                co(None, Some(1), Some(2)),
            ),
            (
                ire,
                None,
                "input length and `max_tokens` exceed context limit: lots".to_owned(),
                co(None, None, None),
            ),
            (
                ire,
                None,
                format!("prompt is too long: 5 tokens > {big} maximum"),
                co(Some(5), None, None),
            ),
            (
                ire,
                cle,
                format!("maximum context length is {big}0 tokens. ({big} in the messages"),
                co(None, None, None),
            ),
            (
                ire,
                None,
                "max_tokens: 999999 > 64000, the maximum".to_owned(),
                None,
            ),
            (ire, None, "messages: field required".to_owned(), None),
            ("overloaded_error", None, "Overloaded".to_owned(), None),
        ];
        for (kind, code, message, want) in cases {
            assert_eq!(overflow(kind, code, &message), want, "{message}");
        }
    }

    #[test]
    fn multi_byte_text_before_a_marker_never_panics() {
        for message in [
            "maximum context length is 8192 tokens. (café in the messages)",
            "maximum context length is 8192 tokens. (🦀 in the messages, é for the completion)",
            "maximum context length is 8192 tokens. (é5 in the messages)",
        ] {
            let error = ProviderError::parse(
                format!(
                    r#"{{"error":{{"code":"context_length_exceeded","message":"{message}"}}}}"#
                )
                .as_bytes(),
            )
            .expect("an error envelope");
            let overflow = parse(&error).expect("an overflow");
            assert_eq!(overflow.context_limit, Some(8192));
        }
    }

    #[test]
    fn digits_saturate_or_reject() {
        let cases = [
            ("0", Some(0)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            ("99999999999999999999999999999999999999", None),
            ("", None),
            ("12a", None),
        ];
        for (digits, want) in cases {
            assert_eq!(parse_digits(digits), want, "{digits}");
        }
    }
}
