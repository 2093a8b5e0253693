//! `haggle bench --pgbench`: PostgreSQL's own ceiling on the same machine, in the same run.
//!
//! After each concurrency level, pgbench's built-in TPC-B-like script runs against the
//! server's database with as many clients as the level had workers (scale factor equal to the
//! clients, so that they do not all queue on one branch row), and the level's state-changing
//! calls per second are set against its transactions per second. The pgbench tables are made
//! before each run and dropped after it.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context, bail};
use serde::Serialize;
use tokio::process::Command;

/// What pgbench measured at one level, and the ratio to Haggle's calls.
#[derive(Debug, Clone, Serialize)]
pub struct Ceiling {
    pub clients: usize,
    pub seconds: u64,
    pub transactions_per_second: f64,
    /// Haggle's state-changing calls per second over pgbench's transactions per second.
    pub ratio: f64,
}

/// How to reach pgbench and the database.
#[derive(Debug, Clone)]
pub struct Pgbench {
    program: PathBuf,
    database_url: String,
    seconds: u64,
}

impl Pgbench {
    /// Finds pgbench (on PATH, through `pg_config --bindir`, or under /usr/lib/postgresql/*/bin)
    /// and checks that it runs.
    pub async fn new(database_url: &str, seconds: u64) -> anyhow::Result<Pgbench> {
        let program = find_program().context(
            "--pgbench needs the pgbench program (PostgreSQL's contrib tools: e.g. apt install postgresql-contrib)",
        )?;
        let version = Command::new(&program).arg("--version").output().await.context("running pgbench --version")?;
        if !version.status.success() {
            bail!("{} --version failed", program.display());
        }
        Ok(Pgbench { program, database_url: database_url.to_owned(), seconds })
    }

    async fn run(&self, what: &str, args: &[String]) -> anyhow::Result<String> {
        let output = Command::new(&self.program)
            .args(args)
            .arg(&self.database_url)
            .stdin(Stdio::null())
            .output()
            .await
            .with_context(|| format!("running pgbench ({what})"))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() {
            bail!("pgbench ({what}) failed: {}", String::from_utf8_lossy(&output.stderr).trim());
        }
        Ok(stdout)
    }

    /// Runs the TPC-B-like script with `clients` clients and compares it with
    /// `calls_per_second`.
    pub async fn measure(&self, clients: usize, calls_per_second: f64) -> anyhow::Result<Ceiling> {
        let scale = clients.max(1).to_string();
        eprintln!("[pgbench] initialising (scale {scale})");
        self.run("initialise", &["-i".into(), "-q".into(), "-s".into(), scale]).await?;
        let threads = clients.min(std::thread::available_parallelism().map_or(1, usize::from)).max(1);
        eprintln!("[pgbench] tpcb-like, {clients} clients, {} s", self.seconds);
        let measured = self
            .run(
                "tpcb-like",
                &[
                    "-n".into(),
                    "-b".into(),
                    "tpcb-like".into(),
                    "-c".into(),
                    clients.to_string(),
                    "-j".into(),
                    threads.to_string(),
                    "-T".into(),
                    self.seconds.to_string(),
                ],
            )
            .await;
        let dropped = self.run("drop its tables", &["-i".into(), "-I".into(), "d".into()]).await;
        let tps = parse_tps(&measured?).context("pgbench printed no `tps = ` line")?;
        dropped?;
        Ok(Ceiling {
            clients,
            seconds: self.seconds,
            transactions_per_second: tps,
            ratio: if tps > 0.0 { calls_per_second / tps } else { 0.0 },
        })
    }
}

/// The transactions per second pgbench reports (PostgreSQL 14+ prints one `tps = ` line, older
/// versions one including and one excluding connection time: the latter is taken).
pub fn parse_tps(output: &str) -> Option<f64> {
    let lines: Vec<&str> = output.lines().filter(|line| line.trim_start().starts_with("tps = ")).collect();
    let line = lines
        .iter()
        .find(|line| line.contains("without initial connection time") || line.contains("excluding"))
        .or(lines.first())?;
    line.trim_start().strip_prefix("tps = ")?.split_whitespace().next()?.parse().ok()
}

fn find_program() -> Option<PathBuf> {
    haggle_server::embedded::find_postgres_programs(&["pgbench"]).map(|dir| dir.join("pgbench"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tps_is_read_from_either_format() {
        let v15 = "latency average = 8.123 ms\ninitial connection time = 12.345 ms\ntps = 1913.862134 (without initial connection time)\n";
        assert_eq!(parse_tps(v15), Some(1913.862134));
        let v13 =
            "tps = 1800.5 (including connections establishing)\ntps = 1850.25 (excluding connections establishing)\n";
        assert_eq!(parse_tps(v13), Some(1850.25));
        assert_eq!(parse_tps("nothing here"), None);
    }
}
