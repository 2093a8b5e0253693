//! Who a call acts as: over stdio, the agent whose key the process was started with; over
//! HTTP, the agent whose key the request carries, put there by the server's authentication.

use haggle_client::{Carried, Client};
use rmcp::ErrorData;
use rmcp::service::{RequestContext, RoleServer};
use uuid::Uuid;

/// The agent an MCP request over HTTP acts as: the API key it carried and the agent it belongs
/// to. The server's authentication puts it into the request's extensions; the tools call the
/// REST API with the same key, so every call is the agent's own, and with what `carried` holds
/// of the MCP request (the client's address: its `ConnectInfo`, its `X-Forwarded-For`), so that
/// the limits and logs that count by address count the calls as that client's.
#[derive(Clone)]
pub struct Credentials {
    pub api_key: String,
    pub agent_id: Uuid,
    pub carried: Carried,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("api_key", &"<redacted>")
            .field("agent_id", &self.agent_id)
            .field("carried", &self.carried)
            .finish()
    }
}

/// Where a call's identity comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Identity {
    /// One agent for the whole connection (stdio): its client already holds the key.
    Fixed(Uuid),
    /// Each request's [`Credentials`] (Streamable HTTP).
    PerRequest,
}

/// A call's agent, and a client that acts as it.
#[derive(Debug, Clone)]
pub(crate) struct Acting {
    pub client: Client,
    pub agent_id: Uuid,
}

impl Acting {
    /// The agent of a request, or the protocol's refusal when it carries none (which the
    /// server's authentication never lets through).
    pub fn of(client: &Client, identity: Identity, context: &RequestContext<RoleServer>) -> Result<Acting, ErrorData> {
        match identity {
            Identity::Fixed(agent_id) => Ok(Acting { client: client.clone(), agent_id }),
            Identity::PerRequest => context
                .extensions
                .get::<http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Credentials>())
                .map(|credentials| Acting {
                    client: client.with_api_key(credentials.api_key.clone()).carrying(credentials.carried.clone()),
                    agent_id: credentials.agent_id,
                })
                .ok_or_else(|| ErrorData::invalid_request("no API key: send `Authorization: Bearer <api key>`", None)),
        }
    }
}
