//! Why the marketplace refuses an action. Each variant maps to one stable error code.

use uuid::Uuid;

use super::party::Party;
use super::thread::ThreadKind;

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
    /// The caller authored the pending bid; only the other party, whose `turn` it is, may answer it.
    NotYourTurn {
        turn: Party,
    },
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
    /// A quote can no longer be booked (it ran out, or the price it quoted changed): ask for a
    /// new one.
    QuoteExpired {
        detail: String,
    },
    /// A payment larger than what is still owed on the order.
    ExceedsOutstanding {
        outstanding: i64,
    },
    /// A negotiation of this kind is already open on the order (its thread, when known).
    NegotiationOpen {
        kind: ThreadKind,
        thread_id: Option<Uuid>,
    },
    /// A refund larger than what was paid on the order and not yet refunded.
    ExceedsRefundable {
        refundable: i64,
    },
    /// The approval request ran out of time before its answer (SPEC §10).
    ApprovalExpired,
    /// The agent holds as many pending approval requests as it may.
    ApprovalLimitReached {
        limit: i64,
    },
    /// The agent has as many approvers as it may.
    ApproverLimitReached {
        limit: i64,
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

/// The stable error codes of SPEC §3, each with its HTTP status: what a refusal is called
/// wherever it is reported (an API answer, a policy's stop, an operator command).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    MalformedRequest,
    Unauthenticated,
    Forbidden,
    NotYourTurn,
    OwnListing,
    NegotiationNotAllowed,
    NotFound,
    MethodNotAllowed,
    InvalidTransition,
    BidExpired,
    FinalOffer,
    ThreadActive,
    OfferLimitReached,
    ListingUnavailable,
    IdempotencyKeyInUse,
    PayloadTooLarge,
    ValidationFailed,
    NotAConcession,
    IdempotencyKeyReused,
    RateLimited,
    Internal,
    Unavailable,
    NegotiationUnavailable,
    QuoteExpired,
    /// The instance holds as many connections as it may: refused before the request is read.
    Overloaded,
    /// The request's `Accept` header allows no type the route answers with.
    NotAcceptable,
    /// The API key is valid, but the operator suspended its agent.
    AgentSuspended,
    /// The body is not of a media type the route reads (`/mcp` reads `application/json`).
    UnsupportedMediaType,
    /// A payment larger than what is still owed on the order.
    ExceedsOutstanding,
    /// A negotiation of the kind is already open on the order.
    NegotiationOpen,
    /// A refund larger than what was paid and not yet refunded.
    ExceedsRefundable,
    /// An approval request answered after its time.
    ApprovalExpired,
    /// Too many pending approval requests.
    ApprovalLimitReached,
    /// Too many approvers.
    ApproverLimitReached,
}

impl Code {
    pub const ALL: [Code; 34] = [
        Code::MalformedRequest,
        Code::Unauthenticated,
        Code::Forbidden,
        Code::NotYourTurn,
        Code::OwnListing,
        Code::NegotiationNotAllowed,
        Code::NotFound,
        Code::MethodNotAllowed,
        Code::InvalidTransition,
        Code::BidExpired,
        Code::FinalOffer,
        Code::ThreadActive,
        Code::OfferLimitReached,
        Code::ListingUnavailable,
        Code::IdempotencyKeyInUse,
        Code::PayloadTooLarge,
        Code::ValidationFailed,
        Code::NotAConcession,
        Code::IdempotencyKeyReused,
        Code::RateLimited,
        Code::Internal,
        Code::Unavailable,
        Code::NegotiationUnavailable,
        Code::QuoteExpired,
        Code::Overloaded,
        Code::NotAcceptable,
        Code::AgentSuspended,
        Code::UnsupportedMediaType,
        Code::ExceedsOutstanding,
        Code::NegotiationOpen,
        Code::ExceedsRefundable,
        Code::ApprovalExpired,
        Code::ApprovalLimitReached,
        Code::ApproverLimitReached,
    ];

