//! The report: what was done, what broke, how soon it came back, and every violation.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::balancer::ServerStats;
use super::http::Tally;
use super::record::{FaultRecord, Ledger, MoveKind, Violations, Workload, span, thousands};
use super::verify::Findings;

/// The conditions of the run, for its first lines.
pub struct Conditions {
    pub command: String,
    pub haproxy: String,
    pub postgres: String,
    pub fsync: bool,
    /// On a pg_auto_failover cluster rather than one PostgreSQL.
    pub failover: bool,
    pub load: Duration,
    pub workers: String,
}

/// How soon moves were acknowledged again after a fault.
#[derive(Debug, Clone)]
pub struct Recovery {
    pub what: String,
    pub at: f64,
    pub note: String,
    /// Moves acknowledged between the fault's start and its end.
    pub during: u64,
    /// From the end of the fault (PostgreSQL taking connections, the instance healthy) to the
    /// next acknowledged move.
    pub first_move_after: Option<Duration>,
    /// From the fault's start to that move.
    pub first_move_from_start: Option<Duration>,
    pub database: bool,
}

pub fn recoveries(ledger: &Ledger, faults: &[FaultRecord]) -> Vec<Recovery> {
    let mut answered: Vec<Instant> = ledger.acks().into_iter().map(|(at, _)| at).collect();
    answered.sort();
    faults
        .iter()
        .map(|fault| {
            let back = fault.back.unwrap_or(fault.started);
            let during = answered.iter().filter(|at| **at >= fault.started && **at < back).count() as u64;
            let first = answered.iter().find(|at| **at >= back);
            let first_move_after = first.map(|at| *at - back);
            let first_move_from_start = first.map(|at| *at - fault.started);
            Recovery {
                what: fault.what.clone(),
                at: ledger.since_start(fault.started),
                note: fault.note.clone(),
                during,
                first_move_after,
                first_move_from_start,
                database: fault.database,
            }
        })
        .collect()
}

