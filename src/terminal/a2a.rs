//! `haggle a2a URL`: a buyer's negotiation with any A2A agent that speaks Haggle's negotiation
//! extension (another Haggle, say), over the agent's JSON-RPC binding, each round drawn on the
//! price ladder as it comes.
//!
//! The agent's card is read first: it must declare the extension
//! (`https://haggle.dev/a2a/negotiation/v1`), whose moves are data parts with the REST API's
//! field names, and name a JSON-RPC interface. The buyer's strategy is `haggle negotiate`'s;
//! each move is a `SendMessage` whose data part names it, the first opening the task, and the
//! task (read with its history, the moves as messages) says where the negotiation stands.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use a2a::{
    AgentCard, GetTaskRequest, JsonRpcId, JsonRpcRequest, JsonRpcResponse, Message, Part, PartContent, Role,
    SendMessageConfiguration, SendMessageRequest, SendMessageResponse, TRANSPORT_PROTOCOL_JSONRPC, Task, TaskState,
};
use anyhow::{Context, anyhow, bail};
use haggle_a2a::{CARD_PATH, EXTENSION_URI};
use haggle_client::{Bid, Listing, Order};
use haggle_domain::money::Price;
use haggle_domain::strategy::{Decision, NegotiationState};
use haggle_domain::{ListingStatus, Party, Tier};
use serde_json::{Value, json};
use uuid::Uuid;

use super::ladder::{Glyphs, Ladder, Positions};
use super::listing_id;
use super::negotiate::{Buyer, BuyerArgs, budget, moved_on};

/// `haggle a2a` options.
#[derive(Debug, clap::Args)]
pub struct A2aArgs {
    /// The agent: its base URL (whose card is at /.well-known/agent-card.json), or its card's
    /// URL.
    pub url: String,
    /// My API key at that agent (sent as `Authorization: Bearer`).
    #[arg(long, env = "HAGGLE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// The listing to negotiate on.
    #[arg(long, value_name = "LISTING_ID", value_parser = listing_id, required_unless_present = "search")]
    pub listing: Option<Uuid>,
    /// Words to find the listing by: the first active, negotiable listing found is taken.
    #[arg(long, conflicts_with = "listing")]
    pub search: Option<String>,
    #[command(flatten)]
    pub buyer: BuyerArgs,
    /// Give up (leaving the negotiation as it stands) after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Draw the ladder in plain ASCII (the default when standard output is not a terminal).
    #[arg(long)]
    pub ascii: bool,
}

/// How long one request to the agent may take: a blocking send waits a few seconds for the
/// seller.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a task waiting for the seller is read again.
const POLL: Duration = Duration::from_millis(300);
/// How many pages of listings are searched for `--listing`.
const LISTING_PAGES: usize = 20;

pub async fn a2a(args: A2aArgs) -> anyhow::Result<()> {
    let Some(key) = args.api_key.clone().filter(|key| !key.trim().is_empty()) else {
        bail!("haggle a2a acts as an agent: give its API key with --api-key or HAGGLE_API_KEY");
    };
    let http = reqwest::Client::builder().timeout(REQUEST_TIMEOUT).build()?;
    let card = resolve_card(&http, &args.url).await?;
    let agent = Agent::of(http, &card, &args.url, key)?;
    let me = agent.check_key(&card).await?;
    eprintln!("{} at {}{me}", card.name, agent.endpoint);

    let listing = match (&args.search, args.listing) {
        (Some(words), _) => agent
            .find(json!(words), open)
            .await?
            .with_context(|| format!("no active, negotiable listing at {} matches {words:?}", agent.endpoint))?,
        (None, Some(id)) => agent.find_by_id(id).await?,
        (None, None) => bail!("give the listing with --listing, or words to find it with --search"),
    };
    let buyer = budget(&args.buyer, listing.ask_amount)?;
    eprintln!(
        "negotiating as buyer on \"{}\" (ask {}), {}",
        listing.title,
        Price::new(listing.ask_amount, listing.currency),
        buyer.describe(listing.currency)
    );
    let ascii = args.ascii || !std::io::stdout().is_terminal();
    let session = Session {
        agent,
        listing,
        buyer,
        glyphs: if ascii { Glyphs::ASCII } else { Glyphs::UNICODE },
        deadline: Instant::now() + Duration::from_secs(args.timeout),
        timeout: args.timeout,
    };
    session.run().await
}

