//! The one driver of the workloads' phases: a phase's units of work dealt to concurrent
//! workers, each a tokio task in a closed loop (its next unit as soon as its last one ends),
//! what they record merged at the end, and the progress of a measured phase on stderr.
//!
//! A workload brings its worker (a [`PhaseWorker`]: how one unit runs and what it records
//! beside its calls); the driver counts the units completed, failed and the workers stopped,
//! so every workload's figures are counted the same way.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::report;
use super::stats::Recorder;

/// How one unit of work ended.
#[derive(Debug)]
pub enum Unit {
    /// Every call of the unit succeeded.
    Completed,
    /// The unit was abandoned (its failure is already recorded); the worker goes on.
    Failed,
    /// The worker cannot go on, for this reason; the unit counts as failed.
    Stopped(String),
}

/// What a worker records in one phase: its calls, and whatever else its workload reports.
pub trait Record: Default + Send + 'static {
    fn calls(&mut self) -> &mut Recorder;

    fn merge(&mut self, other: Self);
}

impl Record for Recorder {
    fn calls(&mut self) -> &mut Recorder {
        self
    }

    fn merge(&mut self, other: Recorder) {
        Recorder::merge(self, other);
    }
}

/// One concurrent worker of a workload.
pub trait PhaseWorker: Send + 'static {
    type Record: Record;

    /// Runs one unit of work, timing its calls into `record`.
    fn run_unit(&mut self, record: &mut Self::Record) -> impl Future<Output = Unit> + Send;
}

/// How a phase's units are dealt to its workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deal {
    /// From one pool: a worker takes the next unit as soon as it is free, so faster workers do
    /// more.
    Pool,
    /// A fixed share each, as even as can be: for workers set up with exactly what their share
    /// needs (see [`share`]).
    Shares,
}

/// Worker `index`'s share of `total` units among `concurrency` workers.
pub fn share(total: u64, concurrency: usize, index: usize) -> u64 {
    let concurrency = concurrency as u64;
    total / concurrency + u64::from((index as u64) < total % concurrency)
}

/// Runs `units` units on the workers, dealt as `deal` says, and gives the workers back (in
/// their order) with what they recorded, merged.
pub async fn run_phase<W: PhaseWorker>(
    deal: Deal,
    workers: Vec<W>,
    units: u64,
    progress: Option<Arc<Progress>>,
) -> anyhow::Result<(Vec<W>, W::Record)> {
    let concurrency = workers.len();
    let pool = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = workers
        .into_iter()
        .enumerate()
        .map(|(index, mut worker)| {
            let pool = Arc::clone(&pool);
            let progress = progress.clone();
            let share = match deal {
                Deal::Pool => None,
                Deal::Shares => Some(share(units, concurrency, index)),
            };
            tokio::spawn(async move {
                let mut record = W::Record::default();
                let mut taken = 0;
                loop {
                    let dealt = match share {
                        Some(share) => taken < share,
                        None => pool.fetch_add(1, Ordering::Relaxed) < units,
                    };
                    if !dealt {
                        break;
                    }
                    taken += 1;
                    match worker.run_unit(&mut record).await {
                        Unit::Completed => record.calls().completed += 1,
                        Unit::Failed => record.calls().failed += 1,
                        Unit::Stopped(why) => {
                            let calls = record.calls();
                            calls.failed += 1;
                            calls.stopped.push(format!("worker {index} stopped: {why}"));
                            break;
                        }
                    }
                    if let Some(progress) = &progress {
                        progress.tick();
                    }
                }
                (worker, record)
            })
        })
        .collect();
    let mut workers = Vec::with_capacity(tasks.len());
    let mut record = W::Record::default();
    for task in tasks {
        let (worker, recorded) = task.await.context("a bench worker failed")?;
        workers.push(worker);
        record.merge(recorded);
    }
    Ok((workers, record))
}

/// A measured phase: the workers back, what they recorded, and when and how long it ran.
pub struct Measured<W: PhaseWorker> {
    pub workers: Vec<W>,
    pub record: W::Record,
    /// When the measured phase started.
    pub date: chrono::DateTime<chrono::Utc>,
    pub wall: Duration,
}

