//! Why the marketplace refuses an action. Each variant maps to one stable error code.

use uuid::Uuid;

/// A validation failure on one field of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError { field: field.into(), message: message.into() }
    }
}

/// A refusal by the rules of the marketplace. Nothing has changed when one is returned,
/// except for [`Rejection::BidExpired`], whose caller records the expiry it discovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// The thing does not exist, or is not visible to the caller.
    NotFound {
        what: &'static str,
    },
    Forbidden {
        detail: String,
    },
    /// The caller authored the pending bid; only the other party may answer it.
    NotYourTurn,
    /// A seller tried to bid on or buy its own listing.
    OwnListing,
    /// The listing does not negotiate with this caller; it may still purchase at the ask.
    NegotiationNotAllowed {
        detail: String,
        listing_id: Uuid,
        ask_amount: i64,
    },
    /// The object is not in a status that allows the action.
    InvalidTransition {
        current_status: &'static str,
        detail: String,
    },
    BidExpired,
    FinalOffer,
    /// The buyer already has a live thread on the listing (its id, when known).
    ThreadActive {
        thread_id: Option<Uuid>,
    },
    OfferLimitReached {
        limit: i32,
    },
    ListingUnavailable {
        current_status: &'static str,
    },
    Validation(Vec<FieldError>),
    /// A counter outside the range the amount rules allow; `min > max` means there is no room left.
    NotAConcession {
        min: i64,
        max: i64,
        detail: String,
    },
}

impl Rejection {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Rejection {
        Rejection::Validation(vec![FieldError::new(field, message)])
    }

    pub fn forbidden(detail: impl Into<String>) -> Rejection {
        Rejection::Forbidden { detail: detail.into() }
    }
}

/// Collects field errors so that a request learns about all of its mistakes at once.
#[derive(Debug, Default)]
pub struct Validator {
    errors: Vec<FieldError>,
}

impl Validator {
    pub fn new() -> Validator {
        Validator::default()
    }

    /// Records the error of `result`, if any, and passes its value on.
    pub fn check<T>(&mut self, field: &str, result: Result<T, String>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(message) => {
                self.errors.push(FieldError::new(field, message));
                None
            }
        }
    }

    pub fn fail(&mut self, field: &str, message: impl Into<String>) {
        self.errors.push(FieldError::new(field, message));
    }

    pub fn finish(self) -> Result<(), Rejection> {
        if self.errors.is_empty() { Ok(()) } else { Err(Rejection::Validation(self.errors)) }
    }
}

/// Checks that an integer lies in an inclusive range.
pub fn in_range<T: PartialOrd + std::fmt::Display + Copy>(value: T, min: T, max: T) -> Result<T, String> {
    if value >= min && value <= max { Ok(value) } else { Err(format!("must be between {min} and {max}")) }
}

/// Checks a free-text field: trimmed non-emptiness where required and a length in characters.
pub fn text(value: &str, required: bool, max_chars: usize) -> Result<String, String> {
    if required && value.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if value.chars().count() > max_chars {
        return Err(format!("must be at most {max_chars} characters"));
    }
    if value.chars().any(|c| c.is_control() && c != '\n' && c != '\t' && c != '\r') {
        return Err("must not contain control characters".into());
    }
    Ok(value.to_owned())
}
