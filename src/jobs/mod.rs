//! Background workers. Each has a `run_once` that tests call directly, and a loop around it.

pub mod expiry;
