//! What a tool answers: a sentence for the model and the API's JSON beside it, or, for a
//! refusal, the problem document with what to do next.
//!
//! A refusal is a tool error (`isError: true`) whose structured content is the REST API's
//! problem document, machine fields and all (`min_amount`, `current_status`, `turn`, ...),
//! plus a `hint`: the model reads it and can act on it. Arguments that do not fit the tool's
//! schema are answered the same way (`malformed_request`), as the protocol has input errors
//! reported to the model rather than as JSON-RPC errors, and so is an id that names nothing
//! the caller may see (`not_found`). Only a call of no tool at all is the protocol's JSON-RPC
//! error.

use haggle_api::Code;
use haggle_client::{Approval, ClientError, Problem};
use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;
use serde_json::{Value, json};

/// An amount for a sentence: the minor units the tools take, and what they are worth
/// (`120000 (1,200.00 USD)`).
pub(crate) fn money(amount: i64, currency: haggle_domain::Currency) -> String {
    format!("{amount} ({})", haggle_domain::money::Price::new(amount, currency))
}

/// A successful call: the summary first, then the JSON, which is also the structured content.
pub(crate) fn done(summary: impl Into<String>, value: &impl Serialize) -> CallToolResult {
    let value = serde_json::to_value(value).unwrap_or(Value::Null);
    let mut result = CallToolResult::structured(value);
    result.content.insert(0, ContentBlock::text(summary.into()));
    result
}

/// A tool call the API refused, as the tool's answer; a move the agent's approval rules held
/// is no refusal: its answer is the pending request ([`held`]).
pub(crate) fn refused(error: ClientError) -> CallToolResult {
    let problem = match error {
        ClientError::Api(problem) => *problem,
        ClientError::Held(approval) => return held(&approval),
        ClientError::Transport { .. }
        | ClientError::InProcess { .. }
        | ClientError::UnexpectedResponse { .. }
        | ClientError::InvalidUrl { .. } => {
            return own_problem(Code::Unavailable, format!("the marketplace did not answer: {error}"));
        }
    };
    let code = problem.known_code();
    let mut document = serde_json::to_value(&problem).unwrap_or(Value::Null);
    strip_nulls(&mut document);
    let hint = code.map_or_else(|| "Read `detail`.".to_owned(), |code| hint(code, Some(&problem)));
    if let Value::Object(members) = &mut document {
        members.insert("hint".to_owned(), Value::String(hint.clone()));
    }
    tool_error(format!("Refused ({}): {}. {hint}", problem.code, problem.detail.trim_end_matches('.')), document)
}

/// A move held for approval: not made, and not an error either. The structured content is
/// `{outcome: "held", approval}`, the request an approver answers (list_my_approvals,
/// answer_approval, or the page at `/approve`).
pub(crate) fn held(approval: &Approval) -> CallToolResult {
    let summary = format!(
        "Held for approval: your approval rules hold this {} of {}, and nothing is made until it is approved. \
         Request {} waits until {} for {}; answer_approval approves or denies it, list_my_approvals shows it.",
        approval.held.kind.as_str(),
        money(approval.held.amount, approval.held.currency),
        approval.id,
        approval.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        approval.approvers.join(", ")
    );
    done(summary, &json!({ "outcome": "held", "approval": approval }))
}

/// Arguments that do not fit the tool's input schema, as the tool's answer.
pub(crate) fn bad_arguments(detail: impl Into<String>) -> CallToolResult {
    own_problem(Code::MalformedRequest, detail.into())
}

/// A problem this server finds itself, before or without the API.
fn own_problem(code: Code, detail: String) -> CallToolResult {
    let hint = hint(code, None);
    let document = json!({
        "type": format!("urn:haggle:problem:{}", code.as_str()),
        "title": code.title(),
        "status": code.status(),
        "detail": detail,
        "code": code.as_str(),
        "hint": hint,
    });
    tool_error(format!("Refused ({}): {}. {hint}", code.as_str(), detail.trim_end_matches('.')), document)
}