/// The agent's card at `url` (its base URL, or the card's own).
async fn resolve_card(http: &reqwest::Client, url: &str) -> anyhow::Result<AgentCard> {
    let trimmed = url.trim_end_matches('/');
    let card_url = if trimmed.ends_with(".json") { trimmed.to_owned() } else { format!("{trimmed}{CARD_PATH}") };
    let response =
        http.get(&card_url).send().await.with_context(|| format!("could not reach an A2A agent at {url}"))?;
    let status = response.status();
    if !status.is_success() {
        bail!("{card_url} answered {status}: no A2A Agent Card there (give the agent's base URL or its card's URL)");
    }
    response.json().await.with_context(|| format!("{card_url} is not an A2A Agent Card"))
}

/// The agent's JSON-RPC binding, as the caller with `key`.
struct Agent {
    http: reqwest::Client,
    endpoint: String,
    key: String,
}

/// A move the agent refused: its A2A error, with Haggle's problem code when it gave one.
#[derive(Debug)]
struct Refused {
    code: i32,
    message: String,
    problem: Option<String>,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the agent refused ({}): {}", self.code, self.message)
    }
}

impl std::error::Error for Refused {}

impl Agent {
    /// The agent of `card`, if it speaks Haggle's extension over JSON-RPC.
    fn of(http: reqwest::Client, card: &AgentCard, url: &str, key: String) -> anyhow::Result<Agent> {
        let speaks = card.capabilities.extensions.iter().flatten().any(|extension| extension.uri == EXTENSION_URI);
        if !speaks {
            bail!(
                "the agent \"{}\" at {url} does not declare Haggle's negotiation extension ({EXTENSION_URI}) in its \
                 card, so it would not take Haggle's moves; haggle a2a negotiates only with agents that do",
                card.name
            );
        }
        let Some(interface) =
            card.supported_interfaces.iter().find(|interface| interface.protocol_binding == TRANSPORT_PROTOCOL_JSONRPC)
        else {
            bail!("the agent \"{}\" at {url} offers no JSON-RPC interface, which haggle a2a speaks", card.name);
        };
        Ok(Agent { http, endpoint: interface.url.clone(), key })
    }

    /// Checks the key against the agent (through its extended card, when it has one), and says
    /// who the key is there.
    async fn check_key(&self, card: &AgentCard) -> anyhow::Result<String> {
        if card.capabilities.extended_agent_card != Some(true) {
            return Ok(String::new());
        }
        let extended: AgentCard = self.call("GetExtendedAgentCard", json!({})).await?;
        let me = extended
            .capabilities
            .extensions
            .iter()
            .flatten()
            .find(|extension| extension.uri == EXTENSION_URI)
            .and_then(|extension| extension.params.as_ref()?.get("agent").cloned());
        Ok(me
            .map(|me| format!(", as {} ({})", me["name"].as_str().unwrap_or("?"), me["tier"].as_str().unwrap_or("?")))
            .unwrap_or_default())
    }

