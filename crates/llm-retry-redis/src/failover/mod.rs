//! Failover marks (cooldowns, unhealthy marks) shared by replicas through
//! Redis: [`RedisTargetMarks`].

mod store;
mod sync;

pub use store::RedisTargetMarks;
