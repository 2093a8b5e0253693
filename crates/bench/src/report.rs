//! The bench's output: a table per level for people, and the same figures as JSON for the docs.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use super::cpu::CpuPerCall;
use super::pgbench::Ceiling;
use super::stats::{ALL_CALLS, Call, Figures, Row};
use super::stats::{AutoFigures, Latency};
use super::workload::Workload;

/// What a latency figure is a figure of.
const LATENCY_MEANS: &str =
    "latency of 2xx answers, from the client call to its decoded answer: encoding, sending, the whole answer, decoding";

#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub tool: &'static str,
    pub command: String,
    pub workload: &'static str,
    pub workload_summary: &'static str,
    pub latency: &'static str,
    /// What the `all` row of each level's calls covers.
    pub all_calls: String,
    pub levels: Vec<LevelReport>,
}

impl BenchReport {
    pub fn new(command: String, workload: Workload) -> BenchReport {
        BenchReport {
            tool: "haggle bench",
            command,
            workload: workload.name(),
            workload_summary: workload.summary(),
            latency: LATENCY_MEANS,
            all_calls: all_calls_covers(workload),
            levels: Vec::new(),
        }
    }

    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let json = serde_json::to_string_pretty(self)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing the figures to {}", path.display()))
    }
}

/// The figures of one concurrency level with the conditions they were measured under.
#[derive(Debug, Serialize)]
pub struct LevelReport {
    pub conditions: Conditions,
    pub figures: Figures,
    /// pgbench's TPC-B-like figures right after the level (`--pgbench`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pgbench: Option<Ceiling>,
    /// W3's figures of the negotiations the server played.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto: Option<AutoFigures>,
    /// CPU per call of the measured phase (`--server-pid`, `--postgres-pid`; the a2a workload).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuPerCall>,
}

/// What the `all` row covers for `workload`: every state-changing call it makes, which is more
/// than the call it is about when it has one (w2's withdrawals only make room for the next
/// placement, yet their latency is in `all`).
pub fn all_calls_covers(workload: Workload) -> String {
    // A held move and its approval together are a sum of two calls, not one of their own.
    let calls: Vec<&str> =
        workload.calls().iter().filter(|call| **call != Call::HeldMove).map(|call| call.name()).collect();
    let calls = calls.join(" + ");
    match workload.measured_call() {
        Some(measured) if workload.calls().len() > 1 => format!(
            "`{ALL_CALLS}` is every state-changing call together ({calls}), not only the measured `{}`: \
             read `{}` for its latency",
            measured.name(),
            measured.name()
        ),
        Some(_) | None => format!("`{ALL_CALLS}` is every state-changing call together ({calls})"),
    }
}

#[derive(Debug, Serialize)]
pub struct Conditions {
    pub url: String,
    pub workload: &'static str,
    pub concurrency: usize,
    /// Units of work measured (see `unit`).
    pub negotiations: u64,
    pub warmup: u64,
    pub unit: &'static str,
    /// CPUs this process may use (`std::thread::available_parallelism`); the server may share them.
    pub cpus: usize,
    /// When the measured phase started (UTC).
    pub date: String,
    pub bench_build: &'static str,
    pub haggle_version: &'static str,
    pub client_timeout_seconds: f64,
    /// Whether every POST carried an `Idempotency-Key` (`--idempotency-keys`).
    pub idempotency_keys: bool,
    pub sellers: usize,
    pub buyers: usize,
    pub listings: u64,
    pub listings_created_mid_run: u64,
}

