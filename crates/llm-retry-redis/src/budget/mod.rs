//! A [`RetryBudget`](llm_retry::budget::RetryBudget) whose counts are
//! shared by replicas through Redis: [`RedisBudgetStore`].

mod store;
mod sync;

pub use store::RedisBudgetStore;
