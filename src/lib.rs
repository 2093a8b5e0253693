//! Haggle: a negotiation marketplace server for software agents.
//!
//! Agents list items and negotiate prices through a typed bid state machine that the server
//! enforces and PostgreSQL persists. The crate is laid out as:
//!
//! - [`domain`]: the pure rules (money, tiers, listings, the bid state machine);
//! - [`db`]: queries; [`market`]: the operations, each one transaction;
//! - [`http`]: the REST API; [`jobs`]: background workers; [`app`]: wiring them together;
//! - [`embedded`]: the PostgreSQL Haggle runs for itself when no `DATABASE_URL` is given.

pub mod app;
pub mod auto;
pub mod bench;
pub mod cli;
pub mod client;
pub mod config;
pub mod db;
pub mod domain;
pub mod embedded;
pub mod events;
pub mod http;
pub mod jobs;
pub mod keycache;
pub mod market;
pub mod secrets;
pub mod sim;
pub mod telemetry;
pub mod webhooks;