    pub fn status(self) -> u16 {
        match self {
            Code::MalformedRequest => 400,
            Code::Unauthenticated => 401,
            Code::Forbidden
            | Code::NotYourTurn
            | Code::OwnListing
            | Code::NegotiationNotAllowed
            | Code::AgentSuspended => 403,
            Code::NotFound => 404,
            Code::MethodNotAllowed => 405,
            Code::NotAcceptable => 406,
            Code::InvalidTransition
            | Code::BidExpired
            | Code::FinalOffer
            | Code::ThreadActive
            | Code::OfferLimitReached
            | Code::ListingUnavailable
            | Code::IdempotencyKeyInUse
            | Code::NegotiationUnavailable
            | Code::ExceedsOutstanding
            | Code::NegotiationOpen
            | Code::ExceedsRefundable
            | Code::ApprovalExpired
            | Code::ApprovalLimitReached
            | Code::ApproverLimitReached => 409,
            Code::QuoteExpired => 410,
            Code::PayloadTooLarge => 413,
            Code::UnsupportedMediaType => 415,
            Code::ValidationFailed | Code::NotAConcession | Code::IdempotencyKeyReused => 422,
            Code::RateLimited => 429,
            Code::Internal => 500,
            Code::Unavailable | Code::Overloaded => 503,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Code::MalformedRequest => "malformed_request",
            Code::Unauthenticated => "unauthenticated",
            Code::Forbidden => "forbidden",
            Code::NotYourTurn => "not_your_turn",
            Code::OwnListing => "own_listing",
            Code::NegotiationNotAllowed => "negotiation_not_allowed",
            Code::NotFound => "not_found",
            Code::MethodNotAllowed => "method_not_allowed",
            Code::InvalidTransition => "invalid_transition",
            Code::BidExpired => "bid_expired",
            Code::FinalOffer => "final_offer",
            Code::ThreadActive => "thread_active",
            Code::OfferLimitReached => "offer_limit_reached",
            Code::ListingUnavailable => "listing_unavailable",
            Code::IdempotencyKeyInUse => "idempotency_key_in_use",
            Code::PayloadTooLarge => "payload_too_large",
            Code::ValidationFailed => "validation_failed",
            Code::NotAConcession => "not_a_concession",
            Code::IdempotencyKeyReused => "idempotency_key_reused",
            Code::RateLimited => "rate_limited",
            Code::Internal => "internal",
            Code::Unavailable => "unavailable",
            Code::NegotiationUnavailable => "negotiation_unavailable",
            Code::QuoteExpired => "quote_expired",
            Code::Overloaded => "overloaded",
            Code::NotAcceptable => "not_acceptable",
            Code::AgentSuspended => "agent_suspended",
            Code::UnsupportedMediaType => "unsupported_media_type",
            Code::ExceedsOutstanding => "exceeds_outstanding",
            Code::NegotiationOpen => "negotiation_open",
            Code::ExceedsRefundable => "exceeds_refundable",
            Code::ApprovalExpired => "approval_expired",
            Code::ApprovalLimitReached => "approval_limit_reached",
            Code::ApproverLimitReached => "approver_limit_reached",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Code::MalformedRequest => "The request could not be read",
            Code::Unauthenticated => "Authentication required",
            Code::Forbidden => "Not allowed",
            Code::NotYourTurn => "Not your turn",
            Code::OwnListing => "This is your own listing",
            Code::NegotiationNotAllowed => "Negotiation not allowed",
            Code::NotFound => "Not found",
            Code::MethodNotAllowed => "Method not allowed",
            Code::InvalidTransition => "Invalid transition",
            Code::BidExpired => "The bid has expired",
            Code::FinalOffer => "Final offer",
            Code::ThreadActive => "A negotiation is already active",
            Code::OfferLimitReached => "Offer limit reached",
            Code::ListingUnavailable => "Listing unavailable",
            Code::IdempotencyKeyInUse => "Idempotency key in use",
            Code::PayloadTooLarge => "Payload too large",
            Code::ValidationFailed => "Validation failed",
            Code::NotAConcession => "Not a concession",
            Code::IdempotencyKeyReused => "Idempotency key reused",
            Code::RateLimited => "Too many requests",
            Code::Internal => "Internal error",
            Code::Unavailable => "Service unavailable",
            Code::NegotiationUnavailable => "Nobody negotiates for the seller",
            Code::QuoteExpired => "The quote has expired",
            Code::Overloaded => "Too many connections",
            Code::NotAcceptable => "Not acceptable",
            Code::AgentSuspended => "Agent suspended",
            Code::UnsupportedMediaType => "Unsupported media type",
            Code::ExceedsOutstanding => "More than is outstanding",
            Code::NegotiationOpen => "A negotiation of this kind is already open",
            Code::ExceedsRefundable => "More than is refundable",
            Code::ApprovalExpired => "The approval request has expired",
            Code::ApprovalLimitReached => "Too many pending approval requests",
            Code::ApproverLimitReached => "Too many approvers",
        }
    }
}

