//! The A2A methods over the REST API: each a few calls of the typed client as the caller, the
//! moves keyed by their message's id.

use a2a::{
    A2AError, AgentCard, ListTasksRequest, ListTasksResponse, SendMessageRequest, SendMessageResponse, Task, TaskState,
};
use haggle_api::{Answered, BidAndThread, Order, OrderQuery, Thread, ThreadQuery};
use haggle_client::{Client, ClientError};
use haggle_domain::bid::CounterTerms;
use haggle_domain::{BidStatus, ThreadStatus};
use uuid::Uuid;

use crate::acting::Acting;
use crate::error::{About, Refusal, with_code};
use crate::moves::{self, Answer, Move};
use crate::recent::Chosen;
use crate::task::{self, Negotiation};

/// The most tasks a `ListTasks` page holds, and how many it holds unless asked.
const MAX_PAGE: i32 = 100;
const DEFAULT_PAGE: i32 = 50;
/// The page the count of `ListTasks` reads the caller's threads by: the REST API's largest.
const COUNT_PAGE: u32 = 200;

/// What a message's move made: a task, or (for a search) a message.
pub(crate) enum Made {
    /// The task, and the bid of the caller's that now waits for the other side, if one does.
    Task(Task, Option<Uuid>),
    /// A message rather than a task: the listings a search found, or a placement or purchase
    /// held for approval (no thread yet).
    Message(SendMessageResponse),
}

/// `SendMessage`: the message's move, made once under its message id, answered with the task
/// after the other side answered a bid of the caller's (for at most the service's wait) when
/// `blocking`, else at once.
pub(crate) async fn send(
    acting: &Acting,
    request: &SendMessageRequest,
    blocking: bool,
) -> Result<SendMessageResponse, Refusal> {
    match make(acting, request).await? {
        Made::Message(answer) => Ok(answer),
        Made::Task(task, Some(waiting)) if blocking => {
            let _ = acting.client.get_bid(waiting, Some(acting.wait.as_secs_f64())).await;
            Ok(SendMessageResponse::Task(read_task(acting, &task.id).await.unwrap_or(task)))
        }
        Made::Task(task, _) => Ok(SendMessageResponse::Task(task)),
    }
}

/// The move a message asks for, made.
pub(crate) async fn make(acting: &Acting, request: &SendMessageRequest) -> Result<Made, Refusal> {
    let message = &request.message;
    let the_move = match moves::read(message) {
        Ok(the_move) => the_move,
        // A message to a task the caller cannot see is refused as that, whatever it holds.
        Err(refusal) => match message.task_id.as_deref().filter(|id| !id.is_empty()) {
            Some(task) => return Err(read_task(acting, task).await.err().unwrap_or(refusal)),
            None => return Err(refusal),
        },
    };
    if message.message_id.is_empty() {
        return Err(Refusal::invalid_params("the message has no messageId, which keys its move"));
    }
    let keyed = acting.client.with_idempotency_key(message.message_id.clone());
    let opens = |what: &str| match &message.task_id {
        Some(task) if !task.is_empty() => Err(Refusal::invalid_params(format!(
            "a {what} opens a task of its own: send it without taskId (this one names {task})"
        ))),
        _ => Ok(()),
    };
    match the_move {
        Move::Search(query) => {
            let page = acting.client.list_listings(&query).await.map_err(|e| Refusal::from_client(e, About::Other))?;
            let count = page.data.len();
            let listings = serde_json::to_value(&page).unwrap_or_default();
            Ok(Made::Message(SendMessageResponse::Message(task::listings_message(listings, count))))
        }
        Move::Purchase { listing_id, currency } => {
            opens("purchase")?;
            check_currency(acting, listing_id, currency.as_deref()).await?;
            match keyed.purchase(listing_id).await {
                Ok(bought) => Ok(Made::Task(task::purchase_task(&bought.order), None)),
                Err(error) => held_or_refused(acting, error, About::Other).await,
            }
        }
        Move::Place { listing_id, placement, currency } => {
            opens("place")?;
            check_currency(acting, listing_id, currency.as_deref()).await?;
            match keyed.place_bid(listing_id, &placement).await {
                Ok(placed) => Ok(after_bid(acting, &placed)),
                Err(error) => held_or_refused(acting, error, About::Other).await,
            }
        }
        Move::Answer { bid_id, answer } => {
            let Some(task_id) = message.task_id.as_deref().filter(|id| !id.is_empty()) else {
                return Err(Refusal::invalid_params(
                    "a counter, accept, reject or withdraw answers a task's bid: set the message's taskId",
                ));
            };
            let thread = parse_task_id(task_id)?;
            let about = About::Task(task_id);
            if let Some(bid) = bid_id {
                let read = acting.client.get_bid(bid, None).await.map_err(|e| Refusal::from_client(e, About::Other))?;
                if read.thread_id != thread {
                    return Err(Refusal::invalid_params(format!("bid {bid} is not a bid of task {task_id}")));
                }
                return match answer_bid(acting, &keyed, bid, &answer).await {
                    Ok(made) => Ok(made),
                    Err(error) => held_or_refused(acting, error, about).await,
                };
            }
            answer_pending(acting, message, thread, task_id, &answer).await
        }
    }
}

