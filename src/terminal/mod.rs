//! The terminal client: `haggle negotiate`, `haggle listings`, `haggle threads`, `haggle
//! orders` and `haggle order`, the API from a terminal through the typed client; and `haggle
//! a2a`, a negotiation with any A2A agent that speaks Haggle's negotiation extension.
//!
//! Results go to standard output, progress and errors to standard error. Every amount is
//! printed as a person reads a price (`haggle_domain::money::Price`: major units with the
//! currency, `1,250.00 USD`), even where the server's own words give minor units (see
//! `refusal`).

mod a2a;
mod ladder;
mod lists;
mod negotiate;
mod refusal;

use anyhow::bail;
use haggle_client::{Client, DEFAULT_URL};
use haggle_domain::Party;
use uuid::Uuid;

pub use a2a::{A2aArgs, a2a};
pub use lists::{ListingsArgs, OrderArgs, OrdersArgs, ThreadsArgs, listings, order, orders, threads};
pub use negotiate::{NegotiateArgs, negotiate};

/// Where the server is and who I am there.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// The server's base URL.
    #[arg(long, env = "HAGGLE_URL", default_value = DEFAULT_URL)]
    pub url: String,
    /// My API key.
    #[arg(long, env = "HAGGLE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

impl ServerArgs {
    fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::new(&self.url, self.api_key.clone())?)
    }

    fn keyed_client(&self, command: &str) -> anyhow::Result<Client> {
        if self.api_key.as_deref().is_none_or(str::is_empty) {
            bail!("haggle {command} acts as an agent: give its API key with --api-key or HAGGLE_API_KEY");
        }
        self.client()
    }
}

fn parse_party(text: &str) -> Result<Party, String> {
    text.to_ascii_lowercase().parse()
}

/// An example of the ids the API gives, all UUIDs of this shape.
const ID_EXAMPLE: &str = "0192f5a8-1b2c-7d3e-8f40-5a6b7c8d9e0f";

/// Reads `text`, given to an option that takes `expected`. Clap puts the option and the value
/// in front of the error; the error says what the value should have been, which uuid's own
/// message ("invalid character: found n at 0") does not.
fn parse_id(text: &str, expected: &str) -> Result<Uuid, String> {
    text.trim().parse().map_err(|_| format!("expected {expected}, a UUID such as {ID_EXAMPLE}"))
}

fn listing_id(text: &str) -> Result<Uuid, String> {
    parse_id(text, "a listing id (as `haggle listings` shows them)")
}

fn order_id(text: &str) -> Result<Uuid, String> {
    parse_id(text, "an order id (as `haggle orders` shows them)")
}

fn agent_id(text: &str) -> Result<Uuid, String> {
    parse_id(text, "an agent id")
}

fn cursor(text: &str) -> Result<Uuid, String> {
    parse_id(text, "a cursor (the id after `more: --cursor` below a full page)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_id_is_refused_with_what_was_expected() {
        let error = listing_id("not-a-uuid").unwrap_err();
        assert!(error.starts_with("expected a listing id") && error.contains(ID_EXAMPLE), "{error}");
        assert!(agent_id("0192").unwrap_err().starts_with("expected an agent id"));
        assert!(cursor("").unwrap_err().starts_with("expected a cursor"));
        assert_eq!(listing_id(ID_EXAMPLE).unwrap().to_string(), ID_EXAMPLE);
        assert!(ID_EXAMPLE.parse::<Uuid>().is_ok());
    }
}
