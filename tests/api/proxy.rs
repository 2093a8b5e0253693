//! A TCP proxy in front of PostgreSQL that loses a connection the way a network can: after the
//! server has run a statement and committed it, before its answer reaches the client.
//!
//! It reads PostgreSQL's wire protocol only as far as it must: the startup message, for the
//! connection's `application_name`, then each message's type and length. Connections must not
//! ask for TLS (`sslmode=disable`), so that every message after the startup is framed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct PgProxy {
    pub port: u16,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Drop for PgProxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl PgProxy {
    /// Relays connections to `upstream` (`host:port`); the connections named `application_name`
    /// are those it may cut.
    pub async fn start(upstream: String, application_name: &str) -> PgProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicUsize::new(0));
        let name = application_name.to_owned();
        let accepting = tokio::spawn({
            let (armed, cuts) = (armed.clone(), cuts.clone());
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let relay = Relay {
                        upstream: upstream.clone(),
                        name: name.clone(),
                        armed: armed.clone(),
                        cuts: cuts.clone(),
                    };
                    tokio::spawn(relay.run(client));
                }
            }
        });
        PgProxy { port, armed, cuts, accepting }
    }

    /// The next statement a named connection executes runs on the server, and the connection is
    /// cut as soon as the server is ready for the next one (the statement's transaction is over,
    /// committed), none of the answer having reached the client.
    pub fn cut_after_next_statement(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// How many connections were cut.
    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }
}

struct Relay {
    upstream: String,
    name: String,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
}

impl Relay {
    async fn run(self, client: TcpStream) {
        let Ok(server) = TcpStream::connect(&self.upstream).await else { return };
        let (mut from_client, mut to_client) = client.into_split();
        let (mut from_server, mut to_server) = server.into_split();
        let Ok(startup) = read_startup(&mut from_client).await else { return };
        let named = application_name(&startup).as_deref() == Some(self.name.as_str());
        if to_server.write_all(&startup).await.is_err() {
            return;
        }
        let withhold = AtomicBool::new(false);
        let upstream = async {
            while let Ok(message) = read_message(&mut from_client).await {
                // Execute: the statement bound before it runs when the Sync after it arrives.
                if named && message[0] == b'E' && self.armed.swap(false, Ordering::SeqCst) {
                    withhold.store(true, Ordering::SeqCst);
                }
                if to_server.write_all(&message).await.is_err() {
                    return;
                }
            }
        };
        let downstream = async {
            while let Ok(message) = read_message(&mut from_server).await {
                if withhold.load(Ordering::SeqCst) {
                    // ReadyForQuery: the statement's implicit transaction has ended.
                    if message[0] == b'Z' {
                        self.cuts.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    continue;
                }
                if to_client.write_all(&message).await.is_err() {
                    return;
                }
            }
        };
        // Whichever side ends first ends both: dropping the halves closes the two connections.
        tokio::select! {
            () = upstream => {}
            () = downstream => {}
        }
    }
}

/// The startup message: its length (which counts itself), then the protocol and parameters.
async fn read_startup(stream: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Vec<u8>> {
    let length = stream.read_u32().await?;
    let mut message = length.to_be_bytes().to_vec();
    message.resize(length as usize, 0);
    stream.read_exact(&mut message[4..]).await?;
    Ok(message)
}

/// A message: its type, its length (which counts itself but not the type), then the rest.
async fn read_message(stream: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Vec<u8>> {
    let kind = stream.read_u8().await?;
    let length = stream.read_u32().await?;
    let mut message = vec![kind];
    message.extend_from_slice(&length.to_be_bytes());
    message.resize(1 + length as usize, 0);
    stream.read_exact(&mut message[5..]).await?;
    Ok(message)
}

/// The `application_name` of a startup message (after the length and the protocol version come
/// names and values, each ended by a NUL).
fn application_name(startup: &[u8]) -> Option<String> {
    let mut fields = startup.get(8..)?.split(|byte| *byte == 0);
    while let Some(name) = fields.next() {
        let value = fields.next()?;
        if name == b"application_name" {
            return Some(String::from_utf8_lossy(value).into_owned());
        }
        if name.is_empty() {
            break;
        }
    }
    None
}