/// A move on the pending bid of `task`: on the bid this message chose when it was sent before;
/// else on the bid the latest answer about the task showed pending, and if the other side has
/// answered that one meanwhile, on the pending bid read from the thread, under the message id
/// and that bid's as the key (the message id alone already keys the refused move).
async fn answer_pending(
    acting: &Acting,
    message: &a2a::Message,
    thread: Uuid,
    task_id: &str,
    answer: &Answer,
) -> Result<Made, Refusal> {
    let about = About::Task(task_id);
    let (agent, message_id) = (acting.agent_id, message.message_id.as_str());
    let chosen = acting.recent.chosen(agent, message_id);
    let remembered =
        chosen.or_else(|| acting.recent.pending(thread).map(|bid| Chosen { bid, key: message_id.to_owned() }));
    let key = match remembered {
        Some(chosen) => {
            acting.recent.set_chosen(agent, message_id, chosen.clone());
            let keyed = acting.client.with_idempotency_key(chosen.key.clone());
            match answer_bid(acting, &keyed, chosen.bid, answer).await {
                Err(error) if chosen.key == message_id && answered_meanwhile(&error) => {
                    acting.recent.set_pending(thread, None);
                    None
                }
                Ok(made) => return Ok(made),
                Err(error) => return held_or_refused(acting, error, about).await,
            }
        }
        None => Some(message_id.to_owned()),
    };
    let bid = pending_bid(acting, thread, task_id).await?;
    let key = key.unwrap_or_else(|| format!("{message_id}:{bid}"));
    acting.recent.set_chosen(agent, message_id, Chosen { bid, key: key.clone() });
    let keyed = acting.client.with_idempotency_key(key);
    match answer_bid(acting, &keyed, bid, answer).await {
        Ok(made) => Ok(made),
        Err(error) => held_or_refused(acting, error, about).await,
    }
}

/// A move the API refused, or that the caller's approval rules held (SPEC §10). A held move is
/// no failure: a counter or acceptance answers its task as it stands, `input-required` (still
/// the caller's turn), with the request in its status message's data part (`approval`); a held
/// placement or purchase, which has no task yet, answers a message carrying the request.
async fn held_or_refused(acting: &Acting, error: ClientError, about: About<'_>) -> Result<Made, Refusal> {
    let ClientError::Held(approval) = error else { return Err(Refusal::from_client(error, about)) };
    match approval.held.thread_id {
        Some(thread) => {
            let read = read_task(acting, &thread.to_string()).await?;
            Ok(Made::Task(task::held_task(read, &approval), None))
        }
        None => Ok(Made::Message(SendMessageResponse::Message(task::held_message(&approval)))),
    }
}

/// Whether the API refused a move because its bid was no longer the pending one.
fn answered_meanwhile(error: &ClientError) -> bool {
    matches!(error.code(), Some("invalid_transition" | "bid_expired" | "not_your_turn"))
}

/// `answer` made on `bid` through `keyed`.
async fn answer_bid(acting: &Acting, keyed: &Client, bid: Uuid, answer: &Answer) -> Result<Made, ClientError> {
    match answer {
        Answer::Counter(offer) => keyed.counter(bid, offer).await.map(|countered| after_bid(acting, &countered)),
        Answer::Accept => keyed.accept(bid).await.map(|answered| after_answer(acting, &answered)),
        Answer::Reject => keyed.reject(bid).await.map(|answered| after_answer(acting, &answered)),
        Answer::Withdraw => keyed.withdraw(bid).await.map(|answered| after_answer(acting, &answered)),
    }
}

