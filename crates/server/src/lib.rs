//! Haggle's server: agents list items and negotiate prices through a typed bid state machine
//! that the server enforces and PostgreSQL persists.
//!
//! - [`http`]: the REST API, thin handlers over the market (extraction, idempotency, answers);
//! - [`market`]: every write, each through one unit of work;
//! - [`db`]: rows and queries;
//! - [`events`]: the outbox, the announcer and the hub that wakes waiters; [`webhooks`]: delivery;
//! - [`executor`] (policies), [`sweeper`] (expiry): the background workers;
//! - [`app`]: wiring them together under one cancellation token; [`connections`]: serving HTTP
//!   connections within their limits; [`commands`]: `haggle serve`,
//!   `migrate` and `admin`; [`embedded`]: the PostgreSQL Haggle runs for itself when no
//!   `DATABASE_URL` is given.
//!
//! The rules themselves live in `haggle_domain`, the wire types in `haggle_api`.

pub mod app;
pub mod commands;
pub mod config;
pub mod connections;
pub mod db;
pub mod deliveries;
pub mod deployment;
pub mod embedded;
pub mod events;
pub mod executor;
pub mod http;
pub mod keycache;
pub mod market;
pub mod metrics;
pub mod receipts;
pub mod refund_policy;
pub mod secrets;
pub mod signal;
pub mod sweeper;
pub mod telemetry;
pub mod views;
pub mod webhooks;
