//! Conversions between reqwest's request and response types and `http`'s.

use bytes::Bytes;
use http_body::Body;
use reqwest::ResponseBuilderExt;

/// A reqwest request as the retry engine sees it. Its extensions (which
/// carry reqwest's per-request timeout) travel with it.
pub(crate) fn to_http(request: reqwest::Request) -> reqwest::Result<http::Request<reqwest::Body>> {
    http::Request::try_from(request)
}

/// One attempt of the engine's request, as reqwest sends it.
pub(crate) fn to_reqwest<B>(request: http::Request<B>) -> reqwest::Result<reqwest::Request>
where
    B: Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    reqwest::Request::try_from(request.map(reqwest::Body::wrap))
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
