//! Pages of a list.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A page of a list, newest first; pass `next_cursor` as the query's `cursor` for the next one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    pub data: Vec<T>,
    pub next_cursor: Option<Uuid>,
}

impl<T> Page<T> {
    /// Builds a page from `limit + 1` fetched rows: the extra row only says that more exist.
    pub fn from_rows(mut rows: Vec<T>, limit: i64, id: impl Fn(&T) -> Uuid) -> Page<T> {
        let more = rows.len() as i64 > limit;
        rows.truncate(limit.max(0) as usize);
        let next_cursor = if more { rows.last().map(&id) } else { None };
        Page { data: rows, next_cursor }
    }

    /// The same page with every item changed by `f`.
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page { data: self.data.into_iter().map(f).collect(), next_cursor: self.next_cursor }
    }
}
