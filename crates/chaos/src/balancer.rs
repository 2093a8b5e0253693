//! HAProxy in front of the instances, configured from the example an operator copies
//! (`deploy/haproxy/`): the run renders that very file with its own ports, adds a statistics
//! listener of its own, and reads per-instance figures from it at the end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

/// The example configuration, as shipped.
pub const TEMPLATE: &str = include_str!("../../../deploy/haproxy/haproxy.cfg");

/// HAProxy's own answers, as problem documents.
pub const ERROR_FILES: [(&str, &str); 3] = [
    ("502.http", include_str!("../../../deploy/haproxy/errors/502.http")),
    ("503.http", include_str!("../../../deploy/haproxy/errors/503.http")),
    ("504.http", include_str!("../../../deploy/haproxy/errors/504.http")),
];

/// Replaces each `"${NAME-default}"` (or `"${NAME}"`) whose `NAME` is in `values` with the
/// value; others stay for HAProxy to read from its environment.
pub fn render(template: &str, values: &BTreeMap<&str, String>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let inner = &after[..end];
        let name = inner.split('-').next().unwrap_or(inner);
        match values.get(name) {
            Some(value) => out.push_str(value),
            None => out.push_str(&rest[start..start + 2 + end + 1]),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Finds HAProxy: the given path, else on PATH, else /usr/sbin.
pub fn find(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = given {
        if path.is_file() {
            return Ok(path.to_owned());
        }
        bail!("--haproxy {}: no such file", path.display());
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).map(|dir| dir.join("haproxy")).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path.into_iter().chain([PathBuf::from("/usr/sbin/haproxy")]).find(|path| path.is_file()).context(
        "HAProxy is not installed. The chaos run puts the instances behind it: install it \
         (`apt-get install haproxy`; scripts/chaos does that for you), or pass --haproxy PATH",
    )
}

/// HAProxy's version line (`HAProxy version 2.6.12-1 ...`).
pub fn version(haproxy: &Path) -> String {
    std::process::Command::new(haproxy)
        .arg("-v")
        .output()
        .ok()
        .and_then(|output| String::from_utf8_lossy(&output.stdout).lines().next().map(str::to_owned))
        .unwrap_or_else(|| "HAProxy (version unknown)".to_owned())
}

pub struct Balancer {
    pub port: u16,
    stats_port: u16,
    child: Child,
    pub config: PathBuf,
}

impl Balancer {
    /// Writes the configuration and error files under `dir`, checks them with `haproxy -c`, and
    /// starts HAProxy in the foreground, logging to `haproxy.log`.
    pub async fn start(
        haproxy: &Path,
        dir: &Path,
        port: u16,
        stats_port: u16,
        servers: &[u16],
    ) -> anyhow::Result<Balancer> {
        let errors = dir.join("errors");
        std::fs::create_dir_all(&errors)?;
        for (name, contents) in ERROR_FILES {
            std::fs::write(errors.join(name), contents)?;
        }
        let mut values = BTreeMap::from([
            ("HAGGLE_LB_BIND", format!("127.0.0.1:{port}")),
            ("HAGGLE_ERRORS_DIR", errors.display().to_string()),
        ]);
        for (index, server) in servers.iter().enumerate() {
            let name = ["HAGGLE_SERVER_1", "HAGGLE_SERVER_2", "HAGGLE_SERVER_3"]
                .get(index)
                .context("the example configuration has three servers")?;
            values.insert(name, format!("127.0.0.1:{server}"));
        }
        let mut config = render(TEMPLATE, &values);
        config.push_str(&format!(
            "\n# Added by haggle chaos: per-server figures for its report.\n\
             listen chaos-stats\n    bind 127.0.0.1:{stats_port}\n    stats enable\n    stats uri /\n"
        ));
        let path = dir.join("haproxy.cfg");
        std::fs::write(&path, config)?;
        let check = Command::new(haproxy).arg("-c").arg("-q").arg("-f").arg(&path).output().await?;
        if !check.status.success() {
            bail!(
                "HAProxy refused the configuration {}: {}",
                path.display(),
                String::from_utf8_lossy(&check.stderr).trim()
            );
        }
        let log = std::fs::File::create(dir.join("haproxy.log"))?;
        let child = Command::new(haproxy)
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .process_group(0)
            .spawn()
            .context("starting HAProxy")?;
        let balancer = Balancer { port, stats_port, child, config: path };
        balancer.wait_listening().await?;
        Ok(balancer)
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn wait_listening(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("HAProxy did not listen on 127.0.0.1:{} within 10 s", self.port);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The backend's servers as HAProxy's statistics show them.
    pub async fn stats(&self) -> anyhow::Result<Vec<ServerStats>> {
        let csv = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()?
            .get(format!("http://127.0.0.1:{}/;csv", self.stats_port))
            .send()
            .await?
            .text()
            .await?;
        Ok(parse_stats(&csv))
    }

    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            // SAFETY: signalling a child this process started and has not reaped.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await.is_err() {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }
}

/// One server of the `haggle` backend, as HAProxy counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerStats {
    pub name: String,
    pub status: String,
    /// Requests sent to it (sessions, one per request here).
    pub sessions: u64,
    pub responses_5xx: u64,
    pub check_failures: u64,
    /// How often it went from UP to DOWN.
    pub went_down: u64,
    pub retries: u64,
    pub redispatches: u64,
}

fn parse_stats(csv: &str) -> Vec<ServerStats> {
    let mut lines = csv.lines();
    let Some(header) = lines.next() else { return Vec::new() };
    let columns: Vec<&str> = header.trim_start_matches("# ").split(',').collect();
    let column = |row: &[&str], name: &str| -> String {
        columns.iter().position(|c| *c == name).and_then(|i| row.get(i)).map(|v| v.to_string()).unwrap_or_default()
    };
    let number = |row: &[&str], name: &str| column(row, name).parse().unwrap_or(0);
    lines
        .map(|line| line.split(',').collect::<Vec<_>>())
        .filter(|row| row.first() == Some(&"haggle") && !matches!(row.get(1), Some(&"FRONTEND" | &"BACKEND")))
        .map(|row| ServerStats {
            name: column(&row, "svname"),
            status: column(&row, "status"),
            sessions: number(&row, "stot"),
            responses_5xx: number(&row, "hrsp_5xx"),
            check_failures: number(&row, "chkfail"),
            went_down: number(&row, "chkdown"),
            retries: number(&row, "wretr"),
            redispatches: number(&row, "wredis"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_renders_with_the_runs_values_and_keeps_the_rest() {
        let values = BTreeMap::from([
            ("HAGGLE_LB_BIND", "127.0.0.1:9000".to_owned()),
            ("HAGGLE_SERVER_1", "127.0.0.1:9001".to_owned()),
            ("HAGGLE_SERVER_2", "127.0.0.1:9002".to_owned()),
            ("HAGGLE_SERVER_3", "127.0.0.1:9003".to_owned()),
            ("HAGGLE_ERRORS_DIR", "/run/errors".to_owned()),
        ]);
        let rendered = render(TEMPLATE, &values);
        let settings: Vec<&str> = rendered.lines().filter(|line| !line.trim_start().starts_with('#')).collect();
        assert!(settings.iter().all(|line| !line.contains("${")), "every variable is filled in:\n{rendered}");
        assert!(rendered.contains("bind \"127.0.0.1:9000\""));
        assert!(rendered.contains("server haggle2 \"127.0.0.1:9002\""));
        assert!(rendered.contains("errorfile 503 \"/run/errors/503.http\""));
        let partial = render("a \"${A-x}\" b \"${B-y}\" c \"${C}\"", &BTreeMap::from([("A", "1".to_owned())]));
        assert_eq!(partial, "a \"1\" b \"${B-y}\" c \"${C}\"");
    }

    #[test]
    fn the_example_balances_each_request_and_checks_liveness() {
        for line in [
            "balance roundrobin",
            "option httpchk GET /healthz",
            "default-server check inter 500ms fall 3 rise 2",
            "option redispatch",
            "retries 3",
            "errorfiles haggle-problems",
            "option forwardfor",
        ] {
            assert!(TEMPLATE.lines().any(|l| l.trim().starts_with(line)), "the example configuration has `{line}`");
        }
        assert!(!TEMPLATE.contains("/readyz"), "health checks are liveness, not readiness");
    }

    #[test]
    fn haproxys_own_answers_are_problem_documents_with_retry_after() {
        for (name, contents) in ERROR_FILES {
            let (head, body) = contents.split_once("\r\n\r\n").unwrap_or_else(|| panic!("{name}: no blank line"));
            let mut lines = head.split("\r\n");
            assert_eq!(lines.next(), Some("HTTP/1.1 503 Service Unavailable"), "{name}");
            let headers: BTreeMap<String, String> = lines
                .map(|line| line.split_once(": ").unwrap_or_else(|| panic!("{name}: {line}")))
                .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
                .collect();
            assert_eq!(headers["content-type"], "application/problem+json", "{name}");
            assert!(headers["retry-after"].parse::<u32>().is_ok(), "{name}");
            assert_eq!(headers["content-length"], body.len().to_string(), "{name}");
            let problem: haggle_api::Problem = serde_json::from_str(body).unwrap();
            assert_eq!((problem.status, problem.code.as_str()), (503, "unavailable"), "{name}");
            assert_eq!(problem.extra["type"], "urn:haggle:problem:unavailable");
            assert_eq!(problem.title, "Service unavailable");
            // Only HAProxy's "no server" answer may say nothing was done.
            assert_eq!(problem.detail.contains("unknown"), name != "503.http", "{name}: {}", problem.detail);
        }
    }

    #[test]
    fn statistics_are_read_by_column_name() {
        let csv = "# pxname,svname,qcur,stot,hrsp_5xx,chkfail,chkdown,wretr,wredis,status,\n\
                   haggle,FRONTEND,,10,0,,,,,OPEN,\n\
                   haggle,haggle1,0,7,1,4,1,2,2,UP,\n\
                   haggle,BACKEND,0,10,1,,,,,UP,\n";
        let stats = parse_stats(csv);
        assert_eq!(stats.len(), 1);
        assert_eq!(
            stats[0],
            ServerStats {
                name: "haggle1".into(),
                status: "UP".into(),
                sessions: 7,
                responses_5xx: 1,
                check_failures: 4,
                went_down: 1,
                retries: 2,
                redispatches: 2,
            }
        );
    }
}