pub fn print(
    conditions: &Conditions,
    ledger: &Ledger,
    tally: &Tally,
    findings: &Findings,
    recoveries: &[Recovery],
    stats: &[ServerStats],
    violations: &Violations,
) {
    println!();
    let on = if conditions.failover { "a primary and its synchronous secondary" } else { "one PostgreSQL" };
    println!("haggle chaos: {} of load through HAProxy to 3 instances on {on}", span(conditions.load));
    println!("  command      {}", conditions.command);
    println!("  balancer     {}", conditions.haproxy);
    if conditions.failover {
        println!(
            "  database     {} under pg_auto_failover: a monitor, a primary and a synchronous secondary (throwaway, fsync on)",
            conditions.postgres
        );
    } else {
        println!(
            "  database     {} (throwaway cluster, fsync {}{})",
            conditions.postgres,
            if conditions.fsync { "on" } else { "off" },
            if conditions.fsync {
                ""
            } else {
                ": safe against the PostgreSQL crashes of this run, not against a machine crash"
            }
        );
    }
    println!("  load         {}", conditions.workers);
    println!(
        "  binary       {} build of haggle, the instances and the load on the same machine",
        if cfg!(debug_assertions) { "a debug" } else { "a release" }
    );

    let acks = ledger.acks();
    let mut by_kind: BTreeMap<MoveKind, u64> = BTreeMap::new();
    let mut replayed = 0;
    for (_, record) in &acks {
        *by_kind.entry(record.ack.kind()).or_default() += 1;
        replayed += u64::from(record.replayed);
    }
    println!();
    println!("acknowledged moves (2xx)       {}", thousands(acks.len() as u64));
    let kinds: Vec<String> = MoveKind::ALL
        .iter()
        .map(|kind| format!("{} {}", by_kind.get(kind).copied().unwrap_or(0), kind.as_str()))
        .collect();
    println!("  by move                      {}", kinds.join(", "));
    println!("  replayed under their key     {}", thousands(replayed));
    let (completed, abandoned) = ledger.completions();
    for (workload, name) in [
        (Workload::W1Keyed, "W1 with idempotency keys"),
        (Workload::W1Plain, "W1 without keys"),
        (Workload::Policy, "policy negotiations"),
        (Workload::Deal, "deals carried through"),
        (Workload::Approval, "held moves answered"),
    ] {
        println!(
            "  {name:<29}{} completed, {} given up",
            thousands(completed.get(&workload).copied().unwrap_or(0)),
            thousands(abandoned.get(&workload).copied().unwrap_or(0))
        );
    }
    let policy: Vec<String> = findings.policy.iter().map(|(status, n)| format!("{n} {status}")).collect();
    println!(
        "  policy threads at the end    {}",
        if policy.is_empty() { "none".to_owned() } else { policy.join(", ") }
    );
    if findings.policy_handed_back > 0 {
        println!(
            "  policy bids handed back      {} (the executor gave up after repeated failures)",
            findings.policy_handed_back
        );
    }
    println!(
        "  checked in the database      {} acknowledged, {} refused checked absent, {} made although unacknowledged (their outcome was unknown)",
        thousands(findings.acks_checked),
        thousands(findings.refusals_checked),
        thousands(findings.made_unacknowledged)
    );
    println!("  orders                       {}", thousands(findings.orders));

    let races = &findings.races;
    println!();
    println!("races                          {}", thousands(races.total));
    let won: Vec<String> = races.won_by.iter().map(|(kind, n)| format!("{n} {kind}")).collect();
    println!("  won (one 2xx each) by        {}", won.join(", "));
    println!(
        "  no 2xx answer                {} decided by a request left unanswered, {} untouched (every request turned away by a fault)",
        races.unanswered_winner, races.untouched
    );
    let losers: Vec<String> = races.losers.iter().map(|(status, n)| format!("{n} × {status}")).collect();
    println!("  losers answered              {}", losers.join(", "));

    println!();
    println!("contests on deals and held moves (at most one winner each)");
    for (what, contest) in &findings.contests {
        let won: Vec<String> = contest.won_by.iter().map(|(kind, n)| format!("{n} {kind}")).collect();
        println!(
            "  {what:<52}{}: won by {}; {} without a 2xx",
            thousands(contest.total),
            if won.is_empty() { "none".to_owned() } else { won.join(", ") },
            contest.undecided
        );
    }
    println!(
        "  orders' lives checked        {} (events legal and ending in the status, refunds within confirmed payments and exact): {} completed, {} cancelled, {} with refunds",
        thousands(findings.deal_orders),
        thousands(findings.completed),
        thousands(findings.cancelled),
        thousands(findings.refunded)
    );
    let approvals: Vec<String> = findings.approvals.iter().map(|(status, n)| format!("{n} {status}")).collect();
    println!(
        "  approval requests            {} (each move made at most once, only when approved; every ruled move carries one)",
        if approvals.is_empty() { "none".to_owned() } else { approvals.join(", ") }
    );

    println!();
    let classes = tally.by_class();
    println!(
        "answers                        {} (2xx {}, 4xx {}, 5xx {}); 409 {}; 503 {} ({} from HAProxy, {} from instances, {} saying the outcome is unknown)",
        thousands(tally.answers()),
        thousands(classes.get(&2).copied().unwrap_or(0)),
        thousands(classes.get(&4).copied().unwrap_or(0)),
        thousands(classes.get(&5).copied().unwrap_or(0)),
        thousands(tally.with_status(409)),
        thousands(tally.with_status(503)),
        thousands(tally.unavailable_from_balancer),
        thousands(tally.unavailable_from_instances),
        thousands(tally.unavailable_unknown),
    );
    let other_5xx: u64 = tally.statuses.iter().filter(|((_, s), _)| *s >= 500 && *s != 503).map(|(_, n)| n).sum();
    println!("  5xx other than 503           {other_5xx}");
    let counts = |map: &BTreeMap<String, u64>| {
        if map.is_empty() {
            "none".to_owned()
        } else {
            map.iter().map(|(to, n)| format!("{n} to {to}")).collect::<Vec<_>>().join(", ")
        }
    };
    println!("  not sent (connection refused) {}", counts(&tally.not_sent));
    println!("  sent, no answer              {}", counts(&tally.no_answer));
    for sample in &tally.no_answer_samples {
        println!("    - {sample}");
    }

    println!();
    let kills = recoveries.iter().filter(|r| !r.database).count();
    let restarts = recoveries.iter().filter(|r| r.what.starts_with("pg_ctl restart")).count();
    let primary_kills: Vec<&Recovery> = recoveries.iter().filter(|r| r.what == "kill -9 the primary").collect();
    let switchovers = recoveries.iter().filter(|r| r.what.contains("switchover")).count();
    if conditions.failover {
        println!(
            "faults                         {}: the primary killed {}, switchovers {switchovers}",
            recoveries.len(),
            primary_kills.len()
        );
    } else {
        println!(
            "faults                         {}: instances killed and restarted {kills}, PostgreSQL restarted {restarts}, PostgreSQL stopped for a while {}",
            recoveries.len(),
            recoveries.len() - kills - restarts
        );
    }
    for recovery in recoveries {
        let first = recovery.first_move_after.map_or_else(|| "none".to_owned(), span);
        println!(
            "  {:6.1} s  {:<28} {}; {} moves acknowledged meanwhile; first move {} after {}",
            recovery.at,
            recovery.what,
            recovery.note,
            recovery.during,
            first,
            match (recovery.database, conditions.failover) {
                (true, true) => "the new primary took writes",
                (true, false) => "PostgreSQL was back",
                (false, _) => "it was healthy",
            }
        );
    }
    let mut killed: Vec<Duration> = primary_kills.iter().filter_map(|r| r.first_move_from_start).collect();
    if !killed.is_empty() {
        let each = killed.iter().map(|d| span(*d)).collect::<Vec<_>>().join(", ");
        killed.sort();
        println!(
            "  the primary killed → first acknowledged move on the new primary: median {} of {} kills, each {each}",
            span(killed[killed.len() / 2]),
            killed.len()
        );
    }
    for switchover in recoveries.iter().filter(|r| r.what.contains("switchover")) {
        let took = switchover.first_move_from_start.map_or_else(|| "none".to_owned(), span);
        println!("  switchover → first acknowledged move on the new primary: {took}");
    }
    let database: Vec<Duration> = recoveries.iter().filter(|r| r.database).filter_map(|r| r.first_move_after).collect();
    if let Some(worst) = database.iter().max() {
        println!(
            "  {} → first acknowledged move: worst {}, each {}",
            if conditions.failover { "a new primary taking writes" } else { "PostgreSQL back" },
            span(*worst),
            database.iter().map(|d| span(*d)).collect::<Vec<_>>().join(", ")
        );
    }

    println!();
    println!(
        "events                         {} written, each agent's numbered gap-free; GET /v1/events paged for {} agents ({} events)",
        thousands(findings.events_published as u64),
        findings.agents_paged,
        thousands(findings.events_paged)
    );
    for (style, (readers, events, reconnects)) in &findings.readers {
        println!(
            "  {style:<29}{readers} readers, {} events, {} reconnections",
            thousands(*events),
            thousands(*reconnects)
        );
    }
    let hooks = &findings.webhooks;
    println!(
        "webhooks                       {} webhooks, {} events to deliver, {} delivered, {} deliveries ({} retried by the server)",
        hooks.webhooks,
        thousands(hooks.expected),
        thousands(hooks.delivered),
        thousands(hooks.deliveries),
        thousands(hooks.retried)
    );
    println!(
        "  exactly once by Event-Id     {}",
        if hooks.duplicated_events == 0 {
            "held".to_owned()
        } else {
            format!(
                "did not hold: {} events delivered more than once ({} extra deliveries); delivery is documented as at least once",
                hooks.duplicated_events, hooks.extra_deliveries
            )
        }
    );
    println!(
        "  attempts missing from the delivery log  {} deliveries arrived more often than their log has attempts \
         (an attempt whose instance or database went away before it was recorded)",
        thousands(hooks.unlogged_attempts)
    );

    if !stats.is_empty() {
        println!();
        println!("HAProxy, per instance          requests  5xx  checks failed  went down  retries  redispatches");
        for server in stats {
            println!(
                "  {:<28} {:>8}  {:>3}  {:>13}  {:>9}  {:>7}  {:>12}",
                server.name,
                thousands(server.sessions),
                server.responses_5xx,
                server.check_failures,
                server.went_down,
                server.retries,
                server.redispatches
            );
        }
    }

    println!();
    let grouped = violations.by_kind();
    println!("violations                     {}", violations.count());
    for (kind, details) in &grouped {
        println!("  {kind}: {}", details.len());
        for detail in details.iter().take(5) {
            println!("    - {detail}");
        }
        if details.len() > 5 {
            println!("    - ... and {} more", details.len() - 5);
        }
    }
}
