//! The server's resident memory while a level runs (`--server-pid`), sampled from
//! `/proc/<pid>/status` every 100 ms.

use std::fmt;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Resident memory in KiB: at the start, at the peak, at the end, and how many samples.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub start_kib: u64,
    pub peak_kib: u64,
    pub end_kib: u64,
    pub samples: u64,
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.samples == 0 {
            return write!(f, "no samples (is the process running, on Linux?)");
        }
        let mib = |kib: u64| kib as f64 / 1024.0;
        write!(
            f,
            "resident {:.1} MiB at the start, {:.1} MiB at the peak, {:.1} MiB at the end ({} samples)",
            mib(self.start_kib),
            mib(self.peak_kib),
            mib(self.end_kib),
            self.samples
        )
    }
}

/// The resident memory of `pid` now, in KiB.
pub fn resident_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

pub struct Sampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Memory>,
}

impl Sampler {
    pub fn start(pid: u32) -> Sampler {
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut memory = Memory::default();
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                if let Some(kib) = resident_kib(pid) {
                    if memory.samples == 0 {
                        memory.start_kib = kib;
                    }
                    memory.peak_kib = memory.peak_kib.max(kib);
                    memory.end_kib = kib;
                    memory.samples += 1;
                }
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tick.tick() => {}
                }
            }
            memory
        });
        Sampler { stop, task }
    }

    pub async fn stop(self) -> Memory {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}
