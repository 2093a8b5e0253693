//! The faults: an instance killed with SIGKILL and started again, PostgreSQL restarted fast and
//! immediate, and an outage of PostgreSQL, in turn at even intervals while the load runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::cluster::{Cluster, Shutdown};
use super::instances::Instances;
use super::record::{FaultRecord, Ledger, span};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `kill -9` instance N (from 0), then start it again.
    Kill(usize),
    /// `pg_ctl restart -m fast` or `-m immediate`.
    Restart(Shutdown),
    /// `pg_ctl stop -m fast`, this long down, `pg_ctl start`.
    Outage(Duration),
}

impl Fault {
    pub fn describe(self) -> String {
        match self {
            Fault::Kill(index) => format!("kill -9 haggle{}", index + 1),
            Fault::Restart(Shutdown::Fast) => "pg_ctl restart -m fast".to_owned(),
            Fault::Restart(Shutdown::Immediate) => "pg_ctl restart -m immediate".to_owned(),
            Fault::Outage(down) => format!("PostgreSQL down for {}", span(down)),
        }
    }
}

/// The faults and when each starts, from the start of the load: one every `every`, the last at
/// least `every / 2` before the end, cycling through an instance kill, a fast restart, another
/// instance's kill, an immediate restart, the third instance's kill and the outage.
pub fn schedule(duration: Duration, every: Duration, outage: Option<Duration>) -> Vec<(Duration, Fault)> {
    let mut cycle = vec![
        Fault::Kill(1),
        Fault::Restart(Shutdown::Fast),
        Fault::Kill(2),
        Fault::Restart(Shutdown::Immediate),
        Fault::Kill(0),
    ];
    if let Some(outage) = outage {
        cycle.push(Fault::Outage(outage));
    }
    if every.is_zero() {
        return Vec::new();
    }
    let mut faults = Vec::new();
    let mut at = every;
    while at + every / 2 <= duration {
        faults.push((at, cycle[faults.len() % cycle.len()]));
        at += every;
    }
    faults
}

/// Causes the scheduled faults, each when its time comes (or as soon as the one before it has
/// recovered), and records them. Stops early, between faults, when `stop` is cancelled.
pub async fn run(
    schedule: Vec<(Duration, Fault)>,
    cluster: Arc<Cluster>,
    instances: Arc<Mutex<Instances>>,
    ledger: Arc<Ledger>,
    down_for: Duration,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    for (offset, fault) in schedule {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep_until((ledger.started + offset).into()) => {}
        }
        let started = Instant::now();
        let at = ledger.since_start(started);
        let record = match fault {
            Fault::Kill(index) => {
                let mut locked = instances.lock().await;
                let pid = locked.all[index].pid().map_or_else(|| "?".to_owned(), |pid| pid.to_string());
                eprintln!("[{at:6.1} s] fault: {} (pid {pid})", fault.describe());
                locked.kill(index).await?;
                drop(locked);
                tokio::time::sleep(down_for).await;
                let restarting = Instant::now();
                let back = instances.lock().await.start(index).await?;
                let note = format!(
                    "down {}, then healthy {} after its start",
                    span(restarting - started),
                    span(back.saturating_duration_since(restarting))
                );
                FaultRecord { what: fault.describe(), database: false, started, back: Some(back), note }
            }
            Fault::Restart(shutdown) => {
                eprintln!("[{at:6.1} s] fault: {}", fault.describe());
                let cluster = cluster.clone();
                let back = tokio::task::spawn_blocking(move || cluster.restart(shutdown)).await??;
                let note = format!("PostgreSQL took connections again after {}", span(back - started));
                FaultRecord { what: fault.describe(), database: true, started, back: Some(back), note }
            }
            Fault::Outage(down) => {
                eprintln!("[{at:6.1} s] fault: {}", fault.describe());
                let cluster = cluster.clone();
                let (stopped, back) = tokio::task::spawn_blocking(move || cluster.outage(down)).await??;
                let note = format!(
                    "stopped after {}, took connections again {} later",
                    span(stopped - started),
                    span(back - stopped)
                );
                FaultRecord { what: fault.describe(), database: true, started, back: Some(back), note }
            }
        };
        eprintln!("[{:6.1} s] recovered: {}: {}", ledger.since_start(Instant::now()), record.what, record.note);
        ledger.fault(record);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_come_in_turn_at_even_intervals_and_stop_before_the_end() {
        let plan = schedule(Duration::from_secs(60), Duration::from_secs(8), Some(Duration::from_secs(8)));
        let times: Vec<u64> = plan.iter().map(|(at, _)| at.as_secs()).collect();
        assert_eq!(times, vec![8, 16, 24, 32, 40, 48, 56]);
        assert_eq!(plan[0].1, Fault::Kill(1));
        assert_eq!(plan[1].1, Fault::Restart(Shutdown::Fast));
        assert_eq!(plan[3].1, Fault::Restart(Shutdown::Immediate));
        assert_eq!(plan[5].1, Fault::Outage(Duration::from_secs(8)));
        assert_eq!(plan[6].1, Fault::Kill(1), "the cycle starts again");

        let without_outage = schedule(Duration::from_secs(60), Duration::from_secs(8), None);
        assert!(without_outage.iter().all(|(_, fault)| !matches!(fault, Fault::Outage(_))));
        assert!(schedule(Duration::from_secs(60), Duration::ZERO, None).is_empty());
    }
}
