//! After the run has settled: every acknowledged answer, race, event and webhook delivery held
//! against what the database has.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use super::http::{Agent, Api, Endpoint};
use super::readers::Seen;
use super::receiver::Arrivals;
use super::record::{Ack, Ledger, MoveKind, Race, Violations, Workload, thousands};
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
}

struct BidRow {
    thread: Uuid,
    status: String,
    reason: Option<String>,
    parent: Option<Uuid>,
}

pub async fn check(pool: &PgPool, evidence: Evidence<'_>, violations: &Violations) -> anyhow::Result<Findings> {
    let mut findings = Findings::default();
    let bids: HashMap<Uuid, BidRow> = sqlx::query_as::<_, (Uuid, Uuid, String, Option<String>, Option<Uuid>)>(
        "SELECT id, thread_id, status, reason, parent_bid_id FROM bids",
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|(id, thread, status, reason, parent)| (id, BidRow { thread, status, reason, parent }))
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
    let deals = Deals { orders: &order_statuses, payments: &payments };
    let order_of_bid: HashMap<Uuid, Uuid> =
        orders.iter().filter_map(|(order, bid)| bid.map(|bid| (bid, *order))).collect();

    check_acks(&evidence, &bids, &orders, &deals, &mut findings, violations);
    check_orders(pool, &bids, &order_of_bid, violations).await?;
    check_ledgers(pool, violations).await?;
    check_unacknowledged(pool, &evidence, &bids, &deals, &mut findings, violations).await?;
    findings.races = check_races(&evidence.ledger.races(), &bids, &order_of_bid, violations);
    check_policies(pool, &evidence, &mut findings, violations).await?;

    // Events: published gap-free, each agent's read in order and whole, by every means.
    let (count, last): (i64, i64) =
        sqlx::query_as("SELECT count(*), coalesce(max(id), 0) FROM events").fetch_one(pool).await?;
    findings.events_published = last;
    if count != last {
        violations.add("event ids not gap-free", format!("{count} events published, but the highest id is {last}"));
    }
    let unpublished: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox").fetch_one(pool).await?;
    if unpublished > 0 {
        violations
            .add("events never published", format!("{unpublished} events still in the outbox after the run settled"));
    }
    let mut inboxes: HashMap<Uuid, Vec<i64>> = HashMap::new();
    for (agent, event) in
        sqlx::query_as::<_, (Uuid, i64)>("SELECT agent_id, event_id FROM event_recipients ORDER BY agent_id, event_id")
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
/// status.
struct Deals<'a> {
    orders: &'a HashMap<Uuid, String>,
    payments: &'a HashMap<Uuid, (Uuid, String)>,
}

impl Deals<'_> {
    fn order(&self, order: &Uuid) -> Option<&str> {
        self.orders.get(order).map(String::as_str)
    }

    fn payment(&self, payment: &Uuid) -> Option<(Uuid, &str)> {
        self.payments.get(payment).map(|(order, status)| (*order, status.as_str()))
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
    for (bid, row) in bids {
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
        "SELECT l.id, l.quantity, l.quantity_available, (SELECT count(*) FROM orders o WHERE o.listing_id = l.id)
         FROM listings l",
    )
    .fetch_all(pool)
    .await?
    {
        if i64::from(quantity - available) != sold {
            violations.add(
                "stock does not match the orders",
                format!("listing {listing}: {quantity} units, {available} available, {sold} orders"),
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
    let threads: HashMap<(Uuid, Uuid), i64> =
        sqlx::query_as::<_, (Uuid, Uuid, i64)>("SELECT listing_id, buyer_id, count(*) FROM threads GROUP BY 1, 2")
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
            MoveKind::Place | MoveKind::List | MoveKind::Pay => None,
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
            | Ack::Completed { .. } => {}
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
        sqlx::query_as::<_, (Uuid, i64, i32)>("SELECT webhook_id, event_id, attempts FROM webhook_deliveries")
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
    use crate::record::Racer;

    fn racer(kind: MoveKind, status: Option<u16>, unclear: bool) -> Racer {
        Racer { kind, via: "haggle1".into(), status, code: None, unclear, summary: String::new() }
    }

    fn race(racers: Vec<Racer>) -> Race {
        Race { number: 7, bid: Uuid::from_u128(1), thread: Uuid::from_u128(2), racers }
    }

    fn bid(status: &str, reason: Option<&str>) -> HashMap<Uuid, BidRow> {
        let row =
            BidRow { thread: Uuid::from_u128(2), status: status.into(), reason: reason.map(Into::into), parent: None };
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
