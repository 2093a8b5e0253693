//! `haggle bench --workload flood`: what a flood of connections that never finish their request
//! does to a server, and whether it still answers meanwhile.
//!
//! The bench opens `--connections` connections to the server as fast as it can (at most
//! [`CONNECTING`] being opened at once), and on each sends the first half of a request's head
//! and nothing more. A connection the server answers within [`ANSWER_WAIT`] is counted by its
//! answer (`503` is a refusal); one it keeps without an answer is held, and kept open by the
//! bench until the server closes it (which its header deadline should do), or for
//! [`HOLD_LIMIT`]. Throughout, two probes ask for `/healthz`: one every [`PROBE_INTERVAL`] on a
//! kept-alive connection opened before the flood (the server's answers, timed), and one every
//! [`FRESH_PROBE_INTERVAL`] on a new connection each time (which a server at its cap refuses).
//!
//! Every connection is a file descriptor on both sides: the bench raises its own open-file
//! limit to the hard limit, and refuses to start if that is too low for the flood.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::stats::percentile;

/// Connections being opened (connected and sent their half head) at once.
const CONNECTING: usize = 512;
/// How long a connection waits for an answer before it counts as held.
const ANSWER_WAIT: Duration = Duration::from_secs(2);
/// How long the bench keeps a held connection open at most.
const HOLD_LIMIT: Duration = Duration::from_secs(120);
/// Between two probes on the kept-alive connection, and on new connections.
const PROBE_INTERVAL: Duration = Duration::from_millis(10);
const FRESH_PROBE_INTERVAL: Duration = Duration::from_millis(100);
/// Descriptors the bench keeps for itself besides the flood's.
const SPARE_FILES: u64 = 256;

const HALF_A_HEAD: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: flood\r\nX-Flood: ";

/// What became of one connection of the flood.
enum Fate {
    /// It could not be opened (the error's kind).
    NotOpened(std::io::ErrorKind),
    /// The server answered at once with this status.
    Answered(u16),
    /// The server closed it (or reset it) without an answer.
    Closed,
    /// The server held it without an answer; it closed it after this long, if it did.
    Held(Option<Duration>),
}

pub async fn run(url: &str, connections: u64) -> anyhow::Result<()> {
    let address = address_of(url)?;
    let open_files = haggle_server::connections::raise_open_file_limit().context("reading the open-file limit")?;
    if connections + SPARE_FILES > open_files {
        bail!(
            "{connections} connections need about {} open files, and this process may have {open_files}: \
             raise the limit (ulimit -n) or flood with fewer (--connections)",
            connections + SPARE_FILES
        );
    }
    let mut kept_alive = TcpStream::connect(&address).await.with_context(|| format!("connecting to {address}"))?;
    if healthz(&mut kept_alive).await? != 200 {
        bail!("{url}/healthz does not answer 200 before the flood");
    }
    eprintln!(
        "[flood] {connections} connections to {address}, each sending half a request head; open-file limit {open_files}"
    );

    let stop = CancellationToken::new();
    let kept_alive_probe = tokio::spawn(probe_kept_alive(kept_alive, stop.clone()));
    let fresh_probe = tokio::spawn(probe_fresh(address.clone(), stop.clone()));
    let started = Instant::now();
    let connecting = Arc::new(Semaphore::new(CONNECTING));
    let open = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let flood: Vec<_> = (0..connections)
        .map(|_| {
            let (address, connecting, open, peak) = (address.clone(), connecting.clone(), open.clone(), peak.clone());
            tokio::spawn(async move { one_connection(&address, &connecting, &open, &peak).await })
        })
        .collect();
    let mut fates = Vec::with_capacity(flood.len());
    for connection in flood {
        fates.push(connection.await.context("a flood connection's task failed")?);
    }
    let flood_wall = started.elapsed();
    stop.cancel();
    let (kept_alive_ms, kept_alive_failures) = kept_alive_probe.await.context("the kept-alive probe")?;
    let fresh = fresh_probe.await.context("the new-connection probe")?;

    report(&Report {
        connections,
        fates,
        peak: peak.load(Ordering::Relaxed),
        flood_wall,
        kept_alive_ms,
        kept_alive_failures,
        fresh,
    });
    Ok(())
}

