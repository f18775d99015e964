//! Which quota a request belongs to, and what it costs.

use http::HeaderName;
use std::hash::{BuildHasher, Hasher};

/// Overrides the key a request is paced under (e.g. one per deployment).
/// Without it the key is the request's authority, a hash of its API-key
/// header and, under a [`RetryLayer`](crate::RetryLayer), the `model` its
/// JSON body names when the body was whole before its first send: every
/// key and model a provider limits is paced alone, so one model's wait
/// holds that model only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateKey(pub u64);

/// The tokens a request is expected to spend, for a tokens-per-minute
/// quota (e.g. its prompt estimate plus `max_tokens`). Without it, under a
/// [`RetryLayer`](crate::RetryLayer) and a gate that counts tokens (a
/// configured token quota, or one its provider states), the cost is
/// [`TokenCost::estimate`] of a body that was whole before its first send
/// (`Full`, `Bytes`); otherwise the request costs no tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenCost(pub u64);

impl TokenCost {
    /// A rough cost for a JSON request body: its `max_tokens` (or
    /// `max_completion_tokens` / `max_output_tokens`) plus one token per
    /// four bytes of body for the prompt. `None` when the body names no
    /// output limit. Insert the result into the request's extensions.
    ///
    /// The limit is found by skimming the body's top level, not parsing all
    /// of it: on any valid JSON body it is the `max_tokens` (or
    /// `max_output_tokens`, `max_completion_tokens`) a full parse reads, and
    /// a body that is not JSON may still get an estimate.
    pub fn estimate(body: &[u8]) -> Option<TokenCost> {
        let output = crate::recover::skimmed_max_tokens(body)?;
        Some(TokenCost(output.saturating_add(body.len() as u64 / 4)))
    }
}

/// Headers whose value identifies the caller's credentials (Anthropic,
/// OpenAI and gateways, Azure OpenAI, Gemini). Names built once: every send
/// looks them up.
static KEY_HEADERS: [HeaderName; KEY_HEADER_COUNT] = [
    HeaderName::from_static("x-api-key"),
    http::header::AUTHORIZATION,
    HeaderName::from_static("api-key"),
    HeaderName::from_static("x-goog-api-key"),
];

const KEY_HEADER_COUNT: usize = 4;

/// Query parameters that carry a credential (Gemini's `?key=`).
const KEY_PARAMS: [&str; 1] = ["key"];

/// What a request's key is read from: its URI, headers and extensions.
#[derive(Clone, Copy)]
pub(crate) struct Head<'a> {
    pub(crate) uri: &'a http::Uri,
    pub(crate) headers: &'a http::HeaderMap,
    pub(crate) extensions: &'a http::Extensions,
}

impl<'a> Head<'a> {
    /// The head of a request's `parts`.
    pub(crate) fn of(parts: &'a http::request::Parts) -> Head<'a> {
        Head {
            uri: &parts.uri,
            headers: &parts.headers,
            extensions: &parts.extensions,
        }
    }
}

/// The default key of a request's [`Head`]: authority, a hash of the
/// credential headers and the `model` (the raw JSON value the body names,
/// if known), keyed by `hasher`'s secret. The credential itself is only
/// hashed, never stored or logged.
///
/// Every part is written as its length and its bytes, in a fixed order,
/// so that replicas sharing a secret (and a store of holds) make the same
/// fingerprint of the same key whatever their build.
pub(super) fn key_of(parts: Head<'_>, model: Option<&[u8]>, hasher: &impl BuildHasher) -> u64 {
    let mut hasher = hasher.build_hasher();
    // The caller's key, hashed with the secret too: the gate's map spreads
    // keys by a fixed multiply, which chosen keys (a tenant's id passed
    // through) must not be able to aim at one bucket.
    if let Some(RateKey(key)) = parts.extensions.get::<RateKey>() {
        hasher.write(b"k");
        hasher.write(&key.to_le_bytes());
        return hasher.finish();
    }
    let mut parts_out = Parts::new(&mut hasher);
    let authority = parts.uri.authority().map_or("", |a| a.as_str());
    parts_out.part(b'a', authority.as_bytes());
    // One pass over the request's few headers instead of a hashed lookup
    // per credential name; the first value of each counts, as `get` gives.
    let mut found: [Option<&http::HeaderValue>; KEY_HEADER_COUNT] = [None; KEY_HEADER_COUNT];
    for (name, value) in parts.headers {
        if let Some(i) = KEY_HEADERS.iter().position(|key| key == name) {
            found[i].get_or_insert(value);
        }
    }
    for (tag, value) in (b'0'..).zip(found) {
        if let Some(value) = value {
            parts_out.part(tag, value.as_bytes());
        }
    }
    let params = parts.uri.query().into_iter().flat_map(|q| q.split('&'));
    for (name, value) in params.filter_map(|param| param.split_once('=')) {
        if let Some(i) = KEY_PARAMS.iter().position(|key| *key == name) {
            parts_out.part(b'p' + i as u8, value.as_bytes());
        }
    }
    if let Some(model) = model {
        parts_out.part(b'm', model);
    }
    parts_out.flush();
    hasher.finish()
}

/// The parts of a key, each written as its tag, its length and its bytes,
/// gathered so the hasher takes them in few writes: its stream is the same
/// however it is split, and each write has a fixed cost.
struct Parts<'h, H: Hasher> {
    hasher: &'h mut H,
    buffer: [u8; 192],
    len: usize,
}

