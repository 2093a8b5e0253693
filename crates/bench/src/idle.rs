//! `--idle-streams N`: idle event waiters held open for the whole run, half long polls
//! (`GET /v1/events?wait=60`, asked again whenever one is answered) and half event streams
//! (`GET /v1/events/stream`), so that the server's memory (`--server-pid`) can be read with them
//! held. The server holds at most `HAGGLE_MAX_STREAMS` of them (4,096 by default) and
//! `HAGGLE_MAX_STREAMS_PER_AGENT` per agent (100): the bench registers one agent per 100.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::api;
use haggle_client::Client;

/// Waiters per agent, the server's default share for one agent.
const PER_AGENT: u64 = 100;
/// Connections being opened at once.
const CONNECTING: usize = 256;

/// The waiters, held until dropped.
pub struct Idle {
    tasks: JoinSet<()>,
    pub opened: Arc<AtomicU64>,
    pub refused: Arc<AtomicU64>,
}

impl Idle {
    pub fn close(mut self) {
        self.tasks.abort_all();
    }
}

pub async fn open(url: &str, client: &Client, run_id: &str, count: u64) -> anyhow::Result<Idle> {
    let parsed = url::Url::parse(url).with_context(|| format!("{url} is not a URL"))?;
    if parsed.scheme() != "http" {
        bail!("--idle-streams speaks plain HTTP: give an http:// URL");
    }
    let host = parsed.host_str().context("the URL has no host")?.to_owned();
    let address = format!("{host}:{}", parsed.port_or_known_default().unwrap_or(80));
    haggle_server::connections::raise_open_file_limit().context("raising the open-file limit")?;
    let mut keys = Vec::new();
    for n in 0..count.div_ceil(PER_AGENT) {
        keys.push(api::register(client, &format!("bench idle {run_id} {n}")).await?);
    }
    let opened = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let connecting = Arc::new(Semaphore::new(CONNECTING));
    let mut tasks = JoinSet::new();
    for n in 0..count {
        let key = keys[(n / PER_AGENT) as usize].clone();
        let path = if n % 2 == 0 { "/v1/events?after=0&wait=60" } else { "/v1/events/stream" };
        let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n");
        let (address, opened, refused, connecting) =
            (address.clone(), opened.clone(), refused.clone(), connecting.clone());
        tasks.spawn(async move {
            let permit = connecting.acquire_owned().await.expect("the semaphore is never closed");
            let Ok(mut stream) = TcpStream::connect(&address).await else {
                refused.fetch_add(1, Ordering::Relaxed);
                return;
            };
            let mut counted = false;
            let mut permit = Some(permit);
            let mut buffer = vec![0u8; 16 * 1024];
            loop {
                if stream.write_all(request.as_bytes()).await.is_err() {
                    break;
                }
                if !counted {
                    counted = true;
                    opened.fetch_add(1, Ordering::Relaxed);
                    // Let the next connection start once this one's request is sent.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    permit.take();
                }
                // Read whatever comes (a stream's heartbeats; a long poll's answer after its
                // wait, then ask again on the same connection).
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(read) => {
                        let text = String::from_utf8_lossy(&buffer[..read]);
                        if text.starts_with("HTTP/1.1 4") || text.starts_with("HTTP/1.1 5") {
                            refused.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        if path.starts_with("/v1/events/stream") {
                            // Keep reading the stream until it ends.
                            while matches!(stream.read(&mut buffer).await, Ok(n) if n > 0) {}
                            break;
                        }
                    }
                }
            }
        });
    }
    // Give the connections time to be opened and answered (or refused).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while opened.load(Ordering::Relaxed) + refused.load(Ordering::Relaxed) < count
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    eprintln!(
        "[idle] {} idle waiters opened ({} long polls, {} streams asked), {} refused or failed",
        opened.load(Ordering::Relaxed),
        count.div_ceil(2),
        count / 2,
        refused.load(Ordering::Relaxed)
    );
    Ok(Idle { tasks, opened, refused })
}
