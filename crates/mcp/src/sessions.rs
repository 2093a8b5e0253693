//! The sessions of the protocol versions before 2026-07-28, each bound to the agent that opened
//! it for its whole life.
//!
//! [`Sessions`] is the SDK's in-memory session manager behind a table of its own. The table
//! names each session by an id of its own making (128 random bits), which is the only id a
//! client ever sees; the SDK's session keeps the SDK's id, which it logs and no request can
//! name. An entry is made when a session is opened, bound to its agent by `initialize`, and
//! removed when the session ends, however it ends (a `DELETE`, the SDK's idle time-out, a
//! shutdown, or being closed to make room), so a session and its owner live and die together:
//! there is never a session without its owner, nor an owner record without its session.
//!
//! An agent holds at most [`MAX_SESSIONS_PER_AGENT`]: opening one more closes its oldest, whose
//! streams end (its client is told: its stream closes, and its next request is answered 404).
//! The instance holds at most [`MAX_SESSIONS`]: past it, opening one closes the oldest session
//! of the agent holding the most, so one agent's many sessions make room before anyone else's.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use rmcp::model::{ClientJsonRpcMessage, GetExtensions, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId, SessionManager};
use uuid::Uuid;

use crate::Credentials;

/// The most sessions one agent holds at once on an instance.
pub const MAX_SESSIONS_PER_AGENT: usize = 16;
/// The most sessions an instance holds at once.
pub const MAX_SESSIONS: usize = 10_000;

/// The sessions of one instance, each with its owner; `M` is the SDK's manager of them.
#[derive(Debug)]
pub struct Sessions<M = LocalSessionManager> {
    sdk: M,
    table: Mutex<Table>,
    per_agent: usize,
    total: usize,
}

#[derive(Debug, Default)]
struct Table {
    entries: HashMap<SessionId, Entry>,
    /// Each agent's sessions, oldest first.
    by_agent: HashMap<Uuid, VecDeque<SessionId>>,
}

#[derive(Debug)]
struct Entry {
    /// The SDK's id of the session.
    sdk: SessionId,
    /// Its agent, from its `initialize` on (`None` until then, when no request can name it).
    owner: Option<Uuid>,
}

impl Table {
    /// Forgets a session; the SDK's id of it, to close.
    fn remove(&mut self, id: &SessionId) -> Option<SessionId> {
        let entry = self.entries.remove(id)?;
        if let Some(owner) = entry.owner
            && let Some(sessions) = self.by_agent.get_mut(&owner)
        {
            sessions.retain(|session| session != id);
            if sessions.is_empty() {
                self.by_agent.remove(&owner);
            }
        }
        Some(entry.sdk)
    }

    /// The oldest session of the agent holding the most.
    fn heaviest_oldest(&self) -> Option<SessionId> {
        self.by_agent.values().max_by_key(|sessions| sessions.len()).and_then(|sessions| sessions.front().cloned())
    }
}

/// Why a session could not be used. Its words never name the session.
#[derive(Debug)]
pub enum SessionError {
    /// No session has this id.
    Unknown,
    /// The instance holds as many sessions as it may, none of which can be closed yet.
    Full,
    /// An `initialize` that no agent's credentials came with.
    NoAgent,
    /// The system gave no random bits for an id.
    NoRandomness,
    /// The SDK's session failed (its words name the SDK's id of it, never the client's).
    Sdk(String),
}

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionError::Unknown => f.write_str("no such session"),
            SessionError::Full => f.write_str("this instance holds as many MCP sessions as it may"),
            SessionError::NoAgent => f.write_str("an initialize without an agent's credentials"),
            SessionError::NoRandomness => f.write_str("no random bits for a session id"),
            SessionError::Sdk(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for SessionError {}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions::with_limits(LocalSessionManager::default(), MAX_SESSIONS_PER_AGENT, MAX_SESSIONS)
    }
}

