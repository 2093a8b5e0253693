//! A typed client for Haggle's API.
//!
//! ```no_run
//! # async fn demo() -> Result<(), haggle_client::ClientError> {
//! use haggle_client::{Client, Placement};
//! let buyer = Client::new("http://127.0.0.1:8080", Some("hk_...".to_owned()))?;
//! let listing = "0190c6f0-0000-7000-8000-000000000000".parse().unwrap();
//! let placed = buyer.place_bid(listing, &Placement::new(120_000)).await?;
//! let answered = buyer.get_bid(placed.bid.id, Some(30.0)).await?;
//! # Ok(()) }
//! ```
//!
//! **Retries.** Every `POST` carries an `Idempotency-Key` of its own, a fresh random UUID per
//! call (or the caller's, given with [`Client::with_idempotency_key`]). When the request fails in transport (no connection, a reset, a timeout), or the server
//! answers `409 idempotency_key_in_use` (the first attempt is still running), the client sends it
//! again with the same key, up to [`ATTEMPTS`] times in all, so a move is made at most once and
//! its answer is the first attempt's. `GET`, `PUT` and `DELETE` are retried the same way, being
//! safe to repeat. Other errors are returned at once.
//!
//! **In process.** A server that calls its own API (its MCP endpoint's tools) makes a client
//! with [`Client::in_process`]: the same requests, retries and answers, handed to the server's
//! router as a service instead of over a socket (see [`ApiService`]).

mod error;
mod in_process;
mod stream;
mod types;

use std::time::Duration;

