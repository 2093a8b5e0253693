//! Haggle's wire: what travels between the server and its clients.
//!
//! Request bodies and query strings, the views the API answers with, pages, events and problem details, each
//! declared once and shared by the server (which serializes views and reads requests) and the
//! typed client (which does the reverse). Nothing here knows about the database: the server
//! turns its rows into these views at its edge.

pub mod admin;
pub mod approvals;
pub mod events;
pub mod page;
pub mod problem;
pub mod query;
pub mod requests;
pub mod signature;
pub mod timeline;
pub mod views;

pub use admin::*;
pub use approvals::*;
pub use events::{Event, EventPage, EventType};
pub use page::Page;
pub use problem::{Code, Problem, ProblemField};
pub use requests::*;
pub use views::*;

/// For fields where absent and `null` differ: absent leaves a value alone, `null` clears it.
pub fn double_option<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    serde::Deserialize::deserialize(deserializer).map(Some)
}
