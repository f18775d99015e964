//! A caller's deadline for one request, carried in its extensions.

use tokio::time::Instant;

/// The instant past which a retry stack neither waits nor resends for a
/// request (the attempt in flight is cut by whoever set it: the failover
/// that put it there times its own attempt). A
/// [`Failover`](crate::failover::Failover) puts its own deadline on every
/// attempt's request, so a target's retry stack never sleeps past what the
/// failover has left; the stack keeps the sooner of this and its policy's
/// `max_elapsed`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline(pub(crate) Instant);
