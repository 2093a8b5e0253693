//! What a run records as it goes: every acknowledged move, every move refused or left unclear,
//! every race, every fault, and the violations found. Plain data, shared by the load, the
//! checks and the report.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;
use uuid::Uuid;

/// The kinds of move the run makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveKind {
    List,
    Place,
    Counter,
    Accept,
    Reject,
    Withdraw,
    /// The seller fulfils the order.
    Fulfil,
    /// The buyer records a payment on the order.
    Pay,
    /// The seller confirms a payment.
    Confirm,
    /// The buyer completes the order.
    Complete,
    /// A negotiation opened on an order (a refund or a cancellation).
    Open,
    /// A refund or a cancellation accepted.
    Settle,
    /// A move of an agent with approval rules, held for approval (202).
    Hold,
    /// An approver's approval of a held move (the move made then, or FAILED).
    Approve,
    /// The agent's withdrawal of its own pending request.
    Unhold,
}

impl MoveKind {
    pub const ALL: [MoveKind; 15] = [
        MoveKind::List,
        MoveKind::Place,
        MoveKind::Counter,
        MoveKind::Accept,
        MoveKind::Reject,
        MoveKind::Withdraw,
        MoveKind::Fulfil,
        MoveKind::Pay,
        MoveKind::Confirm,
        MoveKind::Complete,
        MoveKind::Open,
        MoveKind::Settle,
        MoveKind::Hold,
        MoveKind::Approve,
        MoveKind::Unhold,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MoveKind::List => "listing",
            MoveKind::Place => "placement",
            MoveKind::Counter => "counter",
            MoveKind::Accept => "accept",
            MoveKind::Reject => "reject",
            MoveKind::Withdraw => "withdrawal",
            MoveKind::Fulfil => "fulfilment",
            MoveKind::Pay => "payment",
            MoveKind::Confirm => "confirmation",
            MoveKind::Complete => "completion",
            MoveKind::Open => "order negotiation",
            MoveKind::Settle => "settlement",
            MoveKind::Hold => "held move",
            MoveKind::Approve => "approval",
            MoveKind::Unhold => "request withdrawal",
        }
    }
}

/// Which part of the load made a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// W1 negotiations, every POST with an `Idempotency-Key` and retried under it.
    W1Keyed,
    /// W1 negotiations without keys (the batched path), retried only when nothing was done.
    W1Plain,
    /// Opening bids that both sides' policies play out on the server.
    Policy,
    /// Races and the moves that set them up.
    Race,
    /// Deals carried through: payments (two confirmations racing past the outstanding amount),
    /// refund negotiations, and cancellations racing fulfilment.
    Deal,
    /// Moves of an agent with approval rules, held, and approved while the counterparty moves.
    Approval,
}

/// An acknowledged (2xx) move and what its answer said was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "move", rename_all = "snake_case")]
pub enum Ack {
    Listed {
        listing: Uuid,
    },
    Placed {
        listing: Uuid,
        thread: Uuid,
        bid: Uuid,
    },
    Countered {
        parent: Uuid,
        bid: Uuid,
    },
    /// The order the answer showed (an acceptance without one is itself a violation).
    Accepted {
        bid: Uuid,
        order: Option<Uuid>,
    },
    Rejected {
        bid: Uuid,
    },
    Withdrew {
        bid: Uuid,
    },
    Fulfilled {
        order: Uuid,
    },
    Paid {
        order: Uuid,
        payment: Uuid,
    },
    Confirmed {
        order: Uuid,
        payment: Uuid,
    },
    Completed {
        order: Uuid,
    },
    /// A negotiation of `kind` (`refund` or `cancel`) opened on the order.
    Opened {
        order: Uuid,
        kind: String,
        thread: Uuid,
        bid: Uuid,
    },
    /// A refund or a cancellation accepted: the bid on the order's thread.
    Settled {
        order: Uuid,
        kind: String,
        bid: Uuid,
    },
    /// A move held for approval (202): the request, and the bid it answers.
    Held {
        approval: Uuid,
        bid: Option<Uuid>,
    },
    /// An approval answered 200 APPROVED, and what the move made.
    Approved {
        approval: Uuid,
        bid: Option<Uuid>,
        order: Option<Uuid>,
    },
    /// An approval answered 200 FAILED: the move was refused then, and nothing was made.
    ApprovalFailed {
        approval: Uuid,
    },
    /// A pending request withdrawn by its agent.
    Unheld {
        approval: Uuid,
    },
}

