//! The faults: an instance killed with SIGKILL and started again, PostgreSQL restarted fast and
//! immediate, and an outage of PostgreSQL, in turn at even intervals while the load runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::cluster::{Cluster, Shutdown};
use super::failover::FailoverCluster;
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
    /// The failover cluster's primary killed (its keeper and postmaster, SIGKILL), then the
    /// node started again once the secondary took over, to rejoin as the secondary.
    KillPrimary,
    /// `pg_autoctl perform switchover`: the primary handed over as for maintenance.
    Switchover,
}

/// The database the faults are done to.
pub enum Database {
    /// One PostgreSQL, restarted and stopped.
    Single(Arc<Cluster>),
    /// A primary and a synchronous secondary under pg_auto_failover, failed over.
    Failover(Arc<FailoverCluster>),
}

impl Fault {
    pub fn describe(self) -> String {
        match self {
            Fault::Kill(index) => format!("kill -9 haggle{}", index + 1),
            Fault::Restart(Shutdown::Fast) => "pg_ctl restart -m fast".to_owned(),
            Fault::Restart(Shutdown::Immediate) => "pg_ctl restart -m immediate".to_owned(),
            Fault::Outage(down) => format!("PostgreSQL down for {}", span(down)),
            Fault::KillPrimary => "kill -9 the primary".to_owned(),
            Fault::Switchover => "pg_autoctl perform switchover".to_owned(),
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

/// The failover run's faults: the primary killed, twice, a switchover, and the primary killed
/// three more times, at even intervals as [`schedule`]'s.
pub fn failover_schedule(duration: Duration, every: Duration) -> Vec<(Duration, Fault)> {
    let cycle = [
        Fault::KillPrimary,
        Fault::KillPrimary,
        Fault::Switchover,
        Fault::KillPrimary,
        Fault::KillPrimary,
        Fault::KillPrimary,
    ];
    schedule(duration, every, None)
        .into_iter()
        .enumerate()
        .map(|(index, (at, _))| (at, cycle[index % cycle.len()]))
        .collect()
}

/// Causes the scheduled faults, each when its time comes (or as soon as the one before it has
/// recovered), and records them. Stops early, between faults, when `stop` is cancelled.
pub async fn run(
    schedule: Vec<(Duration, Fault)>,
    database: Database,
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
                let cluster = single(&database)?;
                let back = tokio::task::spawn_blocking(move || cluster.restart(shutdown)).await??;
                let note = format!("PostgreSQL took connections again after {}", span(back - started));
                FaultRecord { what: fault.describe(), database: true, started, back: Some(back), note }
            }
            Fault::Outage(down) => {
                eprintln!("[{at:6.1} s] fault: {}", fault.describe());
                let cluster = single(&database)?;
                let (stopped, back) = tokio::task::spawn_blocking(move || cluster.outage(down)).await??;
                let note = format!(
                    "stopped after {}, took connections again {} later",
                    span(stopped - started),
                    span(back - stopped)
                );
                FaultRecord { what: fault.describe(), database: true, started, back: Some(back), note }
            }
            Fault::KillPrimary => {
                let cluster = failover(&database)?;
                eprintln!("[{at:6.1} s] fault: {}", fault.describe());
                let (node, started, back) = cluster.kill_primary().await?;
                let rejoining = Instant::now();
                let rejoined = cluster.clone();
                let rejoiner = node.clone();
                tokio::task::spawn_blocking(move || rejoined.rejoin(&rejoiner)).await??;
                let note = format!(
                    "{node} killed; the secondary took writes after {}; {node} rejoined as the secondary {} later",
                    span(back - started),
                    span(rejoining.elapsed())
                );
                FaultRecord { what: fault.describe(), database: true, started, back: Some(back), note }
            }
            Fault::Switchover => {
                let cluster = failover(&database)?;
                eprintln!("[{at:6.1} s] fault: {}", fault.describe());
                let (started, back) = cluster.switchover().await?;
                let note = format!("the secondary took writes after {}", span(back - started));
                FaultRecord { what: fault.describe(), database: true, started, back: Some(back), note }
            }
        };
        eprintln!("[{:6.1} s] recovered: {}: {}", ledger.since_start(Instant::now()), record.what, record.note);
        ledger.fault(record);
    }
    Ok(())
}

fn single(database: &Database) -> anyhow::Result<Arc<Cluster>> {
    match database {
        Database::Single(cluster) => Ok(cluster.clone()),
        Database::Failover(_) => anyhow::bail!("a restart of one PostgreSQL scheduled on the failover cluster"),
    }
}

fn failover(database: &Database) -> anyhow::Result<Arc<FailoverCluster>> {
    match database {
        Database::Failover(cluster) => Ok(cluster.clone()),
        Database::Single(_) => anyhow::bail!("a failover scheduled on one PostgreSQL"),
    }
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

    #[test]
    fn the_failover_run_kills_the_primary_five_times_around_one_switchover() {
        let plan = failover_schedule(Duration::from_secs(160), Duration::from_secs(22));
        let faults: Vec<Fault> = plan.iter().map(|(_, fault)| *fault).collect();
        assert_eq!(plan.len(), 6);
        assert_eq!(faults.iter().filter(|fault| **fault == Fault::KillPrimary).count(), 5);
        assert_eq!(faults[2], Fault::Switchover);
    }
}
