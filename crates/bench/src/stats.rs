//! What the bench keeps while it runs, and the figures it makes of it afterwards.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;

/// The state-changing calls the workloads make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Call {
    /// POST /v1/listings/{id}/bids
    Place,
    /// POST /v1/bids/{id}/counter, by either side
    Counter,
    /// POST /v1/bids/{id}/accept
    Accept,
    /// POST /v1/bids/{id}/withdraw
    Withdraw,
    /// POST /v1/orders/{id}/payments
    Pay,
    /// POST /v1/orders/{id}/payments/{pid}/confirm
    Confirm,
    /// POST /v1/orders/{id}/fulfil
    Fulfil,
    /// POST /v1/orders/{id}/negotiations
    Open,
    /// POST /v1/orders/{id}/complete
    Complete,
    /// POST /v1/bids/{id}/accept by an agent whose rules hold it: answered 202 with the request
    Hold,
    /// POST /v1/approvals/{id}/approve, which makes the held move
    Approve,
    /// A held move and its approval together, per move: no call of its own, so left out of `all`
    HeldMove,
}

impl Call {
    pub fn name(self) -> &'static str {
        match self {
            Call::Place => "place",
            Call::Counter => "counter",
            Call::Accept => "accept",
            Call::Withdraw => "withdraw",
            Call::Pay => "pay",
            Call::Confirm => "confirm",
            Call::Fulfil => "fulfil",
            Call::Open => "open",
            Call::Complete => "complete",
            Call::Hold => "hold",
            Call::Approve => "approve",
            Call::HeldMove => "hold+appr",
        }
    }
}

/// How many problem bodies a level keeps to show.
const MAX_PROBLEMS: usize = 5;
/// How much of a problem body is kept.
const MAX_PROBLEM_CHARS: usize = 400;

/// The value at percentile `p` (0 to 100) of `sorted`, by the nearest-rank method: the smallest
/// sample with at least `p` % of the samples at or below it. `None` when there are no samples.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    debug_assert!((0.0..=100.0).contains(&p), "percentile {p} is outside 0..=100");
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    // p * n before the division keeps whole ranks exact (99 * 200 / 100 is 198, not 198.00000000000003).
    let rank = (p * n as f64 / 100.0).ceil() as usize;
    Some(sorted[rank.clamp(1, n) - 1])
}

/// Why a call did not count as a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Failure {
    /// The server answered with this non-2xx status.
    Status(u16),
    /// No answer: refused, reset, or timed out.
    Transport,
    /// A 2xx answer whose body is not what the API promises.
    Unreadable,
    /// A JSON-RPC error (in an HTTP `200`), by its code.
    JsonRpc(i64),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Status(status) => write!(f, "{status}"),
            Failure::Transport => f.write_str("no answer"),
            Failure::Unreadable => f.write_str("bad 2xx body"),
            Failure::JsonRpc(code) => write!(f, "JSON-RPC {code}"),
        }
    }
}

#[derive(Debug, Clone)]
struct Problem {
    at: Instant,
    call: Call,
    failure: Failure,
    body: String,
}

/// One worker's record of one phase; the workers' records are merged at the end.
#[derive(Debug, Default)]
pub struct Recorder {
    samples: BTreeMap<Call, Vec<Duration>>,
    errors: BTreeMap<(Call, Failure), u64>,
    problems: Vec<Problem>,
    /// Units of work (negotiations, placements) whose every call succeeded.
    pub completed: u64,
    /// Units of work abandoned after a failed call.
    pub failed: u64,
    /// Why workers stopped before the work ran out, if any did.
    pub stopped: Vec<String>,
}

impl Recorder {
    /// A call answered 2xx after `latency`.
    pub fn success(&mut self, call: Call, latency: Duration) {
        self.samples.entry(call).or_default().push(latency);
    }

    /// A call failed; `body` is what the server said, or the transport error.
    pub fn failure(&mut self, call: Call, failure: Failure, body: &str) {
        *self.errors.entry((call, failure)).or_default() += 1;
        if self.problems.len() < MAX_PROBLEMS {
            let body: String = body.chars().take(MAX_PROBLEM_CHARS).collect();
            self.problems.push(Problem { at: Instant::now(), call, failure, body });
        }
    }

