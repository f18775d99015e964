//! Errors raised before a response: connect failures, resets, timeouts.
//!
//! Two passes over the error's `source()` chain (at most [`MAX_LINKS`] links):
//! first by type (`std::io::Error` kinds), then, only
//! when no link was recognised, by phrase markers in each link's `Display`
//! (an error event carried as text: `overloaded_error`, `rate limit`, …).
//! Bare numbers such as `429` are never read as a status.

use super::{phrase, Classification, RetryableKind};
use std::error::Error;
use std::io;

/// How many links of a `source()` chain are inspected at most.
const MAX_LINKS: usize = 32;

/// Lowercase phrase markers, strongest first.
const PHRASES: &[(&str, RetryableKind)] = &[
    ("overloaded", RetryableKind::Overloaded),
    ("rate_limit", RetryableKind::RateLimited),
    ("rate limit", RetryableKind::RateLimited),
    ("too many requests", RetryableKind::RateLimited),
    (
        "connection closed before message completed",
        RetryableKind::Reset,
    ),
    ("connection reset", RetryableKind::Reset),
];

/// Classifies an error returned instead of a response by walking its `source()` chain.
///
/// Every transport error is retryable; the kind says which: [`Connect`],
/// [`Reset`], [`Timeout`], [`Overloaded`] / [`RateLimited`] (from phrases),
/// or [`Transport`] when nothing is recognised.
///
/// [`Connect`]: RetryableKind::Connect
/// [`Reset`]: RetryableKind::Reset
/// [`Timeout`]: RetryableKind::Timeout
/// [`Overloaded`]: RetryableKind::Overloaded
/// [`RateLimited`]: RetryableKind::RateLimited
/// [`Transport`]: RetryableKind::Transport
///
/// Errors of the library's own layers (the stream guard's, the gate's) and
/// the timers' `Elapsed` errors (tokio's, tower's timeout layer's) say what
/// they are through [`Reported`](super::Reported); this function does not
/// know them, and reads an `Elapsed` by its text alone as
/// [`Transport`](RetryableKind::Transport).
/// the policy's judgement reads them all.
pub(crate) fn classify_error(error: &(dyn Error + 'static)) -> Classification {
    let kind = chain(error)
        .find_map(by_type)
        .or_else(|| by_phrase(error))
        .unwrap_or(RetryableKind::Transport);
    Classification::Retryable(kind)
}

/// The links of `error`'s chain, outermost first, bounded by [`MAX_LINKS`].
///
/// A custom `io::Error` is followed into the error it wraps (`get_ref`),
/// which `io::Error::source` would skip.
pub(super) fn chain<'a>(
    error: &'a (dyn Error + 'static),
) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(error), |&link| {
        match link
            .downcast_ref::<io::Error>()
            .and_then(io::Error::get_ref)
        {
            Some(inner) => Some(inner as &(dyn Error + 'static)),
            None => link.source(),
        }
    })
    .take(MAX_LINKS)
}

/// Recognises a link by its type.
fn by_type(link: &(dyn Error + 'static)) -> Option<RetryableKind> {
    if let Some(io) = link.downcast_ref::<io::Error>() {
        return io_kind(io.kind());
    }
    None
}

fn io_kind(kind: io::ErrorKind) -> Option<RetryableKind> {
    use io::ErrorKind as K;
    match kind {
        K::ConnectionRefused | K::AddrNotAvailable | K::NotConnected => {
            Some(RetryableKind::Connect)
        }
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
            Some(RetryableKind::Reset)
        }
        K::TimedOut => Some(RetryableKind::Timeout),
        // Stable only since Rust 1.83, above this crate's MSRV: match by name.
        other => {
            let name = format!("{other:?}");
            matches!(
                name.as_str(),
                "HostUnreachable" | "NetworkUnreachable" | "NetworkDown"
            )
            .then_some(RetryableKind::Connect)
        }
    }
}

