//! The executor: answers pending bids for agents whose policies cover them (SPEC §5).
//!
//! A bid that waits for the answer of an agent with a policy is queued as a task in the
//! transaction that makes it, with its event (`Outbox::flush`), so the executor only ever sees
//! committed bids; the request that made it wakes this instance's executor after its commit,
//! and a NOTIFY wakes the others (this instance's listener passes over its own, named by its
//! pool's origin). A counter the executor makes queues the other side's task the
//! same way. Each task is decided and acted on in one transaction that also takes the task off
//! the queue: a crash before the commit leaves the task for the next executor (on this instance
//! after a restart, or on another), and the bid state machine's compare-and-set lets at most one
//! answer to a bid through, whether it comes from a policy on another instance or from the agent
//! itself.
//!
//! When both sides of a thread have policies, a counter queues the other side's task in the
//! statement that makes it, and the same transaction takes that task and decides it at once, up
//! to `HAGGLE_AUTO_CHAIN` moves ([`DEFAULT_CHAIN`]): the policies' exchange commits once rather
//! than once a move, each move still made through the state machine under the thread's lock.
//! When what each side's decision reads is known already (the other side's was read with the
//! task, or with a counter before), a counter that reads nothing more is decided in memory and
//! its rows worked out by the same rules, the next decision made on them, and such counters
//! are written together in one statement before anything else the transaction does
//! ([`Exchange`]). Otherwise a chained counter is one statement, which also records its
//! decision, queues the other side's task taken and reads what the next decision needs; the
//! next move is made on the rows it returned, the thread's lock being the transaction's
//! already. A task being retried after a failure is decided alone.

mod schedule;

use std::time::Duration;

use serde_json::json;
use sqlx::PgConnection;
use sqlx::types::Json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::db;
use crate::db::agents::Caller;
use crate::db::moves::CounterMove;
use crate::db::rows::BidContext;
use crate::db::tasks::{Chained, Decided, NextRead, OtherSide, TakenTask, Task, TaskContext};
use crate::events::{EventType, NewEvent, Outbox};
use crate::market::approvals::{self, Intent};
use crate::market::mediation;
use crate::market::negotiation::{self, Answer};
use crate::market::{self, Access, Market, PolicyMove, Rules};
use crate::metrics;
use crate::refund_policy::{self, Answered};
use haggle_api::HeldMove;
use haggle_domain::approval::Move;
use haggle_domain::bid::Proposal;
use haggle_domain::issues::{Issues, Offer};
use haggle_domain::strategy::{
    self, Decision, MAX_AUTO_ROUNDS, MultiIssue, MultiState, NegotiationState, Policy, Rationale,
};
use haggle_domain::{BidStatus, Party, ThreadKind, ThreadStatus};

/// How often each worker looks for tasks nobody announced (those left by a stopped instance,
/// or due for a retry).
pub const TICK: Duration = Duration::from_secs(1);
/// How far back the executor looks for policy changes that a move may have raced (see
/// [`db::tasks::queue_after_changes`]).
const RACED_WINDOW: Duration = Duration::from_secs(10);
/// A task whose transaction keeps failing is given up after this many attempts.
const MAX_ATTEMPTS: i32 = 8;
/// The most moves one transaction makes on a thread whose sides both have policies, unless
/// configured otherwise (`HAGGLE_AUTO_CHAIN`); the rest are committed and taken up again at once.
pub const DEFAULT_CHAIN: usize = 16;

/// What became of one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The policy answered the bid.
    Acted(&'static str),
    /// The policy stopped and told its owner (`negotiation.action_required`), for this reason.
    Stopped(&'static str),
    /// Nothing to do: the bid was answered or ended meanwhile, the policy was removed, or its
    /// owner was suspended.
    Dropped,
}

impl Outcome {
    /// The outcome as the metrics name it.
    fn label(self) -> &'static str {
        match self {
            Outcome::Acted(_) => "acted",
            Outcome::Stopped(_) => "stopped",
            Outcome::Dropped => "dropped",
        }
    }
}

impl From<schedule::Handled> for Outcome {
    fn from(handled: schedule::Handled) -> Outcome {
        match handled {
            schedule::Handled::Accepted => Outcome::Acted("accept"),
            schedule::Handled::Stopped(reason) => Outcome::Stopped(reason),
            schedule::Handled::Dropped => Outcome::Dropped,
        }
    }
}

