//! How query strings are read: the types of the routes that take one (a type per list, per
//! wait and per stream: [`crate::ListingQuery`], ..., [`crate::AdminAgentQuery`], ...) are
//! written by the typed client and read by the server with [`read`], and by the MCP tools from
//! their JSON arguments, with the field readers of this module.
//!
//! A query is malformed (400) when a parameter is unknown or repeated, or a value cannot be
//! read as its parameter's type (`limit=ten`, an id that is not a UUID). A value that reads
//! but that its parameter does not take (`status=GONE`, a forged `cursor`, `limit=-1`) is
//! refused by the parameter's name (422), and only when nothing in the query is malformed.
//! Bounds that a value of the field's type can still break (`limit=0`, `after=-1`) are the
//! server's to check, in the words of this module where the two meet ([`limit_range`]).

use std::borrow::Cow;
use std::fmt::Display;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use haggle_domain::FieldError;
use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer};
use uuid::Uuid;

/// The page size of a list when its query gives none.
pub const DEFAULT_LIMIT: u32 = 50;
/// The largest page of a list.
pub const MAX_LIMIT: u32 = 200;
/// The window of `GET /v1/admin/stats` when its query gives none, in hours.
pub const DEFAULT_STATS_HOURS: u32 = 24;
/// The longest window of `GET /v1/admin/stats`, in hours (30 days).
pub const MAX_STATS_HOURS: u32 = 720;

/// What a `limit` outside 1 to [`MAX_LIMIT`] is told.
pub fn limit_range() -> String {
    between(MAX_LIMIT)
}

/// What an `hours` outside 1 to [`MAX_STATS_HOURS`] is told.
pub fn hours_range() -> String {
    between(MAX_STATS_HOURS)
}

fn between(max: u32) -> String {
    format!("must be between 1 and {max}")
}

/// Why a query string was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryError {
    /// A parameter unknown or repeated, or a value that is not of its parameter's type, in the
    /// deserializer's words after the parameter's name.
    Malformed(String),
    /// Values that their parameters do not take, each named as sent, in the order sent.
    Refused(Vec<FieldError>),
}

/// Reads a query string (without its `?`) into `T`. Every value is read before a refusal is
/// answered, so that a malformed value anywhere in the query makes it malformed.
pub fn read<T: DeserializeOwned>(query: &str) -> Result<T, QueryError> {
    let mut query = Cow::Borrowed(query);
    let mut refused = Vec::new();
    loop {
        let deserializer = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        let error = match serde_path_to_error::deserialize::<_, T>(deserializer) {
            Ok(value) if refused.is_empty() => return Ok(value),
            Ok(_) => return Err(QueryError::Refused(refused)),
            Err(error) => error,
        };
        let inner = error.inner().to_string();
        let Some(message) = inner.strip_prefix(REFUSED) else {
            return Err(QueryError::Malformed(error.to_string()));
        };
        let name = error.path().to_string();
        let (this, others): (Vec<_>, Vec<_>) =
            form_urlencoded::parse(query.as_bytes()).partition(|(key, _)| *key == name);
        // A value is read where its parameter first appears; the parameter again is a repeat.
        if this.len() > 1 {
            return Err(QueryError::Malformed(format!("duplicate field `{name}`")));
        }
        refused.push(FieldError::new(name, message));
        // The path names a key of the query; were it ever not to, nothing would be left out
        // and the same refusal would come again.
        if this.is_empty() {
            return Err(QueryError::Refused(refused));
        }
        query = Cow::Owned(form_urlencoded::Serializer::new(String::new()).extend_pairs(others).finish());
    }
}

/// How a refusal's message starts, for [`read`] to tell it from a malformed value.
const REFUSED: &str = "not accepted: ";

fn refuse<E: de::Error>(message: impl Display) -> E {
    E::custom(format_args!("{REFUSED}{message}"))
}

/// A value read by its type's `FromStr`, which says what it takes.
pub(crate) fn choice<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr<Err = String>,
{
    let text = Option::<String>::deserialize(deserializer)?;
    text.map(|text| text.parse().map_err(refuse)).transpose()
}

/// A page's cursor: the id a previous page gave as its `next_cursor`.
pub(crate) fn cursor<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Uuid>, D::Error> {
    let text = Option::<String>::deserialize(deserializer)?;
    text.map(|text| Uuid::parse_str(&text).map_err(|_| refuse("must be a next_cursor from a previous page")))
        .transpose()
}

/// A whole number (`2`, `2.0`) that a `u32` holds; the words for one it does not are `range`'s.
fn bounded<'de, D: Deserializer<'de>>(deserializer: D, range: fn() -> String) -> Result<Option<u32>, D::Error> {
    let number = haggle_domain::whole::text_option(deserializer)?;
    number.map(|number| u32::try_from(number).map_err(|_| refuse(range()))).transpose()
}

pub(crate) fn limit<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    bounded(deserializer, limit_range)
}

pub(crate) fn hours<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    bounded(deserializer, hours_range)
}

/// An event id as a whole number; its bound (0 or more) is the server's to check.
pub(crate) fn event_id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    haggle_domain::whole::text_option(deserializer).map(Option::unwrap_or_default)
}

/// An RFC 3339 timestamp.
pub(crate) fn moment<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<DateTime<Utc>>, D::Error> {
    let text = Option::<String>::deserialize(deserializer)?;
    text.map(|text| {
        DateTime::parse_from_rfc3339(&text)
            .map(|at| at.with_timezone(&Utc))
            .map_err(|_| refuse("must be an RFC 3339 timestamp, such as 2026-01-31T00:00:00Z"))
    })
    .transpose()
}

