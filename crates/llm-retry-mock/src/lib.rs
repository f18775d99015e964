//! A scripted, fault-injecting LLM upstream on loopback.