/// The task after a bid of the caller's: waiting for the other side.
fn after_bid(acting: &Acting, made: &BidAndThread) -> Made {
    let negotiation =
        Negotiation { thread: &made.thread, bids: &[], latest: Some(&made.bid), order: None, listing: None };
    let task = task::negotiation_task(&negotiation, acting.agent_id);
    let waiting =
        (made.bid.status == BidStatus::Pending && made.thread.status == ThreadStatus::Active).then_some(made.bid.id);
    acting.recent.set_pending(made.thread.id, waiting);
    Made::Task(task, waiting)
}

/// The task after an answer to a bid (an acceptance, a rejection or a withdrawal).
fn after_answer(acting: &Acting, answered: &Answered) -> Made {
    let negotiation = Negotiation {
        thread: &answered.thread,
        bids: &[],
        latest: Some(&answered.bid),
        order: answered.order.as_ref(),
        listing: None,
    };
    let pending = (answered.thread.status == ThreadStatus::Active && answered.bid.status == BidStatus::Pending)
        .then_some(answered.bid.id);
    acting.recent.set_pending(answered.thread.id, pending);
    Made::Task(task::negotiation_task(&negotiation, acting.agent_id), None)
}

/// The pending bid of a task, which a move that names no bid answers.
async fn pending_bid(acting: &Acting, thread: Uuid, task_id: &str) -> Result<Uuid, Refusal> {
    let read = acting.client.get_thread(thread).await.map_err(|e| Refusal::from_client(e, About::Task(task_id)))?;
    if read.thread.status != ThreadStatus::Active {
        let detail = format!("task {task_id} has ended ({}): it takes no more moves", read.thread.status);
        return Err(with_code(A2AError::unsupported_operation(detail.clone()), "task_ended", &detail).into());
    }
    read.bids
        .iter()
        .rev()
        .find(|bid| bid.status == BidStatus::Pending)
        .map(|bid| bid.id)
        .ok_or_else(|| Refusal::invalid_params(format!("task {task_id} has no pending bid")))
}

/// Refuses a move whose `currency` is not the listing's.
async fn check_currency(acting: &Acting, listing: Uuid, currency: Option<&str>) -> Result<(), Refusal> {
    let Some(currency) = currency else { return Ok(()) };
    let read = acting.client.get_listing(listing).await.map_err(|e| Refusal::from_client(e, About::Other))?;
    if read.currency.as_str().eq_ignore_ascii_case(currency) {
        Ok(())
    } else {
        let detail = format!("the listing is priced in {}, not {currency}", read.currency);
        Err(with_code(A2AError::invalid_params(detail.clone()), "currency_mismatch", &detail).into())
    }
}

fn parse_task_id(id: &str) -> Result<Uuid, Refusal> {
    id.parse().map_err(|_| Refusal::task_not_found(id))
}

/// The task as it truly stands, without its history.
pub(crate) async fn read_task(acting: &Acting, id: &str) -> Result<Task, Refusal> {
    get_task(acting, id, Some(0)).await
}

