//! The Agent Card: who Haggle is to an A2A client, the bindings it serves, its skills, the API
//! key as its security scheme, and the extension that declares Haggle's negotiation parts.

use std::collections::HashMap;

use a2a::{
    AgentCapabilities, AgentCard, AgentExtension, AgentInterface, AgentProvider, AgentSkill, HttpAuthSecurityScheme,
    SecurityScheme, TRANSPORT_PROTOCOL_HTTP_JSON, TRANSPORT_PROTOCOL_JSONRPC,
};
use haggle_api::Agent;
use serde_json::{Value, json};

use crate::paths::{PATH, REST_PATH};

/// The extension a client speaks when it sends Haggle's moves as data parts and reads its
/// views back; its `params` say which parts those are.
pub const EXTENSION_URI: &str = "https://haggle.dev/a2a/negotiation/v1";

const SECURITY_SCHEME: &str = "apiKey";
const DATA: &str = "application/json";
const TEXT: &str = "text/plain";

/// The public card of the server at `base_url` (`scheme://host[:port]`, no trailing slash).
pub fn agent_card(base_url: &str) -> AgentCard {
    let base = base_url.trim_end_matches('/');
    AgentCard {
        name: "Haggle".to_owned(),
        description: "A negotiation marketplace: find listings, negotiate a price as a buyer bid by bid, or buy at \
                      the ask. Each negotiation is a task whose id is its thread's id; each move is a data part \
                      with the REST API's field names (see the extension)."
            .to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        supported_interfaces: vec![
            AgentInterface::new(format!("{base}{PATH}"), TRANSPORT_PROTOCOL_JSONRPC),
            AgentInterface::new(format!("{base}{REST_PATH}"), TRANSPORT_PROTOCOL_HTTP_JSON),
        ],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extensions: Some(vec![extension(None)]),
            extended_agent_card: Some(true),
        },
        default_input_modes: vec![DATA.to_owned()],
        default_output_modes: vec![DATA.to_owned(), TEXT.to_owned()],
        skills: skills(),
        provider: Some(AgentProvider { organization: "Haggle".to_owned(), url: base.to_owned() }),
        documentation_url: Some(format!("{base}/openapi.yaml")),
        icon_url: None,
        security_schemes: Some(HashMap::from([(
            SECURITY_SCHEME.to_owned(),
            SecurityScheme::HttpAuth(HttpAuthSecurityScheme {
                scheme: "Bearer".to_owned(),
                description: Some(
                    "Haggle's API key: `Authorization: Bearer <key>` (register with POST /v1/agents)".to_owned(),
                ),
                bearer_format: Some("API key".to_owned()),
            }),
        )])),
        security_requirements: Some(vec![HashMap::from([(SECURITY_SCHEME.to_owned(), vec![])])]),
        signatures: None,
    }
}

/// The card for an authenticated caller: the public one, with the caller's agent (its id,
/// name and tier, which decides the listings it may negotiate on) in the extension's params.
pub fn extended_card(base_url: &str, agent: &Agent) -> AgentCard {
    let mut card = agent_card(base_url);
    card.capabilities.extensions = Some(vec![extension(Some(agent))]);
    card
}

fn extension(agent: Option<&Agent>) -> AgentExtension {
    let mut params: HashMap<String, Value> = HashMap::from([
        (
            "moves".to_owned(),
            json!({
                "search": { "query": "the words to find, or GET /v1/listings's query: q, status, seller_id, limit, cursor" },
                "place": { "listing_id": "required", "amount": "minor units", "message": "optional", "expires_in": "optional seconds", "terms": "optional object", "currency": "optional: checked against the listing's" },
                "purchase": { "listing_id": "required", "currency": "optional: checked against the listing's" },
                "counter": { "bid_id": "optional: the task's pending bid", "amount": "minor units", "final": "optional", "message": "optional", "expires_in": "optional", "terms": "optional" },
                "accept": { "bid_id": "optional" },
                "reject": { "bid_id": "optional" },
                "withdraw": { "bid_id": "optional" },
            }),
        ),
        (
            "part".to_owned(),
            json!(
                "one data part whose object names the move in `action`; the message's taskId names the negotiation for every move after `place`"
            ),
        ),
        ("answers".to_owned(), json!(["bid", "thread", "order", "listings", "moves", "counter_range"])),
        ("amounts".to_owned(), json!("integers of minor units; a whole number sent as a float (80000.0) is taken")),
    ]);
    if let Some(agent) = agent {
        params.insert("agent".to_owned(), json!({ "id": agent.id, "name": agent.name, "tier": agent.tier }));
    }
    AgentExtension {
        uri: EXTENSION_URI.to_owned(),
        description: Some("Haggle's negotiation moves as data parts, and its REST views in the answers".to_owned()),
        required: Some(false),
        params: Some(params),
    }
}

fn skills() -> Vec<AgentSkill> {
    let skill = |id: &str, name: &str, description: &str, tags: &[&str], example: Value| AgentSkill {
        id: id.to_owned(),
        name: name.to_owned(),
        description: description.to_owned(),
        tags: tags.iter().map(|tag| (*tag).to_owned()).collect(),
        examples: Some(vec![example.to_string()]),
        input_modes: Some(vec![DATA.to_owned()]),
        output_modes: Some(vec![DATA.to_owned(), TEXT.to_owned()]),
        security_requirements: None,
    };
    vec![
        skill(
            "find-listings",
            "Find listings",
            "Search the active listings by words; answered with a message holding `listings` (a page of the REST \
             API's listings).",
            &["search", "listings"],
            json!({ "action": "search", "query": "standing desk" }),
        ),
        skill(
            "negotiate-as-buyer",
            "Negotiate a price as a buyer",
            "Place an opening bid (a new task), then counter, accept, reject or withdraw in the same task. The task \
             is `working` while the seller decides, `input-required` when the seller has countered (the status \
             message names the moves allowed and the counter range), `completed` with the order as an artifact.",
            &["negotiation", "bid", "counter"],
            json!({ "action": "place", "listing_id": "<listing id>", "amount": 80000 }),
        ),
        skill(
            "buy-at-ask",
            "Buy at the ask",
            "Buy one unit at the listing's ask: a task that completes at once, with the order as its artifact.",
            &["purchase", "order"],
            json!({ "action": "purchase", "listing_id": "<listing id>" }),
        ),
        skill(
            "follow-negotiations",
            "Follow my negotiations",
            "ListTasks lists my negotiations, GetTask reads one as it stands, SubscribeToTask streams its updates.",
            &["tasks", "events"],
            json!({ "method": "ListTasks" }),
        ),
    ]
}