/// The block printed for one level.
pub fn level_table(level: &LevelReport, workload: Workload) -> String {
    let c = &level.conditions;
    let f = &level.figures;
    let (_, units) = workload.unit();
    let mut out = String::new();
    let _ = writeln!(out, "\n== haggle bench: {}, concurrency {} ==", c.workload, c.concurrency);
    let _ = writeln!(out, "workload     {}: {}", c.workload, workload.summary());
    let _ = writeln!(out, "server       {}", c.url);
    let _ = writeln!(out, "date         {}", c.date);
    let _ = writeln!(
        out,
        "client       {} CPUs (available_parallelism), {} build of haggle {}",
        c.cpus, c.bench_build, c.haggle_version
    );
    let _ = writeln!(
        out,
        "requests     idempotency keys: {}; sent once each, {} s timeout",
        yes_no(c.idempotency_keys),
        c.client_timeout_seconds
    );
    let _ = writeln!(
        out,
        "concurrency  {}, each with its own seller and AGENCY buyer; {}{}",
        count(c.concurrency as u64, "worker"),
        count(c.listings, "listing"),
        if c.listings_created_mid_run > 0 {
            format!(" ({} created mid-run)", c.listings_created_mid_run)
        } else {
            String::new()
        }
    );
    let _ =
        writeln!(out, "measured     {} {units} after {} warm-up, in {:.2} s", c.negotiations, c.warmup, f.wall_seconds);
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<10} {:>7} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "call", "ok", "errors", "calls/s", "p50 ms", "p95 ms", "p99 ms", "max ms"
    );
    for row in &f.calls {
        let _ = writeln!(
            out,
            "{:<10} {:>7} {:>7} {:>10.1} {:>9} {:>9} {:>9} {:>9}",
            row.call,
            row.ok,
            row.errors,
            row.calls_per_second,
            ms(row.p50_ms),
            ms(row.p95_ms),
            ms(row.p99_ms),
            ms(row.max_ms)
        );
    }
    let _ = writeln!(out, "({LATENCY_MEANS})");
    let _ = writeln!(out, "({})", all_calls_covers(workload));
    let _ = writeln!(out);
    let _ = writeln!(out, "{units}/s  {:.1}  ({} completed, {} failed)", f.units_per_second, f.completed, f.failed);
    if let Some(cpu) = &level.cpu {
        let ms = |ms: Option<f64>| ms.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.3}"));
        let _ = writeln!(
            out,
            "CPU a call   server {} ms, PostgreSQL {} ms, bench {:.3} ms (over {:.1} s of the phase)",
            ms(cpu.server_ms),
            ms(cpu.postgres_ms),
            cpu.bench_ms,
            cpu.seconds
        );
    }
    if f.errors.is_empty() {
        let _ = writeln!(out, "errors       none");
    } else {
        let _ = writeln!(out, "errors by status:");
        for error in &f.errors {
            let calls: Vec<String> = error.by_call.iter().map(|(call, count)| format!("{call} {count}")).collect();
            let _ = writeln!(out, "  {:<12} {:>6}  ({})", error.status, error.count, calls.join(", "));
        }
        let _ = writeln!(out, "first problem bodies:");
        for problem in &f.problems {
            let _ = writeln!(out, "  {} {}: {}", problem.call, problem.status, problem.body.trim());
        }
    }
    if let Some(auto) = &level.auto {
        let latency =
            |l: &Latency| format!("p50 {}  p95 {}  p99 {}  max {}", ms(l.p50), ms(l.p95), ms(l.p99), ms(l.max));
        let _ = writeln!(out, "negotiation, ms:");
        let _ = writeln!(out, "  opening commit -> end, database clock:  {}", latency(&auto.db_ms));
        let _ = writeln!(out, "  opening answer -> end event at bench:   {}", latency(&auto.observed_ms));
        let bids = |n: Option<usize>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
        let _ = writeln!(
            out,
            "bids/thread  p50 {}  max {}",
            bids(auto.bids_per_thread_p50),
            bids(auto.bids_per_thread_max)
        );
        let endings: Vec<String> = auto.outcomes.iter().map(|(status, n)| format!("{status} {n}")).collect();
        let _ =
            writeln!(out, "outcomes     {}", if endings.is_empty() { "none".to_owned() } else { endings.join(", ") });
        let _ = writeln!(out, "lost         {} (opened, but not followed to their end)", auto.lost);
        for reason in &auto.lost_reasons {
            let _ = writeln!(out, "  {reason}");
        }
    }
    for stopped in &f.stopped_workers {
        let _ = writeln!(out, "warning: {stopped}");
    }
    if let Some(pgbench) = &level.pgbench {
        let _ = writeln!(
            out,
            "pgbench      tpcb-like, {} clients, {} s: {:.1} transactions/s; haggle's state-changing calls/s are {:.2} of that",
            pgbench.clients, pgbench.seconds, pgbench.transactions_per_second, pgbench.ratio
        );
    }
    out
}

/// One line per level, after a sweep.
pub fn sweep_table(levels: &[LevelReport], workload: Workload) -> String {
    let (_, units) = workload.unit();
    let headline = workload.measured_call().map_or(ALL_CALLS, |call| call.name());
    let mut out = String::new();
    let _ = writeln!(out, "\n== haggle bench: {} sweep ({headline} latency) ==", workload.name());
    let _ = writeln!(
        out,
        "{:>11} {:>15} {:>10} {:>9} {:>9} {:>9} {:>9} {:>7} {:>12} {:>7}",
        "concurrency",
        format!("{units}/s"),
        "calls/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "errors",
        "pgbench tps",
        "ratio"
    );
    for level in levels {
        let f = &level.figures;
        let row = f.row(headline);
        let all = f.row(ALL_CALLS);
        let (tps, ratio) = match &level.pgbench {
            Some(pgbench) => (format!("{:.1}", pgbench.transactions_per_second), format!("{:.2}", pgbench.ratio)),
            None => ("-".to_owned(), "-".to_owned()),
        };
        let _ = writeln!(
            out,
            "{:>11} {:>15.1} {:>10.1} {:>9} {:>9} {:>9} {:>9} {:>7} {:>12} {:>7}",
            level.conditions.concurrency,
            f.units_per_second,
            all.map_or(0.0, |all| all.calls_per_second),
            ms(row.and_then(|row| row.p50_ms)),
            ms(row.and_then(|row| row.p95_ms)),
            ms(row.and_then(|row| row.p99_ms)),
            ms(row.and_then(|row| row.max_ms)),
            all.map_or(0, |all: &Row| all.errors),
            tps,
            ratio
        );
    }
    out
}

/// `1 worker`, `2 workers`.
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

/// How a switch of the run's conditions reads in its reports.
pub fn yes_no(on: bool) -> &'static str {
    if on { "yes" } else { "no" }
}

pub fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.2}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_all_row_says_what_it_covers() {
        let w2 = all_calls_covers(Workload::W2);
        assert!(w2.contains("place + withdraw") && w2.contains("not only the measured `place`"), "{w2}");
        let w1 = all_calls_covers(Workload::W1);
        assert!(w1.contains("place + counter + accept") && !w1.contains("measured"), "{w1}");
        assert_eq!(all_calls_covers(Workload::W3), "`all` is every state-changing call together (place)");
    }
}
