//! After the run has settled: every acknowledged answer, race, event and webhook delivery held
//! against what the database has.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use super::http::{Agent, Api, Endpoint};
use super::readers::Seen;
use super::receiver::Arrivals;
use super::record::{Ack, Contest, ContestRecord, Ledger, MoveKind, Race, Racer, Violations, Workload, thousands};
use haggle_api::EventPage;

/// What the checks found besides violations, for the report.
#[derive(Debug, Default)]
pub struct Findings {
    pub acks_checked: u64,
    /// Unacknowledged moves whose answers said nothing was done, checked not to be there.
    pub refusals_checked: u64,
    /// Moves whose outcome was unknown to their sender, and that were made.
    pub made_unacknowledged: u64,
    pub orders: u64,
    pub races: RaceFindings,
    pub events_published: i64,
    pub agents_paged: usize,
    pub events_paged: u64,
    pub readers: BTreeMap<&'static str, (usize, u64, u64)>,
    pub webhooks: WebhookFindings,
    pub policy: BTreeMap<String, u64>,
    pub policy_handed_back: u64,
    /// Contests on deals and held moves, by what they were about.
    pub contests: BTreeMap<&'static str, ContestFindings>,
    /// Orders whose life was checked (status, events, payments and refunds), and how many were
    /// cancelled, refunded, completed.
    pub deal_orders: u64,
    pub cancelled: u64,
    pub refunded: u64,
    pub completed: u64,
    /// Approvals in the database, by status.
    pub approvals: BTreeMap<String, u64>,
}

#[derive(Debug, Default)]
pub struct ContestFindings {
    pub total: u64,
    pub won_by: BTreeMap<&'static str, u64>,
    /// No 2xx answer: decided by a racer left unanswered, or untouched.
    pub undecided: u64,
}

#[derive(Debug, Default)]
pub struct RaceFindings {
    pub total: u64,
    pub won_by: BTreeMap<&'static str, u64>,
    /// Races with no 2xx, decided by a move whose answer never came, or left undecided because
    /// every request was turned away during a fault.
    pub unanswered_winner: u64,
    pub untouched: u64,
    /// The losers' answers, by status (`-` for none).
    pub losers: BTreeMap<String, u64>,
}

#[derive(Debug, Default)]
pub struct WebhookFindings {
    pub webhooks: usize,
    pub expected: u64,
    pub delivered: u64,
    pub deliveries: u64,
    /// Events delivered more than once, and the extra deliveries.
    pub duplicated_events: u64,
    pub extra_deliveries: u64,
    /// Deliveries that took more than one attempt, by the server's log.
    pub retried: u64,
    /// Deliveries that reached the receiver more often than their attempt log says they were
    /// attempted: attempts whose outcome was never recorded.
    pub unlogged_attempts: u64,
}

/// A webhook of the run: the receiver's index for it, its id, and its owner.
pub struct Hook {
    pub index: usize,
    pub id: Uuid,
    pub owner: Uuid,
}

pub struct Evidence<'a> {
    pub ledger: &'a Ledger,
    pub agents: &'a [Agent],
    pub readers: Vec<Seen>,
    pub hooks: &'a [Hook],
    pub arrivals: BTreeMap<usize, Arrivals>,
    pub api: &'a Api,
    pub balancer: &'a Endpoint,
    /// Whether an event delivered twice is a violation (delivery is documented at least once).
    pub exactly_once_webhooks: bool,
    /// The agents with approval rules: their every counter and acceptance needs an approval.
    pub ruled: Vec<Uuid>,
}

struct BidRow {
    thread: Uuid,
    status: String,
    reason: Option<String>,
    parent: Option<Uuid>,
    /// A bid of a price negotiation (on a listing), not of an order's refund or cancellation.
    price: bool,
}

pub async fn check(pool: &PgPool, evidence: Evidence<'_>, violations: &Violations) -> anyhow::Result<Findings> {
    let mut findings = Findings::default();
    let bids: HashMap<Uuid, BidRow> = sqlx::query_as::<_, (Uuid, Uuid, String, Option<String>, Option<Uuid>, bool)>(
        "SELECT id, thread_id, status, reason, parent_bid_id, kind = 'price' FROM bids",
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|(id, thread, status, reason, parent, price)| (id, BidRow { thread, status, reason, parent, price }))
    .collect();
    let orders: HashMap<Uuid, Option<Uuid>> =
        sqlx::query_as::<_, (Uuid, Option<Uuid>)>("SELECT id, bid_id FROM orders")
            .fetch_all(pool)
            .await?
            .into_iter()
            .collect();
    findings.orders = orders.len() as u64;
    let order_statuses: HashMap<Uuid, String> = sqlx::query_as::<_, (Uuid, String)>("SELECT id, status FROM orders")
        .fetch_all(pool)
        .await?
        .into_iter()
        .collect();
    let payments: HashMap<Uuid, (Uuid, String)> =
        sqlx::query_as::<_, (Uuid, Uuid, String)>("SELECT id, order_id, status FROM payments")
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|(id, order, status)| (id, (order, status)))
            .collect();
    let approvals: HashMap<Uuid, ApprovalRow> = sqlx::query_as::<_, (Uuid, String, Option<Uuid>, Option<Uuid>)>(
        "SELECT id, status, made_bid_id, made_order_id FROM approvals",
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|(id, status, bid, order)| (id, ApprovalRow { status, bid, order }))
    .collect();
    let deals = Deals { orders: &order_statuses, payments: &payments, approvals: &approvals };
    let order_of_bid: HashMap<Uuid, Uuid> =
        orders.iter().filter_map(|(order, bid)| bid.map(|bid| (bid, *order))).collect();

    check_acks(&evidence, &bids, &orders, &deals, &mut findings, violations);
    check_orders(pool, &bids, &order_of_bid, violations).await?;
    check_ledgers(pool, violations).await?;
    check_unacknowledged(pool, &evidence, &bids, &deals, &mut findings, violations).await?;
    findings.races = check_races(&evidence.ledger.races(), &bids, &order_of_bid, violations);
    check_policies(pool, &evidence, &mut findings, violations).await?;
    findings.contests = check_contests(&evidence.ledger.contests(), &bids, &deals, violations);
    check_order_lives(pool, &mut findings, violations).await?;
    check_approvals(pool, &evidence.ruled, &approvals, &mut findings, violations).await?;

    // Events: each agent's numbered 1, 2, 3... with no gap, and read in order and whole, by
    // every means.
    let (events, gapped): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM events),
                (SELECT count(*) FROM (SELECT agent_id FROM event_recipients GROUP BY agent_id
                                       HAVING count(*) <> max(seq) OR min(seq) <> 1) g)",
    )
    .fetch_one(pool)
    .await?;
    findings.events_published = events;
    if gapped > 0 {
        violations.add("event numbers not gap-free", format!("{gapped} agents' inboxes skip a number"));
    }
    let mut inboxes: HashMap<Uuid, Vec<i64>> = HashMap::new();
    for (agent, event) in
        sqlx::query_as::<_, (Uuid, i64)>("SELECT agent_id, seq FROM event_recipients ORDER BY agent_id, seq")
            .fetch_all(pool)
            .await?
    {
        inboxes.entry(agent).or_default().push(event);
    }
    for agent in evidence.agents {
        let paged = page_events(evidence.api, evidence.balancer, agent).await;
        match paged {
            Ok(ids) => {
                findings.agents_paged += 1;
                findings.events_paged += ids.len() as u64;
                let inbox = inboxes.get(&agent.id).map(Vec::as_slice).unwrap_or_default();
                compare_ids("GET /v1/events", agent.id, &ids, inbox, violations);
            }
            Err(why) => violations.add("GET /v1/events failed after the run", format!("agent {}: {why}", agent.id)),
        }
    }
    for seen in &evidence.readers {
        let entry = findings.readers.entry(seen.style.as_str()).or_default();
        entry.0 += 1;
        entry.1 += seen.ids.len() as u64;
        entry.2 += seen.reconnects;
        for (before, then) in seen.disorder.iter().take(5) {
            violations.add(
                "event out of order or twice",
                format!("{} of agent {}: event {then} came after {before}", seen.style.as_str(), seen.agent),
            );
        }
        let inbox = inboxes.get(&seen.agent).map(Vec::as_slice).unwrap_or_default();
        compare_ids(seen.style.as_str(), seen.agent, &seen.ids, inbox, violations);
    }
    findings.webhooks = check_webhooks(pool, &evidence, &inboxes, violations).await?;
    Ok(findings)
}