    /// One JSON-RPC call, its result read as `T`.
    async fn call<T: serde::de::DeserializeOwned>(&self, method: &str, params: Value) -> anyhow::Result<T> {
        let request = JsonRpcRequest::new(JsonRpcId::Number(1), method, Some(params));
        let response = self
            .http
            .post(&self.endpoint)
            .bearer_auth(&self.key)
            .json(&request)
            .send()
            .await
            .with_context(|| format!("could not reach the agent at {}", self.endpoint))?;
        let status = response.status();
        let body = response.bytes().await.with_context(|| format!("reading the agent's answer to {method}"))?;
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            let problem: Value = serde_json::from_slice(&body).unwrap_or_default();
            let detail = problem["detail"].as_str().unwrap_or("");
            bail!("the agent refused the API key ({status}{}{detail})", if detail.is_empty() { "" } else { ": " });
        }
        if !status.is_success() {
            bail!("the agent answered {method} with {status}: {}", String::from_utf8_lossy(&body));
        }
        let answer: JsonRpcResponse =
            serde_json::from_slice(&body).with_context(|| format!("the agent's answer to {method} is not JSON-RPC"))?;
        if let Some(error) = answer.error {
            let problem = error
                .data
                .as_ref()
                .and_then(Value::as_array)
                .and_then(|details| details.iter().find_map(|detail| detail["metadata"]["code"].as_str()))
                .map(str::to_owned);
            return Err(Refused { code: error.code, message: error.message, problem }.into());
        }
        let result = answer.result.with_context(|| format!("the agent answered {method} with no result"))?;
        serde_json::from_value(result).with_context(|| format!("the agent's result of {method} is not what A2A says"))
    }

    /// Sends the move `data` (in `task`, unless it opens one), answered once the seller has
    /// answered it or the agent's wait is over.
    async fn send(&self, task: Option<&str>, data: Value) -> anyhow::Result<SendMessageResponse> {
        let mut message = Message::new(Role::User, vec![Part::data(data).with_media_type("application/json")]);
        message.message_id = Uuid::now_v7().to_string();
        message.task_id = task.map(str::to_owned);
        let request = SendMessageRequest {
            message,
            configuration: Some(SendMessageConfiguration {
                accepted_output_modes: None,
                task_push_notification_config: None,
                history_length: None,
                return_immediately: Some(false),
            }),
            metadata: None,
            tenant: None,
        };
        self.call("SendMessage", serde_json::to_value(&request)?).await
    }

    /// The task with its whole history.
    async fn task(&self, id: &str) -> anyhow::Result<Task> {
        let request = GetTaskRequest { id: id.to_owned(), history_length: None, tenant: None };
        self.call("GetTask", serde_json::to_value(&request)?).await
    }

    /// The first listing the search `query` finds that `keep` takes, reading up to
    /// [`LISTING_PAGES`] pages.
    async fn find(&self, query: Value, keep: impl Fn(&Listing) -> bool) -> anyhow::Result<Option<Listing>> {
        let mut query = match query {
            Value::String(words) => json!({ "q": words, "status": "ACTIVE", "limit": 100 }),
            other => other,
        };
        for _ in 0..LISTING_PAGES {
            let answer = self.send(None, json!({ "action": "search", "query": query.clone() })).await?;
            let SendMessageResponse::Message(message) = answer else {
                bail!("the agent answered a search with a task, not a message of listings");
            };
            let page = data_part(&message).map(|data| data["listings"].clone()).unwrap_or_default();
            let listings: Vec<Listing> = serde_json::from_value(page["data"].clone())
                .context("the agent's listings are not Haggle's (its extension's `listings`)")?;
            if let Some(found) = listings.into_iter().find(|listing| keep(listing)) {
                return Ok(Some(found));
            }
            match page["next_cursor"].as_str() {
                Some(cursor) => query["cursor"] = json!(cursor),
                None => return Ok(None),
            }
        }
        Ok(None)
    }

    async fn find_by_id(&self, id: Uuid) -> anyhow::Result<Listing> {
        let found = self.find(json!({ "status": "ACTIVE", "limit": 100 }), |listing| listing.id == id).await?;
        found.with_context(|| format!("listing {id} is not among the active listings at {}", self.endpoint))
    }
}

/// The first data part of `message`.
fn data_part(message: &Message) -> Option<&Value> {
    message.parts.iter().find_map(|part| match &part.content {
        PartContent::Data(data) => Some(data),
        PartContent::Text(_) | PartContent::Raw(_) | PartContent::Url(_) => None,
    })
}

struct Session {
    agent: Agent,
    listing: Listing,
    buyer: Buyer,
    glyphs: Glyphs,
    deadline: Instant,
    timeout: u64,
}

/// The bids of a task, from its history's messages.
fn bids_of(task: &Task) -> Vec<Bid> {
    task.history
        .iter()
        .flatten()
        .filter_map(|message| data_part(message)?.get("bid").cloned())
        .filter_map(|bid| serde_json::from_value(bid).ok())
        .collect()
}

/// The move a task's state asks of the buyer, as its status message's data part says it.
fn status_data(task: &Task) -> Value {
    task.status.message.as_ref().and_then(data_part).cloned().unwrap_or_default()
}

