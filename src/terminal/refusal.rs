//! The server's refusals of a move, in the terminal's words.
//!
//! A problem's `detail` is written for any client and gives amounts as the API does, in minor
//! units (`the ask of 35000 USD`). Where a refusal is about amounts, the terminal says it again
//! from the problem's structured members and the listing, in major units with the currency;
//! any other refusal reads as the server wrote it.

use haggle_client::{Client, ClientError, Listing, Problem};
use haggle_domain::Code;
use haggle_domain::money::Price;

/// `error`, from a move on `listing` by the agent of `client`, as the terminal reports it.
pub async fn explain(client: &Client, listing: &Listing, error: ClientError) -> anyhow::Error {
    let ClientError::Api(problem) = &error else { return error.into() };
    let money = |minor: i64| Price::new(minor, listing.currency);
    let said = match problem.known_code() {
        Some(Code::NegotiationNotAllowed) => {
            let ask = money(member(problem, "ask_amount").unwrap_or(listing.ask_amount));
            let purchase =
                problem.extra.get("purchase_url").and_then(|url| url.as_str()).unwrap_or("the purchase route");
            if listing.negotiable {
                // A negotiable listing refuses on the tier alone; saying the caller's helps.
                let yours = client.me().await.map(|me| format!(" and yours is {}", me.tier)).unwrap_or_default();
                format!(
                    "negotiating on this listing takes tier {} or above{yours}; any tier may buy it at the ask of \
                     {ask} with POST {purchase}",
                    listing.min_negotiation_tier
                )
            } else {
                format!("this listing is not negotiable; buy it at the ask of {ask} with POST {purchase}")
            }
        }
        Some(Code::NotAConcession) => match (problem.min_amount, problem.max_amount) {
            (Some(min), Some(max)) if min <= max => {
                format!("a counter here must be from {} to {}", money(min), money(max))
            }
            _ => return error.into(),
        },
        _ => return error.into(),
    };
    anyhow::anyhow!("{} {}: {said}", problem.status, problem.code)
}

/// An integer extension member of `problem`.
fn member(problem: &Problem, name: &str) -> Option<i64> {
    problem.extra.get(name).and_then(serde_json::Value::as_i64)
}