/// `host:port` of an `http://` URL.
fn address_of(url: &str) -> anyhow::Result<String> {
    let parsed = url::Url::parse(url).with_context(|| format!("{url} is not a URL"))?;
    if parsed.scheme() != "http" {
        bail!("the flood speaks plain HTTP: give an http:// URL");
    }
    let host = parsed.host_str().context("the URL has no host")?;
    Ok(format!("{host}:{}", parsed.port_or_known_default().unwrap_or(80)))
}

async fn one_connection(address: &str, connecting: &Semaphore, open: &AtomicI64, peak: &AtomicI64) -> Fate {
    let permit = connecting.acquire().await.expect("the semaphore is never closed");
    let mut stream = match tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(address)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => return Fate::NotOpened(error.kind()),
        Err(_) => return Fate::NotOpened(std::io::ErrorKind::TimedOut),
    };
    let now_open = open.fetch_add(1, Ordering::Relaxed) + 1;
    peak.fetch_max(now_open, Ordering::Relaxed);
    let fate = async {
        if stream.write_all(HALF_A_HEAD).await.is_err() {
            return Fate::Closed;
        }
        let sent = Instant::now();
        drop(permit);
        let mut first = [0u8; 256];
        match tokio::time::timeout(ANSWER_WAIT, stream.read(&mut first)).await {
            Ok(Ok(0) | Err(_)) => Fate::Closed,
            Ok(Ok(n)) => Fate::Answered(status_of(&first[..n])),
            Err(_) => {
                let closed = tokio::time::timeout(HOLD_LIMIT.saturating_sub(ANSWER_WAIT), async {
                    while let Ok(1..) = stream.read(&mut first).await {}
                })
                .await;
                Fate::Held(closed.ok().map(|()| sent.elapsed()))
            }
        }
    }
    .await;
    open.fetch_sub(1, Ordering::Relaxed);
    fate
}

/// The status of an answer's first bytes (0 if they are not a status line).
fn status_of(answer: &[u8]) -> u16 {
    answer.get(9..12).and_then(|code| std::str::from_utf8(code).ok()).and_then(|code| code.parse().ok()).unwrap_or(0)
}

/// Asks for `/healthz` on a kept-alive connection and reads the whole answer; its status.
async fn healthz(stream: &mut TcpStream) -> anyhow::Result<u16> {
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: flood-probe\r\n\r\n").await?;
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    loop {
        let n = stream.read(&mut buffer).await?;
        if n == 0 {
            bail!("the server closed the probe's connection");
        }
        answer.extend_from_slice(&buffer[..n]);
        let Some(end) = answer.windows(4).position(|window| window == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0);
        if answer.len() >= end + 4 + length {
            return Ok(status_of(&answer));
        }
    }
}

