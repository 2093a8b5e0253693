//! Serving the API's HTTP/1.1 connections, within limits that keep one client from taking the
//! process down with connections it opens and never uses:
//!
//! - a cap on the connections held at once ([`Limits::max_connections`]), well below the
//!   process's open-file limit: beyond it a connection is answered `503 overloaded` at once,
//!   before anything of its request is read, and closed;
//! - a deadline for a request's head, from its first byte ([`Limits::header_timeout`]);
//! - a deadline for a connection with no request in flight and nothing of the next one sent
//!   ([`Limits::idle_timeout`]);
//! - on shutdown, nothing more is accepted, a connection between requests is closed at once, a
//!   request in flight may finish, and whatever is still open after
//!   [`Limits::shutdown_timeout`] is closed, so that the process exits.
//!
//! A connection's two deadlines are kept here rather than by hyper, whose header timeout also
//! runs while a kept-alive connection waits for its next request: one deadline could not be
//! both short for a head that is being sent and generous for an idle client.

use std::convert::Infallible;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::http::error::{ApiError, Code, PROBLEM_JSON};

/// The connection cap when the operator sets none: this, or half the process's open-file limit
/// if that is lower (the other half is left to database connections, refusals and files).
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// Refused connections closed gracefully at once (their answer written, then what the client
/// still sends read and dropped for [`REFUSAL_LINGER`]); beyond it they are closed outright,
/// their answer written all the same.
const MAX_LINGERING_REFUSALS: usize = 256;
/// How long a refused connection is kept for its client to read the answer.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// The first and the longest pause after accepting failed for want of file descriptors or
/// memory.
const ACCEPT_BACKOFF_FIRST: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// What the server allows a connection.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections held at once; more are refused with `503 overloaded`.
    pub max_connections: usize,
    /// How long a request's head may take to arrive, from its first byte.
    pub header_timeout: Duration,
    /// How long a connection may wait for a request with none in flight.
    pub idle_timeout: Duration,
    /// How long requests in flight may run on after shutdown begins.
    pub shutdown_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(20),
        }
    }
}

/// The connection cap for a process allowed `open_files` file descriptors.
pub fn default_max_connections(open_files: u64) -> usize {
    usize::try_from(open_files / 2).unwrap_or(usize::MAX).clamp(1, DEFAULT_MAX_CONNECTIONS)
}

/// Raises the process's soft limit of open files to its hard limit, as far as the system
/// allows, and returns the limit in force.
pub fn raise_open_file_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
        // SAFETY: setrlimit reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    Ok(limit.rlim_cur)
}

/// Serves `router` on `listener` until `shutdown` is cancelled and the last connection has
/// ended (or been closed at the shutdown deadline).
pub async fn serve(listener: TcpListener, router: Router, limits: Limits, shutdown: CancellationToken) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let lingering = Arc::new(Semaphore::new(MAX_LINGERING_REFUSALS));
    let mut builder = http1::Builder::new();
    builder.keep_alive(true).header_read_timeout(None);
    let connections = TaskTracker::new();
    let mut backoff = Backoff::default();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                backoff.succeeded();
                accepted
            }
            // The client gave up before it was accepted: nothing is wrong here.
            Err(error) if is_connection_error(&error) => continue,
            // Out of file descriptors or memory: accepting again at once would fail the same
            // way, in a tight loop. Connections that end free what is missing.
            Err(error) => {
                let pause = backoff.failed(&error);
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(pause) => continue,
                }
            }
        };
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let connection = Connection { peer, router: router.clone(), limits, slot };
                connections.spawn(connection.serve(stream, builder.clone(), shutdown.clone()));
            }
            Err(_) => refuse(stream, &lingering),
        }
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// Whether accepting failed for this connection only.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// Pauses between failed accepts, doubling, logged when they start and when they end.
#[derive(Default)]
struct Backoff {
    failures: u64,
    pause: Duration,
}

impl Backoff {
    fn failed(&mut self, error: &io::Error) -> Duration {
        if self.failures == 0 {
            tracing::warn!(%error, "accepting connections failed; pausing until it succeeds again");
            self.pause = ACCEPT_BACKOFF_FIRST;
        } else {
            self.pause = (self.pause * 2).min(ACCEPT_BACKOFF_MAX);
        }
        self.failures += 1;
        self.pause
    }

    fn succeeded(&mut self) {
        if self.failures > 0 {
            tracing::info!(failures = self.failures, "accepting connections again");
            self.failures = 0;
        }
    }
}

/// Answers a connection over the cap with `503 overloaded`, before reading any of it, and
/// closes it. A fresh socket's send buffer takes the answer whole, so writing never waits; it
/// is written on the socket itself, as the runtime does not know yet that it is writable.
fn refuse(stream: TcpStream, lingering: &Arc<Semaphore>) {
    let Ok(stream) = stream.into_std() else { return };
    let _ = (&stream).write(&refusal());
    // Closing a socket with unread data resets the connection, and a reset can discard the
    // answer before the client has read it: so the connection is shut for writing first and
    // what the client still sends is read and dropped for a moment, while few are doing so.
    if let Ok(permit) = lingering.clone().try_acquire_owned()
        && let Ok(stream) = TcpStream::from_std(stream)
    {
        tokio::spawn(linger(stream, permit));
    }
}

async fn linger(mut stream: TcpStream, _permit: OwnedSemaphorePermit) {
    let _ = stream.shutdown().await;
    let drain = async {
        let mut discarded = [0u8; 1024];
        while let Ok(1..) = stream.read(&mut discarded).await {}
    };
    let _ = tokio::time::timeout(REFUSAL_LINGER, drain).await;
}

