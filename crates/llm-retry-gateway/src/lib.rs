//! `llm-retry-gateway`: an LLM API gateway with priority failover and
//! bounded retry rounds, built on the llm-retry engine.
//!
//! Clients (the official Anthropic and OpenAI SDKs, or anything that speaks
//! their APIs) send their requests to the gateway; each [route](Config)
//! sends them to its ordered targets (providers, deployments, API keys),
//! each behind the library's retry stack, and moves to the next target when
//! the one-decision engine certifies the request was not executed (a 429,
//! a 529 or `overloaded_error` before any content, a connection never
//! made), or after an overload answered before content (a 502, 503 or
//! 504, or a 500 naming `server_error`). When it gives up the answer carries `x-should-retry: false` and
//! the wait left as `retry-after`, so the client's SDK does not multiply
//! the gateway's retries. Streams pass through unchanged once their first
//! content arrived.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let text = std::fs::read_to_string("gateway.toml")?;
//! let config = llm_retry_gateway::Config::parse(&text, |var| std::env::var(var).ok())?;
//! let gateway = llm_retry_gateway::Gateway::new(&config)?;
//! let listener = llm_retry_gateway::listen(config.listen)?;
//! gateway.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(())
//! # }
//! ```
//!
//! The config file is documented in `docs/gateway.md`; run the binary with
//! no arguments for a self-contained demo against two local mock targets.
//!
//! # Feature flags
//!
//! None.
#![forbid(unsafe_code)]

mod answer;
mod config;
mod counts;
pub mod demo;
mod dispatch;
mod duration;
mod ending;
mod first_head;
mod flush_first;
mod gateway;
mod idle;
mod inflight;
mod listen;
mod load;
mod prometheus;
mod proxy;
mod route;
mod shared_config;
mod shared_state;
mod timed;
mod upstream;

pub use config::{Config, ConfigError, RouteConfig, TargetConfig};
pub use gateway::{BuildError, Gateway};
pub use listen::{listen, LISTEN_BACKLOG};
pub use llm_retry_redis::FailureMode;
pub use prometheus::{prometheus, SECONDS_BUCKETS};
pub use shared_config::{KeySecret, RedisUrl, SharedConfig};
