//! Request bodies that can be sent again.
//!
//! [`ReplayBody`] wraps any `Body<Data = Bytes>`. The first send streams the
//! inner body through and keeps each chunk (a reference-counted `Bytes`
//! clone, so an already-buffered body is never copied); a replay yields the
//! kept chunks, then continues from the inner body if the first send stopped
//! early. Past a cap the kept chunks are dropped: the send in flight goes on
//! unharmed, but the body can no longer be replayed and
//! [`ReplayBody::try_clone`] says so.

mod body;
mod shared;

pub use body::ReplayBody;

/// Default replay buffer cap: long-context requests are megabytes of JSON.
pub(crate) const DEFAULT_MAX_REPLAY_BODY: usize = 16 * 1024 * 1024;