/// `GetTask`: the task as it truly stands, with the `history_length` most recent messages of
/// its history (all of them when unset).
pub(crate) async fn get_task(acting: &Acting, id: &str, history_length: Option<i32>) -> Result<Task, Refusal> {
    let about = About::Task(id);
    let uuid = parse_task_id(id)?;
    match acting.client.get_thread(uuid).await {
        Ok(read) => {
            let thread = &read.thread;
            let order = match thread.status {
                ThreadStatus::Accepted => {
                    find_order(&acting.client, thread).await.map_err(|e| Refusal::from_client(e, about))?
                }
                ThreadStatus::Active | ThreadStatus::Rejected | ThreadStatus::Expired | ThreadStatus::Closed => None,
            };
            let you = task::side(thread, acting.agent_id);
            // The listing's counter terms, for the range of a counter: on a live thread only.
            let listing = match thread.status {
                ThreadStatus::Active => {
                    let listing = acting
                        .client
                        .get_listing(thread.listing_id)
                        .await
                        .map_err(|e| Refusal::from_client(e, about))?;
                    Some(CounterTerms { rule: listing.concession_rule, ask: listing.ask_amount })
                }
                ThreadStatus::Accepted | ThreadStatus::Rejected | ThreadStatus::Expired | ThreadStatus::Closed => None,
            };
            let negotiation =
                Negotiation { thread, bids: &read.bids, latest: read.bids.last(), order: order.as_ref(), listing };
            let pending = task::standing(&negotiation, you).pending;
            acting.recent.set_pending(thread.id, pending);
            let mut task = task::negotiation_task(&negotiation, acting.agent_id);
            task.history = task::history(thread, &read.bids, acting.agent_id, history_length);
            Ok(task)
        }
        Err(error) if error.status() == Some(404) => {
            // Not a negotiation of the caller's: a purchase of theirs, or nothing they may see.
            match acting.client.get_order(uuid).await {
                Ok(read) if read.order.thread_id.is_none() => Ok(task::purchase_task(&read.order)),
                Ok(_) => Err(Refusal::task_not_found(id)),
                Err(error) => Err(Refusal::from_client(error, about)),
            }
        }
        Err(error) => Err(Refusal::from_client(error, about)),
    }
}

/// The order an accepted thread made.
async fn find_order(client: &Client, thread: &Thread) -> Result<Option<Order>, ClientError> {
    let mut query = OrderQuery { listing_id: Some(thread.listing_id), limit: Some(200), ..OrderQuery::default() };
    loop {
        let page = client.list_orders(&query).await?;
        if let Some(order) = page.data.into_iter().find(|order| order.thread_id == Some(thread.id)) {
            return Ok(Some(order));
        }
        match page.next_cursor {
            Some(cursor) => query.cursor = Some(cursor),
            None => return Ok(None),
        }
    }
}

/// `CancelTask`: the caller's pending bid withdrawn. A task whose pending bid is the other
/// side's, or that has ended, cannot be canceled.
pub(crate) async fn cancel(acting: &Acting, id: &str) -> Result<Task, Refusal> {
    let current = read_task(acting, id).await?;
    let not_cancelable =
        |why: String| -> Refusal { with_code(A2AError::task_not_cancelable(id), "not_cancelable", &why).into() };
    if task::is_terminal(&current.status.state) {
        return Err(not_cancelable(format!("the task has ended ({})", task::state_name(&current.status.state))));
    }
    let thread = parse_task_id(id)?;
    let read = acting.client.get_thread(thread).await.map_err(|e| Refusal::from_client(e, About::Task(id)))?;
    let negotiation =
        Negotiation { thread: &read.thread, bids: &read.bids, latest: read.bids.last(), order: None, listing: None };
    let standing = task::standing(&negotiation, task::side(&read.thread, acting.agent_id));
    let Some(pending) = standing.pending.filter(|_| standing.moves.contains(&"withdraw")) else {
        return Err(not_cancelable(
            "the pending bid is the other side's: reject it (a reject move) to end the negotiation".to_owned(),
        ));
    };
    let withdrawn = acting.client.withdraw(pending).await.map_err(|e| Refusal::from_client(e, About::Task(id)))?;
    let negotiation =
        Negotiation { thread: &withdrawn.thread, bids: &[], latest: Some(&withdrawn.bid), order: None, listing: None };
    Ok(task::negotiation_task(&negotiation, acting.agent_id))
}

