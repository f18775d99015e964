//! A gate's key holds (a provider's named waits) shared by replicas
//! through Redis: [`RedisHolds`].

mod store;
mod sync;

pub use store::RedisHolds;
