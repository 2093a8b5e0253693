//! A throwaway PostgreSQL cluster for one run: `initdb` into the run's directory, its own port
//! on 127.0.0.1, and `pg_ctl` to restart it (fast or immediate) and to stop it for an outage.
//! As root, PostgreSQL's programs run as the `postgres` user.

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How `pg_ctl` shuts the server down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// Sessions are ended, open transactions rolled back, data checkpointed.
    Fast,
    /// Every process is killed at once; the next start recovers from the WAL, as after a crash.
    Immediate,
}

impl Shutdown {
    fn mode(self) -> &'static str {
        match self {
            Shutdown::Fast => "fast",
            Shutdown::Immediate => "immediate",
        }
    }
}

pub struct Cluster {
    bin_dir: PathBuf,
    data_dir: PathBuf,
    log_file: PathBuf,
    port: u16,
    options: String,
    run_as: Option<(u32, u32)>,
}

impl Cluster {
    /// Initialises a cluster under `dir` and starts it on `port`. `fsync = false` trades
    /// durability against a machine crash (never against a PostgreSQL crash, which is what the
    /// run causes) for speed.
    pub fn start(bin_dir: &Path, dir: &Path, port: u16, fsync: bool) -> anyhow::Result<Cluster> {
        let run_as = if unsafe { libc::geteuid() } == 0 { Some(postgres_user()?) } else { None };
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                .context("giving the cluster's directory to postgres")?;
        }
        let data_dir = dir.join("data");
        let socket_dir = dir.to_owned();
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -k {} -c max_connections=200 -c fsync={}",
            socket_dir.display(),
            if fsync { "on" } else { "off" }
        );
        let cluster = Cluster {
            bin_dir: bin_dir.to_owned(),
            data_dir,
            log_file: dir.join("postgres.log"),
            port,
            options,
            run_as,
        };
        cluster.run(
            "initdb",
            &["-D", path(&cluster.data_dir)?, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C"],
        )?;
        cluster.pg_ctl_start()?;
        Ok(cluster)
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// `pg_ctl restart -m <mode>`, waiting until the server takes connections again. Returns
    /// when it does.
    pub fn restart(&self, shutdown: Shutdown) -> anyhow::Result<Instant> {
        let (data, log) = (path(&self.data_dir)?, path(&self.log_file)?);
        // With its log file, the server does not hold pg_ctl's output open after pg_ctl is done.
        let args = ["restart", "-w", "-t", "120", "-m", shutdown.mode(), "-D", data, "-l", log, "-o", &self.options];
        self.run("pg_ctl", &args)?;
        Ok(Instant::now())
    }

    /// Stops the server (`pg_ctl stop -m fast`), leaves it down for `outage`, and starts it
    /// again. Returns when it was stopped and when it takes connections again.
    pub fn outage(&self, outage: Duration) -> anyhow::Result<(Instant, Instant)> {
        self.stop(Shutdown::Fast)?;
        let stopped = Instant::now();
        std::thread::sleep(outage);
        self.pg_ctl_start()?;
        Ok((stopped, Instant::now()))
    }

    pub fn stop(&self, shutdown: Shutdown) -> anyhow::Result<()> {
        let data = path(&self.data_dir)?;
        self.run("pg_ctl", &["stop", "-w", "-t", "120", "-m", shutdown.mode(), "-D", data])
    }

    fn pg_ctl_start(&self) -> anyhow::Result<()> {
        let (data, log) = (path(&self.data_dir)?, path(&self.log_file)?);
        self.run("pg_ctl", &["start", "-w", "-t", "120", "-D", data, "-l", log, "-o", &self.options])
    }

    fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<()> {
        let mut command = Command::new(self.bin_dir.join(program));
        command.args(args).stdin(Stdio::null()).env("LC_ALL", "C");
        // Its own process group, so that a Ctrl-C reaches the run, which then stops the
        // cluster in order.
        command.process_group(0);
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid).gid(gid).current_dir(self.data_dir.parent().unwrap_or(Path::new("/")));
        }
        let output = command.output().with_context(|| format!("running {program}"))?;
        if !output.status.success() {
            let log = std::fs::read_to_string(&self.log_file).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(10).collect();
            bail!(
                "{program} {} failed: {}\n{}\nserver log (last lines):\n{}",
                args.first().copied().unwrap_or_default(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        Ok(())
    }
}

impl Drop for Cluster {
    /// A run that ends early, however, leaves no PostgreSQL behind.
    fn drop(&mut self) {
        if self.data_dir.join("postmaster.pid").exists() {
            let _ = self.stop(Shutdown::Immediate);
        }
    }
}

fn path(path: &Path) -> anyhow::Result<&str> {
    path.to_str().with_context(|| format!("{} is not valid UTF-8", path.display()))
}

fn postgres_user() -> anyhow::Result<(u32, u32)> {
    let name = CString::new("postgres").expect("no NUL in a constant");
    // SAFETY: getpwnam returns a pointer into static storage or null; it is read at once.
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    if entry.is_null() {
        bail!(
            "running as root, PostgreSQL must run as the `postgres` user, and there is none (useradd --system postgres)"
        );
    }
    Ok(unsafe { ((*entry).pw_uid, (*entry).pw_gid) })
}