impl std::str::FromStr for Code {
    type Err = String;

    fn from_str(value: &str) -> Result<Code, String> {
        Code::ALL
            .into_iter()
            .find(|code| code.as_str() == value)
            .ok_or_else(|| format!("unknown problem code `{value}`"))
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Rejection {
    /// The refusal's stable code.
    pub fn code(&self) -> Code {
        match self {
            Rejection::NotFound { .. } => Code::NotFound,
            Rejection::Forbidden { .. } => Code::Forbidden,
            Rejection::NotYourTurn { .. } => Code::NotYourTurn,
            Rejection::OwnListing => Code::OwnListing,
            Rejection::NegotiationNotAllowed { .. } => Code::NegotiationNotAllowed,
            Rejection::InvalidTransition { .. } => Code::InvalidTransition,
            Rejection::BidExpired => Code::BidExpired,
            Rejection::FinalOffer => Code::FinalOffer,
            Rejection::ThreadActive { .. } => Code::ThreadActive,
            Rejection::OfferLimitReached { .. } => Code::OfferLimitReached,
            Rejection::ListingUnavailable { .. } => Code::ListingUnavailable,
            Rejection::Validation(_) => Code::ValidationFailed,
            Rejection::NotAConcession { .. } => Code::NotAConcession,
            Rejection::QuoteExpired { .. } => Code::QuoteExpired,
            Rejection::ExceedsOutstanding { .. } => Code::ExceedsOutstanding,
            Rejection::NegotiationOpen { .. } => Code::NegotiationOpen,
            Rejection::ExceedsRefundable { .. } => Code::ExceedsRefundable,
            Rejection::ApprovalExpired => Code::ApprovalExpired,
            Rejection::ApprovalLimitReached { .. } => Code::ApprovalLimitReached,
            Rejection::ApproverLimitReached { .. } => Code::ApproverLimitReached,
        }
    }

    /// What went wrong, in a sentence for a person.
    pub fn detail(&self) -> String {
        match self {
            Rejection::NotFound { what } => format!("no {what} with this id exists or is visible to you"),
            Rejection::Forbidden { detail }
            | Rejection::NegotiationNotAllowed { detail, .. }
            | Rejection::InvalidTransition { detail, .. }
            | Rejection::NotAConcession { detail, .. }
            | Rejection::QuoteExpired { detail } => detail.clone(),
            Rejection::NotYourTurn { .. } => {
                "you made the pending bid; only the other party may counter, accept or reject it".into()
            }
            Rejection::OwnListing => "a seller cannot bid on or buy its own listing".into(),
            Rejection::BidExpired => "the bid passed its expiry time and is now EXPIRED".into(),
            Rejection::FinalOffer => "the pending bid is a final offer: accept it or reject it".into(),
            Rejection::ThreadActive { .. } => {
                "you already have an active negotiation on this listing; continue it instead".into()
            }
            Rejection::OfferLimitReached { limit } => {
                format!("this listing allows {limit} negotiations per buyer and you have used them all")
            }
            Rejection::ListingUnavailable { current_status } => {
                format!("the listing is {current_status} and no longer takes bids, purchases or changes")
            }
            Rejection::Validation(_) => "some fields of the request are invalid".into(),
            Rejection::NegotiationOpen { kind, .. } => format!(
                "a {kind} negotiation is open on this order; it must end before another of its kind opens, \
                 and no refund negotiation may be open when the order completes"
            ),
            Rejection::ExceedsRefundable { refundable } => {
                format!("a refund may be at most the {refundable} minor units paid (confirmed) and not yet refunded")
            }
            Rejection::ExceedsOutstanding { outstanding } => format!(
                "the payment is more than the {outstanding} minor units still outstanding on the order; \
                 a payment never takes the paid amount past the order's"
            ),
            Rejection::ApprovalExpired => {
                "the approval request ran out of time before its answer; the move was not made".into()
            }
            Rejection::ApprovalLimitReached { limit } => format!(
                "you already have {limit} approval requests waiting, the most an agent may; \
                 withdraw one or wait for its answer"
            ),
            Rejection::ApproverLimitReached { limit } => {
                format!("you already have {limit} approvers, the most an agent may; revoke one to add another")
            }
        }
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
