//! Shared state of [llm-retry](llm_retry) for replicas behind one provider
//! key, through Redis, that keeps serving when Redis is slow or gone.
//!
//! What is shared:
//! - the [retry budget](llm_retry::budget::RetryBudget)
//!   ([`RedisBudgetStore`]), so the fleet's retries stay within the
//!   budget's share of the fleet's first attempts;
//! - the failover's cooldowns and unhealthy marks ([`RedisTargetMarks`]),
//!   so a target one replica sets aside is skipped by all;
//! - what rate-limit gates know of a key ([`RedisGate`]): a 429's named
//!   wait that one replica's gate takes keeps every replica's next sends
//!   to that key and model (each send reads the key's hold before it
//!   goes), and a request or token quota the gates were told or the
//!   provider stated paces the fleet's sends together, not each
//!   replica's.
//!
//! Every key is hash-tagged by its [`StateName`] (`{<namespace>:<name>}:…`,
//! the namespace [`DEFAULT_NAMESPACE`] unless chosen), so one name's keys
//! share a cluster slot, and carries a TTL. Every Redis call
//! is bounded by [`SharedOptions::timeout`]; past it, or on an error, a
//! store decides from local state ([`FailureMode::FailOpen`], the default)
//! or refuses what needs the shared state ([`FailureMode::FailClosed`]),
//! logs once at `warn`, and sets the `llm_retry_shared_state_degraded`
//! gauge (labels `store`, `name`; feature `metrics`) until Redis answers.
//!
//! See `docs/scale-out.md` for keys, TTLs and failure modes.

mod budget;
mod ends;
mod failover;
mod gate;
mod health;
mod key;
mod options;
mod task;

pub use budget::RedisBudgetStore;
pub use failover::RedisTargetMarks;
pub use gate::RedisGate;
pub use key::{InvalidName, StateName, DEFAULT_NAMESPACE};
pub use options::{FailureMode, SharedOptions};