/// Runs `workers` executor loops until cancelled. `wake` is signalled when tasks are queued on
/// this instance; a worker that finds a task while others are due passes the signal on and
/// looks again at once, so that a backlog is worked on in parallel, and otherwise waits for the
/// next signal (or [`TICK`]): an idle worker does not look for work that nobody announced.
pub async fn run(market: Market, rules: Rules, workers: usize, chain: usize, shutdown: CancellationToken) {
    tracing::info!(workers, chain, "auto-negotiation executor started");
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..workers.max(1) {
        set.spawn(work(market.clone(), rules, chain, shutdown.clone()));
    }
    set.spawn(catch_raced(market.clone(), shutdown.clone()));
    while set.join_next().await.is_some() {}
    tracing::info!("auto-negotiation executor stopped");
}

async fn work(market: Market, rules: Rules, chain: usize, shutdown: CancellationToken) {
    let wake = market.wakeups().executor.clone();
    loop {
        let mut pause = TICK;
        match run_once(&market, rules, chain).await {
            Ok(Some(Round { more: true, .. })) => {
                wake.notify();
                continue;
            }
            Ok(Some(Round { more: false, .. }) | None) => {}
            Err(error) => {
                tracing::warn!(%error, "auto-negotiation: reading the task queue failed; retrying");
                pause = Duration::from_millis(200);
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = wake.notified() => {}
            _ = tokio::time::sleep(pause) => {}
        }
        if shutdown.is_cancelled() {
            break;
        }
    }
}

/// Every [`TICK`], queues the bids that a policy change raced with a move (and that neither
/// queued), and wakes the workers for them.
async fn catch_raced(market: Market, shutdown: CancellationToken) {
    let window = i64::try_from(RACED_WINDOW.as_millis()).unwrap_or(i64::MAX);
    loop {
        match db::tasks::queue_after_changes(market.pool(), window).await {
            Ok(0) => {}
            Ok(queued) => {
                tracing::info!(queued, "auto-negotiation: queued bids made as their policies changed");
                market.wakeups().executor.notify();
            }
            Err(error) => tracing::warn!(%error, "auto-negotiation: looking for bids a policy change raced failed"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(TICK) => {}
        }
    }
}

/// What a worker's round did: the first task's outcome, and whether other tasks were due when
/// it took its task (or may be: after a failure, it cannot tell).
#[derive(Debug, Clone, Copy)]
pub struct Round {
    pub outcome: Outcome,
    pub more: bool,
}

/// Takes one due task and decides it, with the tasks its moves queue for the other side's
/// policy in the same transaction (at most `chain` in all). `None` when no task is due.
pub async fn run_once(market: &Market, rules: Rules, chain: usize) -> Result<Option<Round>, sqlx::Error> {
    let pool = market.pool();
    let mut unit = market.begin().await?;
    let Some(taken) = db::tasks::take_task(unit.conn()).await? else {
        return Ok(None);
    };
    let (task, more) = (taken.task, taken.more);
    let taken_at = std::time::Instant::now();
    let decided = async {
        let (conn, events) = unit.parts();
        let mut decided = Vec::with_capacity(1);
        let mut exchange = Exchange::default();
        let (mut current, mut started) = (Taken::Alone(Box::new(taken)), taken_at);
        loop {
            // A first try chains; a retried task is decided alone, so that a failure further on
            // cannot keep it from being answered.
            let chaining = task.attempts == 0 && decided.len() + 1 < chain;
            let (acted, outcome, next) = act(&mut *conn, &mut *events, &mut exchange, current, rules, chaining).await?;
            decided.push((acted, outcome, started));
            let Some(next) = next else { break };
            (current, started) = (Taken::Chained(next), std::time::Instant::now());
        }
        exchange.write(&mut *conn, &mut *events).await?;
        unit.commit().await?;
        Ok::<_, sqlx::Error>(decided)
    }
    .await;
    // A failed unit was rolled back when dropped: its task is free to be touched again.
    match decided {
        Ok(decided) => {
            for (task, outcome, started) in &decided {
                metrics::executor_decided(outcome.label(), task.waited, *started);
                tracing::debug!(bid_id = %task.bid_id, ?outcome, "auto-negotiation decided");
            }
            Ok(decided.first().map(|(_, outcome, _)| Round { outcome: *outcome, more }))
        }
        Err(error) if task.attempts + 1 >= MAX_ATTEMPTS => {
            tracing::error!(bid_id = %task.bid_id, %error, "auto-negotiation gave up on a bid after repeated failures");
            give_up(market, task).await?;
            Ok(Some(Round { outcome: Outcome::Stopped("failed"), more: true }))
        }
        Err(error) => {
            tracing::warn!(bid_id = %task.bid_id, %error, "auto-negotiation failed; retrying");
            let delay = 100i64 << task.attempts.clamp(0, 10);
            db::tasks::retry_task(pool, task, delay).await?;
            Ok(Some(Round { outcome: Outcome::Dropped, more: true }))
        }
    }
}

/// Hands a bid the executor keeps failing on back to its owner, who is told.
async fn give_up(market: &Market, task: Task) -> Result<(), sqlx::Error> {
    let mut unit = market.begin().await?;
    let (conn, events) = unit.parts();
    db::tasks::finish_task(&mut *conn, task.bid_id).await?;
    let context = db::tasks::task_context(&mut *conn, task).await?;
    if let Some(context) = context.filter(|context| context.bid_status == BidStatus::Pending) {
        let detail = "the policy could not act on this bid after repeated attempts; it is yours to answer";
        stop(conn, events, task, &context, "failed", detail, None).await?;
    }
    unit.commit().await?;
    Ok(())
}

/// The sentence the counterparty may read with a policy's move: the same for every reason,
/// since a reason (an acceptance threshold met, a limit passed) would tell of private values.
fn public_rationale(action: &str) -> &'static str {
    match action {
        "accept" => "Offer accepted.",
        "reject" => "Offer declined.",
        _ => "Counter-offer.",
    }
}

/// A task to decide: taken alone, with its context read in the same statement, or taken by the
/// move that queued it, with its context read (and its thread locked) in the same statement.
enum Taken {
    Alone(Box<TakenTask>),
    Chained(Box<Chained>),
}

/// Decides the task's bid with the agent's policy and acts on it, in the caller's transaction.
/// Gives the task with its outcome and, if `chaining` and its counter queued a task for the
/// other side's policy, that task, taken.
async fn act(
    conn: &mut PgConnection,
    events: &mut Outbox,
    exchange: &mut Exchange,
    taken: Taken,
    rules: Rules,
    chaining: bool,
) -> Result<(Task, Outcome, Option<Box<Chained>>), sqlx::Error> {
    let (task, context, held) = match taken {
        Taken::Alone(taken) => {
            let TakenTask { task, kind, context, held, other, .. } = *taken;
            if let Some(other) = other {
                exchange.meet(other);
            }
            // A schedule negotiation on an order is answered by the policy's availability.
            if kind == Some(ThreadKind::Schedule)
                && let Some(handled) = schedule::act(conn, events, task).await?
            {
                return Ok((task, handled.into(), None));
            }
            if held.is_some() {
                // The statement that took the task switched the transaction to generic plans.
                events.planned_generically();
            }
            match context {
                Some(context) => (task, context, held),
                None => return Ok((task, Outcome::Dropped, None)),
            }
        }
        Taken::Chained(chained) => {
            let Chained { task, context, bid } = *chained;
            (task, context, Some(bid))
        }
    };
    // The acceptance's read, when the statement that writes the planned counters made it.
    let mut accepting = None;
    if let Some(held) = held.as_ref() {
        exchange.clock = Some((held.db_now, std::time::Instant::now()));
        if chaining {
            match exchange.defer(task, &context, held, rules) {
                Plan::Countered(deferred) => return Ok(deferred),
                Plan::Accept => accepting = exchange.write_for_acceptance(&mut *conn, &mut *events, held).await?,
                Plan::Other => {}
            }
        }
    }
    // Whatever else the decision does reads or writes the database: the counters before it first.
    exchange.write(&mut *conn, &mut *events).await?;
    let no_counter = |outcome| Ok((task, outcome, None));
    if !answerable(task, &context) {
        return no_counter(Outcome::Dropped);
    }
    let Some(Json(stored)) = context.policy.clone() else {
        return no_counter(Outcome::Dropped);
    };
    let Some((policy, state, caller)) = prepare(&context, stored, task) else {
        tracing::warn!(bid_id = %task.bid_id, "auto-negotiation: the stored policy or thread could not be read");
        return no_counter(Outcome::Dropped);
    };
    let mut refund = refund_policy::decide(&mut *conn, task, &context, &policy).await?;
    if let Answered::Decided(decision) = refund {
        if caller.approval_rules
            && let Some(outcome) = hold_for_approval(conn, events, task, &context, &decision, None, true).await?
        {
            return no_counter(outcome);
        }
        refund = refund_policy::make(&mut *conn, &mut *events, task, decision, caller, rules).await?;
    }
    match refund {
        Answered::NotARefund => {}
        Answered::Dropped => return no_counter(Outcome::Dropped),
        Answered::Acted(action) => return no_counter(Outcome::Acted(action)),
        Answered::Stop { reason, detail } => {
            stop(conn, events, task, &context, reason, &detail, None).await?;
            return no_counter(Outcome::Stopped(reason));
        }
        Answered::Decided(_) => unreachable!("a decision is made or held above"),
    }
    if policy.accept_mediation
        && let Some(outcome) = mediate(conn, events, task, &context, &policy, caller, rules).await?
    {
        return no_counter(outcome);
    }
    let issues = context.issues.as_ref().map(|Json(issues)| issues.clone()).unwrap_or_default();
    let (decision, terms) = match policy.multi_issue(context.role, &issues, context.ask_amount) {
        Some(negotiator) => decide_multi(&policy, &negotiator, &state, &issues, &context),
        None => (strategy::decide(&policy, &state), None),
    };
    if caller.approval_rules
        && let Some(outcome) = hold_for_approval(conn, events, task, &context, &decision, terms.as_ref(), false).await?
    {
        return no_counter(outcome);
    }
    let (action, reason, done) = match decision {
        Decision::Counter { amount, is_final } => {
            let offer = Proposal { terms: terms.map(Some), ..Proposal::of(amount).finally(is_final) };
            let countered = if chaining {
                // The counter's statement records the decision and takes the other side's task.
                let rationale = public_rationale("counter");
                let decided = Decided { action: "counter", reason: "strategy", rationale, counter_bid_id: None };
                negotiation::counter_chaining(conn, events, caller, held.as_ref(), task.bid_id, &offer, rules, decided)
                    .await
                    .map(|(bid, thread, next)| PolicyMade {
                        counter_bid_id: Some(bid.id),
                        recorded: true,
                        next: next.map(|next| Box::new(Chained::after(&context, bid, thread, next))),
                    })
            } else {
                match &held {
                    Some(bid) => negotiation::counter_locked(conn, events, caller, bid, &offer, rules).await,
                    None => {
                        negotiation::counter(conn, events, Access::Locked, caller, task.bid_id, &offer, rules).await
                    }
                }
                .map(|(bid, _)| PolicyMade::unrecorded(Some(bid.id)))
            };
            ("counter", "strategy", countered)
        }
        Decision::Accept { rationale } => {
            let accepted = match (&held, accepting) {
                // Read, the listing locked, by the statement that wrote the counters before.
                (Some(_), Some(read)) => negotiation::accept_read(conn, events, caller, &read).await,
                // The thread is this transaction's since the task was taken, or since the counter
                // before.
                (Some(_), None) => negotiation::accept_on_locked_thread(conn, events, caller, task.bid_id).await,
                (None, _) => {
                    negotiation::answer(conn, events, Access::Locked, caller, task.bid_id, Answer::Accept).await
                }
            };
            ("accept", rationale.as_str(), accepted.map(|_| PolicyMade::unrecorded(None)))
        }
        Decision::Reject { rationale } => {
            let rejected = negotiation::answer(conn, events, Access::Locked, caller, task.bid_id, Answer::Reject).await;
            ("reject", rationale.as_str(), rejected.map(|_| PolicyMade::unrecorded(None)))
        }
        Decision::Stop { rationale } => {
            let suggestion = suggest(&policy, &state);
            stop(conn, events, task, &context, rationale.as_str(), rationale.describe(), suggestion).await?;
            return no_counter(Outcome::Stopped(rationale.as_str()));
        }
    };
    match PolicyMove::of(done)? {
        PolicyMove::Made(made) => {
            if made.counter_bid_id.is_some() {
                exchange.countered(task.agent_id, &context);
            }
            if !made.recorded {
                let rationale = public_rationale(action);
                let decided = Decided { action, reason, rationale, counter_bid_id: made.counter_bid_id };
                db::tasks::record_decision(conn, task, decided).await?;
            }
            Ok((task, Outcome::Acted(action), made.next))
        }
        PolicyMove::Overtaken => no_counter(Outcome::Dropped),
        PolicyMove::Refused(rejection) => {
            let detail =
                format!("the marketplace refused the policy's {action} ({}): {}", rejection.code(), rejection.detail());
            tracing::info!(bid_id = %task.bid_id, action, "auto-negotiation: the action was refused; asking the owner");
            stop(conn, events, task, &context, "refused", &detail, Some(decision)).await?;
            no_counter(Outcome::Stopped("refused"))
        }
    }
}

/// The counters of one executor transaction's exchange that are decided but not written yet,
/// and what it knows of each side. When both sides of a thread have policies and what the
/// other side's decision reads is known (read with the task, or by that side's own counter in
/// the transaction: its policy, standing and count of counters), a counter to it is decided in
/// memory, on the rows of the move before, and so is the other side's answer; such counters are
/// written together in one statement ([`negotiation::write_chain`]) before anything else the
/// transaction does, and at its end. Under the thread's lock, nobody else can move on the
/// thread meanwhile.
#[derive(Default)]
struct Exchange {
    /// The counters planned, in order, each on the rows of the one before.
    moves: Vec<CounterMove>,
    /// Their events, in order.
    events: Vec<NewEvent>,
    /// For each planned counter, the agent whose policy answers it.
    answerers: Vec<Uuid>,
    /// Each side's decision as last read, with the counters its policy has made since counted.
    sides: Vec<(Uuid, Side)>,
    /// The database's clock at the last read, and the instant here it was read at.
    clock: Option<(chrono::DateTime<chrono::Utc>, std::time::Instant)>,
}

/// Whether the task's bid still waits for its agent's answer, and the agent may act: a decision
/// on it is made at all.
fn answerable(task: Task, context: &TaskContext) -> bool {
    context.bid_status == BidStatus::Pending
        && context.thread_status == ThreadStatus::Active
        && context.last_bid_id == task.bid_id
        && !context.agent_suspended
}

/// What [`Exchange::defer`] made of a decision.
enum Plan {
    /// A counter, planned: the task, its outcome and the other side's task taken.
    Countered((Task, Outcome, Option<Box<Chained>>)),
    /// An acceptance, which reads nothing more than the counters written before it do.
    Accept,
    /// Anything else, decided and made as usual.
    Other,
}

/// What a side's next decision reads besides the thread, as its last one in the transaction
/// read it.
#[derive(Clone)]
struct Side {
    tier: haggle_domain::Tier,
    suspended: bool,
    approval_rules: bool,
    auto_counters: i64,
    policy: Option<Json<serde_json::Value>>,
}

impl Exchange {
    /// The thread's other side, as the task was taken: what its decision on a counter reads.
    fn meet(&mut self, other: OtherSide) {
        let side = Side {
            tier: other.tier,
            suspended: other.suspended,
            approval_rules: other.approval_rules,
            auto_counters: other.auto_counters,
            policy: other.policy.map(Json),
        };
        self.sides.push((other.agent_id, side));
    }

    /// The agent of `context` countered with its policy: its next decision reads one counter more.
    fn countered(&mut self, agent_id: Uuid, context: &TaskContext) {
        let side = Side {
            tier: context.agent_tier,
            suspended: context.agent_suspended,
            approval_rules: context.agent_approval_rules,
            auto_counters: context.auto_counters + 1,
            policy: context.policy.clone(),
        };
        self.sides.retain(|(agent, _)| *agent != agent_id);
        self.sides.push((agent_id, side));
    }

    /// Decides the task in memory, when that decision reads nothing more from the database: a
    /// counter the other side's policy answers next is planned, with the task it takes for that
    /// side ([`Plan::Countered`]); an acceptance is told apart, for its read to be made with the
    /// counters' write ([`Plan::Accept`]). Every other decision is made as usual.
    fn defer(&mut self, task: Task, context: &TaskContext, held: &BidContext, rules: Rules) -> Plan {
        if !answerable(task, context) {
            return Plan::Other;
        }
        let Some((policy, state, caller)) =
            context.policy.clone().and_then(|Json(stored)| prepare(context, stored, task))
        else {
            return Plan::Other;
        };
        // Approvals, the mediator, refunds and several issues each read the database.
        let issues = context.issues.as_ref().map(|Json(issues)| issues.clone()).unwrap_or_default();
        if caller.approval_rules
            || policy.accept_mediation
            || (policy.refund.is_some() && context.role == Party::Seller)
            || policy.multi_issue(context.role, &issues, context.ask_amount).is_some()
        {
            return Plan::Other;
        }
        match strategy::decide(&policy, &state) {
            Decision::Counter { amount, is_final } => {
                let offer = Proposal::of(amount).finally(is_final);
                self.counter(task, context, held, caller, &offer, rules).map_or(Plan::Other, Plan::Countered)
            }
            Decision::Accept { .. } => Plan::Accept,
            Decision::Reject { .. } | Decision::Stop { .. } => Plan::Other,
        }
    }

    /// Plans the policy's counter `offer` on the held bid, if the other side's policy answers
    /// it next and nothing about it reads the database.
    fn counter(
        &mut self,
        task: Task,
        context: &TaskContext,
        held: &BidContext,
        caller: Caller,
        offer: &Proposal,
        rules: Rules,
    ) -> Option<(Task, Outcome, Option<Box<Chained>>)> {
        let other = if context.role == Party::Seller { held.thread.buyer_id } else { held.thread.seller_id };
        let side = self.sides.iter().find(|(agent, _)| *agent == other).map(|(_, side)| side.clone())?;
        if side.suspended || side.policy.is_none() {
            return None;
        }
        let negotiation::PlannedCounter { counter, thread, event } =
            negotiation::plan_counter(held, caller, offer, rules, &context.amounts, &context.terms.0)?;
        self.countered(task.agent_id, context);
        let next = NextRead {
            agent_id: other,
            agent_tier: side.tier,
            agent_suspended: side.suspended,
            agent_approval_rules: side.approval_rules,
            buyer_tier: context.buyer_tier,
            auto_counters: side.auto_counters,
            policy: side.policy,
            listing: held.listing.0.clone(),
            db_now: self.now(counter.now),
        };
        let chained = Chained::after(context, counter.counter.clone(), thread, next);
        self.moves.push(counter);
        self.events.push(event);
        self.answerers.push(other);
        Some((task, Outcome::Acted("counter"), Some(Box::new(chained))))
    }

    /// The database's clock now, as the last read's advanced by the time since here, in the
    /// database's precision and after `after`, the move before.
    fn now(&self, after: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
        use chrono::SubsecRound;
        let elapsed = |(read, at): (chrono::DateTime<chrono::Utc>, std::time::Instant)| {
            read + chrono::Duration::from_std(at.elapsed()).unwrap_or_default()
        };
        let now = self.clock.map_or(after, elapsed).trunc_subsecs(6);
        now.max(after + chrono::Duration::microseconds(1))
    }

    /// Writes the counters planned so far, in one statement. Their first answers a bid stored
    /// since before the transaction's lock; if that bid ran out of time since (it had a second
    /// left when planned), the whole transaction is given up, and the task is decided again alone.
    async fn write(&mut self, conn: &mut PgConnection, events: &mut Outbox) -> Result<(), sqlx::Error> {
        self.write_then(conn, events, None).await.map(drop)
    }

    /// [`write`](Self::write), for the acceptance of the last counter planned (`held`, as the
    /// acceptance's decision read it): the same statement locks the listing and reads it, and
    /// the acceptance's read is given back. `None` with nothing planned.
    async fn write_for_acceptance(
        &mut self,
        conn: &mut PgConnection,
        events: &mut Outbox,
        held: &BidContext,
    ) -> Result<Option<BidContext>, sqlx::Error> {
        if self.moves.last().is_none_or(|planned| planned.counter.id != held.bid.id) {
            return Ok(None);
        }
        let Some((listing, db_now)) = self.write_then(conn, events, Some(held.listing.id)).await? else {
            return Ok(None);
        };
        Ok(Some(BidContext { listing: Json(listing), db_now, ..held.clone() }))
    }

    /// Writes the counters planned, and locks and reads `listing` in the same statement.
    async fn write_then(
        &mut self,
        conn: &mut PgConnection,
        events: &mut Outbox,
        listing: Option<Uuid>,
    ) -> Result<Option<(db::Listing, chrono::DateTime<chrono::Utc>)>, sqlx::Error> {
        if self.moves.is_empty() {
            return Ok(None);
        }
        let moves = std::mem::take(&mut self.moves);
        let made_events = std::mem::take(&mut self.events);
        let answerers = std::mem::take(&mut self.answerers);
        let rationale = public_rationale("counter");
        let decided = Decided { action: "counter", reason: "strategy", rationale, counter_bid_id: None };
        match negotiation::write_chain(conn, events, &moves, made_events, &answerers, decided, listing).await {
            Ok(Some(read)) => Ok(read),
            Ok(None) => Err(sqlx::Error::Protocol(
                "the bid a policy's planned counter answered changed before it was written".to_owned(),
            )),
            Err(market::Error::Database(error)) => Err(error),
            Err(error) => Err(sqlx::Error::Protocol(format!("a planned counter could not be written: {error}"))),
        }
    }
}

/// A policy's move made: the counter it made, if any; whether its statement recorded the
/// decision; and the other side's task, taken by a counter's statement when the executor chains.
struct PolicyMade {
    counter_bid_id: Option<Uuid>,
    recorded: bool,
    next: Option<Box<Chained>>,
}

impl PolicyMade {
    /// A move whose decision is recorded after it, with nothing taken.
    fn unrecorded(counter_bid_id: Option<Uuid>) -> PolicyMade {
        PolicyMade { counter_bid_id, recorded: false, next: None }
    }
}

/// Holds the policy's counter or acceptance for approval when its owner's rules hold policy
/// moves and catch it (SPEC §10): the request is made instead of the move, and the task is done.
/// Read only for an agent with rules. On a refund thread (`refund`) the move is a `refund` to the
/// rules, its amount the refund's.
async fn hold_for_approval(
    conn: &mut PgConnection,
    events: &mut Outbox,
    task: Task,
    context: &TaskContext,
    decision: &Decision,
    terms: Option<&serde_json::Value>,
    refund: bool,
) -> Result<Option<Outcome>, sqlx::Error> {
    let (action, is_final) = match decision {
        Decision::Counter { is_final, .. } => (Move::Counter, *is_final),
        Decision::Accept { .. } => (Move::Accept, false),
        Decision::Reject { .. } | Decision::Stop { .. } => return Ok(None),
    };
    let kind = if refund { Move::Refund } else { action };
    let Some(bid) = db::approvals::bid_target(&mut *conn, task.bid_id, task.agent_id).await? else {
        return Ok(None);
    };
    let amount = match decision {
        Decision::Counter { amount, .. } => *amount,
        _ => bid.amount,
    };
    let intent = Intent {
        held: HeldMove {
            kind,
            route: format!("POST /v1/bids/{}/{action}", task.bid_id),
            party: context.role,
            listing_id: context.listing_id,
            thread_id: Some(task.thread_id),
            bid_id: Some(task.bid_id),
            amount,
            currency: bid.currency,
            message: None,
            expires_in: None,
            is_final,
            terms: if action == Move::Counter { terms.cloned().map(Some) } else { None },
        },
        bid_expires_at: Some(bid.expires_at),
    };
    let caught = match approvals::caught(&mut *conn, task.agent_id, &intent, true).await {
        Ok(caught) => caught,
        Err(market::Error::Database(error) | market::Error::OutcomeUnknown(error)) => return Err(error),
        Err(market::Error::Rejected(_) | market::Error::NeedsLocks) => None,
    };
    let Some(ttl) = caught else { return Ok(None) };
    match approvals::hold(conn, events, task.agent_id, &intent, ttl).await {
        Ok(_) => {
            let rationale = "The policy's move waits for approval.";
            let decided = Decided { action: "stop", reason: "approval_held", rationale, counter_bid_id: None };
            db::tasks::record_decision(conn, task, decided).await?;
            Ok(Some(Outcome::Stopped("approval_held")))
        }
        Err(market::Error::Rejected(rejection)) => {
            let detail = format!("the policy's {kind} could not be held for approval: {}", rejection.detail());
            stop(conn, events, task, context, "refused", &detail, Some(*decision)).await?;
            Ok(Some(Outcome::Stopped("refused")))
        }
        Err(market::Error::Database(error) | market::Error::OutcomeUnknown(error)) => Err(error),
        Err(market::Error::NeedsLocks) => unreachable!("holding a move takes no unlocked path"),
    }
}

/// What a policy with a utility does on a listing with issues: the limits of [`strategy::decide`]
/// first (nothing to answer, approval, the round budget), then the multi-issue negotiator, whose
/// counter comes with its terms.
fn decide_multi(
    policy: &Policy,
    negotiator: &MultiIssue,
    state: &NegotiationState,
    issues: &Issues,
    context: &TaskContext,
) -> (Decision, Option<serde_json::Value>) {
    let stop = |rationale| (Decision::Stop { rationale }, None);
    if let Err(rationale) = state.turn() {
        return stop(rationale);
    }
    if policy.require_approval {
        return stop(Rationale::ApprovalRequired);
    }
    if i64::from(state.auto_moves) >= i64::from(policy.max_auto_rounds) {
        return stop(Rationale::MaxAutoRounds);
    }
    let offers: Option<Vec<Offer>> =
        state.bids.iter().zip(&context.terms.0).map(|(&amount, terms)| issues.offer(amount, terms.as_ref())).collect();
    let Some(offers) = offers.filter(|offers| offers.len() == state.bids.len()) else {
        return stop(Rationale::OutOfRange);
    };
    let multi = MultiState {
        mover: state.mover,
        ask: state.ask,
        max_rounds: state.max_rounds,
        issues,
        offers,
        pending_final: state.pending_final,
    };
    let made = negotiator.decide(&multi);
    (made.decision, made.values.map(|values| issues.terms(&values)))
}

/// A policy that opted in to mediation, on a deadlocked thread whose suggestion answers this
/// bid and lies within its limits, agrees to it: the thread is settled if the other side agreed
/// too (explicitly, or through its own opted-in policy). If not, and nobody's policy plays for
/// the other side, the policy holds and leaves the other side time to settle; against another
/// policy it plays on (`None`).
async fn mediate(
    conn: &mut PgConnection,
    events: &mut Outbox,
    task: Task,
    context: &TaskContext,
    policy: &Policy,
    caller: Caller,
    rules: Rules,
) -> Result<Option<Outcome>, sqlx::Error> {
    let Some((thread, listing)) = db::mediation::lock_thread_and_listing(conn, task.thread_id, task.agent_id).await?
    else {
        return Ok(None);
    };
    let Some(suggestion) = thread.mediation.clone().filter(|s| s.bid_id == task.bid_id) else {
        return Ok(None);
    };
    if !mediation::policy_accepts(policy, context.role, &listing, &suggestion) {
        return Ok(None);
    }
    let settled =
        match mediation::settle(conn, events, Access::Locked, caller, task.thread_id, Some(suggestion.bid_id), rules)
            .await
        {
            Ok(settled) => settled,
            Err(market::Error::Database(error) | market::Error::OutcomeUnknown(error)) => return Err(error),
            Err(error) => {
                tracing::info!(bid_id = %task.bid_id, ?error, "auto-negotiation: the mediated settlement was refused");
                return Ok(None);
            }
        };
    if settled.order.is_some() {
        let decided = Decided {
            action: "accept",
            reason: "mediation",
            rationale: "Settled at the mediator's suggestion.",
            counter_bid_id: None,
        };
        db::tasks::record_decision(conn, task, decided).await?;
        return Ok(Some(Outcome::Acted("settle")));
    }
    let other = context.role.other();
    let policies = db::policies::thread_policies(&mut *conn, task.thread_id).await?;
    let other_has_policy = match other {
        Party::Buyer => policies.buyer.is_some(),
        Party::Seller => policies.seller.is_some(),
    };
    if other_has_policy {
        return Ok(None);
    }
    let detail = "The policy agreed to the mediator's suggestion and waits for the other side to settle.";
    stop(conn, events, task, context, "awaiting_mediation", detail, None).await?;
    Ok(Some(Outcome::Stopped("awaiting_mediation")))
}

/// Reads the stored policy and the thread into what [`strategy::decide`] takes.
fn prepare(context: &TaskContext, stored: serde_json::Value, task: Task) -> Option<(Policy, NegotiationState, Caller)> {
    let policy: Policy = serde_json::from_value(stored).ok()?;
    let state = NegotiationState {
        mover: context.role,
        ask: context.ask_amount,
        max_rounds: context.max_rounds,
        buyer_tier: context.buyer_tier,
        bids: context.amounts.clone(),
        pending_final: context.bid_final,
        auto_moves: u32::try_from(context.auto_counters).ok()?,
    };
    let caller = Caller { id: task.agent_id, tier: context.agent_tier, approval_rules: context.agent_approval_rules };
    Some((policy, state, caller))
}

/// What the policy would do without its approval requirement and round budget: a suggestion
/// for the owner it stopped for.
fn suggest(policy: &Policy, state: &NegotiationState) -> Option<Decision> {
    let unbound = Policy { require_approval: false, max_auto_rounds: MAX_AUTO_ROUNDS, ..policy.clone() };
    let fresh = NegotiationState { auto_moves: 0, ..state.clone() };
    match strategy::decide(&unbound, &fresh) {
        Decision::Stop { .. } => None,
        decision => Some(decision),
    }
}

/// Leaves the bid to its owner: records the stop and tells the owner alone.
async fn stop(
    conn: &mut PgConnection,
    events: &mut Outbox,
    task: Task,
    context: &TaskContext,
    reason: &str,
    detail: &str,
    suggestion: Option<Decision>,
) -> Result<(), sqlx::Error> {
    let decided = Decided { action: "stop", reason, rationale: detail, counter_bid_id: None };
    db::tasks::record_decision(conn, task, decided).await?;
    let bid = db::threads::get_bid(&mut *conn, task.bid_id, task.agent_id).await?;
    events.push(NewEvent {
        kind: EventType::NegotiationActionRequired,
        audience: vec![task.agent_id],
        listing_id: Some(context.listing_id),
        thread_id: Some(task.thread_id),
        bid_id: Some(task.bid_id),
        order_id: None,
        data: json!({
            "reason": reason,
            "detail": detail,
            "role": context.role,
            "suggestion": suggestion,
            "bid": bid.map(haggle_api::Bid::from),
        }),
    });
    Ok(())
}
