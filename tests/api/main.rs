//! Integration tests: a real PostgreSQL (a fresh database per test), the app on a free port,
//! and real HTTP. See support.rs for the harness.

mod admin;
mod agents;
mod architecture;
mod auto;
mod cli;
mod client;
mod compat;
mod connections;
mod console;
mod deploy;
mod embedded;
mod events;
mod expiry;
mod foreseen;
mod idempotency;
mod issues;
mod listings;
mod lost;
mod malformed;
mod mcp;
mod metrics;
mod migrations;
mod moves;
mod negotiation;
mod openapi;
mod proxy;
mod races;
mod request_ids;
mod scale;
mod shared_limits;
mod sim;
mod spec;
mod support;
mod walkthrough;
mod webhooks;
