//! The limits on connections: a head that is late, a connection left idle, connections over the
//! cap, and a shutdown with connections still open. Raw TCP, to send what no HTTP client would.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{ServerProcess, TestApp, TestDb, eventually};

const HALF_A_HEAD: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: haggle\r\nX-Unfinished: ";
const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: haggle\r\n\r\n";

fn address(base: &str) -> String {
    base.trim_start_matches("http://").to_owned()
}

/// Reads until the server closes the connection, or `None` if it has not within `limit`. A reset
/// counts as closed.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let read = async {
        let mut buffer = [0u8; 4096];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    };
    tokio::time::timeout(limit, read).await.ok()?;
    Some(received)
}

/// Sends one request on a kept-alive connection and reads its whole answer (a Content-Length
/// body), giving the status line.
async fn exchange(stream: &mut TcpStream, request: &[u8]) -> String {
    stream.write_all(request).await.unwrap();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
            .await
            .expect("an answer in time")
            .unwrap();
        assert!(n > 0, "the connection closed before the answer: {}", String::from_utf8_lossy(&received));
        received.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&received).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|line| line.to_ascii_lowercase().strip_prefix("content-length: ").map(str::to_owned))
                .and_then(|value| value.trim().parse().ok())
                .expect("a content-length");
            if body.len() >= length {
                return head.lines().next().unwrap().to_owned();
            }
        }
    }
}

#[tokio::test]
async fn a_head_sent_too_slowly_is_closed_at_the_header_deadline() {
    let app = TestApp::spawn_with(|config| {
        config.connections.header_timeout = Duration::from_millis(500);
        config.connections.idle_timeout = Duration::from_secs(30);
    })
    .await;
    let mut slow = TcpStream::connect(address(&app.base)).await.unwrap();
    slow.write_all(HALF_A_HEAD).await.unwrap();
    let sent = Instant::now();
    let answer = closed_within(&mut slow, Duration::from_secs(10)).await.expect("the server to close the connection");
    assert!(sent.elapsed() >= Duration::from_millis(400), "closed before the deadline: {:?}", sent.elapsed());
    assert!(answer.is_empty() || answer.starts_with(b"HTTP/1.1 408"), "{}", String::from_utf8_lossy(&answer));
    // Others are served meanwhile and after.
    app.send(reqwest::Method::GET, "/healthz", None, crate::support::Body::None, &[]).await.expect(200);
}

#[tokio::test]
async fn a_kept_alive_connection_waits_for_its_next_request_until_the_idle_deadline() {
    let app = TestApp::spawn_with(|config| {
        config.connections.header_timeout = Duration::from_millis(300);
        config.connections.idle_timeout = Duration::from_millis(1500);
    })
    .await;
    let mut client = TcpStream::connect(address(&app.base)).await.unwrap();
    assert_eq!(exchange(&mut client, HEALTHZ).await, "HTTP/1.1 200 OK");
    // Idle for longer than a head may take: still open, as idle connections have their own
    // deadline.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(exchange(&mut client, HEALTHZ).await, "HTTP/1.1 200 OK");
    let answered = Instant::now();
    let closing = closed_within(&mut client, Duration::from_secs(10)).await.expect("the idle connection to be closed");
    assert!(closing.is_empty(), "{}", String::from_utf8_lossy(&closing));
    let idle = answered.elapsed();
    // Not before its deadline; that it closed at all, `closed_within` checked.
    assert!(idle >= Duration::from_millis(1300), "closed after {idle:?}");
}

#[tokio::test]
async fn connections_over_the_cap_are_refused_with_503_and_a_freed_slot_serves_again() {
    let app = TestApp::spawn_with(|config| config.connections.max_connections = 3).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(address(&app.base)).await.unwrap();
        assert_eq!(exchange(&mut stream, HEALTHZ).await, "HTTP/1.1 200 OK");
        held.push(stream);
    }

    for _ in 0..5 {
        let mut over = TcpStream::connect(address(&app.base)).await.unwrap();
        over.write_all(HEALTHZ).await.unwrap();
        let answer = closed_within(&mut over, Duration::from_secs(5)).await.expect("a refusal, then the end");
        let answer = String::from_utf8(answer).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no answer: {answer:?}"));
        let head = head.to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 503"), "{head}");
        assert!(head.contains("content-type: application/problem+json"), "{head}");
        assert!(head.contains("retry-after: 1"), "{head}");
        let problem: Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            (problem["status"].as_u64(), problem["code"].as_str()),
            (Some(503), Some("overloaded")),
            "{problem}"
        );
        assert_eq!(problem["type"], "urn:haggle:problem:overloaded");
    }

    // The held connections are still served.
    assert_eq!(exchange(&mut held[0], HEALTHZ).await, "HTTP/1.1 200 OK");
    // A connection that ends frees its slot.
    drop(held.pop());
    let base = app.base.clone();
    eventually("a freed slot to serve /healthz", || {
        let base = base.clone();
        async move {
            let mut stream = TcpStream::connect(address(&base)).await.ok()?;
            stream.write_all(HEALTHZ).await.ok()?;
            let mut first = [0u8; 12];
            stream.read_exact(&mut first).await.ok()?;
            (&first == b"HTTP/1.1 200").then_some(())
        }
    })
    .await;
}

