//! Event readers that follow agents through the faults: Server-Sent Events streams that resume
//! with `Last-Event-ID` whenever they are cut, and long polls that resume from their cursor.
//! Each keeps every id it was given, and notes any that does not come after the one before.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::http::{Agent, Api, Endpoint, Outcome, Request};
use haggle_api::EventPage;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Stream,
    LongPoll,
}

impl Style {
    pub fn as_str(self) -> &'static str {
        match self {
            Style::Stream => "SSE stream",
            Style::LongPoll => "long poll",
        }
    }
}

/// What one reader saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub agent: Uuid,
    pub style: Style,
    pub ids: Vec<i64>,
    /// Ids that came at or below the one before (`(before, then)`).
    pub disorder: Vec<(i64, i64)>,
    /// Connections after the first (streams), or failed polls (long polls).
    pub reconnects: u64,
}

impl Seen {
    fn take(&mut self, id: i64) {
        match self.ids.last() {
            Some(&last) if id <= last => self.disorder.push((last, id)),
            _ => self.ids.push(id),
        }
    }

    pub fn last(&self) -> i64 {
        self.ids.last().copied().unwrap_or(0)
    }
}

pub type Shared = Arc<Mutex<Seen>>;

/// Starts a reader for `agent`; it runs until `stop`.
pub fn spawn(api: Api, to: Endpoint, agent: Agent, style: Style, stop: CancellationToken) -> Shared {
    let seen =
        Arc::new(Mutex::new(Seen { agent: agent.id, style, ids: Vec::new(), disorder: Vec::new(), reconnects: 0 }));
    let shared = seen.clone();
    tokio::spawn(async move {
        let reading = async {
            match style {
                Style::Stream => follow_stream(&api, &to, &agent, &seen).await,
                Style::LongPoll => follow_polls(&api, &to, &agent, &seen).await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = reading => {}
        }
    });
    shared
}

/// How long a stream may stay silent before it counts as dead (the instances send a heartbeat
/// every few seconds).
const SILENCE: Duration = Duration::from_secs(20);

async fn follow_stream(api: &Api, to: &Endpoint, agent: &Agent, seen: &Shared) {
    let mut first = true;
    loop {
        if !first {
            seen.lock().expect("seen").reconnects += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        first = false;
        let last = seen.lock().expect("seen").last();
        let response = match api.open_stream(to, &agent.key, (last > 0).then_some(last)).await {
            Ok(response) => response,
            Err(_) => continue,
        };
        let mut body = response.bytes_stream();
        let mut buffer = String::new();
        loop {
            let chunk = match tokio::time::timeout(SILENCE, body.next()).await {
                Ok(Some(Ok(chunk))) => chunk,
                // Cut (an instance died, or closed the stream when its database went away),
                // ended, or silent for too long: resume from the last id.
                Ok(Some(Err(_)) | None) | Err(_) => break,
            };
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let message: String = buffer.drain(..end + 2).collect();
                if let Some(id) = message_id(&message) {
                    seen.lock().expect("seen").take(id);
                }
            }
        }
    }
}

/// The `id:` of one SSE message, if it has one (heartbeats are comments without).
fn message_id(message: &str) -> Option<i64> {
    message.lines().find_map(|line| line.strip_prefix("id:")).and_then(|id| id.trim().parse().ok())
}

async fn follow_polls(api: &Api, to: &Endpoint, agent: &Agent, seen: &Shared) {
    loop {
        let after = seen.lock().expect("seen").last();
        let path = format!("/v1/events?after={after}&limit=200&wait=20");
        let outcome = api.send(to, Request { wait: Duration::from_secs(20), ..Request::get(&path, &agent.key) }).await;
        let page = match &outcome {
            Outcome::Answered(reply) if reply.success() => reply.json::<EventPage>().ok(),
            _ => None,
        };
        match page {
            Some(page) => {
                let mut seen = seen.lock().expect("seen");
                for event in page.data {
                    seen.take(event.id);
                }
            }
            None => {
                seen.lock().expect("seen").reconnects += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_give_their_ids_and_heartbeats_none() {
        assert_eq!(message_id("id: 42\nevent: bid.placed\ndata: {}\n\n"), Some(42));
        assert_eq!(message_id("event: bid.placed\nid:7\ndata: {}\n\n"), Some(7));
        assert_eq!(message_id(": heartbeat\n\n"), None);
    }

    #[test]
    fn an_id_at_or_below_the_last_is_disorder() {
        let mut seen = Seen { agent: Uuid::nil(), style: Style::Stream, ids: vec![], disorder: vec![], reconnects: 0 };
        for id in [3, 5, 5, 4, 9] {
            seen.take(id);
        }
        assert_eq!(seen.ids, vec![3, 5, 9]);
        assert_eq!(seen.disorder, vec![(5, 5), (5, 4)]);
    }
}
