//! A pg_auto_failover cluster for the failover run: a monitor, a primary and a synchronous
//! secondary, started, failed over, switched over and stopped by `scripts/pg-failover` (the
//! script an operator can run by hand), in the run's directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use haggle_server::db::primary::{DatabaseUrl, Primary};

pub struct FailoverCluster {
    script: PathBuf,
    dir: PathBuf,
    /// `DATABASE_URL` naming both nodes, for the instances.
    pub url: String,
    primary: Primary,
}

impl FailoverCluster {
    /// Starts the cluster under `dir` (which must not exist yet).
    pub fn start(script: &Path, dir: &Path) -> anyhow::Result<FailoverCluster> {
        let url = run(script, &["start", path(dir)?])?.trim().to_owned();
        let parsed = DatabaseUrl::parse(&url).map_err(|why| anyhow::anyhow!("{url}: {why}"))?;
        let primary = Primary::new(&parsed).context("the cluster's URL names a single host")?;
        Ok(FailoverCluster { script: script.to_owned(), dir: dir.to_owned(), url, primary })
    }

    /// The monitor's table of nodes and their states.
    pub fn state(&self) -> String {
        self.script(&["state"]).unwrap_or_else(|error| format!("{error:#}"))
    }

    /// A pool on the primary, following it, for the checks.
    pub async fn pool(&self, size: u32) -> anyhow::Result<sqlx::PgPool> {
        self.primary.wait_for(Duration::from_secs(60)).await.map_err(anyhow::Error::msg)?;
        Ok(self.primary.connect(size).await?)
    }

    /// Kills the primary's node (its keeper, then its postmaster, with SIGKILL) and waits until
    /// the other node accepts writes. Gives the node killed, when it was killed, and when the
    /// new primary took writes.
    pub async fn kill_primary(&self) -> anyhow::Result<(String, Instant, Instant)> {
        let node = self.script(&["primary"])?.trim().to_owned();
        if node.is_empty() {
            bail!("the monitor names no primary:\n{}", self.state());
        }
        let old = self.primary.find().await.map_err(|_| anyhow::anyhow!("no primary before the kill"))?;
        let killed = Instant::now();
        self.script(&["kill", &node])?;
        let back = self.new_primary(&old).await?;
        Ok((node, killed, back))
    }

    /// Starts a killed node's keeper again and waits until it is a secondary.
    pub fn rejoin(&self, node: &str) -> anyhow::Result<()> {
        self.script(&["rejoin", node]).map(drop)
    }

    /// `pg_autoctl perform switchover`, once the monitor has a settled primary and secondary
    /// (asked right after a failover, while the new primary still waits for its secondary, the
    /// monitor finds no primary to hand over), waiting until the other node accepts writes.
    /// Gives when it was asked for and when the new primary took writes.
    pub async fn switchover(&self) -> anyhow::Result<(Instant, Instant)> {
        self.script(&["primary"])?;
        let old = self.primary.find().await.map_err(|_| anyhow::anyhow!("no primary before the switchover"))?;
        let (script, dir) = (self.script.clone(), self.dir.clone());
        let asked = Instant::now();
        let switching = tokio::task::spawn_blocking(move || run(&script, &["switchover", path(&dir)?]));
        let back = self.new_primary(&old).await?;
        switching.await??;
        Ok((asked, back))
    }

    /// Waits (up to 2 minutes) until a host other than `old` accepts writes.
    async fn new_primary(&self, old: &haggle_server::db::primary::Host) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            if let Ok(host) = self.primary.find().await
                && host != *old
            {
                return Ok(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("no new primary within 2 minutes:\n{}", self.state())
    }

    pub fn stop(&self) -> anyhow::Result<()> {
        self.script(&["stop"]).map(drop)
    }

    fn script(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut all = vec![args[0], path(&self.dir)?];
        all.extend_from_slice(&args[1..]);
        run(&self.script, &all)
    }
}

impl Drop for FailoverCluster {
    /// A run that ends early, however, leaves no PostgreSQL behind.
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn run(script: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new(script)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "{} {} failed: {}\n{}",
            script.display(),
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn path(path: &Path) -> anyhow::Result<&str> {
    path.to_str().with_context(|| format!("{} is not valid UTF-8", path.display()))
}