/// What the database holds of the orders' lives: each order's status, each payment's order and
/// status; and of approvals: each request's status and what it made.
struct Deals<'a> {
    orders: &'a HashMap<Uuid, String>,
    payments: &'a HashMap<Uuid, (Uuid, String)>,
    approvals: &'a HashMap<Uuid, ApprovalRow>,
}

struct ApprovalRow {
    status: String,
    bid: Option<Uuid>,
    order: Option<Uuid>,
}

impl Deals<'_> {
    fn order(&self, order: &Uuid) -> Option<&str> {
        self.orders.get(order).map(String::as_str)
    }

    fn payment(&self, payment: &Uuid) -> Option<(Uuid, &str)> {
        self.payments.get(payment).map(|(order, status)| (*order, status.as_str()))
    }

    fn approval(&self, approval: &Uuid) -> Option<&ApprovalRow> {
        self.approvals.get(approval)
    }
}

fn check_acks(
    evidence: &Evidence<'_>,
    bids: &HashMap<Uuid, BidRow>,
    orders: &HashMap<Uuid, Option<Uuid>>,
    deals: &Deals<'_>,
    findings: &mut Findings,
    violations: &Violations,
) {
    for (_, record) in evidence.ledger.acks() {
        findings.acks_checked += 1;
        let status = |bid: &Uuid| bids.get(bid).map(|row| row.status.as_str());
        let missing = match &record.ack {
            // Listings are checked by count with the refused ones (check_unacknowledged).
            Ack::Listed { .. } => None,
            Ack::Placed { thread, bid, .. } => match bids.get(bid) {
                Some(row) if row.thread == *thread => None,
                Some(_) => Some("the bid is in another thread".to_owned()),
                None => Some("no such bid".to_owned()),
            },
            Ack::Countered { parent, bid } => match (status(parent), bids.get(bid)) {
                (Some("COUNTERED"), Some(row)) if row.parent == Some(*parent) => None,
                (parent_status, new) => Some(format!(
                    "the countered bid is {}, the counter {}",
                    parent_status.unwrap_or("missing"),
                    if new.is_some() { "exists" } else { "is missing" }
                )),
            },
            Ack::Accepted { bid, order } => match (status(bid), order) {
                (Some("ACCEPTED"), Some(order)) if orders.get(order) == Some(&Some(*bid)) => None,
                (Some("ACCEPTED"), None) => Some("the answer showed no order".to_owned()),
                (bid_status, order) => Some(format!(
                    "the bid is {}, the order {}",
                    bid_status.unwrap_or("missing"),
                    if order.is_some_and(|order| orders.contains_key(&order)) {
                        "is another bid's"
                    } else {
                        "is missing"
                    }
                )),
            },
            Ack::Rejected { bid } => match status(bid) {
                Some("REJECTED") => None,
                other => Some(format!("the bid is {}", other.unwrap_or("missing"))),
            },
            Ack::Withdrew { bid } => match bids.get(bid) {
                Some(row) if row.status == "REJECTED" && row.reason.as_deref() == Some("withdrawn") => None,
                Some(row) => Some(format!("the bid is {} ({})", row.status, row.reason.as_deref().unwrap_or("-"))),
                None => Some("no such bid".to_owned()),
            },
            Ack::Fulfilled { order } => match deals.order(order) {
                Some("FULFILLED" | "COMPLETED") => None,
                other => Some(format!("the order is {}", other.unwrap_or("missing"))),
            },
            Ack::Completed { order } => match deals.order(order) {
                Some("COMPLETED") => None,
                other => Some(format!("the order is {}", other.unwrap_or("missing"))),
            },
            Ack::Paid { order, payment } => match deals.payment(payment) {
                Some((of, _)) if of == *order => None,
                Some(_) => Some("the payment is another order's".to_owned()),
                None => Some("no such payment".to_owned()),
            },
            Ack::Confirmed { order, payment } => match deals.payment(payment) {
                Some((of, "CONFIRMED")) if of == *order => None,
                other => Some(format!("the payment is {}", other.map_or("missing", |(_, status)| status))),
            },
            Ack::Opened { bid, thread, .. } => match bids.get(bid) {
                Some(row) if row.thread == *thread => None,
                Some(_) => Some("the bid is in another thread".to_owned()),
                None => Some("no such bid".to_owned()),
            },
            Ack::Settled { order, kind, bid } => match (status(bid), deals.order(order)) {
                (Some("ACCEPTED"), Some("CANCELLED")) if kind == "cancel" => None,
                (Some("ACCEPTED"), Some(_)) if kind == "refund" => None,
                (bid_status, order_status) => Some(format!(
                    "the {kind}'s bid is {}, the order {}",
                    bid_status.unwrap_or("missing"),
                    order_status.unwrap_or("missing")
                )),
            },
            Ack::Held { approval, .. } => match deals.approval(approval) {
                Some(_) => None,
                None => Some("no such request".to_owned()),
            },
            Ack::Approved { approval, bid, order } => match deals.approval(approval) {
                Some(row) if row.status == "APPROVED" && row.bid == *bid && row.order == *order => None,
                Some(row) => Some(format!("the request is {}, made {:?} {:?}", row.status, row.bid, row.order)),
                None => Some("no such request".to_owned()),
            },
            Ack::ApprovalFailed { approval } => match deals.approval(approval).map(|row| row.status.as_str()) {
                Some("FAILED") => None,
                other => Some(format!("the request is {}", other.unwrap_or("missing"))),
            },
            Ack::Unheld { approval } => match deals.approval(approval).map(|row| row.status.as_str()) {
                Some("WITHDRAWN") => None,
                other => Some(format!("the request is {}", other.unwrap_or("missing"))),
            },
        };
        if let Some(why) = missing {
            violations.add(
                "acknowledged move missing",
                format!(
                    "{} ({:?}) acknowledged at {:.1} s{}: {why}: {}",
                    record.ack.kind().as_str(),
                    record.workload,
                    record.at,
                    if record.replayed { " (replayed)" } else { "" },
                    serde_json::to_string(&record.ack).unwrap_or_default()
                ),
            );
        }
    }
}

