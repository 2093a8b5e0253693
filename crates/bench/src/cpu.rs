//! CPU time spent per call while a phase runs: the server's (`--server-pid`), PostgreSQL's
//! (`--postgres-pid`, the postmaster: its backends are its children) and the bench's own, read
//! from `/proc/<pid>/stat` every 50 ms (Linux).
//!
//! On a machine whose cores other work shares, calls a second rise and fall with that work; the
//! CPU each process spent on the phase's calls does not, so it compares two transports fairly
//! where throughput cannot.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Clock ticks a second in `/proc/<pid>/stat` (`USER_HZ`, 100 on every Linux the bench runs on).
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU milliseconds per successful call of a phase, by process.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CpuPerCall {
    pub server_ms: Option<f64>,
    pub postgres_ms: Option<f64>,
    pub bench_ms: f64,
    /// Server and PostgreSQL together: what a call costs the deployment.
    pub deployment_ms: Option<f64>,
    /// The span the readings cover, which the phase's wall time bounds.
    pub seconds: f64,
}

#[derive(Debug, Clone, Copy)]
struct Reading {
    at: Instant,
    server: Option<u64>,
    postgres: Option<u64>,
    bench: u64,
}

/// Readings taken in the background until stopped.
pub struct CpuSampler {
    readings: Arc<Mutex<Vec<Reading>>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl CpuSampler {
    pub fn start(server: Option<u32>, postgres: Option<u32>) -> CpuSampler {
        let readings = Arc::new(Mutex::new(Vec::new()));
        let (stop, mut stopped) = oneshot::channel();
        let kept = Arc::clone(&readings);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tick.tick() => {}
                }
                let reading = Reading {
                    at: Instant::now(),
                    server: server.and_then(ticks),
                    postgres: postgres.and_then(postgres_ticks),
                    bench: std::fs::read_to_string("/proc/self/stat").ok().as_deref().and_then(own_ticks).unwrap_or(0),
                };
                kept.lock().expect("the readings' lock").push(reading);
            }
        });
        CpuSampler { readings, stop: Some(stop), task: Some(task) }
    }

    /// The CPU of the `calls` calls made between `start` and `end`, from the readings nearest
    /// inside that span; `None` without two readings in it.
    pub fn per_call(&self, start: Instant, end: Instant, calls: u64) -> Option<CpuPerCall> {
        let readings = self.readings.lock().expect("the readings' lock");
        let first = readings.iter().find(|reading| reading.at >= start)?;
        let last = readings.iter().rev().find(|reading| reading.at <= end)?;
        if last.at <= first.at || calls == 0 {
            return None;
        }
        let per_call =
            |before: u64, after: u64| after.saturating_sub(before) as f64 * 1000.0 / TICKS_PER_SECOND / calls as f64;
        let of = |pick: fn(&Reading) -> Option<u64>| Some(per_call(pick(first)?, pick(last)?));
        let server_ms = of(|reading| reading.server);
        let postgres_ms = of(|reading| reading.postgres);
        Some(CpuPerCall {
            server_ms,
            postgres_ms,
            bench_ms: per_call(first.bench, last.bench),
            deployment_ms: server_ms.zip(postgres_ms).map(|(server, postgres)| server + postgres),
            seconds: last.at.duration_since(first.at).as_secs_f64(),
        })
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

/// User and system ticks of `pid`, with those of its children it has waited for.
fn ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields = fields_after_name(&stat)?;
    // utime, stime, cutime, cstime: fields 14 to 17 of the line, 11 to 14 after the name.
    Some((11..=14).filter_map(|index| fields.get(index)?.parse::<u64>().ok()).sum())
}

fn own_ticks(stat: &str) -> Option<u64> {
    let fields = fields_after_name(stat)?;
    Some((11..=12).filter_map(|index| fields.get(index)?.parse::<u64>().ok()).sum())
}

/// The postmaster's ticks with its live children's (the backends and workers): an ended
/// backend's are in the postmaster's children's count once it has been waited for.
fn postgres_ticks(postmaster: u32) -> Option<u64> {
    let mut total = ticks(postmaster)?;
    let parent = postmaster.to_string();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some(fields) = fields_after_name(&stat) else { continue };
        if fields.get(1) == Some(&parent.as_str()) {
            total += own_ticks(&stat).unwrap_or(0);
        }
    }
    Some(total)
}

/// The fields of a `/proc/<pid>/stat` line after the process's name (which may hold spaces and
/// parentheses): the state first, then the parent's pid.
fn fields_after_name(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_past_a_name_with_spaces() {
        let line = "42 (postgres: a b) S 7 42 42 0 -1 4194560 100 0 0 0 250 50 3 2 20 0 1 0";
        let fields = fields_after_name(line).unwrap();
        assert_eq!((fields[0], fields[1]), ("S", "7"));
        assert_eq!(own_ticks(line), Some(300));
    }
}