impl<'h, H: Hasher> Parts<'h, H> {
    fn new(hasher: &'h mut H) -> Self {
        Parts {
            hasher,
            buffer: [0; 192],
            len: 0,
        }
    }

    /// One part: its tag, its length and its bytes.
    fn part(&mut self, tag: u8, bytes: &[u8]) {
        let mut head = [tag; 9];
        head[1..].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
        self.write(&head);
        self.write(bytes);
    }

    fn write(&mut self, bytes: &[u8]) {
        if let Some(room) = self.buffer.get_mut(self.len..self.len + bytes.len()) {
            room.copy_from_slice(bytes);
            self.len += bytes.len();
        } else {
            self.flush();
            self.hasher.write(bytes);
        }
    }

    /// Hands what is gathered to the hasher.
    fn flush(&mut self) {
        self.hasher.write(&self.buffer[..self.len]);
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The default key of a request's `parts`.
    fn default_key_of(
        parts: &http::request::Parts,
        model: Option<&[u8]>,
        hasher: &impl BuildHasher,
    ) -> u64 {
        key_of(Head::of(parts), model, hasher)
    }

    /// One gate's keys: the same secret for every call of a test.
    fn default_key(parts: &http::request::Parts) -> u64 {
        static HASHER: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
        default_key_of(parts, None, HASHER.get_or_init(std::hash::RandomState::new))
    }

    #[test]
    fn a_fingerprint_is_the_same_in_every_build() {
        // Replicas sharing a secret and a store must fingerprint one key
        // alike, whatever their build: the parts, their tags and their
        // order are pinned here.
        let hasher = super::super::shared::KeyHasher::keyed(*b"sixteen byte key");
        let request = http::Request::post("https://generativelanguage.test/v1?alt=sse&key=secret")
            .header("x-api-key", "sk-one")
            .header("authorization", "Bearer two")
            .body(())
            .unwrap();
        let (parts, ()) = request.into_parts();
        assert_eq!(
            default_key_of(&parts, Some(br#""model-a""#), &hasher),
            0xa954_9583_e1b1_6030
        );
    }

    #[test]
    fn gathered_parts_hash_as_the_parts_written_one_by_one() {
        // Credentials of every length around the gathering buffer's size
        // fingerprint as each part written straight to the hasher would.
        let hasher = super::super::shared::KeyHasher::keyed(*b"sixteen byte key");
        for len in [0, 1, 100, 160, 170, 183, 184, 191, 192, 193, 400, 5_000] {
            let key = "k".repeat(len);
            let request = http::Request::post("https://api.test/v1?key=q")
                .header("x-api-key", key.as_str())
                .header("authorization", "Bearer two")
                .body(())
                .unwrap();
            let (parts, ()) = request.into_parts();
            let model = br#""model-a""#;
            let mut direct = hasher.build_hasher();
            for (tag, bytes) in [
                (b'a', &b"api.test"[..]),
                (b'0', key.as_bytes()),
                (b'1', b"Bearer two"),
                (b'p', b"q"),
                (b'm', model),
            ] {
                direct.write(&[tag]);
                direct.write(&(bytes.len() as u64).to_le_bytes());
                direct.write(bytes);
            }
            assert_eq!(
                default_key_of(&parts, Some(model), &hasher),
                direct.finish(),
                "credential of {len} bytes"
            );
        }
    }

    #[test]
    fn each_gate_keys_with_a_secret_of_its_own() {
        let request = parts("http://a.test/v1/messages", "k1");
        let one = std::hash::RandomState::new();
        assert_eq!(
            default_key_of(&request, None, &one),
            default_key_of(&request, None, &one)
        );
        let other = std::hash::RandomState::new();
        assert_ne!(
            default_key_of(&request, None, &one),
            default_key_of(&request, None, &other)
        );
    }

    fn parts(uri: &str, key: &str) -> http::request::Parts {
        let (parts, ()) = http::Request::post(uri)
            .header("x-api-key", key)
            .body(())
            .unwrap_or_default()
            .into_parts();
        parts
    }

    #[test]
    fn token_costs_are_estimated_from_json_bodies() {
        let body =
            br#"{"model":"m","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}"#;
        let want = 1000 + body.len() as u64 / 4;
        assert_eq!(TokenCost::estimate(body), Some(TokenCost(want)));
        let openai = br#"{"max_completion_tokens": 50}"#;
        assert_eq!(
            TokenCost::estimate(openai),
            Some(TokenCost(50 + openai.len() as u64 / 4))
        );
        for no_limit in [
            &b"{}"[..],
            b"not json",
            br#"{"max_tokens":"many"}"#,
            b"\xff",
        ] {
            assert_eq!(TokenCost::estimate(no_limit), None);
        }
    }

    #[test]
    fn every_credential_header_counts_in_any_order_and_only_its_first_value() {
        let key = |headers: &[(&str, &str)]| {
            let mut request = http::Request::post("http://a.test/v1/messages");
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            default_key(&request.body(()).unwrap_or_default().into_parts().0)
        };
        let both = key(&[("x-api-key", "k1"), ("authorization", "Bearer t")]);
        assert_eq!(
            both,
            key(&[("authorization", "Bearer t"), ("x-api-key", "k1")])
        );
        assert_ne!(both, key(&[("x-api-key", "k1")]));
        assert_ne!(
            both,
            key(&[("x-api-key", "k1"), ("authorization", "Bearer u")])
        );
        for name in ["x-api-key", "authorization", "api-key", "x-goog-api-key"] {
            assert_ne!(key(&[(name, "k1")]), key(&[(name, "k2")]), "{name}");
            assert_ne!(key(&[(name, "k1")]), key(&[]), "{name}");
        }
        // Other headers are not credentials.
        assert_eq!(
            key(&[("x-api-key", "k1"), ("content-type", "a/b")]),
            key(&[("x-api-key", "k1")])
        );
        // A repeated header is keyed by its first value, as `get` reads it.
        let repeated = key(&[("x-api-key", "k1"), ("x-api-key", "k2")]);
        assert_eq!(repeated, key(&[("x-api-key", "k1")]));
    }

    #[test]
    fn keys_separate_hosts_and_credentials_and_honour_overrides() {
        let a = default_key(&parts("http://a.test/v1/messages", "k1"));
        assert_eq!(
            a,
            default_key(&parts("http://a.test/v1/other", "k1")),
            "the path does not matter"
        );
        assert_ne!(a, default_key(&parts("http://b.test/v1/messages", "k1")));
        assert_ne!(a, default_key(&parts("http://a.test/v1/messages", "k2")));
        // Gemini's credentials: a header, or the `key` query parameter.
        let gemini = |uri: &str, key: &str| {
            let (parts, ()) = http::Request::post(uri)
                .header("x-goog-api-key", key)
                .body(())
                .unwrap_or_default()
                .into_parts();
            default_key(&parts)
        };
        let g = "http://g.test/v1beta/models/m:generateContent";
        assert_ne!(gemini(g, "t1"), gemini(g, "t2"));
        let by_query = |key: &str| {
            let uri = format!("{g}?alt=sse&key={key}");
            let (parts, ()) = http::Request::post(uri).body(()).unwrap().into_parts();
            default_key(&parts)
        };
        assert_ne!(by_query("t1"), by_query("t2"));
        assert_eq!(by_query("t1"), by_query("t1"));
        let mut custom = parts("http://a.test/", "k1");
        custom.extensions.insert(RateKey(7));
        let mut other = parts("http://b.test/", "k2");
        other.extensions.insert(RateKey(7));
        assert_eq!(
            default_key(&custom),
            default_key(&other),
            "the caller's key alone"
        );
        other.extensions.insert(RateKey(8));
        assert_ne!(default_key(&custom), default_key(&other));
        assert_ne!(default_key(&custom), 7, "hashed with the gate's secret");
    }
}