async fn check_orders(
    pool: &PgPool,
    bids: &HashMap<Uuid, BidRow>,
    order_of_bid: &HashMap<Uuid, Uuid>,
    violations: &Violations,
) -> anyhow::Result<()> {
    for (what, query) in [
        ("thread", "SELECT thread_id, count(*) FROM orders WHERE thread_id IS NOT NULL GROUP BY 1 HAVING count(*) > 1"),
        ("bid", "SELECT bid_id, count(*) FROM orders WHERE bid_id IS NOT NULL GROUP BY 1 HAVING count(*) > 1"),
    ] {
        for (id, count) in sqlx::query_as::<_, (Uuid, i64)>(query).fetch_all(pool).await? {
            violations.add("duplicate order", format!("{count} orders for {what} {id}"));
        }
    }
    // An accepted refund or cancellation makes no order: its thread is on one.
    for (bid, row) in bids.iter().filter(|(_, row)| row.price) {
        let accepted = row.status == "ACCEPTED";
        let ordered = order_of_bid.contains_key(bid);
        if accepted != ordered {
            violations.add(
                "order and bid disagree",
                format!("bid {bid} is {} and has {} order", row.status, if ordered { "an" } else { "no" }),
            );
        }
    }
    for (listing, quantity, available, sold) in sqlx::query_as::<_, (Uuid, i32, i32, i64)>(
        "SELECT l.id, l.quantity, l.quantity_available,
                (SELECT count(*) FROM orders o WHERE o.listing_id = l.id AND o.status <> 'CANCELLED')
         FROM listings l",
    )
    .fetch_all(pool)
    .await?
    {
        if i64::from(quantity - available) != sold {
            violations.add(
                "stock does not match the orders",
                format!("listing {listing}: {quantity} units, {available} available, {sold} orders not cancelled"),
            );
        }
    }
    Ok(())
}

/// Every order's ledger exact: its paid amount is the sum of its confirmed payments and never
/// more than its amount.
async fn check_ledgers(pool: &PgPool, violations: &Violations) -> anyhow::Result<()> {
    for (order, amount, paid, confirmed) in sqlx::query_as::<_, (Uuid, i64, i64, i64)>(
        "SELECT o.id, o.amount, o.paid_amount,
                coalesce((SELECT sum(p.amount) FROM payments p WHERE p.order_id = o.id AND p.status = 'CONFIRMED'), 0)::bigint
         FROM orders o",
    )
    .fetch_all(pool)
    .await?
    {
        if paid != confirmed || paid > amount {
            violations.add(
                "an order's ledger is not exact",
                format!("order {order}: amount {amount}, paid {paid}, confirmed payments {confirmed}"),
            );
        }
    }
    Ok(())
}

/// Moves that got no 2xx: those whose every answer said nothing was done must not be there;
/// those whose outcome was unknown are counted when they were made.
async fn check_unacknowledged(
    pool: &PgPool,
    evidence: &Evidence<'_>,
    bids: &HashMap<Uuid, BidRow>,
    deals: &Deals<'_>,
    findings: &mut Findings,
    violations: &Violations,
) -> anyhow::Result<()> {
    // Placements and listings are counted: by (listing, buyer) and by seller.
    let threads: HashMap<(Uuid, Uuid), i64> = sqlx::query_as::<_, (Uuid, Uuid, i64)>(
        "SELECT listing_id, buyer_id, count(*) FROM threads WHERE kind = 'price' GROUP BY 1, 2",
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|(listing, buyer, count)| ((listing, buyer), count))
    .collect();
    let listings: HashMap<Uuid, i64> =
        sqlx::query_as::<_, (Uuid, i64)>("SELECT seller_id, count(*) FROM listings GROUP BY 1")
            .fetch_all(pool)
            .await?
            .into_iter()
            .collect();
    let unacknowledged = evidence.ledger.unacknowledged_moves();
    for moved in &unacknowledged {
        let made = match moved.kind {
            MoveKind::Counter => bids.get(&moved.target).map(|row| row.status == "COUNTERED"),
            MoveKind::Accept => bids.get(&moved.target).map(|row| row.status == "ACCEPTED"),
            MoveKind::Reject => bids.get(&moved.target).map(|row| row.status == "REJECTED"),
            MoveKind::Withdraw => bids.get(&moved.target).map(|row| row.reason.as_deref() == Some("withdrawn")),
            MoveKind::Fulfil => deals.order(&moved.target).map(|status| status != "CONFIRMED"),
            MoveKind::Complete => deals.order(&moved.target).map(|status| status == "COMPLETED"),
            MoveKind::Confirm => deals.payment(&moved.target).map(|(_, status)| status == "CONFIRMED"),
            MoveKind::Settle => bids.get(&moved.target).map(|row| row.status == "ACCEPTED"),
            MoveKind::Approve => deals.approval(&moved.target).map(|row| row.status != "PENDING"),
            MoveKind::Unhold => deals.approval(&moved.target).map(|row| row.status == "WITHDRAWN"),
            // A held move's request, or a negotiation opened on an order, is another row: its
            // absence is not looked for.
            MoveKind::Place | MoveKind::List | MoveKind::Pay | MoveKind::Open | MoveKind::Hold => None,
        };
        match made {
            Some(true) if moved.claims_not_made => {
                findings.refusals_checked += 1;
                violations.add(
                    "move made though its answer said it was not",
                    format!(
                        "{} of {} ({:?}) by agent {}: last answer {}",
                        moved.kind.as_str(),
                        moved.target,
                        moved.workload,
                        moved.agent,
                        moved.last
                    ),
                );
            }
            Some(true) => findings.made_unacknowledged += 1,
            Some(false) if moved.claims_not_made => findings.refusals_checked += 1,
            Some(false) | None => {}
        }
    }
    // Placements and listings by count: no more in the database than were acknowledged or
    // left unclear.
    let mut placements: HashMap<(Uuid, Uuid), (i64, i64, i64)> = HashMap::new();
    let mut listed: HashMap<Uuid, (i64, i64, i64)> = HashMap::new();
    let mut paid: HashMap<Uuid, (i64, i64, i64)> = HashMap::new();
    for (_, record) in evidence.ledger.acks() {
        match record.ack {
            Ack::Placed { listing, .. } => placements.entry((listing, record.agent)).or_default().0 += 1,
            Ack::Listed { .. } => listed.entry(record.agent).or_default().0 += 1,
            Ack::Paid { order, .. } => paid.entry(order).or_default().0 += 1,
            Ack::Countered { .. }
            | Ack::Accepted { .. }
            | Ack::Rejected { .. }
            | Ack::Withdrew { .. }
            | Ack::Fulfilled { .. }
            | Ack::Confirmed { .. }
            | Ack::Completed { .. }
            | Ack::Opened { .. }
            | Ack::Settled { .. }
            | Ack::Held { .. }
            | Ack::Approved { .. }
            | Ack::ApprovalFailed { .. }
            | Ack::Unheld { .. } => {}
        }
    }
    for moved in &unacknowledged {
        let slot = match moved.kind {
            MoveKind::Place => placements.entry((moved.target, moved.agent)).or_default(),
            MoveKind::List => listed.entry(moved.agent).or_default(),
            MoveKind::Pay => paid.entry(moved.target).or_default(),
            _ => continue,
        };
        if moved.claims_not_made { slot.2 += 1 } else { slot.1 += 1 }
    }
    let mut payments_of: HashMap<Uuid, i64> = HashMap::new();
    for (order, _) in deals.payments.values() {
        *payments_of.entry(*order).or_default() += 1;
    }
    for (order, (acked, unclear, refused)) in paid {
        let there = payments_of.get(&order).copied().unwrap_or(0);
        findings.refusals_checked += refused as u64;
        findings.made_unacknowledged += (there - acked).clamp(0, unclear) as u64;
        if there > acked + unclear || there < acked {
            violations.add(
                if there < acked { "acknowledged move missing" } else { "move made though its answer said it was not" },
                format!(
                    "order {order} has {there} payments: {acked} acknowledged, {unclear} unclear, {refused} refused"
                ),
            );
        }
    }
    for ((listing, buyer), (acked, unclear, refused)) in placements {
        let there = threads.get(&(listing, buyer)).copied().unwrap_or(0);
        findings.refusals_checked += refused as u64;
        findings.made_unacknowledged += (there - acked).clamp(0, unclear) as u64;
        if there > acked + unclear {
            violations.add(
                "move made though its answer said it was not",
                format!(
                    "buyer {buyer} has {there} threads on listing {listing}: {acked} placements acknowledged, \
                     {unclear} unclear, {refused} refused"
                ),
            );
        }
        if there < acked {
            violations.add(
                "acknowledged move missing",
                format!("buyer {buyer}: {acked} placements acknowledged on listing {listing}, {there} threads"),
            );
        }
    }
    for (seller, (acked, unclear, refused)) in listed {
        let there = listings.get(&seller).copied().unwrap_or(0);
        findings.refusals_checked += refused as u64;
        if there > acked + unclear || there < acked {
            violations.add(
                if there < acked { "acknowledged move missing" } else { "move made though its answer said it was not" },
                format!(
                    "seller {seller} has {there} listings: {acked} acknowledged, {unclear} unclear, {refused} refused"
                ),
            );
        }
    }
    Ok(())
}

