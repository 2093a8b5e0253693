//! The bench's side of the API: the typed client as the bench configures it, timed calls for
//! the measured work, and the checks that fail fast before any of it.

use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

use super::stats::Call;
use super::stats::{Failure, Recorder};
use haggle_client::{Client, ClientError, ProfilePatch, Registered};
use haggle_domain::Tier;

/// The option that names the server, for the advice when it cannot be worked with.
pub const SERVER_FLAG: &str = "--url / HAGGLE_URL";

/// A timed call failed; it is already in the recorder.
#[derive(Debug)]
pub struct CallFailed;

/// The client every worker and agent of a run speaks through (their clones share one
/// keep-alive connection pool). It sends each request once, so that an error is counted rather
/// than hidden by a retry; gives up on a request after `timeout`; and sends an
/// `Idempotency-Key` with each `POST` only when asked to, as the published figures were
/// measured without.
pub fn connect(url: &str, timeout: Duration, idempotency_keys: bool) -> anyhow::Result<Client> {
    let client = Client::new(url, None).map_err(|error| anyhow!("{error}; pass --url http://HOST:PORT"))?;
    Ok(client.attempts(1).idempotency_keys(idempotency_keys).timeout(timeout))
}

/// A measured call: the latency of a success goes to `recorder`, any other outcome is counted
/// there as an error of `call` with what the server said (or why it said nothing). The clock
/// runs around the whole typed call, so besides the round trip it takes in the client's JSON
/// encoding of the request and decoding of the answer, a few microseconds.
pub async fn timed<T>(
    recorder: &mut Recorder,
    call: Call,
    request: impl Future<Output = Result<T, ClientError>>,
) -> Result<T, CallFailed> {
    let started = Instant::now();
    let outcome = request.await;
    let latency = started.elapsed();
    match outcome {
        Ok(answer) => {
            recorder.success(call, latency);
            Ok(answer)
        }
        Err(error) => {
            recorder.failure(call, failure_of(&error), &error.to_string());
            Err(CallFailed)
        }
    }
}

fn failure_of(error: &ClientError) -> Failure {
    match error {
        ClientError::Api(problem) => Failure::Status(problem.status),
        ClientError::UnexpectedResponse { status, .. } if (200..300).contains(status) => Failure::Unreadable,
        ClientError::UnexpectedResponse { status, .. } => Failure::Status(*status),
        // Benchmarks set no approval rules; a held move counts as the 202 it is.
        ClientError::Held(_) => Failure::Status(202),
        // A client that was built has a valid URL; no request of it fails on one.
        ClientError::Transport { .. } | ClientError::InProcess { .. } | ClientError::InvalidUrl { .. } => {
            Failure::Transport
        }
    }
}

/// Fails unless a Haggle server answers at the client's URL with its database ready.
pub async fn check_server(client: &Client, flag: &str) -> anyhow::Result<()> {
    client.ready().await.map_err(|error| error.first_contact(client.base_url(), flag))
}

/// Fails unless the server takes `admin`'s key as its operator token.
pub async fn check_admin_token(admin: &Client) -> anyhow::Result<()> {
    match admin.check_admin_token().await {
        Ok(()) => Ok(()),
        Err(error) if matches!(error.status(), Some(401 | 403)) => bail!(
            "the server refused the admin token ({error}). Pass --admin-token or set HAGGLE_ADMIN_TOKEN to the \
             token the server was started with; the bench needs it to raise its buyers to the AGENCY tier"
        ),
        Err(error) => Err(error.first_contact(admin.base_url(), SERVER_FLAG)),
    }
}

/// Registers an agent (untimed) and gives its API key.
pub async fn register(client: &Client, name: &str) -> anyhow::Result<String> {
    Ok(registered(client, name).await?.api_key)
}

/// Registers an agent and raises it to the AGENCY tier, which listings negotiate with by
/// default (untimed), and gives its API key.
pub async fn register_buyer(client: &Client, admin: &Client, name: &str) -> anyhow::Result<String> {
    let buyer = registered(client, name).await?;
    admin
        .update_agent(buyer.agent.id, &ProfilePatch::tier(Tier::Agency))
        .await
        .context("raising a bench buyer to the AGENCY tier")?;
    Ok(buyer.api_key)
}

async fn registered(client: &Client, name: &str) -> anyhow::Result<Registered> {
    client
        .register(name)
        .await
        .context("registering a bench agent (the server must allow open registration: HAGGLE_OPEN_REGISTRATION=true)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_counted_by_what_the_server_answered() {
        let problem: haggle_client::Problem =
            serde_json::from_value(serde_json::json!({ "status": 409, "code": "thread_active" })).unwrap();
        let unexpected = |status| ClientError::UnexpectedResponse { status, detail: String::new() };
        assert_eq!(failure_of(&ClientError::Api(Box::new(problem))), Failure::Status(409));
        assert_eq!(failure_of(&unexpected(502)), Failure::Status(502));
        assert_eq!(failure_of(&unexpected(200)), Failure::Unreadable);
    }

    #[tokio::test]
    async fn a_timed_call_records_its_failure_with_the_detail() {
        let mut recorder = Recorder::default();
        let failed: Result<(), _> = timed(&mut recorder, Call::Place, async { Err(unexpected_html()) }).await;
        assert!(failed.is_err());
        assert_eq!(recorder.error_count(), 1);
        let first = recorder.first_problem().unwrap();
        assert!(first.starts_with("place 502: ") && first.contains("Bad Gateway"), "{first}");

        let answered = timed(&mut recorder, Call::Place, async { Ok::<_, ClientError>(7) }).await;
        assert_eq!(answered.unwrap(), 7);
        let figures = recorder.summarize(&[Call::Place], Duration::from_secs(1));
        let place = figures.row("place").unwrap();
        assert_eq!((place.ok, place.errors), (1, 1));
    }

    fn unexpected_html() -> ClientError {
        ClientError::UnexpectedResponse { status: 502, detail: "<h1>502 Bad Gateway</h1>".to_owned() }
    }
}
