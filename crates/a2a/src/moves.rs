//! A message's move: one data part whose object names it in `action`, with the REST API's own
//! field names beside it. The fields are read into the REST API's request types as the API
//! reads them (amounts as it takes them: a whole number sent as a float is taken, a fraction of
//! a minor unit is refused by its validation); a message without a data part, or a move that
//! does not say what it is, is refused here, never guessed.

use a2a::{A2AError, Message, PartContent};
use haggle_api::{CounterOffer, ListingQuery, Placement};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::error::{Refusal, with_code};

/// The moves a data part may name.
pub(crate) const ACTIONS: [&str; 7] = ["place", "counter", "accept", "reject", "withdraw", "purchase", "search"];

/// What a message asks for.
#[derive(Debug)]
pub(crate) enum Move {
    /// Listings to find (a message, not a task).
    Search(ListingQuery),
    /// An opening bid: a new task.
    Place { listing_id: Uuid, placement: Placement, currency: Option<String> },
    /// One unit at the ask: a task that completes at once.
    Purchase { listing_id: Uuid, currency: Option<String> },
    /// A move on a pending bid of the message's task (its pending bid unless `bid_id` names it).
    Answer { bid_id: Option<Uuid>, answer: Answer },
}

#[derive(Debug)]
pub(crate) enum Answer {
    Counter(CounterOffer),
    Accept,
    Reject,
    Withdraw,
}

/// The move `message` asks for.
pub(crate) fn read(message: &Message) -> Result<Move, Refusal> {
    let mut parts = message.parts.iter().filter_map(|part| match &part.content {
        PartContent::Data(data) => Some(data),
        PartContent::Text(_) | PartContent::Raw(_) | PartContent::Url(_) => None,
    });
    let Some(data) = parts.next() else {
        let detail = "a move is one data part (mediaType application/json), e.g. {\"action\": \"place\", \
                      \"listing_id\": \"...\", \"amount\": 80000}; this message has no data part";
        return Err(with_code(A2AError::content_type_not_supported(), "data_part_required", detail).into());
    };
    if parts.next().is_some() {
        // Two moves would be two answers to one message id.
        return Err(Refusal::invalid_params("one move a message: send one data part"));
    }
    let Value::Object(fields) = data else {
        return Err(Refusal::invalid_params("the data part must be a JSON object naming its move in `action`"));
    };
    let mut fields = fields.clone();
    let action = match fields.remove("action") {
        Some(Value::String(action)) => action,
        Some(_) | None => {
            return Err(Refusal::invalid_params(format!(
                "the data part names no move: add \"action\", one of {}",
                ACTIONS.join(", ")
            )));
        }
    };
    match action.as_str() {
        "search" => {
            let query = match fields.remove("query") {
                None | Some(Value::Null) => ListingQuery::default(),
                Some(Value::String(words)) => ListingQuery { q: Some(words), ..ListingQuery::default() },
                Some(query @ Value::Object(_)) => read_fields("query", query)?,
                Some(_) => {
                    return Err(Refusal::invalid_params("`query` is the words to find, or a listing query object"));
                }
            };
            no_other_fields(&action, &fields)?;
            Ok(Move::Search(query))
        }
        "place" => {
            let listing_id = required_id(&mut fields, "listing_id", &action)?;
            let currency = currency(&mut fields)?;
            let placement = read_fields(&action, Value::Object(fields))?;
            Ok(Move::Place { listing_id, placement, currency })
        }
        "purchase" => {
            let listing_id = required_id(&mut fields, "listing_id", &action)?;
            let currency = currency(&mut fields)?;
            no_other_fields(&action, &fields)?;
            Ok(Move::Purchase { listing_id, currency })
        }
        "counter" | "accept" | "reject" | "withdraw" => {
            let bid_id = optional_id(&mut fields, "bid_id")?;
            fields.remove("currency");
            let answer = match action.as_str() {
                "counter" => Answer::Counter(read_fields(&action, Value::Object(fields))?),
                other => {
                    no_other_fields(other, &fields)?;
                    match other {
                        "accept" => Answer::Accept,
                        "reject" => Answer::Reject,
                        _ => Answer::Withdraw,
                    }
                }
            };
            Ok(Move::Answer { bid_id, answer })
        }
        other => Err(Refusal::invalid_params(format!(
            "no move is called {other:?}: \"action\" is one of {}",
            ACTIONS.join(", ")
        ))),
    }
}