fn check_races(
    races: &[Race],
    bids: &HashMap<Uuid, BidRow>,
    order_of_bid: &HashMap<Uuid, Uuid>,
    violations: &Violations,
) -> RaceFindings {
    let mut findings = RaceFindings { total: races.len() as u64, ..Default::default() };
    for race in races {
        let Some(row) = bids.get(&race.bid) else {
            violations
                .add("acknowledged move missing", format!("race {}: its bid {} is not there", race.number, race.bid));
            continue;
        };
        // What the database says happened to the bid, as the move that did it.
        let outcome = match (row.status.as_str(), row.reason.as_deref()) {
            ("PENDING", _) => None,
            ("ACCEPTED", _) => Some(MoveKind::Accept),
            ("COUNTERED", _) => Some(MoveKind::Counter),
            ("REJECTED", Some("withdrawn")) => Some(MoveKind::Withdraw),
            ("REJECTED", _) => Some(MoveKind::Reject),
            _ => Some(MoveKind::List),
        };
        let describe = || {
            let racers: Vec<String> =
                race.racers.iter().map(|r| format!("{} via {}: {}", r.kind.as_str(), r.via, r.summary)).collect();
            format!(
                "race {} on bid {} ({} {}): {}",
                race.number,
                race.bid,
                row.status,
                row.reason.as_deref().unwrap_or("-"),
                racers.join("; ")
            )
        };
        let winners: Vec<_> =
            race.racers.iter().filter(|r| r.status.is_some_and(|s| (200..300).contains(&s))).collect();
        match winners.as_slice() {
            [] => {
                let unclear_matches = race.racers.iter().any(|r| r.unclear && Some(r.kind) == outcome);
                let lost_to_someone = race.racers.iter().any(|r| r.status == Some(409));
                match outcome {
                    None if !lost_to_someone => findings.untouched += 1,
                    Some(_) if unclear_matches => findings.unanswered_winner += 1,
                    _ => violations.add("race without a winner", describe()),
                }
            }
            [winner] => {
                *findings.won_by.entry(winner.kind.as_str()).or_default() += 1;
                if Some(winner.kind) != outcome {
                    violations.add("race winner not what the database has", describe());
                }
                if winner.kind == MoveKind::Accept && !order_of_bid.contains_key(&race.bid) {
                    violations.add("race winner not what the database has", format!("{}: no order", describe()));
                }
            }
            _ => violations.add("race with more than one winner", describe()),
        }
        for racer in race.racers.iter().filter(|r| !r.status.is_some_and(|s| (200..300).contains(&s))) {
            let label = racer.status.map_or_else(|| "no answer".to_owned(), |s| s.to_string());
            *findings.losers.entry(label).or_default() += 1;
            let acceptable = match racer.status {
                Some(409) | Some(503) | None => true,
                Some(_) => false,
            };
            if !acceptable {
                violations.add("race loser answered neither 409 nor 503", describe());
            }
        }
    }
    findings
}

fn is_win(racer: &Racer) -> bool {
    racer.status.is_some_and(|status| (200..300).contains(&status))
}

