//! One target's service: the library's client stack over an HTTPS client,
//! and the rewrite that makes a target's request from the original.

use crate::config::{RouteConfig, TargetConfig};
use crate::shared_state::{SharedState, SharedStore};
use crate::timed::{TargetSeconds, Timed};
use bytes::Bytes;
use http::header::{self, HeaderName};
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Request, Response, Uri};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::budget::RetryBudget;
use llm_retry::rate_limit::{Quotas, RateLimitLayer, SharedGate};
use llm_retry::{BoxError, ClientLayer, ConfigError, RetryPolicy};
use std::sync::Arc;
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt};

/// What every target of every route is: a request in, an answer out.
pub(crate) type TargetService =
    BoxCloneSyncService<Request<Full<Bytes>>, Response<axum::body::Body>, BoxError>;

/// The credential header Anthropic's API reads.
pub(crate) const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// The credential header Azure OpenAI reads.
pub(crate) const API_KEY: HeaderName = HeaderName::from_static("api-key");

/// Credential headers a client may send, and the headers that choose
/// which account a key bills: never forwarded to a target that has a
/// credential of its own.
const CREDENTIAL_HEADERS: [HeaderName; 5] = [
    header::AUTHORIZATION,
    X_API_KEY,
    API_KEY,
    HeaderName::from_static("openai-organization"),
    HeaderName::from_static("openai-project"),
];

/// Headers that belong to one connection (or one side), never forwarded
/// either way; with them, every header the `Connection` header names.
const NOT_FORWARDED: [HeaderName; 11] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::COOKIE,
    header::SET_COOKIE,
];

/// Whether `headers` name a transfer coding other than `chunked`: a body
/// the client side reads as it came (hyper decodes `chunked` only), which
/// forwarded without its `transfer-encoding` would pass as plain bytes.
pub(crate) fn foreign_transfer_coding(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .any(|value| {
            value.to_str().map_or(true, |value| {
                value
                    .split(',')
                    .any(|coding| !coding.trim().eq_ignore_ascii_case("chunked"))
            })
        })
}

/// Removes the headers that must not cross the gateway: hop-by-hop ones,
/// those the `Connection` header names, cookies, and a `content-length`
/// that `transfer-encoding` overrides.
pub(crate) fn strip_unforwarded(headers: &mut http::HeaderMap) {
    // Most messages carry none of them: one pass over the names present
    // (a `Connection` header among them) instead of a lookup for each.
    if !headers.keys().any(|name| NOT_FORWARDED.contains(name)) {
        return;
    }
    // A message framed by `transfer-encoding` was read by it; a
    // `content-length` beside it is not its body's length (RFC 9112, 6.3),
    // and forwarded it would cut the body short and look whole.
    if headers.contains_key(header::TRANSFER_ENCODING) {
        headers.remove(header::CONTENT_LENGTH);
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|token| HeaderName::try_from(token.trim()).ok())
        .collect();
    for name in named.iter().chain(&NOT_FORWARDED) {
        headers.remove(name);
    }
}

/// The connector every target shares: HTTPS with the system's roots (or,
/// without any, with none: https targets then fail their handshake with a
/// clear error) and plain HTTP.
pub(crate) fn connector() -> Result<HttpsConnector<HttpConnector>, String> {
    let builder = match hyper_rustls::HttpsConnectorBuilder::new().with_native_roots() {
        Ok(builder) => builder,
        Err(error) => {
            tracing::warn!(%error, "no system root certificates: https targets will fail");
            let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS configuration: {e}"))?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
        }
    };
    // Upstream streams are many small reads and writes too: no Nagle.
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    Ok(builder
        .https_or_http()
        .enable_all_versions()
        .wrap_connector(http))
}

/// The target's retry layer, as [`service`] builds it: refused settings
/// are found when the config is read, with the target named.
pub(crate) fn validate(route: &RouteConfig, target: &TargetConfig) -> Result<(), ConfigError> {
    client_layer(route, target, RetryBudget::default(), None).map(|_| ())
}

fn client_layer(
    route: &RouteConfig,
    target: &TargetConfig,
    budget: RetryBudget,
    holds: Option<Arc<dyn SharedGate>>,
) -> Result<ClientLayer, ConfigError> {
    let mut policy = RetryPolicy::builder()
        .max_retries(target.max_retries)
        .max_server_wait(target.max_server_wait)
        .max_elapsed(route.deadline)
        .budget(budget);
    if let Some(timeout) = target.attempt_timeout {
        policy = policy.attempt_timeout(timeout);
    }
    let gate = match target.requests_per_minute {
        Some(rpm) => Some(RateLimitLayer::new(
            Quotas::none().requests_per_minute(rpm),
        )?),
        None => None,
    };
    let gate = match (gate, holds) {
        (gate, Some(holds)) => Some(
            gate.unwrap_or_else(RateLimitLayer::learned)
                .share_with(holds),
        ),
        (gate, None) => gate,
    };
    let layer = ClientLayer::new(policy.build()?);
    Ok(match gate {
        Some(gate) => layer.rate_limit(gate),
        None => layer,
    })
}