/// The whole answer to a connection over the cap.
fn refusal() -> Vec<u8> {
    // No request was read, so the id is a new one, in the header and the problem alike.
    let request_id = uuid::Uuid::now_v7().to_string();
    let error = ApiError {
        retry_after: Some(1),
        ..ApiError::new(Code::Overloaded, "this instance holds as many connections as it may; retry in a moment")
    }
    .with("request_id", request_id.as_str());
    let body = error.body();
    let mut answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: {PROBLEM_JSON}\r\nretry-after: 1\r\n\
         x-request-id: {request_id}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}

/// An accepted connection, holding one of the cap's slots until it ends.
struct Connection {
    peer: SocketAddr,
    router: Router,
    limits: Limits,
    slot: OwnedSemaphorePermit,
}

impl Connection {
    async fn serve(self, stream: TcpStream, builder: http1::Builder, shutdown: CancellationToken) {
        let Connection { peer, router, limits, slot: _slot } = self;
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Watched { stream, activity: activity.clone() });
        let exchanges = activity.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let exchange = exchanges.begin();
            let router = router.clone();
            async move {
                let response = router.oneshot(request).await?;
                Ok::<_, Infallible>(response.map(|body| Tracked { body, _exchange: exchange }))
            }
        });
        let connection = builder.serve_connection(io, service);
        tokio::pin!(connection);
        let mut deadline: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = connection.as_mut() => break,
                // No request in flight, and its head (or any request) is late: dropping the
                // connection closes it.
                () = activity.expired(&limits) => break,
                () = shutdown.cancelled(), if deadline.is_none() => {
                    if !activity.serving() {
                        break;
                    }
                    // Ends the connection once the request in flight has been answered.
                    connection.as_mut().graceful_shutdown();
                    deadline = Some(Instant::now() + limits.shutdown_timeout);
                }
                () = sleep_until(deadline), if deadline.is_some() => break,
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// What a connection is doing, as its deadlines see it.
struct Activity {
    state: Mutex<Phase>,
    changed: Notify,
}

#[derive(Clone, Copy)]
struct Phase {
    /// Requests whose answers are not yet over (more than one only when pipelined).
    exchanges: usize,
    /// When the last answer ended, or the connection was accepted.
    idle_since: Instant,
    /// When the first byte of the next request arrived, if one has.
    head_started: Option<Instant>,
}

impl Activity {
    fn new() -> Activity {
        let phase = Phase { exchanges: 0, idle_since: Instant::now(), head_started: None };
        Activity { state: Mutex::new(phase), changed: Notify::new() }
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Bytes arrived.
    fn heard(&self) {
        let mut phase = self.phase();
        if phase.exchanges == 0 && phase.head_started.is_none() {
            phase.head_started = Some(Instant::now());
            drop(phase);
            self.changed.notify_one();
        }
    }

    /// A request's head has arrived; it is in flight until the guard is dropped.
    fn begin(self: &Arc<Self>) -> Exchange {
        let mut phase = self.phase();
        phase.exchanges += 1;
        phase.head_started = None;
        drop(phase);
        self.changed.notify_one();
        Exchange(self.clone())
    }

    fn serving(&self) -> bool {
        self.phase().exchanges > 0
    }

    /// When the connection is to be closed if nothing changes: none while a request is in
    /// flight.
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        let phase = *self.phase();
        match (phase.exchanges, phase.head_started) {
            (1.., _) => None,
            (0, Some(started)) => Some(started + limits.header_timeout),
            (0, None) => Some(phase.idle_since + limits.idle_timeout),
        }
    }

    /// Resolves when a deadline has passed.
    async fn expired(&self, limits: &Limits) {
        loop {
            match self.deadline(limits) {
                None => self.changed.notified().await,
                Some(deadline) if deadline <= Instant::now() => return,
                Some(deadline) => {
                    tokio::select! {
                        () = self.changed.notified() => {}
                        () = tokio::time::sleep_until(deadline) => {}
                    }
                }
            }
        }
    }
}

/// A request in flight, from its head until its answer's body is over (or dropped).
struct Exchange(Arc<Activity>);

impl Drop for Exchange {
    fn drop(&mut self) {
        let mut phase = self.0.phase();
        phase.exchanges -= 1;
        if phase.exchanges == 0 {
            phase.idle_since = Instant::now();
            phase.head_started = None;
        }
        drop(phase);
        self.0.changed.notify_one();
    }
}

/// An answer's body, which keeps its request in flight until it is over.
struct Tracked {
    body: Body,
    _exchange: Exchange,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The connection's socket, telling its [`Activity`] when bytes arrive.
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.heard();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_leaves_half_the_open_files_to_the_rest() {
        assert_eq!(default_max_connections(1024), 512);
        assert_eq!(default_max_connections(20_000), 10_000);
        assert_eq!(default_max_connections(1 << 20), DEFAULT_MAX_CONNECTIONS);
        assert_eq!(default_max_connections(1), 1);
    }

    #[test]
    fn a_refusal_is_a_whole_problem_answer() {
        let answer = String::from_utf8(refusal()).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert!(head.contains("content-type: application/problem+json") && head.contains("retry-after: 1"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())), "{head}");
        let problem: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(problem["code"], "overloaded");
        let header = head.lines().find_map(|line| line.strip_prefix("x-request-id: ")).unwrap();
        assert_eq!(problem["request_id"], header.trim());
    }
}