use reqwest::{Method, RequestBuilder, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use error::refusal;
pub use error::{ClientError, MoveOutcome, OrHeld, Problem, ProblemField};
pub use in_process::{ApiBody, ApiService, BodyError, Carried};
pub use stream::{EventStream, STREAM_IDLE_LIMIT};
pub use types::*;

use haggle_domain::strategy::Policy;
use in_process::{InProcess, USER_AGENT};

/// How many times a request is sent, by default, before its transport failure is returned.
pub const ATTEMPTS: u32 = 3;
/// How long a request may take beyond the time it asks the server to wait, unless the client
/// was given another [`Client::timeout`].
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The URL a client uses when none is given.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// A client of one Haggle server, acting as one agent (or as nobody, for registration and the
/// public routes).
#[derive(Clone)]
pub struct Client {
    /// Sends the requests over HTTP, and builds them either way.
    http: reqwest::Client,
    /// The API in this process, when the requests go to it instead.
    in_process: Option<InProcess>,
    base: String,
    api_key: Option<String>,
    attempts: u32,
    idempotency_keys: bool,
    /// The key every `POST` carries, when the caller chose one.
    idempotency_key: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("in_process", &self.in_process.is_some())
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("attempts", &self.attempts)
            .field("idempotency_keys", &self.idempotency_keys)
            .field("idempotency_key", &self.idempotency_key)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Client {
    /// A client of the server at `base_url` (e.g. `http://127.0.0.1:8080`), authenticated with
    /// `api_key` when given.
    pub fn new(base_url: &str, api_key: Option<String>) -> Result<Client, ClientError> {
        let parsed = url::Url::parse(base_url)
            .map_err(|error| ClientError::InvalidUrl { url: base_url.to_owned(), reason: error.to_string() })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ClientError::InvalidUrl { url: base_url.to_owned(), reason: "not an http(s) URL".to_owned() });
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(USER_AGENT)
            .build()
            .map_err(|error| ClientError::Transport { method: "-".to_owned(), url: base_url.to_owned(), error })?;
        // An empty key (say, `HAGGLE_API_KEY=`) is no key.
        let api_key = api_key.filter(|key| !key.is_empty());
        Ok(Client {
            http,
            in_process: None,
            base: base_url.trim_end_matches('/').to_owned(),
            api_key,
            attempts: ATTEMPTS,
            idempotency_keys: true,
            idempotency_key: None,
            timeout: REQUEST_TIMEOUT,
        })
    }

    /// A client of the API served in this process by `api` (the server's router, with all
    /// its layers), reached at `base_url` as far as the requests say: their `Host`, and the URL
    /// errors name. No request opens a socket.
    pub fn in_process(base_url: &str, api: ApiService) -> Result<Client, ClientError> {
        let client = Client::new(base_url, None)?;
        Ok(Client { in_process: Some(InProcess { service: api, carried: Carried::default() }), ..client })
    }

    /// The same client, each request of which carries `carried`'s extensions and headers: what
    /// the server knows of the request a call is made for (the address of the client behind
    /// it), for the limits and logs that count by it. Only a client [in process](Self::in_process)
    /// carries anything; over HTTP a request is only its own.
    pub fn carrying(&self, carried: Carried) -> Client {
        let mut client = self.clone();
        if let Some(in_process) = &mut client.in_process {
            in_process.carried = carried;
        }
        client
    }

    /// The same server and settings, as another agent. The clients share their connections.
    pub fn with_api_key(&self, api_key: impl Into<String>) -> Client {
        Client { api_key: Some(api_key.into()), ..self.clone() }
    }

    /// Sends each request at most `attempts` times (at least once). With 1, a transport failure
    /// or a busy idempotency key is returned at once, as a load generator wants.
    pub fn attempts(self, attempts: u32) -> Client {
        Client { attempts: attempts.max(1), ..self }
    }

    /// Whether `POST`s carry an `Idempotency-Key` (the default). Without keys a `POST` is never
    /// retried, since a retry could make the move twice.
    pub fn idempotency_keys(self, on: bool) -> Client {
        Client { idempotency_keys: on, ..self }
    }

    /// The same client, sending `key` as the `Idempotency-Key` of its `POST`s instead of a fresh
    /// one each: for a caller that retries a move itself (an agent that lost the answer), so that
    /// the retry replays the first answer instead of making the move again. One key is one
    /// move: use the returned client for the one `POST` the key stands for.
    pub fn with_idempotency_key(&self, key: impl Into<String>) -> Client {
        Client { idempotency_keys: true, idempotency_key: Some(key.into()), ..self.clone() }
    }

    /// Gives up on a request that has not been answered within `timeout` (by default
    /// [`REQUEST_TIMEOUT`]) and returns it as a transport failure. A request that asks the server
    /// to wait (`get_bid` with `wait`, `events` with `query.wait`) is given that wait on top.
    pub fn timeout(self, timeout: Duration) -> Client {
        Client { timeout, ..self }
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    // ----- the server -----

    /// Checks that a Haggle server answers at the base URL and can serve (`GET /readyz`). A
    /// server that is up while its database does not answer is refused with `unavailable`; see
    /// [`ClientError::first_contact`] for telling a user what the failure means.
    pub async fn ready(&self) -> Result<(), ClientError> {
        #[derive(serde::Deserialize)]
        struct Readiness {
            status: String,
        }
        let url = format!("{}/readyz", self.base);
        let readiness: Readiness = self.get("/readyz", &()).await?;
        if readiness.status != "ready" {
            return Err(ClientError::UnexpectedResponse {
                status: 200,
                detail: format!("GET {url}: the status is `{}`, not `ready`", readiness.status),
            });
        }
        Ok(())
    }

    /// Checks that the server takes this client's key as its operator token. The probe changes
    /// an agent that cannot exist, so with a good token it is a harmless `404 not_found`, which
    /// is `Ok`; a refused token is an `Api` error with status 401 (not the server's token) or
    /// 403 (an agent's key).
    pub async fn check_admin_token(&self) -> Result<(), ClientError> {
        match self.update_agent(Uuid::nil(), &ProfilePatch::default()).await {
            Ok(_) => Ok(()),
            Err(ClientError::Api(problem)) if problem.code == "not_found" => Ok(()),
            Err(error) => Err(error),
        }
    }

    // ----- agents -----

    /// Registers an agent; the answer holds its API key, shown this once.
    pub async fn register(&self, name: &str) -> Result<Registered, ClientError> {
        self.post("/v1/agents", &serde_json::json!({ "name": name })).await
    }

    /// The calling agent.
    pub async fn me(&self) -> Result<Agent, ClientError> {
        self.get("/v1/agents/me", &()).await
    }

    // ----- listings -----

    pub async fn create_listing(&self, listing: &NewListing) -> Result<Listing, ClientError> {
        self.post("/v1/listings", listing).await
    }

    pub async fn get_listing(&self, id: Uuid) -> Result<Listing, ClientError> {
        self.get(&format!("/v1/listings/{id}"), &()).await
    }

    /// Changes the fields given; the currency never changes.
    pub async fn update_listing(&self, id: Uuid, patch: &ListingPatch) -> Result<Listing, ClientError> {
        self.request(Method::PATCH, &format!("/v1/listings/{id}"), &(), Some(patch), None).await
    }

    /// Takes a listing off the market; its live negotiations are closed.
    pub async fn withdraw_listing(&self, id: Uuid) -> Result<Listing, ClientError> {
        self.post(&format!("/v1/listings/{id}/withdraw"), &serde_json::json!({})).await
    }

    /// One page of listings; pass its `next_cursor` as `query.cursor` for the next.
    pub async fn list_listings(&self, query: &ListingQuery) -> Result<Page<Listing>, ClientError> {
        self.get("/v1/listings", query).await
    }

    /// Buys one unit at the ask.
    pub async fn purchase(&self, listing: Uuid) -> Result<Purchased, ClientError> {
        self.post(&format!("/v1/listings/{listing}/purchase"), &serde_json::json!({})).await
    }

    // ----- bids -----

    /// Opens a thread on a listing with a first bid.
    pub async fn place_bid(&self, listing: Uuid, placement: &Placement) -> Result<BidAndThread, ClientError> {
        self.post(&format!("/v1/listings/{listing}/bids"), placement).await
    }

    /// Counters the pending bid; the answer holds the new pending bid.
    pub async fn counter(&self, bid: Uuid, offer: &CounterOffer) -> Result<BidAndThread, ClientError> {
        self.post(&format!("/v1/bids/{bid}/counter"), offer).await
    }

    /// Accepts the pending bid; the answer holds the order.
    pub async fn accept(&self, bid: Uuid) -> Result<Answered, ClientError> {
        self.post(&format!("/v1/bids/{bid}/accept"), &serde_json::json!({})).await
    }

    /// Accepts a bid with terms: on an order's schedule negotiation, the window taken
    /// ([`Acceptance::choosing`]).
    pub async fn accept_with(&self, bid: Uuid, acceptance: &Acceptance) -> Result<Answered, ClientError> {
        self.post(&format!("/v1/bids/{bid}/accept"), acceptance).await
    }

    pub async fn reject(&self, bid: Uuid) -> Result<Answered, ClientError> {
        self.post(&format!("/v1/bids/{bid}/reject"), &serde_json::json!({})).await
    }

    /// Takes back my own pending bid.
    pub async fn withdraw(&self, bid: Uuid) -> Result<Answered, ClientError> {
        self.post(&format!("/v1/bids/{bid}/withdraw"), &serde_json::json!({})).await
    }

    /// A bid. With `wait` (seconds, up to 60) a pending bid is answered as soon as it leaves
    /// `PENDING`, or when the time is up, as it then is.
    pub async fn get_bid(&self, bid: Uuid, wait: Option<f64>) -> Result<Bid, ClientError> {
        self.get_waiting(&format!("/v1/bids/{bid}"), &WaitQuery { wait }, wait).await
    }

    // ----- threads, orders, events -----

    pub async fn get_thread(&self, thread: Uuid) -> Result<ThreadWithBids, ClientError> {
        self.get(&format!("/v1/threads/{thread}"), &()).await
    }

    pub async fn list_threads(&self, query: &ThreadQuery) -> Result<Page<Thread>, ClientError> {
        self.get("/v1/threads", query).await
    }

    /// An order with its payments.
    pub async fn get_order(&self, order: Uuid) -> Result<OrderWithPayments, ClientError> {
        self.get(&format!("/v1/orders/{order}"), &()).await
    }

    /// The seller fulfils a CONFIRMED order.
    pub async fn fulfil_order(&self, order: Uuid, fulfilment: &Fulfil) -> Result<OrderWithPayments, ClientError> {
        self.post(&format!("/v1/orders/{order}/fulfil"), fulfilment).await
    }

    /// The buyer completes a FULFILLED order.
    pub async fn complete_order(&self, order: Uuid) -> Result<OrderWithPayments, ClientError> {
        self.post(&format!("/v1/orders/{order}/complete"), &serde_json::json!({})).await
    }

    /// The buyer records a payment of at most the order's outstanding amount.
    pub async fn record_payment(&self, order: Uuid, payment: &NewPayment) -> Result<PaymentAndOrder, ClientError> {
        self.post(&format!("/v1/orders/{order}/payments"), payment).await
    }

    /// Opens a negotiation on an order (a refund the buyer asks for, or the order's
    /// cancellation) with its first bid; its later moves are the bids' (`counter`, `accept`, ...).
    pub async fn open_negotiation(&self, order: Uuid, opening: &OpenNegotiation) -> Result<BidAndThread, ClientError> {
        self.post(&format!("/v1/orders/{order}/negotiations"), opening).await
    }

    /// Sends a refund that ended without agreement (REJECTED or EXPIRED) to the operator.
    pub async fn escalate_thread(&self, thread: Uuid) -> Result<Thread, ClientError> {
        self.post(&format!("/v1/threads/{thread}/escalate"), &serde_json::json!({})).await
    }

    /// The seller confirms a recorded payment.
    pub async fn confirm_payment(&self, order: Uuid, payment: Uuid) -> Result<PaymentAndOrder, ClientError> {
        self.post(&format!("/v1/orders/{order}/payments/{payment}/confirm"), &serde_json::json!({})).await
    }

    /// The seller disputes a recorded payment.
    pub async fn dispute_payment(
        &self,
        order: Uuid,
        payment: Uuid,
        dispute: &PaymentDispute,
    ) -> Result<PaymentAndOrder, ClientError> {
        self.post(&format!("/v1/orders/{order}/payments/{payment}/dispute"), dispute).await
    }

    pub async fn list_orders(&self, query: &OrderQuery) -> Result<Page<Order>, ClientError> {
        self.get("/v1/orders", query).await
    }

    /// My events after `query.after`, long-polling up to `query.wait` seconds when there are none.
    pub async fn events(&self, query: &EventQuery) -> Result<EventPage, ClientError> {
        self.get_waiting("/v1/events", query, query.wait).await
    }

    /// My events as they are published, from the one after `after` (or, without it, from now
    /// on), as Server-Sent Events. The stream holds one of the agent's waiting places on the
    /// server for as long as it is open.
    pub async fn event_stream(&self, after: Option<i64>) -> Result<EventStream, ClientError> {
        let url = format!("{}/v1/events/stream", self.base);
        let mut request =
            self.http.get(&url).header(reqwest::header::ACCEPT, "text/event-stream").query(&StreamQuery { after });
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let transport = |error| ClientError::Transport { method: "GET".to_owned(), url: url.clone(), error };
        let source = match &self.in_process {
            None => stream::Source::Http(request.send().await.map_err(transport)?),
            Some(in_process) => {
                let request = request.build().map_err(transport)?;
                let response =
                    in_process.send(request).await.map_err(|failure| failure.into_error(&Method::GET, &url))?;
                stream::Source::InProcess(response)
            }
        };
        if !source.status().is_success() {
            return Err(source.refused(&url).await);
        }
        Ok(EventStream::new(source, after))
    }

    // ----- policies -----

    pub async fn set_policy(&self, scope: PolicyScope, policy: &Policy) -> Result<StoredPolicy, ClientError> {
        self.request(Method::PUT, &scope.path(), &(), Some(policy), None).await
    }

    pub async fn get_policy(&self, scope: PolicyScope) -> Result<StoredPolicy, ClientError> {
        self.get(&scope.path(), &()).await
    }

    pub async fn delete_policy(&self, scope: PolicyScope) -> Result<(), ClientError> {
        let _: serde_json::Value = self.request(Method::DELETE, &scope.path(), &(), None::<&()>, None).await?;
        Ok(())
    }

    // ----- keys -----

    /// My API keys, oldest first (never the keys themselves).
    pub async fn list_keys(&self, query: &PageQuery) -> Result<Page<KeyRecord>, ClientError> {
        self.get("/v1/agents/me/keys", query).await
    }

    // ----- webhooks -----

    /// Registers a webhook; the answer holds its signing secret, shown this once.
    pub async fn create_webhook(&self, webhook: &NewWebhook) -> Result<WebhookCreated, ClientError> {
        self.post("/v1/webhooks", webhook).await
    }

    pub async fn list_webhooks(&self, query: &PageQuery) -> Result<Page<Webhook>, ClientError> {
        self.get("/v1/webhooks", query).await
    }

    pub async fn get_webhook(&self, id: Uuid) -> Result<Webhook, ClientError> {
        self.get(&format!("/v1/webhooks/{id}"), &()).await
    }

    pub async fn delete_webhook(&self, id: Uuid) -> Result<(), ClientError> {
        let _: serde_json::Value =
            self.request(Method::DELETE, &format!("/v1/webhooks/{id}"), &(), None::<&()>, None).await?;
        Ok(())
    }

    /// A webhook's deliveries, newest first, each with its attempts.
    pub async fn webhook_deliveries(&self, id: Uuid, query: &PageQuery) -> Result<Page<Delivery>, ClientError> {
        self.get(&format!("/v1/webhooks/{id}/deliveries"), query).await
    }

    /// Turns a disabled webhook back on.
    pub async fn enable_webhook(&self, id: Uuid) -> Result<Webhook, ClientError> {
        self.post(&format!("/v1/webhooks/{id}/enable"), &serde_json::json!({})).await
    }

    // ----- approvals -----

    /// Sets the agent's own approval rules (the default for every move of its own).
    pub async fn set_approval_rules(&self, rules: &ApprovalRules) -> Result<StoredApprovalRules, ClientError> {
        self.request(Method::PUT, "/v1/agents/me/approval-rules", &(), Some(rules), None).await
    }

    /// Adds an approver; the answer holds its token (`hap_…`), shown this once.
    pub async fn add_approver(&self, name: &str) -> Result<ApproverIssued, ClientError> {
        self.post("/v1/agents/me/approvers", &NewApprover { name: name.to_owned(), webhook_url: None }).await
    }

    /// The agent's requests for approval, newest first. Takes the agent's key or an approver's
    /// token as the client's key.
    pub async fn list_approvals(&self, query: &ApprovalQuery) -> Result<Page<Approval>, ClientError> {
        self.get("/v1/approvals", query).await
    }

    /// One request for approval, as it is now (a pending one past its time reads EXPIRED).
    pub async fn get_approval(&self, id: Uuid) -> Result<Approval, ClientError> {
        self.get(&format!("/v1/approvals/{id}"), &()).await
    }

    /// Approves a request: the held move is made then (or the request ends FAILED with the
    /// move's refusal in `failure`).
    pub async fn approve(&self, id: Uuid, grant: &ApprovalGrant) -> Result<ApprovalOutcome, ClientError> {
        self.post(&format!("/v1/approvals/{id}/approve"), grant).await
    }

    /// Denies a request, with a note the agent reads.
    pub async fn deny(&self, id: Uuid, denial: &ApprovalDenial) -> Result<Approval, ClientError> {
        self.post(&format!("/v1/approvals/{id}/deny"), denial).await
    }

    /// Withdraws the agent's own pending request (an approver may not).
    pub async fn withdraw_approval(&self, id: Uuid) -> Result<Approval, ClientError> {
        self.post(&format!("/v1/approvals/{id}/withdraw"), &serde_json::json!({})).await
    }

    // ----- operator -----

    /// Changes an agent's tier or verified identity. The client's key must be the server's
    /// admin token.
    pub async fn update_agent(&self, agent: Uuid, update: &ProfilePatch) -> Result<Agent, ClientError> {
        self.request(Method::PATCH, &format!("/v1/admin/agents/{agent}"), &(), Some(update), None).await
    }

    /// Agents, newest first, by name or id, tier and status. As every `admin_` call, it takes
    /// the server's admin token as the client's key.
    pub async fn admin_agents(&self, query: &AdminAgentQuery) -> Result<Page<AdminAgent>, ClientError> {
        self.get("/v1/admin/agents", query).await
    }

    /// An agent's API keys.
    pub async fn admin_keys(&self, agent: Uuid, query: &AdminPageQuery) -> Result<Page<KeyRecord>, ClientError> {
        self.get(&format!("/v1/admin/agents/{agent}/keys"), query).await
    }

    /// Any agent's threads, newest first.
    pub async fn admin_threads(&self, query: &AdminThreadQuery) -> Result<Page<Thread>, ClientError> {
        self.get("/v1/admin/threads", query).await
    }

    /// Decides an escalated refund: the thread with its decision, and the order with the refund.
    pub async fn admin_decide(&self, thread: Uuid, decision: &DisputeDecision) -> Result<Decided, ClientError> {
        self.post(&format!("/v1/admin/threads/{thread}/decide"), decision).await
    }

    /// Any agent's orders, newest first.
    pub async fn admin_orders(&self, query: &AdminOrderQuery) -> Result<Page<Order>, ClientError> {
        self.get("/v1/admin/orders", query).await
    }

    /// Every webhook, or only the failing ones.
    pub async fn admin_webhooks(&self, query: &AdminWebhookQuery) -> Result<Page<AdminWebhook>, ClientError> {
        self.get("/v1/admin/webhooks", query).await
    }

    /// Any webhook's deliveries, newest first.
    pub async fn admin_deliveries(&self, webhook: Uuid, query: &AdminPageQuery) -> Result<Page<Delivery>, ClientError> {
        self.get(&format!("/v1/admin/webhooks/{webhook}/deliveries"), query).await
    }

    /// The market now and over the last `query.hours` hours.
    pub async fn market_stats(&self, query: &StatsQuery) -> Result<MarketStats, ClientError> {
        self.get("/v1/admin/stats", query).await
    }

    // ----- plumbing -----

    async fn get<T: DeserializeOwned>(&self, path: &str, query: &impl Serialize) -> Result<T, ClientError> {
        self.request(Method::GET, path, query, None::<&()>, None).await
    }

    async fn get_waiting<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &impl Serialize,
        wait: Option<f64>,
    ) -> Result<T, ClientError> {
        let wait = wait.filter(|w| w.is_finite() && *w > 0.0).map(|w| Duration::from_secs_f64(w.min(3600.0)));
        self.request(Method::GET, path, query, None::<&()>, wait).await
    }

    async fn post<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize) -> Result<T, ClientError> {
        self.request(Method::POST, path, &(), Some(body), None).await
    }

    /// Sends a request, retrying transport failures (see the module's documentation), and reads
    /// the answer: `T` on success, a [`Problem`] otherwise.
    async fn request<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &impl Serialize,
        body: Option<&impl Serialize>,
        wait: Option<Duration>,
    ) -> Result<T, ClientError> {
        let url = format!("{}{path}", self.base);
        let idempotency_key = (method == Method::POST && self.idempotency_keys)
            .then(|| self.idempotency_key.clone().unwrap_or_else(|| Uuid::now_v7().to_string()));
        // A POST without a key is not safe to send twice.
        let attempts = if method == Method::POST && !self.idempotency_keys { 1 } else { self.attempts };
        let timeout = self.timeout + wait.unwrap_or_default();
        let mut attempt = 1;
        loop {
            let mut request: RequestBuilder = self.http.request(method.clone(), &url).query(query).timeout(timeout);
            if let Some(key) = &self.api_key {
                request = request.bearer_auth(key);
            }
            if let Some(key) = &idempotency_key {
                request = request.header("idempotency-key", key);
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let outcome = self.send(&method, &url, request).await;
            match outcome {
                Err(error) if attempt < attempts && error.is_retryable() => {
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                    attempt += 1;
                }
                outcome => return outcome,
            }
        }
    }

    /// Sends a request once, over HTTP or in process, and reads the answer.
    async fn send<T: DeserializeOwned>(
        &self,
        method: &Method,
        url: &str,
        request: RequestBuilder,
    ) -> Result<T, ClientError> {
        let transport = |error| ClientError::Transport { method: method.to_string(), url: url.to_owned(), error };
        let (status, bytes) = match &self.in_process {
            None => {
                let response = request.send().await.map_err(transport)?;
                let status = response.status();
                (status, response.bytes().await.map_err(transport)?)
            }
            Some(in_process) => {
                let request = request.build().map_err(transport)?;
                in_process.exchange(request).await.map_err(|failure| failure.into_error(method, url))?
            }
        };
        read(method, url, status, &bytes)
    }
}

fn read<T: DeserializeOwned>(method: &Method, url: &str, status: StatusCode, bytes: &[u8]) -> Result<T, ClientError> {
    // A move the agent's approval rules held: nothing was made (SPEC §10).
    if status == StatusCode::ACCEPTED
        && let Ok(held) = serde_json::from_slice::<Held>(bytes)
    {
        return Err(ClientError::Held(Box::new(held.approval)));
    }
    if status.is_success() {
        // A 204 has no body; read it as JSON null for callers that expect nothing.
        let bytes: &[u8] = if status == StatusCode::NO_CONTENT || bytes.is_empty() { b"null" } else { bytes };
        return serde_json::from_slice(bytes).map_err(|error| ClientError::UnexpectedResponse {
            status: status.as_u16(),
            detail: format!("{method} {url}: the answer is not what the API describes ({error})"),
        });
    }
    Err(refusal(method, url, status, bytes))
}
