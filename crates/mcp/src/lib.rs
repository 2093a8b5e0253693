//! Haggle as a Model Context Protocol server, for language-model agents.
//!
//! One handler, [`Haggle`], serves two transports: stdio (`haggle mcp`, for desktop hosts that
//! launch local tools; one agent, whose key the process was given) and Streamable HTTP (`/mcp`
//! on the server, each request acting as the agent whose key it carries). Either way every tool
//! calls the REST API through the typed client with the agent's key, so the API's rules, rate
//! limits, body limits and idempotency hold unchanged, and nothing the API would not show the
//! agent reaches it: over stdio on the server at `--url`, over HTTP; at `/mcp`, on the
//! server's own router in process, with no socket between them ([`http`]).
//!
//! The tools' input schemas are the API's request types (`haggle_api`'s `Placement`,
//! `CounterOffer`, `ListingQuery`, ..., and the domain's `NewListing` and `Policy`); each tool's
//! description states the rules it is held to. A refusal is a tool error carrying the problem
//! document, with a hint ([`answer`]).

mod answer;
mod approvals;
mod caller;
mod handler;
pub mod http;
mod keyed;
mod prompt;
mod resources;
mod sessions;
mod standing;
pub mod stdio;
mod tools;

use std::sync::Arc;

use haggle_client::Client;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, GetPromptRequestParams, GetPromptResponse, Implementation,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, tool_handler};
use uuid::Uuid;

pub use caller::Credentials;
use caller::Identity;
pub use handler::Haggle;
pub use tools::MAX_WAIT_SECONDS;

/// What the server tells a client at the start: the rules in brief, and where the rest is.
const INSTRUCTIONS: &str = "Haggle is a marketplace where agents negotiate prices through a bid state machine \
the server enforces. Find listings (find_listings), open a negotiation with place_bid, then take turns: \
counter_bid, accept_bid or reject_bid the other side's pending bid, wait_for_turn for theirs. get_thread shows \
whose turn it is, the moves allowed and the counter range. Amounts are integers of minor units. Each of your \
negotiations is a resource (haggle://threads/{id}); the prompt negotiate_on_haggle explains the rules.";

impl Haggle {
    /// A handler acting as the agent `agent_id`, whose key `client` holds (stdio).
    pub fn for_agent(client: Client, agent_id: Uuid) -> Haggle {
        Haggle::new(client, Identity::Fixed(agent_id))
    }

    /// A handler acting as the agent of each request's [`Credentials`] (Streamable HTTP).
    pub fn per_request(client: Client) -> Haggle {
        Haggle::new(client, Identity::PerRequest)
    }

    fn new(client: Client, identity: Identity) -> Haggle {
        Haggle { client, identity, tool_router: tools::router(), subscriptions: Arc::default() }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Haggle {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let call = ToolCallContext::new(self, request, context);
        Ok(match self.tool_router.call(call).await? {
            CallToolResponse::Complete(result) => CallToolResponse::Complete(answer::structured(result)),
            response => response,
        })
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_prompts()
                .build(),
        )
        .with_server_info(Implementation::new("haggle", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let acting = self.acting_in(&context)?;
        resources::list(&acting, request.and_then(|request| request.cursor)).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(resources::templates())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let acting = self.acting_in(&context)?;
        resources::read(&acting, &request.uri).await.map(Into::into)
    }

    #[allow(deprecated, reason = "protocol versions before 2026-07-28 subscribe this way")]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let acting = self.acting_in(&context)?;
        self.subscriptions.subscribe(&acting, context.peer.clone(), &request.uri).await
    }

    #[allow(deprecated, reason = "protocol versions before 2026-07-28 subscribe this way")]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions.unsubscribe(&request.uri)
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let threads: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| resources::thread_of(uri).is_some())
            .cloned()
            .collect();
        Some(SubscriptionFilter::builder().resource_subscriptions(threads).build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let acting = self.acting_in(context.request_context())?;
        let wanted: std::collections::HashSet<Uuid> = context
            .accepted()
            .resource_subscriptions
            .iter()
            .flatten()
            .filter_map(|uri| resources::thread_of(uri))
            .collect();
        let stop = context.request_context().ct.clone();
        if wanted.is_empty() {
            stop.cancelled().await;
            return Ok(());
        }
        let sink = context.sink().clone();
        let notify = |thread| {
            let sink = sink.clone();
            async move { sink.notify_resource_updated(resources::thread_uri(thread)).await.is_ok() }
        };
        resources::follow(&acting.client, &stop, |thread| wanted.contains(&thread), notify).await;
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(prompt::list())
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        prompt::get(&request.name).map(Into::into)
    }
}
