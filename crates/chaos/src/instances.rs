//! The `haggle serve` instances: the very binary the run is, started with the run's settings on
//! ports of their own, killed with SIGKILL and started again.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

pub struct Instance {
    pub name: String,
    pub port: u16,
    child: Option<Child>,
    starts: u32,
}

impl Instance {
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }
}

pub struct Instances {
    exe: PathBuf,
    env: Vec<(String, String)>,
    logs: PathBuf,
    pub all: Vec<Instance>,
    health: reqwest::Client,
}

impl Instances {
    /// Instances `haggle1`... on `ports`, not yet started, with `env` on top of the run's own
    /// environment (less any Haggle settings of its own).
    pub fn new(exe: &Path, ports: &[u16], env: Vec<(String, String)>, logs: &Path) -> anyhow::Result<Instances> {
        let all = ports
            .iter()
            .enumerate()
            .map(|(index, port)| Instance { name: format!("haggle{}", index + 1), port: *port, child: None, starts: 0 })
            .collect();
        let health = reqwest::Client::builder().timeout(Duration::from_secs(2)).no_proxy().build()?;
        Ok(Instances { exe: exe.to_owned(), env, logs: logs.to_owned(), all, health })
    }

    /// Starts instance `index` and waits until it answers its health check. Returns when it did.
    pub async fn start(&mut self, index: usize) -> anyhow::Result<Instant> {
        let instance = &mut self.all[index];
        instance.starts += 1;
        let log_path = self.logs.join(format!("{}.log", instance.name));
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
        let mut command = Command::new(&self.exe);
        command.arg("serve").stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log).kill_on_drop(true);
        for (name, _) in std::env::vars() {
            if name.starts_with("HAGGLE_") || name == "DATABASE_URL" || name == "RUST_LOG" {
                command.env_remove(name);
            }
        }
        command.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        command.env("HAGGLE_BIND", format!("127.0.0.1:{}", instance.port));
        // Its own process group: a Ctrl-C reaches the run, which stops the instances in order.
        command.process_group(0);
        let child = command.spawn().with_context(|| format!("starting {}", self.exe.display()))?;
        instance.child = Some(child);
        self.wait_healthy(index, Duration::from_secs(60)).await
    }

    /// Waits until instance `index` answers `GET /healthz`.
    pub async fn wait_healthy(&mut self, index: usize, patience: Duration) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + patience;
        let url = format!("{}/healthz", self.all[index].base_url());
        loop {
            if let Ok(response) = self.health.get(&url).send().await
                && response.status().is_success()
            {
                return Ok(Instant::now());
            }
            let instance = &mut self.all[index];
            if let Some(child) = &mut instance.child
                && let Some(status) = child.try_wait()?
            {
                bail!(
                    "{} exited ({status}) before answering its health check; see {}",
                    instance.name,
                    self.logs.join(format!("{}.log", instance.name)).display()
                );
            }
            if Instant::now() > deadline {
                bail!("{} did not answer {url} within {patience:?}", instance.name);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `kill -9`: the instance dies at once, with whatever it was doing.
    pub async fn kill(&mut self, index: usize) -> anyhow::Result<()> {
        let instance = &mut self.all[index];
        if let Some(mut child) = instance.child.take() {
            child.start_kill().with_context(|| format!("killing {}", instance.name))?;
            child.wait().await?;
        }
        Ok(())
    }

    /// Stops every instance as an operator would (SIGTERM), killing any that take too long.
    pub async fn stop_all(&mut self) {
        for instance in &mut self.all {
            let Some(mut child) = instance.child.take() else { continue };
            if let Some(pid) = child.id() {
                // SAFETY: signalling a child this process started and has not reaped.
                unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            }
            if tokio::time::timeout(Duration::from_secs(15), child.wait()).await.is_err() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
    }

    /// Whether every instance is running.
    pub fn all_running(&mut self) -> bool {
        self.all.iter_mut().all(|instance| {
            instance
                .child
                .as_mut()
                .is_some_and(|child| child.try_wait().map(|status| status.is_none()).unwrap_or(false))
        })
    }
}