/// Contests on deals and held moves: at most one winner each, the database agreeing with it,
/// the losers answered 409 (or left unanswered, or 503, by a fault), and no move made that
/// nobody won unless a racer's answer never came.
fn check_contests(
    contests: &[ContestRecord],
    bids: &HashMap<Uuid, BidRow>,
    deals: &Deals<'_>,
    violations: &Violations,
) -> BTreeMap<&'static str, ContestFindings> {
    let mut findings: BTreeMap<&'static str, ContestFindings> = BTreeMap::new();
    for record in contests {
        let describe = |state: String| {
            let racers: Vec<String> =
                record.racers.iter().map(|r| format!("{} via {}: {}", r.kind.as_str(), r.via, r.summary)).collect();
            format!(
                "contest {} ({}): {state}: {}",
                record.number,
                serde_json::to_string(&record.contest).unwrap_or_default(),
                racers.join("; ")
            )
        };
        let winners: Vec<&Racer> = record.racers.iter().filter(|r| is_win(r)).collect();
        for racer in record.racers.iter().filter(|r| !is_win(r)) {
            if !matches!(racer.status, Some(409) | Some(503) | None) {
                violations.add("contest loser answered neither 409 nor 503", describe(String::new()));
            }
        }
        match &record.contest {
            Contest::Confirms { order, payments } => {
                let tally = findings.entry("two confirmations past the outstanding amount").or_default();
                tally.total += 1;
                let confirmed: Vec<bool> =
                    payments.iter().map(|p| deals.payment(p).is_some_and(|(_, s)| s == "CONFIRMED")).collect();
                let state = format!("order {order}, payments confirmed {confirmed:?}");
                if confirmed.iter().filter(|c| **c).count() > 1 {
                    violations.add("payments confirmed past the outstanding amount", describe(state.clone()));
                }
                if winners.len() > 1 {
                    violations.add("contest with more than one winner", describe(state.clone()));
                }
                for (index, racer) in record.racers.iter().enumerate().take(2) {
                    if is_win(racer) && !confirmed[index] {
                        violations.add("acknowledged move missing", describe(state.clone()));
                    }
                    if !is_win(racer) && confirmed[index] && !racer.unclear {
                        violations.add("contest without a winner", describe(state.clone()));
                    }
                }
                match winners.as_slice() {
                    [] => tally.undecided += 1,
                    _ => *tally.won_by.entry("a confirmation").or_default() += 1,
                }
            }
            Contest::CancelOrFulfil { order, cancel_bid } => {
                let tally = findings.entry("cancellation accepted against fulfilment").or_default();
                tally.total += 1;
                let status = deals.order(order).unwrap_or("missing");
                let cancel = bids.get(cancel_bid).map_or("missing", |row| row.status.as_str());
                let outcome = match status {
                    "CANCELLED" => Some(MoveKind::Settle),
                    "FULFILLED" | "COMPLETED" => Some(MoveKind::Fulfil),
                    _ => None,
                };
                let state = format!("order {order} {status}, cancellation {cancel}");
                if (status == "CANCELLED") != (cancel == "ACCEPTED") {
                    violations.add("order and its cancellation disagree", describe(state.clone()));
                }
                decide(tally, &winners, &record.racers, outcome, violations, || describe(state.clone()));
            }
            Contest::ApprovalOrWithdraw { approval, bid } => {
                let tally = findings.entry("approvals against the counterparty's withdrawal").or_default();
                tally.total += 1;
                let request = deals.approval(approval);
                let status = request.map_or("missing", |row| row.status.as_str());
                let row = bids.get(bid);
                let withdrawn = row.is_some_and(|row| row.reason.as_deref() == Some("withdrawn"));
                let answered = row.is_some_and(|row| matches!(row.status.as_str(), "ACCEPTED" | "COUNTERED"));
                let state = format!(
                    "request {status}, the counterparty's bid {}",
                    row.map_or("missing".to_owned(), |row| format!(
                        "{} ({})",
                        row.status,
                        row.reason.as_deref().unwrap_or("-")
                    ))
                );
                let approvers: Vec<&Racer> = winners.iter().copied().filter(|r| r.kind == MoveKind::Approve).collect();
                if approvers.len() > 1 {
                    violations.add("approved twice", describe(state.clone()));
                }
                // What the database says won: the approval (the move made), or the withdrawal.
                let outcome = match (status, withdrawn, answered) {
                    ("APPROVED", false, true) => Some(MoveKind::Approve),
                    ("APPROVED", _, _) => {
                        violations.add("approved move not made", describe(state.clone()));
                        Some(MoveKind::Approve)
                    }
                    (_, true, _) => Some(MoveKind::Withdraw),
                    (_, false, true) => {
                        violations.add("move made without its approval", describe(state.clone()));
                        None
                    }
                    _ => None,
                };
                match record.approval_answer.as_deref() {
                    Some("APPROVED") if status != "APPROVED" => {
                        violations.add("acknowledged move missing", describe(state.clone()))
                    }
                    Some("FAILED") if status != "FAILED" => {
                        violations.add("acknowledged move missing", describe(state.clone()))
                    }
                    _ => {}
                }
                // An approver answered FAILED lost to the withdrawal: only APPROVED wins.
                let mut effective: Vec<&Racer> = Vec::new();
                if record.approval_answer.as_deref() == Some("APPROVED")
                    && let Some(first) = approvers.first()
                {
                    effective.push(first);
                }
                effective.extend(winners.iter().copied().filter(|r| r.kind == MoveKind::Withdraw));
                decide(tally, &effective, &record.racers, outcome, violations, || describe(state.clone()));
            }
        }
    }
    findings
}

/// Holds a contest's winners to what the database says happened (`outcome`: the kind of move
/// that won, if any).
fn decide(
    tally: &mut ContestFindings,
    winners: &[&Racer],
    racers: &[Racer],
    outcome: Option<MoveKind>,
    violations: &Violations,
    describe: impl Fn() -> String,
) {
    match winners {
        [] => {
            let unclear = racers.iter().any(|r| r.unclear && Some(r.kind) == outcome);
            if outcome.is_some() && !unclear {
                violations.add("contest without a winner", describe());
            }
            tally.undecided += 1;
        }
        [winner] => {
            *tally.won_by.entry(winner.kind.as_str()).or_default() += 1;
            if Some(winner.kind) != outcome {
                violations.add("contest winner not what the database has", describe());
            }
        }
        _ => violations.add("contest with more than one winner", describe()),
    }
}

/// Whether an order's events, oldest first (`order.created`, `order.fulfilled`,
/// `order.completed`, `order.cancelled`), follow its table and end in its status: CONFIRMED,
/// then FULFILLED then COMPLETED, or CANCELLED before any fulfilment. Gives what is wrong.
fn order_history_fault(types: &[&str], status: &str) -> Option<String> {
    let mut state = "CONFIRMED";
    for (index, event) in types.iter().enumerate() {
        state = match (state, *event) {
            ("CONFIRMED", "order.created") if index == 0 => "CONFIRMED",
            ("CONFIRMED", "order.fulfilled") => "FULFILLED",
            ("CONFIRMED", "order.cancelled") => "CANCELLED",
            ("FULFILLED", "order.completed") => "COMPLETED",
            (from, event) => return Some(format!("{event} on a {from} order (events: {})", types.join(", "))),
        };
    }
    (state != status).then(|| format!("its events end {state}, its status is {status} (events: {})", types.join(", ")))
}

/// Every order's life: its events legal and ending in its status, its refunds never more than
/// its confirmed payments, and exactly the accepted refunds and the operator's decisions.
async fn check_order_lives(pool: &PgPool, findings: &mut Findings, violations: &Violations) -> anyhow::Result<()> {
    let mut histories: HashMap<Uuid, Vec<String>> = HashMap::new();
    for (order, kind) in sqlx::query_as::<_, (Uuid, String)>(
        "SELECT order_id, type FROM events
         WHERE order_id IS NOT NULL
           AND type IN ('order.created', 'order.fulfilled', 'order.completed', 'order.cancelled')
         ORDER BY id",
    )
    .fetch_all(pool)
    .await?
    {
        histories.entry(order).or_default().push(kind);
    }
    for (order, status, paid, refunded, confirmed, agreed, decided) in
        sqlx::query_as::<_, (Uuid, String, i64, i64, i64, i64, i64)>(
            "SELECT o.id, o.status, o.paid_amount, o.refunded_amount,
                coalesce((SELECT sum(p.amount) FROM payments p WHERE p.order_id = o.id AND p.status = 'CONFIRMED'), 0)::bigint,
                coalesce((SELECT sum(b.amount) FROM bids b JOIN threads t ON t.id = b.thread_id
                          WHERE t.order_id = o.id AND t.kind = 'refund' AND b.status = 'ACCEPTED'), 0)::bigint,
                coalesce((SELECT sum(t.decided_amount) FROM threads t WHERE t.order_id = o.id), 0)::bigint
             FROM orders o",
        )
        .fetch_all(pool)
        .await?
    {
        findings.deal_orders += 1;
        findings.cancelled += u64::from(status == "CANCELLED");
        findings.completed += u64::from(status == "COMPLETED");
        findings.refunded += u64::from(refunded > 0);
        if refunded > confirmed || refunded > paid {
            violations.add(
                "refund past what was paid",
                format!("order {order}: refunded {refunded}, paid {paid}, confirmed payments {confirmed}"),
            );
        }
        if refunded != agreed + decided {
            violations.add(
                "an order's refunds are not exact",
                format!("order {order}: refunded {refunded}, refunds accepted {agreed}, decided {decided}"),
            );
        }
        let events: Vec<&str> = histories.get(&order).map(|h| h.iter().map(String::as_str).collect()).unwrap_or_default();
        if let Some(fault) = order_history_fault(&events, &status) {
            violations.add("order status not legal", format!("order {order}: {fault}"));
        }
    }
    Ok(())
}