/// A target's service, and the store its budget shares, if it does.
pub(crate) struct BuiltTarget {
    pub(crate) service: TargetService,
    pub(crate) shared: Vec<SharedStore>,
}

/// The target's service: `ClientLayer` with the target's retries, quota
/// and timeouts, timed per answer for the metrics. With `shared`, its
/// retry budget's counts and its gate's holds are shared under
/// `<route>/<target>`.
pub(crate) fn service(
    route: &RouteConfig,
    target: &TargetConfig,
    connector: HttpsConnector<HttpConnector>,
    shared: Option<&SharedState>,
) -> Result<BuiltTarget, String> {
    // Each target's own budget, its gauge labelled `route/target`.
    let budget = RetryBudget::default().named(format!("{}/{}", route.name, target.name));
    let (budget, holds, stores) = match shared {
        Some(shared) => {
            let (budget, budget_store) = shared.budget(&route.name, &target.name, budget)?;
            let (holds, holds_store) = shared.holds(&route.name, &target.name)?;
            (budget, Some(holds), vec![budget_store, holds_store])
        }
        None => (budget, None, Vec::new()),
    };
    let layer = client_layer(route, target, budget, holds).map_err(|error| error.to_string())?;
    let client = Client::builder(TokioExecutor::new()).build(connector);
    let stack = layer
        .layer(client)
        .map_response(|response: Response<_>| response.map(axum::body::Body::new));
    let seconds = TargetSeconds::new(&route.name, &target.name);
    Ok(BuiltTarget {
        service: BoxCloneSyncService::new(Timed::new(stack, seconds)),
        shared: stores,
    })
}

/// Makes a target's request from a copy of the original: the target's
/// base URL with the request's path and query (no header ever chooses the
/// upstream), the target's credential instead of the client's, and the
/// target's model.
pub(crate) fn rewrite(
    target: &TargetConfig,
) -> impl Fn(&mut Parts, &mut Bytes) -> Result<(), BoxError> + Send + Sync + 'static {
    let base = target.base_url.clone();
    let base_path = base.path().trim_end_matches('/').to_owned();
    let credential = target.credential.clone();
    let model = target.model.clone().map(llm_retry::failover::set_model);
    move |parts, body| {
        // Under a base URL with no path the request's own path and query
        // are taken as they are (a shared copy), not written and parsed.
        let path_and_query = match parts.uri.path_and_query() {
            Some(pq) if base_path.is_empty() => pq.clone(),
            pq => {
                let pq = pq.map_or("/", PathAndQuery::as_str);
                PathAndQuery::try_from(format!("{base_path}{pq}"))?
            }
        };
        let mut uri = http::uri::Parts::default();
        uri.scheme = base.scheme().cloned();
        uri.authority = base.authority().cloned();
        uri.path_and_query = Some(path_and_query);
        parts.uri = Uri::from_parts(uri)?;
        // The client's protocol is not the upstream's: an HTTP/2 request
        // sent as such on an HTTP/1 connection is refused by the client
        // before it leaves. HTTP/1.1 goes on either (an upstream that
        // offers HTTP/2 by ALPN gets it).
        parts.version = http::Version::HTTP_11;
        parts.headers.remove(header::HOST);
        parts.headers.remove(header::CONTENT_LENGTH);
        strip_unforwarded(&mut parts.headers);
        if let Some((name, value)) = &credential {
            for header in &CREDENTIAL_HEADERS {
                parts.headers.remove(header);
            }
            parts.headers.insert(name.clone(), value.clone());
        }
        if let Some(model) = &model {
            model(parts, body)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn target(base_url: &str) -> TargetConfig {
        let toml = format!(
            "[[route]]\nname = \"r\"\n[[route.target]]\nname = \"a\"\nbase_url = \"{base_url}\"\n"
        );
        let config = crate::Config::parse(&toml, |_| None).unwrap();
        config.routes[0].targets[0].clone()
    }

    fn rewritten(base_url: &str, uri: &str) -> String {
        let (mut parts, ()) = Request::builder().uri(uri).body(()).unwrap().into_parts();
        let mut body = Bytes::new();
        rewrite(&target(base_url))(&mut parts, &mut body).unwrap();
        parts.uri.to_string()
    }

    #[test]
    fn the_target_gets_its_base_url_with_the_requests_path_and_query() {
        for (base, uri, expected) in [
            (
                "http://up:8080",
                "/v1/messages?beta=true",
                "http://up:8080/v1/messages?beta=true",
            ),
            ("https://up/", "/v1/messages", "https://up/v1/messages"),
            (
                "http://up/openai",
                "/v1/chat/completions?x=1",
                "http://up/openai/v1/chat/completions?x=1",
            ),
            (
                "http://up/openai/",
                "/v1/chat/completions",
                "http://up/openai/v1/chat/completions",
            ),
            (
                "http://up/openai/",
                "http://client-chosen:1/v1/models",
                "http://up/openai/v1/models",
            ),
            (
                "http://up",
                "http://client-chosen:1/v1/models",
                "http://up/v1/models",
            ),
        ] {
            assert_eq!(rewritten(base, uri), expected, "{base} {uri}");
        }
    }
}