/// `true` or `false`, as a query string writes them.
pub(crate) fn flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<bool>, D::Error> {
    let text = Option::<String>::deserialize(deserializer)?;
    text.map(|text| match text.as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(refuse("must be `true` or `false`")),
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        AdminAgentQuery, AdminOrderQuery, AdminPageQuery, AdminThreadQuery, AdminWebhookQuery, AgentStatus, EventQuery,
        ListingQuery, PageQuery, StatsQuery, ThreadQuery,
    };
    use haggle_domain::{ListingStatus, ThreadStatus};

    fn refused(field: &str, message: &str) -> FieldError {
        FieldError::new(field, message)
    }

    #[test]
    fn typed_values_are_read_from_a_query_and_written_back_the_same() {
        let query = ListingQuery {
            seller_id: Some(Uuid::nil()),
            status: Some(ListingStatus::Sold),
            q: Some("oak chair".to_owned()),
            limit: Some(20),
            cursor: Some(Uuid::max()),
        };
        let written = serde_urlencoded::to_string(&query).unwrap();
        assert_eq!(read::<ListingQuery>(&written), Ok(query));
        assert_eq!(read::<ListingQuery>(""), Ok(ListingQuery::default()));
        assert_eq!(read::<ThreadQuery>("role=buyer&status=active").unwrap().status, Some(ThreadStatus::Active));
        assert_eq!(
            read::<EventQuery>("after=3.0&limit=1e1&wait=2.5"),
            Ok(EventQuery { after: 3, limit: Some(10), wait: Some(2.5) })
        );
        let admin = AdminWebhookQuery { failing: Some(true), limit: None, cursor: None };
        assert_eq!(read::<AdminWebhookQuery>(&serde_urlencoded::to_string(&admin).unwrap()), Ok(admin));
        let since = "2026-01-31T00:00:00Z".parse::<DateTime<Utc>>().unwrap();
        let admin = AdminOrderQuery { since: Some(since), ..AdminOrderQuery::default() };
        assert_eq!(read::<AdminOrderQuery>(&serde_urlencoded::to_string(&admin).unwrap()), Ok(admin));
        assert_eq!(
            read::<AdminPageQuery>("after=00000000-0000-0000-0000-000000000000").unwrap().cursor,
            Some(Uuid::nil())
        );
        assert_eq!(read::<AdminAgentQuery>("status=SUSPENDED").unwrap().status, Some(AgentStatus::Suspended));
    }

    #[test]
    fn values_their_parameters_do_not_take_are_refused_by_name() {
        let status = "unknown listing status `GONE`; expected one of ACTIVE, SOLD, WITHDRAWN";
        assert_eq!(read::<ListingQuery>("status=GONE"), Err(QueryError::Refused(vec![refused("status", status)])));
        assert_eq!(
            read::<ThreadQuery>("cursor=abc&limit=-1"),
            Err(QueryError::Refused(vec![
                refused("cursor", "must be a next_cursor from a previous page"),
                refused("limit", "must be between 1 and 200"),
            ]))
        );
        assert_eq!(
            read::<StatsQuery>("hours=-1"),
            Err(QueryError::Refused(vec![refused("hours", "must be between 1 and 720")]))
        );
        assert_eq!(
            read::<AdminWebhookQuery>("failing=yes"),
            Err(QueryError::Refused(vec![refused("failing", "must be `true` or `false`")]))
        );
        assert!(
            matches!(read::<AdminThreadQuery>("since=yesterday"), Err(QueryError::Refused(fields)) if fields[0].field == "since")
        );
        // Bounds a u32 can hold are the server's.
        assert_eq!(read::<PageQuery>("limit=0").unwrap().limit, Some(0));
    }

    #[test]
    fn a_malformed_value_anywhere_makes_the_query_malformed() {
        let malformed = |query: &str| match read::<ListingQuery>(query) {
            Err(QueryError::Malformed(text)) => text,
            other => panic!("{query}: {other:?}"),
        };
        assert_eq!(malformed("limit=ten"), "limit: invalid value: string \"ten\", expected a whole number");
        assert_eq!(malformed("status=GONE&limit=ten"), malformed("limit=ten"));
        assert!(malformed("status=GONE&sort=price").contains("unknown field `sort`"), "{}", malformed("sort=price"));
        assert!(malformed("seller_id=42").starts_with("seller_id: "));
        // A refused value given twice is a repeat, as any parameter given twice is.
        assert_eq!(malformed("status=GONE&status=SOLD"), malformed("status=SOLD&status=SOLD"));
        assert_eq!(malformed("limit=2.5"), "limit: invalid value: string \"2.5\", expected a whole number");
    }

    #[test]
    fn tool_arguments_read_as_json_take_numbers_and_nulls() {
        let query: EventQuery = serde_json::from_str(r#"{"after": 7, "limit": 20, "wait": 1.5}"#).unwrap();
        assert_eq!(query, EventQuery { after: 7, limit: Some(20), wait: Some(1.5) });
        let query: ListingQuery =
            serde_json::from_str(r#"{"status": "ACTIVE", "limit": null, "cursor": null}"#).unwrap();
        assert_eq!(query, ListingQuery { status: Some(ListingStatus::Active), ..ListingQuery::default() });
        assert!(serde_json::from_str::<ThreadQuery>(r#"{"role": "BUYER"}"#).is_err());
        assert!(serde_json::from_str::<ThreadQuery>(r#"{"limit": -1}"#).is_err());
    }
}
