//! The library's own layer errors, read by their [`Reported`] classification.

use crate::classify::{recognise, Recognise};
use crate::rate_limit::GateError;
use crate::stream_guard::{PreContentError, StreamInterrupted};

#[cfg(doc)]
use crate::classify::Reported;

/// Every error type a layer of this crate fails an attempt with.
pub(super) const LAYER_ERRORS: [Recognise; 3] = [
    recognise::<PreContentError>,
    recognise::<StreamInterrupted>,
    recognise::<GateError>,
];
