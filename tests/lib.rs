//! End-to-end tests for llm-retry live in `tests/`.
