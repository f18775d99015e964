//! The tower service that sleeps and resends: [`RetryLayer`] → [`Retry`].
//!
//! ```no_run
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use llm_retry::{ReplayBody, RetryLayer, RetryPolicy};
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # async fn run<C>(client: C) -> Result<(), llm_retry::BoxError>
//! # where
//! #     C: Service<http::Request<ReplayBody<Full<Bytes>>>, Response = http::Response<Full<Bytes>>> + Clone,
//! #     C::Error: Into<llm_retry::BoxError>,
//! # {
//! let mut svc = ServiceBuilder::new()
//!     .layer(RetryLayer::new(RetryPolicy::default()))
//!     .service(client);
//! let request = http::Request::post("http://127.0.0.1:8080/v1/messages")
//!     .body(Full::new(Bytes::from_static(b"{}")))?;
//! let response = svc.ready().await?.call(request).await?;
//! let report = response.extensions().get::<llm_retry::RetryReport>();
//! println!("{:?}", report.map(|r| r.attempts));
//! # Ok(())
//! # }
//! ```

pub(crate) mod account;
mod attempt;
mod body;
pub(crate) mod future;
mod layer;
mod peek;
mod service;
mod tower_path;

pub use body::RetryBody;
pub use layer::RetryLayer;
pub use service::Retry;

#[cfg(test)]
mod bounds_proptest;
#[cfg(test)]
mod equivalence_proptest;
#[cfg(test)]
pub(crate) mod tests;
#[cfg(all(test, feature = "metrics"))]
pub(crate) use tests as tests_support;
