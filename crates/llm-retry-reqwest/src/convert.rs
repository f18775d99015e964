//! Conversions between reqwest's request and response types and `http`'s.

use bytes::Bytes;
use http_body::Body;
use reqwest::ResponseBuilderExt;
use std::time::Duration;

/// What a reqwest request keeps outside `http::Request`, for rebuilding
/// each attempt as reqwest sends it: its parsed URL (parsing one costs more
/// than the rest of the conversion) and its per-request timeout.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    url: reqwest::Url,
    uri: http::Uri,
    timeout: Option<Duration>,
}

/// A reqwest request as the retry engine sees it, and what rebuilds it.
pub(crate) fn to_http(
    mut request: reqwest::Request,
) -> Result<(http::Request<reqwest::Body>, Origin), http::uri::InvalidUri> {
    let uri = http::Uri::try_from(request.url().as_str())?;
    let mut http = http::Request::new(request.body_mut().take().unwrap_or_default());
    *http.method_mut() = request.method().clone();
    *http.uri_mut() = uri.clone();
    *http.version_mut() = request.version();
    *http.headers_mut() = std::mem::take(request.headers_mut());
    let origin = Origin {
        timeout: request.timeout().copied(),
        url: request.url().clone(),
        uri,
    };
    Ok((http, origin))
}

/// One attempt of the engine's request, as reqwest sends it: the original
/// URL unless a layer changed the URI, and the original timeout.
pub(crate) fn to_reqwest<B>(
    request: http::Request<B>,
    origin: &Origin,
) -> reqwest::Result<reqwest::Request>
where
    B: Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if request.uri() != &origin.uri {
        let mut rebuilt = reqwest::Request::try_from(request.map(reqwest::Body::wrap))?;
        *rebuilt.timeout_mut() = origin.timeout;
        return Ok(rebuilt);
    }
    let (parts, body) = request.into_parts();
    let mut rebuilt = reqwest::Request::new(parts.method, origin.url.clone());
    *rebuilt.headers_mut() = parts.headers;
    *rebuilt.version_mut() = parts.version;
    *rebuilt.body_mut() = Some(reqwest::Body::wrap(body));
    *rebuilt.timeout_mut() = origin.timeout;
    Ok(rebuilt)
}

/// A reqwest response as the engine sees it. The response's URL rides in
/// its extensions, where [`to_reqwest_response`] finds it again.
pub(crate) fn from_reqwest(response: reqwest::Response) -> http::Response<reqwest::Body> {
    let url = response.url().clone();
    let mut response = http::Response::<reqwest::Body>::from(response);
    // reqwest keeps a response's URL in an extension of a private type; its
    // response builder is the public way to put one there.
    if let Ok(carrier) = http::Response::builder().url(url).body(()) {
        response
            .extensions_mut()
            .extend(carrier.into_parts().0.extensions);
    }
    response
}

/// The engine's final response, as reqwest hands it to the caller: with its
/// URL, its status and headers, and the report in its extensions.
pub(crate) fn to_reqwest_response<B>(response: http::Response<B>) -> reqwest::Response
where
    B: Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    reqwest::Response::from(response.map(reqwest::Body::wrap))
}
