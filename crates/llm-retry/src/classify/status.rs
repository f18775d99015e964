//! The status-primary decision table.

use super::{Classification, ProviderError};
use http::{HeaderMap, StatusCode};

/// Classifies a response from its status, headers and (when read) the provider error in its body.
pub fn classify_response(
    status: StatusCode,
    _headers: &HeaderMap,
    _provider: Option<&ProviderError>,
) -> Classification {
    if status.is_success() {
        Classification::Success
    } else {
        Classification::Fatal(super::FatalKind::Status(status))
    }
}