/// Waits until the server has read every byte sent on `stream`: the kernel holds none of them in
/// the receive queue of the server's end (Linux's `/proc/net/tcp`).
async fn read_by_the_server(stream: &TcpStream) {
    let (client, server) = (stream.local_addr().unwrap(), stream.peer_addr().unwrap());
    let hex = |address: std::net::SocketAddr| match address {
        std::net::SocketAddr::V4(v4) => format!("{:08X}:{:04X}", u32::from_le_bytes(v4.ip().octets()), v4.port()),
        std::net::SocketAddr::V6(_) => panic!("the tests' servers listen on IPv4"),
    };
    let (ours, theirs) = (hex(client), hex(server));
    eventually("the server to read what was sent", || {
        let (ours, theirs) = (ours.clone(), theirs.clone());
        async move {
            let table = std::fs::read_to_string("/proc/net/tcp").expect("the kernel's table of TCP sockets");
            // Each line: sl, local address, remote address, state, tx_queue:rx_queue, ...
            let unread = table.lines().skip(1).find_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                (fields.get(1) == Some(&theirs.as_str()) && fields.get(2) == Some(&ours.as_str()))
                    .then(|| fields[4].split_once(':').map(|(_, rx)| rx.to_owned()))
                    .flatten()
            })?;
            (u64::from_str_radix(&unread, 16).ok()? == 0).then_some(())
        }
    })
    .await;
}

/// When the server closed the connection (within 10 s).
async fn closed_at(stream: &mut TcpStream, what: &str) -> Instant {
    closed_within(stream, Duration::from_secs(10)).await.expect(what);
    Instant::now()
}

#[tokio::test]
async fn shutdown_closes_idle_connections_at_once_and_the_rest_at_its_deadline() {
    let db = TestDb::create().await;
    let mut server = ServerProcess::spawn(&[
        ("DATABASE_URL", db.url.as_str()),
        ("HAGGLE_SHUTDOWN_TIMEOUT", "2s"),
        ("HAGGLE_HEADER_TIMEOUT", "60s"),
        ("HAGGLE_IDLE_TIMEOUT", "60s"),
    ]);
    let address = address(&server.base);
    // One connection with half a head, one whose request is in flight (its body is still
    // coming, and will not come).
    let mut half_open = TcpStream::connect(&address).await.unwrap();
    half_open.write_all(HALF_A_HEAD).await.unwrap();
    let mut in_flight = TcpStream::connect(&address).await.unwrap();
    in_flight
        .write_all(b"POST /v1/agents HTTP/1.1\r\nHost: haggle\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"name\":")
        .await
        .unwrap();
    let mut idle = TcpStream::connect(&address).await.unwrap();
    assert_eq!(exchange(&mut idle, HEALTHZ).await, "HTTP/1.1 200 OK");
    // The server has read what each sent: the request's head is in its handler, the half head
    // is heard.
    read_by_the_server(&in_flight).await;
    read_by_the_server(&half_open).await;

    server.send_sigterm();
    let signalled = Instant::now();
    // "At once" is before the deadline: both are closed while the request in flight still has
    // its time, whatever the machine's speed.
    let (half_open_closed, idle_closed, in_flight_cut) = tokio::join!(
        closed_at(&mut half_open, "the half-open connection closed at once"),
        closed_at(&mut idle, "the idle connection closed at once"),
        closed_at(&mut in_flight, "the request in flight cut at the deadline"),
    );
    assert!(half_open_closed < in_flight_cut, "the half-open connection was kept to the deadline");
    assert!(idle_closed < in_flight_cut, "the idle connection was kept to the deadline");
    let cut = in_flight_cut - signalled;
    assert!(cut >= Duration::from_millis(1500), "the request in flight was not given its time: {cut:?}");
    let (server, exited) = tokio::task::spawn_blocking(move || {
        let exited = server.wait_for_exit(Duration::from_secs(15));
        (server, exited)
    })
    .await
    .unwrap();
    let status = exited.unwrap_or_else(|| panic!("haggle did not exit after SIGTERM:\n{}", server.log()));
    assert!(status.success(), "{status}\n{}", server.log());
}