/// `ListTasks`: the caller's negotiations, newest first, a page at a time (the page token is
/// the REST API's cursor), and how many of them match in all (`totalSize`, counted through every
/// page of the caller's threads that the filters select). A task carries its history only when
/// `historyLength` asks for some, which reads each thread's bids. Purchases at the ask are read
/// with `GetTask`.
pub(crate) async fn list(acting: &Acting, request: &ListTasksRequest) -> Result<ListTasksResponse, Refusal> {
    let size = request.page_size.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&size) {
        return Err(Refusal::invalid_params(format!("pageSize is 1 to {MAX_PAGE}")));
    }
    if request.history_length.is_some_and(|length| length < 0) {
        return Err(Refusal::invalid_params("historyLength is 0 or more"));
    }
    let cursor = match request.page_token.as_deref() {
        None | Some("") => None,
        Some(token) => {
            Some(token.parse().map_err(|_| Refusal::invalid_params("pageToken is not one this server gave"))?)
        }
    };
    let empty = || ListTasksResponse { tasks: vec![], next_page_token: String::new(), page_size: size, total_size: 0 };
    let listing_id = match request.context_id.as_deref() {
        None | Some("") => None,
        Some(context) => match context.parse() {
            Ok(listing) => Some(listing),
            Err(_) => return Ok(empty()),
        },
    };
    let wanted = request.status.clone().filter(|state| *state != TaskState::Unspecified);
    let status = match &wanted {
        None => None,
        Some(TaskState::Working | TaskState::InputRequired) => Some(ThreadStatus::Active),
        Some(TaskState::Completed) => Some(ThreadStatus::Accepted),
        Some(TaskState::Rejected) => Some(ThreadStatus::Rejected),
        Some(TaskState::Canceled) => Some(ThreadStatus::Rejected),
        Some(TaskState::Failed) => None,
        Some(TaskState::Submitted | TaskState::AuthRequired | TaskState::Unspecified) => return Ok(empty()),
    };
    let matches = |thread: &Thread| {
        let you = task::side(thread, acting.agent_id);
        wanted.as_ref().is_none_or(|wanted| *wanted == task::state(thread, you))
            && request.status_timestamp_after.is_none_or(|after| thread.updated_at > after)
    };
    // A task is a negotiation on a listing; the negotiations on orders are not tasks.
    let query = ThreadQuery {
        role: None,
        status,
        listing_id,
        order_id: None,
        kind: Some(haggle_domain::ThreadKind::Price),
        limit: Some(size as u32),
        cursor,
    };
    let page = acting.client.list_threads(&query).await.map_err(|e| Refusal::from_client(e, About::Other))?;
    let with_history = request.history_length.filter(|length| *length > 0);
    let mut tasks = Vec::with_capacity(page.data.len());
    for thread in page.data.iter().filter(|thread| matches(thread)) {
        let order = match (thread.status, request.include_artifacts) {
            (ThreadStatus::Accepted, Some(true)) => {
                find_order(&acting.client, thread).await.map_err(|e| Refusal::from_client(e, About::Other))?
            }
            _ => None,
        };
        let negotiation = Negotiation { thread, bids: &[], latest: None, order: order.as_ref(), listing: None };
        let mut task = task::negotiation_task(&negotiation, acting.agent_id);
        if request.include_artifacts != Some(true) {
            task.artifacts = None;
        }
        if with_history.is_some() {
            let read = acting.client.get_thread(thread.id).await.map_err(|e| Refusal::from_client(e, About::Other))?;
            task.history = task::history(thread, &read.bids, acting.agent_id, with_history);
        }
        tasks.push(task);
    }
    let total = count_matching(&acting.client, ThreadQuery { cursor: None, ..query }, matches).await?;
    Ok(ListTasksResponse {
        tasks,
        next_page_token: page.next_cursor.map(|cursor| cursor.to_string()).unwrap_or_default(),
        page_size: size,
        total_size: total,
    })
}

/// How many of the threads `query` selects (through all its pages) `matches` keeps.
async fn count_matching(
    client: &Client,
    mut query: ThreadQuery,
    matches: impl Fn(&Thread) -> bool,
) -> Result<i32, Refusal> {
    query.limit = Some(COUNT_PAGE);
    let mut total: i32 = 0;
    loop {
        let page = client.list_threads(&query).await.map_err(|e| Refusal::from_client(e, About::Other))?;
        let counted = page.data.iter().filter(|thread| matches(thread)).count();
        total = total.saturating_add(i32::try_from(counted).unwrap_or(i32::MAX));
        match page.next_cursor {
            Some(cursor) => query.cursor = Some(cursor),
            None => return Ok(total),
        }
    }
}

/// `GetExtendedAgentCard`: the card with the caller's agent and tier.
pub(crate) async fn extended_card(acting: &Acting, base_url: &str) -> Result<AgentCard, Refusal> {
    let me = acting.client.me().await.map_err(|e| Refusal::from_client(e, About::Other))?;
    Ok(crate::card::extended_card(base_url, &me))
}
