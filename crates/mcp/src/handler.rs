//! The MCP handler's state, below the tools that are its methods and the protocol handler that
//! routes to them (`lib.rs`).

use std::sync::Arc;

use haggle_client::Client;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use crate::caller::{Acting, Identity};
use crate::resources::Subscriptions;

/// The MCP handler: Haggle's tools, resources and prompt, acting as one agent per call.
#[derive(Clone)]
pub struct Haggle {
    /// The API's client: with the agent's key over stdio, without one over HTTP.
    pub(crate) client: Client,
    pub(crate) identity: Identity,
    pub(crate) tool_router: Arc<ToolRouter<Haggle>>,
    pub(crate) subscriptions: Arc<Subscriptions>,
}

impl Haggle {
    /// Who the request acts as, with the client that acts for it.
    pub(crate) fn acting_in(&self, context: &RequestContext<RoleServer>) -> Result<Acting, ErrorData> {
        Acting::of(&self.client, self.identity, context)
    }
}