impl<M: SessionManager> Sessions<M> {
    /// The sessions of `sdk`, holding at most `per_agent` an agent and `total` in all.
    pub fn with_limits(sdk: M, per_agent: usize, total: usize) -> Sessions<M> {
        Sessions { sdk, table: Mutex::default(), per_agent: per_agent.max(1), total: total.max(1) }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The agent a session belongs to; `None` if no open session has this id.
    pub fn owner(&self, id: &str) -> Option<Uuid> {
        self.table().entries.get(id).and_then(|entry| entry.owner)
    }

    fn sdk_id(&self, id: &SessionId) -> Result<SessionId, SessionError> {
        self.table().entries.get(id).map(|entry| entry.sdk.clone()).ok_or(SessionError::Unknown)
    }

    /// Closes the SDK's sessions named, outside the table's lock.
    async fn close_all(&self, closing: Vec<SessionId>) {
        for sdk in closing {
            // A session that already ended has nothing left to close.
            let _ = self.sdk.close_session(&sdk).await;
        }
    }
}

/// A fresh id for a client to name its session by: 128 random bits, in hex.
fn new_id() -> Result<SessionId, SessionError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|_| SessionError::NoRandomness)?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect::<String>().into())
}

/// The agent whose credentials the server's authentication put into a request.
fn agent_of(message: &ClientJsonRpcMessage) -> Option<Uuid> {
    let ClientJsonRpcMessage::Request(request) = message else {
        return None;
    };
    request
        .request
        .extensions()
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Credentials>())
        .map(|credentials| credentials.agent_id)
}

/// A stream of the SDK's session as a type of its own: the SDK's streams are `'static`, but
/// their types name the borrow of the id they were opened with.
fn erased(stream: impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static) -> SseStream {
    Box::pin(stream)
}

type SseStream = std::pin::Pin<Box<dyn futures::Stream<Item = ServerSseMessage> + Send + Sync>>;

/// The SDK's error, in words.
fn sdk_error(error: impl std::error::Error) -> SessionError {
    SessionError::Sdk(error.to_string())
}

impl<M: SessionManager> SessionManager for Sessions<M> {
    type Error = SessionError;
    type Transport = M::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let id = new_id()?;
        let closing = {
            let table = self.table();
            if table.entries.len() >= self.total { table.heaviest_oldest() } else { None }
        };
        if let Some(oldest) = closing {
            let sdk = self.table().remove(&oldest);
            self.close_all(sdk.into_iter().collect()).await;
        }
        if self.table().entries.len() >= self.total {
            return Err(SessionError::Full);
        }
        let (sdk, transport) = self.sdk.create_session().await.map_err(sdk_error)?;
        self.table().entries.insert(id.clone(), Entry { sdk, owner: None });
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let owner = agent_of(&message).ok_or(SessionError::NoAgent)?;
        let (sdk, closing) = {
            let mut table = self.table();
            let entry = table.entries.get_mut(id).ok_or(SessionError::Unknown)?;
            entry.owner = Some(owner);
            let sdk = entry.sdk.clone();
            let sessions = table.by_agent.entry(owner).or_default();
            sessions.push_back(id.clone());
            let excess = sessions.len().saturating_sub(self.per_agent);
            let oldest: Vec<SessionId> = sessions.iter().take(excess).cloned().collect();
            let closing: Vec<SessionId> = oldest.iter().filter_map(|old| table.remove(old)).collect();
            (sdk, closing)
        };
        self.close_all(closing).await;
        self.sdk.initialize_session(&sdk, message).await.map_err(sdk_error)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        match self.sdk_id(id) {
            Ok(sdk) => self.sdk.has_session(&sdk).await.map_err(sdk_error),
            Err(_) => Ok(false),
        }
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let sdk = self.table().remove(id);
        self.close_all(sdk.into_iter().collect()).await;
        Ok(())
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let sdk = self.sdk_id(id)?;
        let stream = self.sdk.create_stream(&sdk, message).await.map_err(sdk_error)?;
        Ok(erased(stream))
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        let sdk = self.sdk_id(id)?;
        self.sdk.accept_message(&sdk, message).await.map_err(sdk_error)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let sdk = self.sdk_id(id)?;
        let stream = self.sdk.create_standalone_stream(&sdk).await.map_err(sdk_error)?;
        Ok(erased(stream))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let sdk = self.sdk_id(id)?;
        let stream = self.sdk.resume(&sdk, last_event_id).await.map_err(sdk_error)?;
        Ok(erased(stream))
    }
}