    pub fn merge(&mut self, other: Recorder) {
        for (call, samples) in other.samples {
            self.samples.entry(call).or_default().extend(samples);
        }
        for (key, count) in other.errors {
            *self.errors.entry(key).or_default() += count;
        }
        self.problems.extend(other.problems);
        self.problems.sort_by_key(|problem| problem.at);
        self.problems.truncate(MAX_PROBLEMS);
        self.completed += other.completed;
        self.failed += other.failed;
        self.stopped.extend(other.stopped);
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The first problem seen, for a one-line hint.
    pub fn first_problem(&self) -> Option<String> {
        self.problems.first().map(|problem| format!("{} {}: {}", problem.call.name(), problem.failure, problem.body))
    }

    /// The figures of a measured phase that took `wall` for the calls in `calls`.
    pub fn summarize(mut self, calls: &[Call], wall: Duration) -> Figures {
        let seconds = wall.as_secs_f64();
        let per_second = |count: u64| if seconds > 0.0 { count as f64 / seconds } else { 0.0 };
        let mut all = Vec::new();
        let mut rows = Vec::new();
        for &call in calls {
            let mut samples = self.samples.remove(&call).unwrap_or_default();
            let errors = self.errors.iter().filter(|((c, _), _)| *c == call).map(|(_, count)| count).sum();
            samples.sort_unstable();
            rows.push(Row::new(call.name(), &samples, errors, per_second(samples.len() as u64)));
            if call != Call::HeldMove {
                all.extend(samples);
            }
        }
        all.sort_unstable();
        let errors = self.error_count();
        rows.push(Row::new(ALL_CALLS, &all, errors, per_second(all.len() as u64)));

        let mut by_status: BTreeMap<Failure, ErrorCount> = BTreeMap::new();
        for (&(call, failure), &count) in &self.errors {
            let entry = by_status.entry(failure).or_insert_with(|| ErrorCount {
                status: failure.to_string(),
                count: 0,
                by_call: BTreeMap::new(),
            });
            entry.count += count;
            *entry.by_call.entry(call.name()).or_default() += count;
        }
        Figures {
            wall_seconds: seconds,
            completed: self.completed,
            failed: self.failed,
            units_per_second: per_second(self.completed),
            calls: rows,
            errors: by_status.into_values().collect(),
            problems: self
                .problems
                .into_iter()
                .map(|problem| ProblemBody {
                    call: problem.call.name(),
                    status: problem.failure.to_string(),
                    body: problem.body,
                })
                .collect(),
            stopped_workers: self.stopped,
        }
    }
}

/// The name of the row that sums every state-changing call.
pub const ALL_CALLS: &str = "all";

/// The figures of one measured phase.
#[derive(Debug, Serialize)]
pub struct Figures {
    pub wall_seconds: f64,
    /// Units of work (negotiations, placements) whose every call succeeded.
    pub completed: u64,
    pub failed: u64,
    pub units_per_second: f64,
    /// One row per call type, then the `all` row.
    pub calls: Vec<Row>,
    pub errors: Vec<ErrorCount>,
    /// The first few non-2xx bodies (or transport errors), in the order they came.
    pub problems: Vec<ProblemBody>,
    pub stopped_workers: Vec<String>,
}

impl Figures {
    pub fn row(&self, call: &str) -> Option<&Row> {
        self.calls.iter().find(|row| row.call == call)
    }
}

/// Latency (of 2xx answers, from the client call to its decoded answer) and
/// throughput of one call type.
#[derive(Debug, Serialize)]
pub struct Row {
    pub call: &'static str,
    /// Calls answered 2xx.
    pub ok: u64,
    pub errors: u64,
    /// 2xx answers per second of the phase's wall time.
    pub calls_per_second: f64,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

impl Row {
    fn new(call: &'static str, sorted: &[Duration], errors: u64, calls_per_second: f64) -> Row {
        let ms = |p: f64| percentile(sorted, p).map(|latency| (latency.as_secs_f64() * 1e6).round() / 1e3);
        Row {
            call,
            ok: sorted.len() as u64,
            errors,
            calls_per_second,
            p50_ms: ms(50.0),
            p95_ms: ms(95.0),
            p99_ms: ms(99.0),
            max_ms: ms(100.0),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ErrorCount {
    /// The HTTP status, or `no answer` / `bad 2xx body`.
    pub status: String,
    pub count: u64,
    pub by_call: BTreeMap<&'static str, u64>,
}

#[derive(Debug, Serialize)]
pub struct ProblemBody {
    pub call: &'static str,
    pub status: String,
    pub body: String,
}

/// W3's own figures, besides the opening bid's latency: how long the server took to negotiate.
#[derive(Debug, Serialize)]
pub struct AutoFigures {
    /// From the opening bid's transaction to the one that ended the thread, by the database's clock.
    pub db_ms: Latency,
    /// From the opening bid's answer to the end event reaching the bench, by the bench's clock.
    pub observed_ms: Latency,
    pub bids_per_thread_p50: Option<usize>,
    pub bids_per_thread_max: Option<usize>,
    /// Ended threads by status.
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Negotiations opened but not followed to their end (a failed read, or past the patience).
    pub lost: u64,
    /// The first few reasons.
    pub lost_reasons: Vec<String>,
}

/// A latency distribution, in milliseconds.
#[derive(Debug, Serialize)]
pub struct Latency {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl Latency {
    pub fn of(mut values: Vec<f64>) -> Latency {
        values.sort_by(f64::total_cmp);
        let at = |p| percentile(&values, p).map(|ms| (ms * 1e3).round() / 1e3);
        Latency { p50: at(50.0), p95: at(95.0), p99: at(99.0), max: at(100.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles_of_a_small_sample() {
        // The textbook example: five samples, each rank covering 20 %.
        let sorted = [15, 20, 35, 40, 50];
        assert_eq!(percentile(&sorted, 0.0), Some(15));
        assert_eq!(percentile(&sorted, 5.0), Some(15));
        assert_eq!(percentile(&sorted, 20.0), Some(15));
        assert_eq!(percentile(&sorted, 30.0), Some(20));
        assert_eq!(percentile(&sorted, 40.0), Some(20));
        assert_eq!(percentile(&sorted, 50.0), Some(35));
        assert_eq!(percentile(&sorted, 95.0), Some(50));
        assert_eq!(percentile(&sorted, 100.0), Some(50));
    }

    #[test]
    fn nearest_rank_percentiles_land_on_whole_ranks() {
        let sorted: Vec<u32> = (1..=200).collect();
        assert_eq!(percentile(&sorted, 50.0), Some(100));
        assert_eq!(percentile(&sorted, 95.0), Some(190));
        assert_eq!(percentile(&sorted, 99.0), Some(198));
        assert_eq!(percentile(&sorted, 99.9), Some(200));
        assert_eq!(percentile(&sorted, 100.0), Some(200));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile::<u32>(&[], 50.0), None);
    }

    #[test]
    fn figures_count_errors_by_status_and_call() {
        let mut recorder = Recorder::default();
        for ms in [4, 1, 3, 2] {
            recorder.success(Call::Place, Duration::from_millis(ms));
        }
        recorder.success(Call::Accept, Duration::from_millis(10));
        recorder.failure(Call::Accept, Failure::Status(409), "{\"code\":\"invalid_transition\"}");
        recorder.failure(Call::Place, Failure::Status(409), "{\"code\":\"thread_active\"}");
        recorder.completed = 1;
        recorder.failed = 2;
        let figures = recorder.summarize(&[Call::Place, Call::Accept], Duration::from_secs(2));
        let place = figures.row("place").unwrap();
        assert_eq!((place.ok, place.errors, place.p50_ms, place.max_ms), (4, 1, Some(2.0), Some(4.0)));
        assert_eq!(place.calls_per_second, 2.0);
        let all = figures.row(ALL_CALLS).unwrap();
        assert_eq!((all.ok, all.errors, all.p99_ms), (5, 2, Some(10.0)));
        assert_eq!(figures.errors.len(), 1);
        assert_eq!((figures.errors[0].status.as_str(), figures.errors[0].count), ("409", 2));
        assert_eq!(figures.problems.len(), 2);
        assert_eq!(figures.units_per_second, 0.5);
    }
}