/// Every approval made its move at most once, and only if approved; every counter and
/// acceptance of an agent with rules carries an approval.
async fn check_approvals(
    pool: &PgPool,
    ruled: &[Uuid],
    approvals: &HashMap<Uuid, ApprovalRow>,
    findings: &mut Findings,
    violations: &Violations,
) -> anyhow::Result<()> {
    let mut made: HashMap<Uuid, Vec<String>> = HashMap::new();
    for (what, id, approval) in sqlx::query_as::<_, (String, Uuid, Option<String>)>(
        "SELECT 'bid', id, approval->>'id' FROM bids WHERE approval IS NOT NULL
         UNION ALL SELECT 'order', id, approval->>'id' FROM orders WHERE approval IS NOT NULL",
    )
    .fetch_all(pool)
    .await?
    {
        match approval.as_deref().and_then(|id| Uuid::parse_str(id).ok()) {
            Some(approval) => made.entry(approval).or_default().push(format!("{what} {id}")),
            None => violations
                .add("move made twice by an approval", format!("{what} {id} carries an approval without an id")),
        }
    }
    for (id, row) in approvals {
        *findings.approvals.entry(row.status.clone()).or_default() += 1;
        let moves = made.remove(id).unwrap_or_default();
        let approved = row.status == "APPROVED";
        if moves.len() > 1 {
            violations.add("move made twice by an approval", format!("request {id}: {}", moves.join(", ")));
        } else if approved && moves.is_empty() && (row.bid.is_some() || row.order.is_some()) {
            violations.add("approved move not made", format!("request {id} is APPROVED and nothing carries it"));
        } else if !approved && !moves.is_empty() {
            violations.add(
                "move made under an approval that did not approve it",
                format!("request {id} is {}: {}", row.status, moves.join(", ")),
            );
        }
    }
    for (approval, moves) in made {
        violations.add("move made twice by an approval", format!("unknown request {approval}: {}", moves.join(", ")));
    }
    for (what, id) in sqlx::query_as::<_, (String, Uuid)>(
        "SELECT 'counter', b.id FROM bids b JOIN threads t ON t.id = b.thread_id
         WHERE t.buyer_id = ANY($1) AND t.kind = 'price' AND b.author = 'buyer' AND b.round > 1 AND b.approval IS NULL
         UNION ALL
         SELECT 'acceptance', o.id FROM orders o JOIN bids b ON b.id = o.bid_id
         WHERE o.buyer_id = ANY($1) AND b.author = 'seller' AND o.approval IS NULL",
    )
    .bind(ruled)
    .fetch_all(pool)
    .await?
    {
        violations.add("move of a ruled agent made without an approval", format!("{what} {id}"));
    }
    Ok(())
}

async fn check_policies(
    pool: &PgPool,
    evidence: &Evidence<'_>,
    findings: &mut Findings,
    violations: &Violations,
) -> anyhow::Result<()> {
    let threads: Vec<Uuid> = evidence
        .ledger
        .acks()
        .into_iter()
        .filter(|(_, record)| record.workload == Workload::Policy)
        .filter_map(|(_, record)| match record.ack {
            Ack::Placed { thread, .. } => Some(thread),
            _ => None,
        })
        .collect();
    let rows: Vec<(Uuid, String, Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT t.id, t.status, d.action, d.reason FROM threads t
         LEFT JOIN LATERAL (SELECT action, reason FROM auto_decisions d WHERE d.thread_id = t.id
                            ORDER BY d.id DESC LIMIT 1) d ON true
         WHERE t.id = ANY($1)",
    )
    .bind(&threads)
    .fetch_all(pool)
    .await?;
    for (thread, status, action, reason) in rows {
        *findings.policy.entry(status.clone()).or_default() += 1;
        if status == "ACTIVE" {
            if action.as_deref() == Some("stop") && reason.as_deref() == Some("failed") {
                findings.policy_handed_back += 1;
            } else {
                violations.add(
                    "policy negotiation stalled",
                    format!(
                        "thread {thread} is still ACTIVE after the run settled (last decision: {} {})",
                        action.as_deref().unwrap_or("none"),
                        reason.as_deref().unwrap_or("")
                    ),
                );
            }
        }
    }
    Ok(())
}

/// Every event of the agent's, read page by page from the start.
async fn page_events(api: &Api, to: &Endpoint, agent: &Agent) -> Result<Vec<i64>, String> {
    let mut ids = Vec::new();
    let mut after = 0;
    loop {
        let path = format!("/v1/events?after={after}&limit=200");
        let reply = api.read(to, &path, agent, Duration::from_secs(30)).await.map_err(|outcome| outcome.describe())?;
        let page: EventPage = reply.json()?;
        ids.extend(page.data.iter().map(|event| event.id));
        if page.data.is_empty() || !page.has_more {
            return Ok(ids);
        }
        after = page.next_cursor;
    }
}

/// Holds what a reader saw (`ids`, in the order given) to the agent's inbox in the database:
/// strictly increasing, and the same ids.
fn compare_ids(reader: &str, agent: Uuid, ids: &[i64], inbox: &[i64], violations: &Violations) {
    if let Some(pair) = ids.windows(2).find(|pair| pair[1] <= pair[0]) {
        violations
            .add("event out of order or twice", format!("{reader} of agent {agent}: {} after {}", pair[1], pair[0]));
    }
    let seen: BTreeSet<i64> = ids.iter().copied().collect();
    let want: BTreeSet<i64> = inbox.iter().copied().collect();
    let missing: Vec<i64> = want.difference(&seen).copied().collect();
    let foreign: Vec<i64> = seen.difference(&want).copied().collect();
    if !missing.is_empty() {
        violations.add(
            "event missing (a gap)",
            format!(
                "{reader} of agent {agent}: {} of {} events never came, first {:?}",
                thousands(missing.len() as u64),
                thousands(want.len() as u64),
                &missing[..missing.len().min(5)]
            ),
        );
    }
    if !foreign.is_empty() {
        violations.add(
            "event shown to an agent it does not concern",
            format!("{reader} of agent {agent}: {:?}", &foreign[..foreign.len().min(5)]),
        );
    }
}

