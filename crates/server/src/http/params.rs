//! What handlers check of a query beyond its type (`haggle_api::query`): the page size, the
//! longest wait, and the refusal of one parameter.

use std::time::Duration;

use haggle_api::query;
use haggle_domain::FieldError;

use super::error::{ApiError, Code};

/// The longest a request may ask to wait for a change.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// A validation failure of one query parameter.
pub fn invalid_param(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::fields(Code::ValidationFailed, "some query parameters are invalid", &[FieldError::new(field, message)])
}

/// The page size a list's `limit` asks for: 1 to [`query::MAX_LIMIT`], [`query::DEFAULT_LIMIT`]
/// by default.
pub fn page_size(limit: Option<u32>) -> Result<i64, ApiError> {
    let limit = limit.unwrap_or(query::DEFAULT_LIMIT);
    if !(1..=query::MAX_LIMIT).contains(&limit) {
        return Err(invalid_param("limit", query::limit_range()));
    }
    Ok(i64::from(limit))
}
