//! What rate-limit gates share through Redis: the holds a provider's
//! named waits set, and each quota's pace. [`RedisGate`].

mod news;
mod pace;
mod store;
mod sync;

pub use store::RedisGate;