/// A level's phases as every workload runs them: `warmup` units left out of the figures (a
/// line on stderr says how they went), then `units` measured ones, with progress. `unit` names
/// one unit of work, singular and plural; `label` heads the lines on stderr.
pub async fn warm_up_and_measure<W: PhaseWorker>(
    label: &str,
    unit: (&'static str, &'static str),
    deal: Deal,
    workers: Vec<W>,
    warmup: u64,
    units: u64,
) -> anyhow::Result<Measured<W>> {
    let workers = if warmup > 0 {
        let started = Instant::now();
        let (workers, mut record) = run_phase(deal, workers, warmup, None).await?;
        let calls = record.calls();
        eprintln!(
            "{label} warm-up: {} completed in {:.1} s, {}{}",
            report::count(calls.completed, unit.0),
            started.elapsed().as_secs_f64(),
            report::count(calls.error_count(), "error"),
            calls.first_problem().map(|problem| format!(" (first: {problem})")).unwrap_or_default()
        );
        workers
    } else {
        workers
    };
    let date = chrono::Utc::now();
    let progress = Arc::new(Progress::new(label.to_owned(), unit.1, units));
    let started = Instant::now();
    let (workers, record) = run_phase(deal, workers, units, Some(progress)).await?;
    Ok(Measured { workers, record, date, wall: started.elapsed() })
}

/// A line on stderr each tenth of a measured phase.
pub struct Progress {
    label: String,
    unit: &'static str,
    total: u64,
    done: AtomicU64,
    started: Instant,
}

impl Progress {
    pub fn new(label: String, unit: &'static str, total: u64) -> Progress {
        Progress { label, unit, total, done: AtomicU64::new(0), started: Instant::now() }
    }

    fn tick(&self) {
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        if done * 10 / self.total != (done - 1) * 10 / self.total {
            let seconds = self.started.elapsed().as_secs_f64();
            eprintln!(
                "{} {:>3}%  {done}/{} {} in {seconds:.1} s ({:.1}/s)",
                self.label,
                done * 100 / self.total,
                self.total,
                self.unit,
                done as f64 / seconds.max(f64::EPSILON)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Call, Failure};

    /// Fails every third unit, and stops after `stop_after` units when given.
    struct Counting {
        units: u64,
        stop_after: Option<u64>,
    }

    impl PhaseWorker for Counting {
        type Record = Recorder;

        async fn run_unit(&mut self, record: &mut Recorder) -> Unit {
            self.units += 1;
            tokio::task::yield_now().await;
            if self.stop_after.is_some_and(|after| self.units > after) {
                return Unit::Stopped("out of listings".to_owned());
            }
            if self.units.is_multiple_of(3) {
                record.failure(Call::Place, Failure::Status(409), "thread_active");
                return Unit::Failed;
            }
            record.success(Call::Place, Duration::from_millis(1));
            Unit::Completed
        }
    }

    fn workers(n: usize, stop_after: Option<u64>) -> Vec<Counting> {
        (0..n).map(|_| Counting { units: 0, stop_after }).collect()
    }

    #[tokio::test]
    async fn shares_deal_each_worker_its_part_and_the_counts_add_up() {
        let (back, record) = run_phase(Deal::Shares, workers(3, None), 10, None).await.unwrap();
        assert_eq!(back.iter().map(|worker| worker.units).collect::<Vec<_>>(), [4, 3, 3]);
        // The third unit of each worker failed.
        assert_eq!((record.completed, record.failed, record.error_count()), (7, 3, 3));
        assert_eq!((share(10, 3, 0), share(10, 3, 2), share(2, 4, 3)), (4, 3, 0));
    }

    #[tokio::test]
    async fn a_pool_deals_every_unit_once_and_a_stopped_worker_says_why() {
        let (back, record) = run_phase(Deal::Pool, workers(4, None), 25, None).await.unwrap();
        assert_eq!(back.iter().map(|worker| worker.units).sum::<u64>(), 25);
        assert_eq!(record.completed + record.failed, 25);

        let (_, record) = run_phase(Deal::Pool, workers(2, Some(1)), 10, None).await.unwrap();
        assert_eq!((record.completed, record.failed), (2, 2));
        assert_eq!(record.stopped.len(), 2);
        assert!(record.stopped.iter().all(|why| why.ends_with("stopped: out of listings")), "{:?}", record.stopped);
    }
}