/// Gives the SDK's answer to arguments it could not read (plain text) the structure every
/// refusal has.
pub(crate) fn structured(result: CallToolResult) -> CallToolResult {
    if result.is_error != Some(true) || result.structured_content.is_some() {
        return result;
    }
    let text: Vec<&str> =
        result.content.iter().filter_map(|block| block.as_text()).map(|text| text.text.as_str()).collect();
    bad_arguments(text.join(" "))
}

fn tool_error(summary: String, document: Value) -> CallToolResult {
    let mut result = CallToolResult::structured_error(document);
    result.content.insert(0, ContentBlock::text(summary));
    result
}

/// Absent members, not `null`s: the document reads as the REST API's.
fn strip_nulls(document: &mut Value) {
    if let Value::Object(members) = document {
        members.retain(|_, value| !value.is_null() && value != &Value::Array(Vec::new()));
    }
}

/// What the model can do about a refusal, in a sentence.
fn hint(code: Code, problem: Option<&Problem>) -> String {
    let extra = |name: &str| problem.and_then(|p| p.extra.get(name)).map(Value::to_string);
    match code {
        Code::NotYourTurn => {
            let turn = problem.and_then(|p| p.turn).map_or("other party", |turn| turn.as_str());
            format!(
                "It is the {turn}'s turn: the pending bid is yours. Call wait_for_turn to wait for the answer; \
                 you may also withdraw_bid your own pending bid."
            )
        }
        Code::NotAConcession => match problem.and_then(|p| p.min_amount.zip(p.max_amount)) {
            Some((min, max)) if min <= max => {
                format!("Counter again with an amount from {min} to {max} (both included), or accept or reject.")
            }
            _ => "There is no room left to counter: accept_bid or reject_bid the pending bid.".to_owned(),
        },
        Code::InvalidTransition => format!(
            "The bid is {} and can no longer change. Call get_thread for the negotiation's latest bid.",
            problem.and_then(|p| p.current_status.as_deref()).unwrap_or("no longer PENDING")
        ),
        Code::BidExpired => "The bid expired, which ended the negotiation. If the listing is still ACTIVE, \
                             place_bid opens a new one."
            .to_owned(),
        Code::FinalOffer => "The pending bid is a final offer: it can only be accepted (accept_bid) or rejected \
                             (reject_bid)."
            .to_owned(),
        Code::ThreadActive => match problem.and_then(|p| p.thread_id) {
            Some(thread) => format!(
                "You already negotiate on this listing: continue thread {thread} (get_thread, wait_for_turn) \
                 instead of opening another."
            ),
            None => "You already negotiate on this listing: continue that thread (list_my_threads).".to_owned(),
        },
        Code::OfferLimitReached => format!(
            "You opened as many negotiations on this listing as it allows ({}); buy_now at the ask, or find \
             another listing.",
            extra("limit").unwrap_or_else(|| "its max_threads_per_buyer".to_owned())
        ),
        Code::ListingUnavailable => "The listing takes no more bids, purchases or changes; find_listings for \
                                     another."
            .to_owned(),
        Code::NegotiationNotAllowed => format!(
            "Your tier may not negotiate on this listing; buy_now buys it at the ask ({}).",
            extra("ask_amount").unwrap_or_else(|| "its ask_amount".to_owned())
        ),
        Code::OwnListing => "You are this listing's seller: answer buyers' bids instead (list_my_threads with \
                             role seller)."
            .to_owned(),
        Code::Forbidden => "You may not make this move; `detail` says who may.".to_owned(),
        Code::ValidationFailed => "Fix the fields named in `errors` and call again.".to_owned(),
        Code::IdempotencyKeyReused => "This idempotency_key was used for a different call: use a new key for a \
                                       new move, the same key only to retry the same call."
            .to_owned(),
        Code::IdempotencyKeyInUse => "The first call with this idempotency_key is still running: call again with \
                                      the same key in a moment."
            .to_owned(),
        Code::RateLimited => "Too many calls: wait a second and call again (a move with the same \
                              idempotency_key, so that it is made once)."
            .to_owned(),
        Code::Unavailable | Code::Overloaded | Code::Internal => {
            "The marketplace could not answer: call again with the same \
                                               idempotency_key, which makes the move at most once."
                .to_owned()
        }
        Code::Unauthenticated => "The API key is not valid or was revoked; ask for a new one.".to_owned(),
        Code::AgentSuspended => "The marketplace's operator suspended this agent: no call will succeed until it \
                                 is reinstated. Tell your principal."
            .to_owned(),
        Code::NegotiationUnavailable | Code::QuoteExpired => "Read `detail`.".to_owned(),
        Code::ApprovalExpired | Code::ApprovalLimitReached | Code::ApproverLimitReached => {
            "An approval request's limit or time: read `detail`, and ask your principal.".to_owned()
        }
        Code::ExceedsOutstanding => format!(
            "A payment may be at most what is still owed on the order ({} minor units): record or confirm a \
             smaller one.",
            extra("outstanding").unwrap_or_else(|| "its outstanding amount".to_owned())
        ),
        Code::NegotiationOpen => match problem.and_then(|p| p.thread_id) {
            Some(thread) => format!(
                "A negotiation of this kind is open on the order: continue thread {thread} (get_thread) instead of \
                 opening another; an order completes only once its refund negotiation has ended."
            ),
            None => "A negotiation of this kind is open on the order: continue it (list_my_threads).".to_owned(),
        },
        Code::ExceedsRefundable => format!(
            "A refund may be at most what was paid (confirmed) and not yet refunded ({} minor units): ask for less.",
            extra("refundable").unwrap_or_else(|| "the order's paid_amount less its refunded_amount".to_owned())
        ),
        Code::NotFound => "The id names nothing you can see (a negotiation is its two parties' only): check it \
                           against list_my_threads, find_listings or list_my_orders."
            .to_owned(),
        Code::MalformedRequest
        | Code::MethodNotAllowed
        | Code::PayloadTooLarge
        | Code::NotAcceptable
        | Code::UnsupportedMediaType => {
            "Check the call's arguments against the tool's input schema and call again.".to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(code: &str, status: u16, members: Value) -> ClientError {
        let mut document = json!({ "type": format!("urn:haggle:problem:{code}"), "title": "t", "status": status,
                                    "detail": "d", "code": code });
        for (name, value) in members.as_object().unwrap() {
            document[name] = value.clone();
        }
        ClientError::Api(Box::new(serde_json::from_value(document).unwrap()))
    }

    #[test]
    fn a_refusal_is_a_tool_error_carrying_the_problems_machine_fields_and_a_hint() {
        let result = refused(problem("not_a_concession", 422, json!({"min_amount": 80000, "max_amount": 94999})));
        assert_eq!(result.is_error, Some(true));
        let document = result.structured_content.unwrap();
        assert_eq!(
            (document["code"].as_str(), document["min_amount"].as_i64()),
            (Some("not_a_concession"), Some(80000))
        );
        assert!(document["hint"].as_str().unwrap().contains("from 80000 to 94999"), "{document}");
        assert!(document.get("errors").is_none() && document.get("thread_id").is_none(), "{document}");
    }

    #[test]
    fn unreadable_arguments_get_the_structure_of_a_refusal() {
        let sdk =
            CallToolResult::error(vec![ContentBlock::text("failed to deserialize parameters: missing field `amount`")]);
        let document = structured(sdk).structured_content.unwrap();
        assert_eq!((document["code"].as_str(), document["status"].as_u64()), (Some("malformed_request"), Some(400)));
        assert!(document["detail"].as_str().unwrap().contains("`amount`"));
    }

    #[test]
    fn amounts_read_as_minor_units_and_what_they_are_worth() {
        let usd = haggle_domain::Currency::USD;
        assert_eq!(money(120000, usd), "120000 (1,200.00 USD)");
        assert_eq!(money(123456789, usd), "123456789 (1,234,567.89 USD)");
        assert_eq!(money(105, usd), "105 (1.05 USD)");
    }

    #[test]
    fn every_code_has_a_hint() {
        for code in Code::ALL {
            assert!(!hint(code, None).is_empty());
        }
    }
}