impl Session {
    async fn run(&self) -> anyhow::Result<()> {
        let ask = self.listing.ask_amount;
        let opening = self.state(&[]);
        let amount = match self.buyer.next(&opening) {
            Decision::Counter { amount, .. } => amount,
            Decision::Accept { rationale } | Decision::Reject { rationale } | Decision::Stop { rationale } => {
                println!("stopped: {}", rationale.describe());
                return Ok(());
            }
        };
        let placed = self
            .agent
            .send(None, json!({ "action": "place", "listing_id": self.listing.id, "amount": amount }))
            .await
            .map_err(|error| self.explain(error))?;
        let SendMessageResponse::Task(task) = placed else { bail!("the agent answered a bid with no task") };
        let task_id = task.id;
        eprintln!("task {task_id}");
        let mut ladder: Option<Ladder> = None;
        let mut printed = 0;
        let mut refusals = 0;
        loop {
            let task = self.agent.task(&task_id).await?;
            let bids = bids_of(&task);
            if let Some(first) = bids.first() {
                let ladder = *ladder.get_or_insert_with(|| Ladder::new(first.amount..=ask, self.glyphs));
                for (index, bid) in bids.iter().enumerate().skip(printed) {
                    println!("{}", ladder.line(bid, Positions::after(&bids[..=index], ask)));
                }
                printed = printed.max(bids.len());
            }
            match &task.status.state {
                TaskState::Working | TaskState::Submitted => {
                    if Instant::now() >= self.deadline {
                        bail!(
                            "the seller did not answer within --timeout ({} s); the negotiation is left as it stands",
                            self.timeout
                        );
                    }
                    tokio::time::sleep(POLL).await;
                }
                TaskState::InputRequired => {
                    let decision = self.buyer.next(&self.state(&bids));
                    let data = match decision {
                        Decision::Accept { .. } => json!({ "action": "accept" }),
                        Decision::Counter { amount, is_final } => {
                            json!({ "action": "counter", "amount": amount, "final": is_final })
                        }
                        Decision::Reject { rationale } => {
                            eprintln!("rejecting: {}", rationale.describe());
                            json!({ "action": "reject" })
                        }
                        Decision::Stop { rationale } => {
                            println!("stopped: {}", rationale.describe());
                            return Ok(());
                        }
                    };
                    match self.agent.send(Some(&task_id), data).await {
                        Ok(_) => {}
                        Err(error) if moved_on_without_us(&error) && refusals < 3 => {
                            refusals += 1;
                            eprintln!("refused: {error}");
                        }
                        Err(error) => return Err(self.explain(error)),
                    }
                }
                state @ (TaskState::Completed
                | TaskState::Rejected
                | TaskState::Canceled
                | TaskState::Failed
                | TaskState::AuthRequired
                | TaskState::Unspecified) => return self.print_outcome(&task, state, &bids),
            }
        }
    }

    fn state(&self, bids: &[Bid]) -> NegotiationState {
        NegotiationState {
            mover: Party::Buyer,
            ask: self.listing.ask_amount,
            max_rounds: self.listing.max_rounds,
            buyer_tier: Tier::Agency,
            bids: bids.iter().map(|bid| bid.amount).collect(),
            pending_final: bids.last().is_some_and(|bid| bid.is_final),
            auto_moves: u32::try_from(bids.iter().filter(|bid| bid.author == Party::Buyer).count()).unwrap_or(0),
        }
    }

    fn print_outcome(&self, task: &Task, state: &TaskState, bids: &[Bid]) -> anyhow::Result<()> {
        let price = |amount| Price::new(amount, self.listing.currency);
        let rounds = bids.len();
        match state {
            TaskState::Completed => {
                let order: Option<Order> =
                    task.artifacts.iter().flatten().flat_map(|artifact| artifact.parts.iter()).find_map(|part| {
                        match &part.content {
                            PartContent::Data(data) => serde_json::from_value(data.get("order")?.clone()).ok(),
                            PartContent::Text(_) | PartContent::Raw(_) | PartContent::Url(_) => None,
                        }
                    });
                match order {
                    Some(order) => println!("ACCEPTED at {} (order {})", price(order.amount), order.id),
                    None => println!("ACCEPTED"),
                }
            }
            TaskState::Rejected => println!("REJECTED at round {rounds}"),
            TaskState::Canceled => println!("WITHDRAWN at round {rounds}"),
            TaskState::Failed => {
                let thread = &status_data(task)["thread"];
                let reason = thread["closed_reason"].as_str().or(thread["status"].as_str()).unwrap_or("ended");
                println!("ENDED ({reason}) at round {rounds}");
            }
            other => bail!("the agent put the task in a state a negotiation has not: {other:?}"),
        }
        Ok(())
    }

    /// A refusal of a move, with what the buyer may do instead when the listing takes no
    /// negotiation from it.
    fn explain(&self, error: anyhow::Error) -> anyhow::Error {
        let Some(refused) = error.downcast_ref::<Refused>() else { return error };
        match refused.problem.as_deref() {
            Some("negotiation_not_allowed") => anyhow!(
                "{refused}; any tier may buy it at the ask of {} (the purchase move)",
                Price::new(self.listing.ask_amount, self.listing.currency)
            ),
            _ => error,
        }
    }
}

/// A refusal that says the negotiation moved on without us (the bid expired or was answered),
/// rather than a mistake of ours: the task is read again.
fn moved_on_without_us(error: &anyhow::Error) -> bool {
    error.downcast_ref::<Refused>().and_then(|refused| refused.problem.as_deref()).is_some_and(moved_on)
}

/// Whether a listing is open to bids.
fn open(listing: &Listing) -> bool {
    listing.status == ListingStatus::Active && listing.negotiable
}
