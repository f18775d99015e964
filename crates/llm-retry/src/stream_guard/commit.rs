//! [`StreamCommit`]: has any byte of this response reached the caller?

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// A handle in a guarded streamed response's extensions that tells any
/// outer retry loop whether the attempt is committed.
///
/// An attempt is *committed* once at least one byte was forwarded to the
/// caller; from then on it may only finish or fail, never be replayed.
/// Cloning shares the same state.
#[derive(Debug, Clone, Default)]
pub struct StreamCommit {
    state: Arc<CommitState>,
}

#[derive(Debug, Default)]
struct CommitState {
    bytes_forwarded: AtomicU64,
    end: AtomicU8,
}

/// How a guarded stream ended, as seen by its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamEnd {
    /// The stream ended normally.
    Completed,
    /// The stream failed after content was forwarded.
    Interrupted,
    /// The caller dropped the body before its end.
    Dropped,
}

const OPEN: u8 = 0;

impl StreamEnd {
    fn code(self) -> u8 {
        match self {
            StreamEnd::Completed => 1,
            StreamEnd::Interrupted => 2,
            StreamEnd::Dropped => 3,
        }
    }

    fn from_code(code: u8) -> Option<StreamEnd> {
        match code {
            1 => Some(StreamEnd::Completed),
            2 => Some(StreamEnd::Interrupted),
            3 => Some(StreamEnd::Dropped),
            _ => None,
        }
    }
}

impl StreamCommit {
    /// Whether any byte reached the caller: if so, never replay this request.
    pub fn is_committed(&self) -> bool {
        self.bytes_forwarded() > 0
    }

    /// Bytes forwarded to the caller so far.
    pub fn bytes_forwarded(&self) -> u64 {
        self.state.bytes_forwarded.load(Ordering::Acquire)
    }

    /// How the stream ended, once it has.
    pub fn end(&self) -> Option<StreamEnd> {
        StreamEnd::from_code(self.state.end.load(Ordering::Acquire))
    }

    pub(super) fn add_forwarded(&self, n: usize) {
        self.state
            .bytes_forwarded
            .fetch_add(n as u64, Ordering::AcqRel);
    }

    /// Records the end; only the first call counts.
    pub(super) fn set_end(&self, end: StreamEnd) -> bool {
        self.state
            .end
            .compare_exchange(OPEN, end.code(), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}