fn read_fields<T: DeserializeOwned>(action: &str, fields: Value) -> Result<T, Refusal> {
    serde_json::from_value(fields)
        .map_err(|error| Refusal::invalid_params(format!("the {action} move's fields are not the REST API's: {error}")))
}

fn no_other_fields(action: &str, fields: &Map<String, Value>) -> Result<(), Refusal> {
    match fields.keys().next() {
        None => Ok(()),
        Some(field) => Err(Refusal::invalid_params(format!("the {action} move takes no field `{field}`"))),
    }
}

fn required_id(fields: &mut Map<String, Value>, name: &str, action: &str) -> Result<Uuid, Refusal> {
    optional_id(fields, name)?.ok_or_else(|| Refusal::invalid_params(format!("the {action} move needs `{name}`")))
}

fn optional_id(fields: &mut Map<String, Value>, name: &str) -> Result<Option<Uuid>, Refusal> {
    match fields.remove(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) => {
            id.parse().map(Some).map_err(|_| Refusal::invalid_params(format!("`{name}` is not an id: {id:?}")))
        }
        Some(_) => Err(Refusal::invalid_params(format!("`{name}` is an id, as a string"))),
    }
}

fn currency(fields: &mut Map<String, Value>) -> Result<Option<String>, Refusal> {
    match fields.remove("currency") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(code)) => Ok(Some(code)),
        Some(_) => Err(Refusal::invalid_params("`currency` is a three-letter code, as a string")),
    }
}

#[cfg(test)]
mod tests {
    use a2a::{Part, Role};
    use serde_json::json;

    use super::*;

    fn message(parts: Vec<Part>) -> Message {
        Message::new(Role::User, parts)
    }

    #[test]
    fn a_whole_amount_sent_as_a_float_is_read_as_the_api_reads_it() {
        let listing = Uuid::now_v7();
        let read = read(&message(vec![Part::data(json!({
            "action": "place", "listing_id": listing.to_string(), "amount": 80000.0, "currency": "usd"
        }))]))
        .unwrap();
        let Move::Place { listing_id, placement, currency } = read else { panic!("not a placement: {read:?}") };
        assert_eq!((listing_id, currency.as_deref()), (listing, Some("usd")));
        assert_eq!(serde_json::to_value(&placement).unwrap()["amount"], json!(80000.0));
    }

    #[test]
    fn text_alone_is_refused_naming_the_part_it_needs() {
        let refused = read(&message(vec![Part::text("I offer 800 dollars")])).unwrap_err();
        assert_eq!(refused.error.code, a2a::error_code::CONTENT_TYPE_NOT_SUPPORTED);
        let data = refused.error.to_jsonrpc_error().data.unwrap().to_string();
        assert!(data.contains("data_part_required"), "{data}");
    }

    #[test]
    fn a_move_without_an_action_or_with_fields_it_does_not_take_is_invalid() {
        for data in [
            json!({ "amount": 5 }),
            json!({ "action": "haggle" }),
            json!({ "action": "accept", "amount": 5 }),
            json!({ "action": "place", "amount": 5 }),
            json!({ "action": "counter", "amount": 5, "colour": "red" }),
            json!(["place"]),
        ] {
            let refused = read(&message(vec![Part::data(data.clone())])).unwrap_err();
            assert_eq!(refused.error.code, a2a::error_code::INVALID_PARAMS, "{data}");
        }
    }
}
