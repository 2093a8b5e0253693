//! `GET /v1/events/stream`: my events as the server publishes them, read as Server-Sent Events.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use haggle_api::Event;
use http_body_util::BodyExt;

use reqwest::Method;

use crate::in_process::Failure;
use crate::{ApiBody, ClientError};

/// How long a stream may stay silent before it counts as broken. The server sends a heartbeat
/// every 15 s by default, so a longer silence means the connection is gone.
pub const STREAM_IDLE_LIMIT: Duration = Duration::from_secs(90);

/// A live stream of the agent's events, oldest first. Reconnect after it ends with
/// [`crate::Client::event_stream`] and `after` = [`EventStream::cursor`], so that nothing is missed.
pub struct EventStream {
    source: Source,
    buffer: Vec<u8>,
    ready: VecDeque<Event>,
    cursor: Option<i64>,
}

impl EventStream {
    pub(crate) fn new(source: Source, after: Option<i64>) -> EventStream {
        EventStream { source, buffer: Vec::new(), ready: VecDeque::new(), cursor: after }
    }

    /// The id of the last event read (or the `after` the stream started from).
    pub fn cursor(&self) -> Option<i64> {
        self.cursor
    }

    /// The next event. `None` when the stream ended: the server stopped it (shutting down, or
    /// the key was revoked), the connection broke, or it stayed silent past
    /// [`STREAM_IDLE_LIMIT`].
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                self.cursor = Some(event.id);
                return Some(event);
            }
            match tokio::time::timeout(STREAM_IDLE_LIMIT, self.source.chunk()).await {
                Ok(Some(bytes)) => {
                    self.buffer.extend_from_slice(&bytes);
                    self.read_messages();
                }
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Moves every complete message in the buffer to `ready`.
    fn read_messages(&mut self) {
        while let Some((end, separator)) = message_end(&self.buffer) {
            let message: Vec<u8> = self.buffer.drain(..end + separator).take(end).collect();
            let text = String::from_utf8_lossy(&message);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|data| data.strip_prefix(' ').unwrap_or(data))
                .collect();
            // Comments (heartbeats) have no data; anything unreadable is skipped, not fatal.
            if !data.is_empty()
                && let Ok(event) = serde_json::from_str::<Event>(&data.join("\n"))
            {
                self.ready.push_back(event);
            }
        }
    }
}

/// Where the first message of `buffer` ends, and the length of the blank line that ends it.
fn message_end(buffer: &[u8]) -> Option<(usize, usize)> {
    (0..buffer.len()).find_map(|at| {
        if buffer[at..].starts_with(b"\r\n\r\n") {
            Some((at, 4))
        } else if buffer[at..].starts_with(b"\n\n") {
            Some((at, 2))
        } else {
            None
        }
    })
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream").field("cursor", &self.cursor).field("ready", &self.ready.len()).finish()
    }
}

/// Where a stream's answer comes from: the network, or the API in this process.
pub(crate) enum Source {
    Http(reqwest::Response),
    InProcess(http::Response<ApiBody>),
}

impl Source {
    pub fn status(&self) -> http::StatusCode {
        match self {
            Source::Http(response) => response.status(),
            Source::InProcess(response) => response.status(),
        }
    }

    /// The next piece of the body; `None` once it ended or broke.
    async fn chunk(&mut self) -> Option<Bytes> {
        match self {
            Source::Http(response) => response.chunk().await.ok().flatten(),
            Source::InProcess(response) => loop {
                match response.body_mut().frame().await {
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => return Some(data),
                        // Trailers: nothing to read.
                        Err(_) => continue,
                    },
                    Some(Err(_)) | None => return None,
                }
            },
        }
    }

    /// A refused stream request's problem document.
    pub async fn refused(self, url: &str) -> ClientError {
        let status = self.status();
        let bytes = match self {
            Source::Http(response) => response.bytes().await.map_err(|error| ClientError::Transport {
                method: "GET".to_owned(),
                url: url.to_owned(),
                error,
            }),
            Source::InProcess(response) => response
                .into_body()
                .collect()
                .await
                .map(|body| body.to_bytes())
                .map_err(|error| Failure::Body(error).into_error(&Method::GET, url)),
        };
        match bytes {
            Ok(bytes) => crate::error::refusal(&Method::GET, url, status, &bytes),
            Err(error) => error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_end_at_a_blank_line_of_either_kind() {
        assert_eq!(message_end(b"id: 1\ndata: {}\n\nrest"), Some((14, 2)));
        assert_eq!(message_end(b"id: 1\r\ndata: {}\r\n\r\n"), Some((15, 4)));
        assert_eq!(message_end(b"id: 1\ndata: {}\n"), None);
    }
}