impl Ack {
    pub fn kind(&self) -> MoveKind {
        match self {
            Ack::Listed { .. } => MoveKind::List,
            Ack::Placed { .. } => MoveKind::Place,
            Ack::Countered { .. } => MoveKind::Counter,
            Ack::Accepted { .. } => MoveKind::Accept,
            Ack::Rejected { .. } => MoveKind::Reject,
            Ack::Withdrew { .. } => MoveKind::Withdraw,
            Ack::Fulfilled { .. } => MoveKind::Fulfil,
            Ack::Paid { .. } => MoveKind::Pay,
            Ack::Confirmed { .. } => MoveKind::Confirm,
            Ack::Completed { .. } => MoveKind::Complete,
            Ack::Opened { .. } => MoveKind::Open,
            Ack::Settled { .. } => MoveKind::Settle,
            Ack::Held { .. } => MoveKind::Hold,
            Ack::Approved { .. } | Ack::ApprovalFailed { .. } => MoveKind::Approve,
            Ack::Unheld { .. } => MoveKind::Unhold,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct AckRecord {
    /// Seconds from the start of the load to the answer.
    pub at: f64,
    pub workload: Workload,
    /// The agent that made it.
    pub agent: Uuid,
    /// Whether the answer was a replay (`Idempotent-Replayed: true`).
    pub replayed: bool,
    #[serde(flatten)]
    pub ack: Ack,
}

/// A move that got no 2xx in the end, with what its answers said about whether it was made.
#[derive(Debug, Clone, Serialize)]
pub struct Unacknowledged {
    pub workload: Workload,
    pub kind: MoveKind,
    /// The bid moved (counter, accept, reject, withdraw, settlement, a held move), the listing
    /// bid on (placement), the order (fulfilment, payment, completion, an order's negotiation
    /// opened), the payment confirmed, or the request withdrawn.
    pub target: Uuid,
    /// The agent that sent it.
    pub agent: Uuid,
    /// Every answer said nothing was done (a refusal, or a 503 that says so): the move must not
    /// be in the database.
    pub claims_not_made: bool,
    /// The last answer, in words.
    pub last: String,
}

/// One racer's request and what came of it.
#[derive(Debug, Clone, Serialize)]
pub struct Racer {
    pub kind: MoveKind,
    /// Where it was sent: an instance by name, or the balancer.
    pub via: String,
    pub status: Option<u16>,
    pub code: Option<String>,
    /// Whether its outcome is unknown: no answer, a 503 saying so, or an unexpected 5xx.
    pub unclear: bool,
    pub summary: String,
}

/// A race: one pending bid, and moves on it sent at once through different instances.
#[derive(Debug, Clone, Serialize)]
pub struct Race {
    pub number: u64,
    pub bid: Uuid,
    pub thread: Uuid,
    pub racers: Vec<Racer>,
}

/// What a contest on a deal was about: moves on one order or one held move, sent at once
/// through different instances, of which at most one may win.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "contest", rename_all = "snake_case")]
pub enum Contest {
    /// The seller confirms two payments at once, each of the whole amount: one may win.
    Confirms { order: Uuid, payments: [Uuid; 2] },
    /// The seller accepts the buyer's cancellation and fulfils the order at once.
    CancelOrFulfil { order: Uuid, cancel_bid: Uuid },
    /// Two approvers approve a held move while the counterparty withdraws the bid it answers.
    ApprovalOrWithdraw { approval: Uuid, bid: Uuid },
}

/// One contest, and each of its racers.
#[derive(Debug, Clone, Serialize)]
pub struct ContestRecord {
    pub number: u64,
    pub contest: Contest,
    /// Each racer's move: [`MoveKind::Confirm`] (one per payment, in order), [`MoveKind::Settle`]
    /// and [`MoveKind::Fulfil`], or [`MoveKind::Approve`] twice and [`MoveKind::Withdraw`].
    pub racers: Vec<Racer>,
    /// For an approval contest: the status a 200 answer gave the request (`APPROVED` or
    /// `FAILED`).
    pub approval_answer: Option<String>,
}

/// A fault the run caused, and when things came back.
#[derive(Debug, Clone)]
pub struct FaultRecord {
    pub what: String,
    pub database: bool,
    pub started: Instant,
    /// When the instance answered its health check again, or PostgreSQL took connections again.
    pub back: Option<Instant>,
    pub note: String,
}

/// A broken promise, by kind, with the details that let someone reproduce it.
#[derive(Debug, Clone)]
pub struct Violation {
    pub kind: &'static str,
    pub detail: String,
}

/// The violations found, as they are found.
#[derive(Debug, Default)]
pub struct Violations(Mutex<Vec<Violation>>);

impl Violations {
    pub fn add(&self, kind: &'static str, detail: impl Into<String>) {
        self.0.lock().expect("violations").push(Violation { kind, detail: detail.into() });
    }

    pub fn count(&self) -> usize {
        self.0.lock().expect("violations").len()
    }

    /// The violations grouped by kind, each group in the order found.
    pub fn by_kind(&self) -> BTreeMap<&'static str, Vec<String>> {
        let mut grouped: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
        for violation in self.0.lock().expect("violations").iter() {
            grouped.entry(violation.kind).or_default().push(violation.detail.clone());
        }
        grouped
    }
}

/// Everything the load recorded, appended to as it runs. Acknowledged answers also go, one
/// JSON line each, to `acks.jsonl` in the run's directory.
pub struct Ledger {
    pub started: Instant,
    inner: Mutex<LedgerInner>,
}

#[derive(Default)]
struct LedgerInner {
    acks: Vec<(Instant, AckRecord)>,
    unacknowledged: Vec<Unacknowledged>,
    races: Vec<Race>,
    contests: Vec<ContestRecord>,
    faults: Vec<FaultRecord>,
    abandoned: BTreeMap<Workload, u64>,
    completed: BTreeMap<Workload, u64>,
    file: Option<BufWriter<File>>,
}

impl Ledger {
    pub fn new(acks_file: &Path) -> std::io::Result<Ledger> {
        let file = BufWriter::new(File::create(acks_file)?);
        Ok(Ledger {
            started: Instant::now(),
            inner: Mutex::new(LedgerInner { file: Some(file), ..Default::default() }),
        })
    }

    pub fn since_start(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.started).as_secs_f64()
    }

    pub fn ack(&self, workload: Workload, agent: Uuid, answered: Instant, replayed: bool, ack: Ack) {
        let record = AckRecord { at: self.since_start(answered), workload, agent, replayed, ack };
        let mut inner = self.inner.lock().expect("ledger");
        if let Some(file) = &mut inner.file {
            let line = serde_json::to_string(&record).expect("acks serialize");
            // A failed write loses a line of the log, not the check: the record stays in memory.
            let _ = writeln!(file, "{line}");
        }
        inner.acks.push((answered, record));
    }

    pub fn unacknowledged(&self, record: Unacknowledged) {
        self.inner.lock().expect("ledger").unacknowledged.push(record);
    }

    pub fn race(&self, race: Race) {
        self.inner.lock().expect("ledger").races.push(race);
    }

    pub fn contest(&self, contest: ContestRecord) {
        self.inner.lock().expect("ledger").contests.push(contest);
    }

    pub fn contests(&self) -> Vec<ContestRecord> {
        self.inner.lock().expect("ledger").contests.clone()
    }

    pub fn fault(&self, fault: FaultRecord) {
        self.inner.lock().expect("ledger").faults.push(fault);
    }

    pub fn completed(&self, workload: Workload) {
        *self.inner.lock().expect("ledger").completed.entry(workload).or_default() += 1;
    }

    pub fn abandoned(&self, workload: Workload) {
        *self.inner.lock().expect("ledger").abandoned.entry(workload).or_default() += 1;
    }

    pub fn flush(&self) {
        if let Some(file) = &mut self.inner.lock().expect("ledger").file {
            let _ = file.flush();
        }
    }

    pub fn acks(&self) -> Vec<(Instant, AckRecord)> {
        self.inner.lock().expect("ledger").acks.clone()
    }

    pub fn ack_count(&self) -> usize {
        self.inner.lock().expect("ledger").acks.len()
    }

    pub fn unacknowledged_moves(&self) -> Vec<Unacknowledged> {
        self.inner.lock().expect("ledger").unacknowledged.clone()
    }

    pub fn races(&self) -> Vec<Race> {
        self.inner.lock().expect("ledger").races.clone()
    }

    pub fn race_count(&self) -> usize {
        self.inner.lock().expect("ledger").races.len()
    }

    pub fn faults(&self) -> Vec<FaultRecord> {
        self.inner.lock().expect("ledger").faults.clone()
    }

    pub fn completions(&self) -> (BTreeMap<Workload, u64>, BTreeMap<Workload, u64>) {
        let inner = self.inner.lock().expect("ledger");
        (inner.completed.clone(), inner.abandoned.clone())
    }
}

/// `1,234`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1.23 s` or `456 ms`.
pub fn span(duration: Duration) -> String {
    if duration >= Duration::from_secs(1) {
        format!("{:.2} s", duration.as_secs_f64())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(span(Duration::from_millis(85)), "85 ms");
        assert_eq!(span(Duration::from_millis(1234)), "1.23 s");
    }

    #[test]
    fn acknowledged_answers_are_logged_one_json_line_each() {
        let dir = std::env::temp_dir().join(format!("haggle-chaos-unit-{}", Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("acks.jsonl");
        let ledger = Ledger::new(&path).unwrap();
        let bid = Uuid::now_v7();
        ledger.ack(Workload::W1Keyed, Uuid::nil(), Instant::now(), true, Ack::Withdrew { bid });
        ledger.flush();
        let line = std::fs::read_to_string(&path).unwrap();
        let value: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(value["move"], "withdrew");
        assert_eq!(value["bid"], bid.to_string());
        assert_eq!(value["workload"], "w1_keyed");
        assert_eq!(value["replayed"], true);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
