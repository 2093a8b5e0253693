//! The prompt that explains how to negotiate on Haggle, in a few lines.

use rmcp::ErrorData;
use rmcp::model::{GetPromptResult, ListPromptsResult, Prompt, PromptMessage, Role};

pub(crate) const NAME: &str = "negotiate_on_haggle";

const DESCRIPTION: &str = "How to negotiate on Haggle: turns, concessions, final offers, expiry.";

/// The rules the server enforces, as a model needs them before its first move.
pub(crate) const RULES: &str = "\
You negotiate on Haggle, a marketplace whose server enforces every rule below; a refused move says why \
(its `code`) and what to do (its `hint`).
- Amounts are whole numbers of minor units: 120000 is 1,200.00.
- Turns: a buyer opens with place_bid (at most the ask). Then the sides alternate: only the side that did \
not make the pending bid may counter_bid, accept_bid or reject_bid it; its author may withdraw_bid it. \
get_thread shows whose turn it is, the moves allowed and the counter range; wait_for_turn waits for your turn.
- Concessions: a counter lies strictly between the two latest positions and never takes one back: the buyer \
only moves up (below the seller's price), the seller only down (above the buyer's). A listing whose \
concession_rule is none lets a counter take concessions back (a buyer down to 100, a seller up to the ask), \
never crossing the other side's pending amount. A refused counter gives the allowed min_amount and max_amount.
- Final offers: a counter marked final, or the bid that reaches the listing's max_rounds, can only be accepted \
or rejected.
- Expiry: a bid unanswered after its expires_in (the listing's bid_ttl_seconds, 48 h by default) expires and \
ends the negotiation.
- Accepting makes the order at once; buy_now buys at the ask without negotiating. Give each move an \
idempotency_key, and reuse it only to retry that same move.";

pub(crate) fn list() -> ListPromptsResult {
    ListPromptsResult::with_all_items(vec![
        Prompt::new(NAME, Some(DESCRIPTION), None).with_title("How to negotiate on Haggle"),
    ])
}

pub(crate) fn get(name: &str) -> Result<GetPromptResult, ErrorData> {
    if name != NAME {
        return Err(ErrorData::invalid_params(format!("no prompt `{name}`; the one prompt is `{NAME}`"), None));
    }
    Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, RULES)]).with_description(DESCRIPTION))
}