async fn check_webhooks(
    pool: &PgPool,
    evidence: &Evidence<'_>,
    inboxes: &HashMap<Uuid, Vec<i64>>,
    violations: &Violations,
) -> anyhow::Result<WebhookFindings> {
    let mut findings = WebhookFindings { webhooks: evidence.hooks.len(), ..Default::default() };
    let (unsettled, retried): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status <> 'SUCCEEDED'), count(*) FILTER (WHERE attempts > 1)
         FROM webhook_deliveries",
    )
    .fetch_one(pool)
    .await?;
    findings.retried = retried as u64;
    let logged: HashMap<(Uuid, i64), i32> =
        // Keyed by the event's number as the webhook's owner knows it, which `Haggle-Event-Id` carries.
        sqlx::query_as::<_, (Uuid, i64, i32)>(
            "SELECT d.webhook_id, coalesce(e.seqs[array_position(e.audience, w.agent_id)], e.id), d.attempts
             FROM webhook_deliveries d JOIN events e ON e.id = d.event_id JOIN webhooks w ON w.id = d.webhook_id",
        )
        .fetch_all(pool)
        .await?
            .into_iter()
            .map(|(webhook, event, attempts)| ((webhook, event), attempts))
            .collect();
    if unsettled > 0 {
        violations.add(
            "webhook delivery not settled",
            format!("{unsettled} deliveries are not SUCCEEDED after the run settled"),
        );
    }
    for hook in evidence.hooks {
        let want: BTreeSet<i64> = inboxes.get(&hook.owner).map(|ids| ids.iter().copied().collect()).unwrap_or_default();
        let arrived = evidence.arrivals.get(&hook.index).cloned().unwrap_or_default();
        findings.expected += want.len() as u64;
        findings.deliveries += arrived.deliveries;
        for bad in arrived.bad.iter().take(5) {
            violations.add("webhook delivery not signed right", format!("webhook {}: {bad}", hook.index));
        }
        let got: BTreeSet<i64> = arrived.events.keys().copied().collect();
        findings.delivered += want.intersection(&got).count() as u64;
        for (event, count) in &arrived.events {
            let attempts = logged.get(&(hook.id, *event)).copied().unwrap_or(0);
            if i64::from(*count) > i64::from(attempts) {
                findings.unlogged_attempts += 1;
            }
            if *count > 1 {
                findings.duplicated_events += 1;
                findings.extra_deliveries += u64::from(count - 1);
                if evidence.exactly_once_webhooks {
                    violations.add(
                        "webhook event delivered more than once",
                        format!("webhook {} of agent {}: event {event} arrived {count} times", hook.index, hook.owner),
                    );
                }
            }
        }
        let missing: Vec<i64> = want.difference(&got).copied().collect();
        if !missing.is_empty() {
            violations.add(
                "webhook event never delivered",
                format!(
                    "webhook {} of agent {}: {} of {} events never arrived, first {:?}",
                    hook.index,
                    hook.owner,
                    missing.len(),
                    want.len(),
                    &missing[..missing.len().min(5)]
                ),
            );
        }
        let foreign: Vec<i64> = got.difference(&want).copied().collect();
        if !foreign.is_empty() {
            violations.add(
                "webhook delivered an event of another agent",
                format!("webhook {}: {:?}", hook.index, &foreign[..foreign.len().min(5)]),
            );
        }
    }
    Ok(findings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn racer(kind: MoveKind, status: Option<u16>, unclear: bool) -> Racer {
        Racer { kind, via: "haggle1".into(), status, code: None, unclear, summary: String::new() }
    }

    fn race(racers: Vec<Racer>) -> Race {
        Race { number: 7, bid: Uuid::from_u128(1), thread: Uuid::from_u128(2), racers }
    }

    fn bid(status: &str, reason: Option<&str>) -> HashMap<Uuid, BidRow> {
        let row = BidRow {
            thread: Uuid::from_u128(2),
            status: status.into(),
            reason: reason.map(Into::into),
            parent: None,
            price: true,
        };
        HashMap::from([(Uuid::from_u128(1), row)])
    }

    fn kinds(violations: &Violations) -> Vec<&'static str> {
        violations.by_kind().into_keys().collect()
    }

    #[test]
    fn a_race_has_one_winner_and_the_database_agrees_with_it() {
        let ordered = HashMap::from([(Uuid::from_u128(1), Uuid::from_u128(9))]);
        let clean = race(vec![
            racer(MoveKind::Accept, Some(200), false),
            racer(MoveKind::Reject, Some(409), false),
            racer(MoveKind::Counter, Some(409), false),
            racer(MoveKind::Withdraw, None, true),
        ]);
        let violations = Violations::default();
        let found =
            check_races(std::slice::from_ref(&clean), &bid("ACCEPTED", Some("accepted")), &ordered, &violations);
        assert_eq!((violations.count(), found.won_by["accept"]), (0, 1));

        let violations = Violations::default();
        check_races(&[clean], &bid("REJECTED", Some("withdrawn")), &ordered, &violations);
        assert_eq!(kinds(&violations), ["race winner not what the database has"]);

        let two = race(vec![racer(MoveKind::Accept, Some(200), false), racer(MoveKind::Reject, Some(200), false)]);
        let violations = Violations::default();
        check_races(&[two], &bid("ACCEPTED", None), &ordered, &violations);
        assert!(kinds(&violations).contains(&"race with more than one winner"));

        let odd_loser = race(vec![racer(MoveKind::Reject, Some(200), false), racer(MoveKind::Accept, Some(500), true)]);
        let violations = Violations::default();
        check_races(&[odd_loser], &bid("REJECTED", Some("rejected")), &HashMap::new(), &violations);
        assert_eq!(kinds(&violations), ["race loser answered neither 409 nor 503"]);
    }

    #[test]
    fn a_race_without_a_2xx_is_explained_by_an_unanswered_request_or_by_nothing_happening() {
        let unanswered = race(vec![racer(MoveKind::Counter, None, true), racer(MoveKind::Accept, Some(409), false)]);
        let violations = Violations::default();
        let found = check_races(
            std::slice::from_ref(&unanswered),
            &bid("COUNTERED", Some("countered")),
            &HashMap::new(),
            &violations,
        );
        assert_eq!((violations.count(), found.unanswered_winner), (0, 1));

        let turned_away =
            race(vec![racer(MoveKind::Counter, Some(503), false), racer(MoveKind::Accept, Some(503), false)]);
        let violations = Violations::default();
        let found =
            check_races(std::slice::from_ref(&turned_away), &bid("PENDING", None), &HashMap::new(), &violations);
        assert_eq!((violations.count(), found.untouched), (0, 1));

        // Made by a request whose answer said it was not: a 503 that claimed nothing was done.
        let violations = Violations::default();
        check_races(&[turned_away], &bid("COUNTERED", Some("countered")), &HashMap::new(), &violations);
        assert_eq!(kinds(&violations), ["race without a winner"]);

        // Everyone lost to nobody.
        let lost = race(vec![racer(MoveKind::Counter, Some(409), false), racer(MoveKind::Accept, Some(409), false)]);
        let violations = Violations::default();
        check_races(&[lost], &bid("PENDING", None), &HashMap::new(), &violations);
        assert_eq!(kinds(&violations), ["race without a winner"]);
    }

    fn deals<'a>(
        orders: &'a HashMap<Uuid, String>,
        payments: &'a HashMap<Uuid, (Uuid, String)>,
        approvals: &'a HashMap<Uuid, ApprovalRow>,
    ) -> Deals<'a> {
        Deals { orders, payments, approvals }
    }

    fn contest(contest: Contest, racers: Vec<Racer>, approval_answer: Option<&str>) -> ContestRecord {
        ContestRecord { number: 3, contest, racers, approval_answer: approval_answer.map(Into::into) }
    }

    #[test]
    fn two_confirmations_past_the_outstanding_amount_have_one_winner_and_one_payment_confirmed() {
        let (order, first, second) = (Uuid::from_u128(10), Uuid::from_u128(11), Uuid::from_u128(12));
        let orders = HashMap::from([(order, "CONFIRMED".to_owned())]);
        let record = |a, b| {
            contest(
                Contest::Confirms { order, payments: [first, second] },
                vec![racer(MoveKind::Confirm, a, false), racer(MoveKind::Confirm, b, false)],
                None,
            )
        };
        let ledger =
            |a: &str, b: &str| HashMap::from([(first, (order, a.to_owned())), (second, (order, b.to_owned()))]);
        let approvals = HashMap::new();

        let clean = ledger("CONFIRMED", "RECORDED");
        let violations = Violations::default();
        let found = check_contests(
            &[record(Some(200), Some(409))],
            &HashMap::new(),
            &deals(&orders, &clean, &approvals),
            &violations,
        );
        assert_eq!(violations.count(), 0, "{:?}", violations.by_kind());
        assert_eq!(found["two confirmations past the outstanding amount"].won_by["a confirmation"], 1);

        // Both confirmed: past the outstanding amount, and two winners.
        let both = ledger("CONFIRMED", "CONFIRMED");
        let violations = Violations::default();
        check_contests(
            &[record(Some(200), Some(200))],
            &HashMap::new(),
            &deals(&orders, &both, &approvals),
            &violations,
        );
        assert_eq!(
            kinds(&violations),
            ["contest with more than one winner", "payments confirmed past the outstanding amount"]
        );

        // The acknowledged confirmation is not there; the refused one is.
        let swapped = ledger("RECORDED", "CONFIRMED");
        let violations = Violations::default();
        check_contests(
            &[record(Some(200), Some(409))],
            &HashMap::new(),
            &deals(&orders, &swapped, &approvals),
            &violations,
        );
        assert_eq!(kinds(&violations), ["acknowledged move missing", "contest without a winner"]);
    }

    #[test]
    fn a_cancellation_racing_fulfilment_ends_one_way_and_the_database_agrees() {
        let (order, cancel) = (Uuid::from_u128(20), Uuid::from_u128(1));
        let record = |settle, fulfil, unclear| {
            contest(
                Contest::CancelOrFulfil { order, cancel_bid: cancel },
                vec![racer(MoveKind::Settle, settle, unclear), racer(MoveKind::Fulfil, fulfil, false)],
                None,
            )
        };
        let (payments, approvals) = (HashMap::new(), HashMap::new());
        let run = |record: ContestRecord, status: &str, bid_status: &str| {
            let orders = HashMap::from([(order, status.to_owned())]);
            let violations = Violations::default();
            check_contests(&[record], &bid(bid_status, None), &deals(&orders, &payments, &approvals), &violations);
            kinds(&violations)
        };
        assert!(run(record(Some(409), Some(200), false), "FULFILLED", "PENDING").is_empty());
        assert!(run(record(Some(200), Some(409), false), "CANCELLED", "ACCEPTED").is_empty());
        // A cancellation whose answer never came may have been made.
        assert!(run(record(None, Some(409), true), "CANCELLED", "ACCEPTED").is_empty());
        assert_eq!(
            run(record(Some(200), Some(409), false), "FULFILLED", "ACCEPTED"),
            ["contest winner not what the database has", "order and its cancellation disagree"]
        );
        assert_eq!(
            run(record(Some(200), Some(200), false), "CANCELLED", "ACCEPTED"),
            ["contest with more than one winner"]
        );
        assert_eq!(run(record(Some(409), Some(409), false), "CANCELLED", "ACCEPTED"), ["contest without a winner"]);
        assert_eq!(
            run(record(Some(409), Some(500), false), "FULFILLED", "PENDING"),
            ["contest loser answered neither 409 nor 503", "contest without a winner"]
        );
    }

    #[test]
    fn an_approval_racing_the_counterpartys_withdrawal_makes_its_move_once_or_fails() {
        let approval = Uuid::from_u128(30);
        let record = |first, second, withdraw, answer| {
            contest(
                Contest::ApprovalOrWithdraw { approval, bid: Uuid::from_u128(1) },
                vec![
                    racer(MoveKind::Approve, first, false),
                    racer(MoveKind::Approve, second, false),
                    racer(MoveKind::Withdraw, withdraw, false),
                ],
                answer,
            )
        };
        let (orders, payments) = (HashMap::new(), HashMap::new());
        let run = |record: ContestRecord, status: &str, bids: HashMap<Uuid, BidRow>| {
            let approvals =
                HashMap::from([(approval, ApprovalRow { status: status.to_owned(), bid: None, order: None })]);
            let violations = Violations::default();
            check_contests(&[record], &bids, &deals(&orders, &payments, &approvals), &violations);
            kinds(&violations)
        };
        // The approval won: the held acceptance made, the other approver and the withdrawal refused.
        let won = record(Some(200), Some(409), Some(409), Some("APPROVED"));
        assert!(run(won.clone(), "APPROVED", bid("ACCEPTED", Some("accepted"))).is_empty());
        // The withdrawal won: the approval answered FAILED, nothing made.
        let lost = record(Some(200), Some(409), Some(200), Some("FAILED"));
        assert!(run(lost, "FAILED", bid("REJECTED", Some("withdrawn"))).is_empty());
        // Approved, and withdrawn too.
        let both = record(Some(200), Some(409), Some(200), Some("APPROVED"));
        assert_eq!(
            run(both, "APPROVED", bid("REJECTED", Some("withdrawn"))),
            ["approved move not made", "contest with more than one winner"]
        );
        // Two approvers both answered 200.
        let twice = record(Some(200), Some(200), Some(409), Some("APPROVED"));
        assert_eq!(run(twice, "APPROVED", bid("ACCEPTED", Some("accepted"))), ["approved twice"]);
        // The move made though the request never was approved.
        let unapproved = record(Some(409), Some(409), Some(409), None);
        assert_eq!(run(unapproved, "DENIED", bid("ACCEPTED", Some("accepted"))), ["move made without its approval"]);
        // An acknowledged approval the database does not have.
        assert_eq!(
            run(won, "PENDING", bid("PENDING", None)),
            ["acknowledged move missing", "contest winner not what the database has"]
        );
    }

    #[test]
    fn an_order_is_cancelled_only_before_fulfilment_and_its_events_end_in_its_status() {
        assert_eq!(order_history_fault(&["order.created"], "CONFIRMED"), None);
        let life = ["order.created", "order.fulfilled", "order.completed"];
        assert_eq!(order_history_fault(&life, "COMPLETED"), None);
        assert_eq!(order_history_fault(&["order.created", "order.cancelled"], "CANCELLED"), None);
        let late = order_history_fault(&["order.created", "order.fulfilled", "order.cancelled"], "CANCELLED");
        assert!(late.is_some_and(|fault| fault.starts_with("order.cancelled on a FULFILLED order")));
        assert!(order_history_fault(&["order.created", "order.completed"], "COMPLETED").is_some());
        assert!(order_history_fault(&["order.created", "order.fulfilled", "order.fulfilled"], "FULFILLED").is_some());
        // The status says more than the events: an event was lost.
        assert!(order_history_fault(&["order.created"], "FULFILLED").is_some());
    }

    #[test]
    fn a_reader_is_held_to_the_inbox() {
        let violations = Violations::default();
        compare_ids("stream", Uuid::nil(), &[1, 4, 9], &[1, 4, 9], &violations);
        assert_eq!(violations.count(), 0);
        compare_ids("stream", Uuid::nil(), &[1, 9], &[1, 4, 9], &violations);
        compare_ids("stream", Uuid::nil(), &[1, 4, 4, 9], &[1, 4, 9], &violations);
        compare_ids("stream", Uuid::nil(), &[1, 2, 4, 9], &[1, 4, 9], &violations);
        let kinds: Vec<&str> = violations.by_kind().into_keys().collect();
        assert_eq!(
            kinds,
            ["event missing (a gap)", "event out of order or twice", "event shown to an agent it does not concern"]
        );
    }
}
