//! The tower service that sleeps and resends: [`RetryLayer`] → [`Retry`].
//! (Private: its types are documented where the crate root exports them.)

pub(crate) mod account;
mod attempt;
mod body;
mod carry;
mod entered;
pub(crate) mod future;
mod layer;
mod peek;
mod service;
mod tower_path;

pub use body::RetryBody;
pub use layer::RetryLayer;
pub use service::Retry;

#[cfg(test)]
mod bounds_property_tests;
#[cfg(test)]
mod carry_tests;
#[cfg(test)]
mod equivalence_property_tests;
#[cfg(test)]
pub(crate) mod service_tests;
#[cfg(test)]
mod stream_property_tests;
