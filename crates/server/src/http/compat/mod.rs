//! IAB-style compatibility routes (SPEC §5), so that an unmodified IAB buyer agent negotiates
//! and books with Haggle.
//!
//! A product is a listing, a proposal a thread (`proposal_id` = `negotiation_id` = the thread's
//! id), a deal an order, and the caller is the buyer. Prices are floats in currency units on the
//! legacy routes and `Money {amount_micros, currency}` on the `/api/v1` ones, converted exactly
//! to and from minor units (`domain::money`).
//!
//! - [`negotiation`]: `POST /proposals`, the legacy counter, and the messages route. The
//!   protocol is synchronous: each buyer message is answered with the seller's move, which the
//!   seller's policy makes within milliseconds.
//! - [`deals`]: discovery (`GET /products`), quotes and booking.
//! - [`view`]: a proposal as these routes show it: rounds counted as exchanges, the rounds the
//!   seller's policy has left, and the seller's last word.
//! - [`envelope`]: errors on these routes in the IAB envelope.
//!
//! Requests refused for what they say (a field, an unknown proposal, the wrong currency) are
//! refused before any idempotency key is claimed: nothing is stored, and a retry is refused
//! alike.

use serde::Deserialize;
use serde_json::Number;

use super::Endpoint;
use super::error::{ApiError, Code};
use super::extract::{IdempotencyKey, MAX_IDEMPOTENCY_KEY_LEN};
use haggle_domain::money::{self, Amount, AmountLimits, RawAmount};
use haggle_domain::{Currency, FieldError};

mod deals;
mod envelope;
mod negotiation;
mod view;

pub use envelope::iab_errors;

pub fn endpoints() -> Vec<Endpoint> {
    vec![
        Endpoint::post("/proposals", negotiation::open_proposal),
        Endpoint::post("/proposals/{id}/counter", negotiation::counter_proposal),
        Endpoint::post("/api/v1/negotiations/messages", negotiation::negotiation_message),
        Endpoint::get("/products", deals::products),
        Endpoint::post("/api/v1/quotes", deals::request_quote),
        Endpoint::post("/api/v1/deals", deals::book_deal),
    ]
}

/// `Money` as IAB clients send it.
#[derive(Debug, Deserialize)]
struct MoneyInput {
    amount_micros: Number,
    currency: String,
}

impl MoneyInput {
    /// The amount, or the field's error: a whole number of micros that is a whole number of
    /// minor units, within the bounds.
    fn amount(&self, limits: AmountLimits) -> Result<Amount, String> {
        money::amount_from_micros(raw(&self.amount_micros), limits)
    }

    /// The currency, as IAB clients write it: an ISO 4217 code in capitals.
    fn currency(&self) -> Result<Currency, String> {
        match self.currency.bytes().all(|b| b.is_ascii_uppercase()) {
            true => Currency::parse(&self.currency),
            false => Err(format!("`{}` is not an ISO 4217 currency code in capitals", self.currency)),
        }
    }
}

/// A JSON number as the amount checks take it.
fn raw(number: &Number) -> RawAmount {
    match (number.as_i64(), number.as_u64()) {
        (Some(n), _) => RawAmount::Integer(n.into()),
        (None, Some(n)) => RawAmount::Integer(n.into()),
        (None, None) => RawAmount::Float(number.as_f64().unwrap_or(f64::NAN)),
    }
}

/// Keeps a field's value, or collects its error.
fn check<T>(errors: &mut Vec<FieldError>, field: &str, result: Result<T, String>) -> Option<T> {
    result.map_err(|message| errors.push(FieldError::new(field, message))).ok()
}

fn invalid(errors: &[FieldError]) -> ApiError {
    ApiError::fields(Code::ValidationFailed, "some fields of the request are invalid", errors)
}

fn uuid(raw: &str, what: &str) -> Result<uuid::Uuid, String> {
    uuid::Uuid::parse_str(raw).map_err(|_| format!("must be {what} (a UUID)"))
}

/// The request's idempotency key, from the body's `idempotency_key` (as IAB clients send it)
/// or the `Idempotency-Key` header; if both are sent they must be equal.
fn body_key(errors: &mut Vec<FieldError>, header: IdempotencyKey, body: Option<&str>) -> IdempotencyKey {
    let Some(key) = body else { return header };
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN || !key.bytes().all(|b| b.is_ascii_graphic()) {
        errors.push(FieldError::new(
            "idempotency_key",
            format!("must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} printable ASCII characters, without spaces"),
        ));
    } else if header.0.as_deref().is_some_and(|header| header != key) {
        errors.push(FieldError::new("idempotency_key", "differs from the Idempotency-Key header; send one of them"));
    }
    IdempotencyKey(Some(key.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_numbers_keep_their_kind() {
        let number = |json: &str| raw(&serde_json::from_str::<Number>(json).unwrap());
        assert_eq!(number("20"), RawAmount::Integer(20));
        assert_eq!(number("-20"), RawAmount::Integer(-20));
        assert_eq!(number("18446744073709551615"), RawAmount::Integer(u64::MAX.into()));
        assert_eq!(number("20.1"), RawAmount::Float(20.1));
        assert_eq!(number("1e2"), RawAmount::Float(100.0));
    }

    #[test]
    fn the_body_key_and_the_header_key_must_agree() {
        let header = |key: Option<&str>| IdempotencyKey(key.map(str::to_owned));
        let mut errors = Vec::new();
        assert_eq!(body_key(&mut errors, header(Some("a")), None).0.as_deref(), Some("a"));
        assert_eq!(body_key(&mut errors, header(None), Some("b")).0.as_deref(), Some("b"));
        assert_eq!(body_key(&mut errors, header(Some("b")), Some("b")).0.as_deref(), Some("b"));
        assert!(errors.is_empty());
        body_key(&mut errors, header(Some("a")), Some("b"));
        body_key(&mut errors, header(None), Some("has space"));
        body_key(&mut errors, header(None), Some(""));
        assert_eq!(errors.len(), 3);
    }
}