/// `/healthz` every [`PROBE_INTERVAL`] on one kept-alive connection until `stop`: the latencies
/// of its 200s, in milliseconds, and how many probes failed (a new connection replaces a lost
/// one).
async fn probe_kept_alive(mut stream: TcpStream, stop: CancellationToken) -> (Vec<f64>, u64) {
    let (mut latencies, mut failures) = (Vec::new(), 0);
    while !stop.is_cancelled() {
        let asked = Instant::now();
        match tokio::time::timeout(Duration::from_secs(10), healthz(&mut stream)).await {
            Ok(Ok(200)) => latencies.push(asked.elapsed().as_secs_f64() * 1000.0),
            _ => {
                failures += 1;
                if let Ok(fresh) = TcpStream::connect(stream.peer_addr().expect("a connected stream")).await {
                    stream = fresh;
                }
            }
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
    (latencies, failures)
}

/// What `/healthz` on a new connection each time got.
#[derive(Default)]
struct Fresh {
    ok_ms: Vec<f64>,
    refused: u64,
    failed: u64,
}

async fn probe_fresh(address: String, stop: CancellationToken) -> Fresh {
    let mut fresh = Fresh::default();
    while !stop.is_cancelled() {
        let asked = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(10), async {
            let mut stream = TcpStream::connect(&address).await?;
            healthz(&mut stream).await
        })
        .await;
        match answer {
            Ok(Ok(200)) => fresh.ok_ms.push(asked.elapsed().as_secs_f64() * 1000.0),
            Ok(Ok(503)) => fresh.refused += 1,
            _ => fresh.failed += 1,
        }
        tokio::time::sleep(FRESH_PROBE_INTERVAL).await;
    }
    fresh
}

struct Report {
    connections: u64,
    fates: Vec<Fate>,
    peak: i64,
    flood_wall: Duration,
    kept_alive_ms: Vec<f64>,
    kept_alive_failures: u64,
    fresh: Fresh,
}

fn report(report: &Report) {
    let count = |test: &dyn Fn(&Fate) -> bool| report.fates.iter().filter(|fate| test(fate)).count();
    let not_opened = count(&|fate| matches!(fate, Fate::NotOpened(_)));
    let refused = count(&|fate| matches!(fate, Fate::Answered(503)));
    let other_answers = count(&|fate| matches!(fate, Fate::Answered(status) if *status != 503));
    let closed = count(&|fate| matches!(fate, Fate::Closed));
    let held = count(&|fate| matches!(fate, Fate::Held(_)));
    let mut held_for: Vec<f64> = report
        .fates
        .iter()
        .filter_map(|fate| match fate {
            Fate::Held(Some(held_for)) => Some(held_for.as_secs_f64()),
            _ => None,
        })
        .collect();
    held_for.sort_by(f64::total_cmp);
    let still_held = held - held_for.len();
    let mut kept_alive = report.kept_alive_ms.clone();
    kept_alive.sort_by(f64::total_cmp);
    let ms = |values: &[f64], p: f64| percentile(values, p).map_or("-".to_owned(), |value| format!("{value:.2}"));
    let seconds = |values: &[f64], p: f64| percentile(values, p).map_or("-".to_owned(), |value| format!("{value:.1}"));

    println!("flood: {} connections, each sending half a request head", report.connections);
    println!("| outcome | connections |");
    println!("|---|---|");
    println!("| held by the server without an answer | {held} |");
    println!("| refused at once with 503 | {refused} |");
    println!("| answered otherwise | {other_answers} |");
    println!("| closed without an answer | {closed} |");
    let why_not_opened = report.fates.iter().find_map(|fate| match fate {
        Fate::NotOpened(kind) => Some(format!(" (first: {kind})")),
        _ => None,
    });
    println!("| could not be opened | {not_opened}{} |", why_not_opened.unwrap_or_default());
    println!("| open at once, at most | {} |", report.peak);
    println!(
        "held connections closed by the server after: p50 {} s, max {} s{}; the flood lasted {:.1} s",
        seconds(&held_for, 50.0),
        seconds(&held_for, 100.0),
        if still_held > 0 {
            format!(" ({still_held} still open after {} s)", HOLD_LIMIT.as_secs())
        } else {
            String::new()
        },
        report.flood_wall.as_secs_f64()
    );
    println!(
        "/healthz on a kept-alive connection during the flood: {} answers, p50 {} ms, p99 {} ms, max {} ms, {} failed",
        kept_alive.len(),
        ms(&kept_alive, 50.0),
        ms(&kept_alive, 99.0),
        ms(&kept_alive, 100.0),
        report.kept_alive_failures
    );
    let mut fresh = report.fresh.ok_ms.clone();
    fresh.sort_by(f64::total_cmp);
    println!(
        "/healthz on a new connection each time: {} answered 200 (p50 {} ms), {} refused with 503, {} failed",
        fresh.len(),
        ms(&fresh, 50.0),
        report.fresh.refused,
        report.fresh.failed
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_read_from_the_status_line() {
        assert_eq!(status_of(b"HTTP/1.1 503 Service Unavailable\r\n"), 503);
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n"), 200);
        assert_eq!(status_of(b"garbage"), 0);
    }

    #[test]
    fn the_flood_takes_plain_http_urls() {
        assert_eq!(address_of("http://127.0.0.1:18181").unwrap(), "127.0.0.1:18181");
        assert_eq!(address_of("http://localhost").unwrap(), "localhost:80");
        assert!(address_of("https://example.com").is_err());
    }
}