/// The strongest phrase marker found in any link's `Display`.
fn by_phrase(error: &(dyn Error + 'static)) -> Option<RetryableKind> {
    let texts: Vec<String> = chain(error).map(phrase::lowercase_text).collect();
    PHRASES
        .iter()
        .find(|(phrase, _)| texts.iter().any(|t| t.contains(phrase)))
        .map(|(_, kind)| *kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::phrase::MAX_TEXT;
    use std::fmt;

    /// A test error: a message and an optional source.
    #[derive(Debug)]
    struct Link(String, Option<Box<dyn Error + Send + Sync>>);

    impl fmt::Display for Link {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl Error for Link {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|e| e as &(dyn Error + 'static))
        }
    }

    /// An error that is its own source.
    #[derive(Debug)]
    struct Loop;

    impl fmt::Display for Loop {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("loop")
        }
    }

    impl Error for Loop {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(self)
        }
    }

    type Boxed = Box<dyn Error + Send + Sync>;

    fn text(msg: &str) -> Boxed {
        Box::new(Link(msg.to_owned(), None))
    }

    fn wrap(msg: &str, source: Boxed) -> Boxed {
        Box::new(Link(msg.to_owned(), Some(source)))
    }

    fn io(kind: io::ErrorKind) -> Boxed {
        Box::new(io::Error::from(kind))
    }

    fn nest(depth: usize, inner: Boxed) -> Boxed {
        (0..depth).fold(inner, |e, i| wrap(&format!("layer {i}"), e))
    }

    fn classify(error: &Boxed) -> RetryableKind {
        match classify_error(&**error) {
            Classification::Retryable(kind) => kind,
            other => panic!("transport errors are retryable, got {other:?}"),
        }
    }

    #[test]
    fn chain_table() {
        use io::ErrorKind as K;
        use RetryableKind::*;
        let long = format!("{}overloaded", "é".repeat(MAX_TEXT));
        let cases: Vec<(Boxed, RetryableKind)> = vec![
            // io kinds, directly and wrapped
            (io(K::ConnectionRefused), Connect),
            (io(K::AddrNotAvailable), Connect),
            (io(K::NotConnected), Connect),
            (
                wrap("client error (Connect)", io(K::ConnectionRefused)),
                Connect,
            ),
            (io(K::ConnectionReset), Reset),
            (io(K::ConnectionAborted), Reset),
            (io(K::BrokenPipe), Reset),
            (io(K::UnexpectedEof), Reset),
            (wrap("error reading a body", io(K::ConnectionReset)), Reset),
            (io(K::TimedOut), Timeout),
            (
                Box::new(io::Error::other(Link("x".into(), Some(io(K::TimedOut))))),
                Timeout,
            ),
            (io(K::PermissionDenied), Transport),
            (io(K::Other), Transport),
            // a timeout's text alone means nothing (timer errors are read
            // by type where the policy knows them: policy/known.rs)
            (text("request timed out"), Transport),
            // a recognised type beats any phrase
            (wrap("overloaded_error", io(K::TimedOut)), Timeout),
            // phrases, only when no type was recognised
            (
                text("stream error event: overloaded_error: Overloaded"),
                Overloaded,
            ),
            (wrap("stream failed", text("Overloaded")), Overloaded),
            (text("rate_limit_error: slow down"), RateLimited),
            (text("Rate limit exceeded"), RateLimited),
            (text("429 Too Many Requests"), RateLimited),
            (text("connection closed before message completed"), Reset),
            (
                wrap("client error", text("Connection reset by peer")),
                Reset,
            ),
            (
                Box::new(io::Error::other("connection reset by peer")),
                Reset,
            ),
            (wrap("connection reset", text("overloaded")), Overloaded),
            // bare numbers and vague words are not markers
            (text("request id 4293001"), Transport),
            (text("error 429"), Transport),
            (text("HTTP status 529"), Transport),
            (text("error trying to connect: dns error"), Transport),
            (text(""), Transport),
            // bounded: depth and text length
            (nest(MAX_LINKS - 1, io(K::ConnectionRefused)), Connect),
            (nest(MAX_LINKS, io(K::ConnectionRefused)), Transport),
            (nest(MAX_LINKS, text("overloaded")), Transport),
            (Box::new(Loop), Transport),
            (text(&long), Transport),
        ];
        for (error, want) in cases {
            assert_eq!(classify(&error), want, "{error}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn unreachable_kinds_are_connect() {
        // EHOSTUNREACH, ENETUNREACH, ENETDOWN: kinds newer than the MSRV.
        for code in [113, 101, 100] {
            let error: Boxed = Box::new(io::Error::from_raw_os_error(code));
            assert_eq!(classify(&error), RetryableKind::Connect, "{error}");
        }
    }
}
