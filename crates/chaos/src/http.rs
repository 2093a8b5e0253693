//! The run's side of the API: raw HTTP, so that every answer's status and headers are seen
//! (the typed client hides them), a journal that counts every answer and holds each error
//! answer to the API's promise (no 5xx but 503, and a 503 always with `Retry-After` and a
//! problem document), and the retry rules of a careful agent.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use super::record::Violations;
use haggle_api::Problem;

/// Where requests go: the balancer, or one instance directly.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub name: String,
    pub base: String,
}

/// An answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub retry_after: Option<String>,
    pub problem_json: bool,
    pub replayed: bool,
    /// The server's request id; HAProxy's own answers have none.
    pub request_id: Option<String>,
    pub body: Bytes,
    pub answered: Instant,
}

impl Reply {
    pub fn success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub fn json<T: DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_slice(&self.body).map_err(|error| format!("an answer of the wrong shape ({error})"))
    }

    pub fn problem(&self) -> Option<Problem> {
        serde_json::from_slice(&self.body).ok()
    }

    pub fn code(&self) -> Option<String> {
        self.problem().map(|problem| problem.code)
    }

    /// Whether HAProxy answered rather than an instance.
    pub fn answered_by_balancer(&self) -> bool {
        self.request_id.is_none()
    }

    /// A 503 that says the change may have been made (the server's "outcome unknown", or
    /// HAProxy's answer for an instance that died with the request).
    pub fn outcome_unknown(&self) -> bool {
        self.status == 503 && self.problem().is_some_and(|problem| problem.detail.contains("unknown"))
    }

    pub fn describe(&self) -> String {
        let origin = if self.answered_by_balancer() { " from HAProxy" } else { "" };
        match self.problem() {
            Some(problem) => format!("{} {}{origin}: {}", self.status, problem.code, problem.detail),
            None => format!("{}{origin}", self.status),
        }
    }
}

/// What became of a request.
#[derive(Debug, Clone)]
pub enum Outcome {
    Answered(Reply),
    /// No connection could be made: nothing was sent.
    NotSent(String),
    /// Sent, and no (whole) answer came: whether it was acted on is unknown.
    NoAnswer(String),
}

impl Outcome {
    pub fn describe(&self) -> String {
        match self {
            Outcome::Answered(reply) => reply.describe(),
            Outcome::NotSent(why) => format!("not sent: {why}"),
            Outcome::NoAnswer(why) => format!("no answer: {why}"),
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            Outcome::Answered(reply) => Some(reply.status),
            Outcome::NotSent(_) | Outcome::NoAnswer(_) => None,
        }
    }
}

/// What an outcome says about a state-changing request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// 2xx: made (or replayed).
    Done,
    /// Nothing was done, and sending it again is safe: a 503 that says so, a 429, a
    /// connection never made.
    NotDone,
    /// It may have been made: no answer, a 503 saying the outcome is unknown, or a 5xx the API
    /// never gives.
    Unclear,
    /// The first request with this idempotency key is still running.
    KeyBusy,
    /// Refused (a 4xx): nothing was done.
    Refused,
}

pub fn verdict(outcome: &Outcome) -> Verdict {
    match outcome {
        Outcome::NotSent(_) => Verdict::NotDone,
        Outcome::NoAnswer(_) => Verdict::Unclear,
        Outcome::Answered(reply) => match reply.status {
            200..=299 => Verdict::Done,
            429 => Verdict::NotDone,
            409 if reply.code().as_deref() == Some("idempotency_key_in_use") => Verdict::KeyBusy,
            400..=499 => Verdict::Refused,
            503 if !reply.outcome_unknown() => Verdict::NotDone,
            _ => Verdict::Unclear,
        },
    }
}

/// Counts of answers, by where they went and what they were.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// (endpoint, status) → answers.
    pub statuses: BTreeMap<(String, u16), u64>,
    /// 503s answered by HAProxy itself, and by the instances.
    pub unavailable_from_balancer: u64,
    pub unavailable_from_instances: u64,
    /// 503s saying the outcome is unknown.
    pub unavailable_unknown: u64,
    pub not_sent: BTreeMap<String, u64>,
    pub no_answer: BTreeMap<String, u64>,
    /// The first few requests left without an answer, in words.
    pub no_answer_samples: Vec<String>,
}

impl Tally {
    pub fn answers(&self) -> u64 {
        self.statuses.values().sum()
    }

    pub fn by_class(&self) -> BTreeMap<u16, u64> {
        let mut classes = BTreeMap::new();
        for ((_, status), count) in &self.statuses {
            *classes.entry(status / 100).or_default() += count;
        }
        classes
    }

    pub fn with_status(&self, wanted: u16) -> u64 {
        self.statuses.iter().filter(|((_, status), _)| *status == wanted).map(|(_, count)| count).sum()
    }
}

/// One request to send.
pub struct Request<'a> {
    pub method: Method,
    pub path: &'a str,
    /// The API key (or the operator token) it is sent with.
    pub auth: Option<&'a str>,
    pub idempotency_key: Option<&'a str>,
    pub body: Option<&'a Value>,
    /// How long the server is asked to wait (a long poll), on top of the usual time limit.
    pub wait: Duration,
}

impl<'a> Request<'a> {
    pub fn get(path: &'a str, auth: &'a str) -> Request<'a> {
        Request { method: Method::GET, path, auth: Some(auth), idempotency_key: None, body: None, wait: Duration::ZERO }
    }

    pub fn post(path: &'a str, auth: &'a str, body: &'a Value) -> Request<'a> {
        Request { method: Method::POST, body: Some(body), ..Request::get(path, auth) }
    }
}

/// The client every part of the load sends through, with the journal of its answers.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    streams: reqwest::Client,
    tally: Arc<Mutex<Tally>>,
    violations: Arc<Violations>,
    started: Instant,
}

/// How long one request may take (long polls add their wait).
const TIMEOUT: Duration = Duration::from_secs(30);

impl Api {
    pub fn new(violations: Arc<Violations>, started: Instant) -> anyhow::Result<Api> {
        // Idle connections are dropped before HAProxy's keep-alive timeout (10 s) closes them,
        // so that no request goes out on a connection the balancer is closing.
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .pool_idle_timeout(Duration::from_secs(5))
            .no_proxy()
            .build()?;
        let streams = reqwest::Client::builder().connect_timeout(Duration::from_secs(5)).no_proxy().build()?;
        Ok(Api { http, streams, tally: Default::default(), violations, started })
    }

    pub fn tally(&self) -> Tally {
        self.tally.lock().expect("tally").clone()
    }

    /// Sends one request and journals its outcome.
    pub async fn send(&self, to: &Endpoint, sending: Request<'_>) -> Outcome {
        let Request { method, path, auth, idempotency_key, body, wait } = sending;
        let url = format!("{}{path}", to.base);
        let mut request = self.http.request(method.clone(), &url).timeout(TIMEOUT + wait);
        if let Some(key) = auth {
            request = request.bearer_auth(key);
        }
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let outcome = match request.send().await {
            Ok(response) => {
                let head = Head::of(&response);
                match response.bytes().await {
                    Ok(body) => Outcome::Answered(head.reply(body)),
                    Err(error) => Outcome::NoAnswer(causes(&error)),
                }
            }
            Err(error) if error.is_connect() => Outcome::NotSent(causes(&error)),
            Err(error) => Outcome::NoAnswer(causes(&error)),
        };
        self.journal(to, &method, path, &outcome);
        outcome
    }

    /// Opens an event stream; the answer's head is journalled, and a 2xx gives the response
    /// to read from.
    pub async fn open_stream(
        &self,
        to: &Endpoint,
        auth: &str,
        last_event_id: Option<i64>,
    ) -> Result<reqwest::Response, Outcome> {
        let path = "/v1/events/stream?after=0";
        let mut request =
            self.streams.get(format!("{}{path}", to.base)).bearer_auth(auth).header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let sent = tokio::time::timeout(TIMEOUT, request.send()).await;
        let outcome = match sent {
            Err(_) => Outcome::NoAnswer("no answer within 30 s".to_owned()),
            Ok(Err(error)) if error.is_connect() => Outcome::NotSent(causes(&error)),
            Ok(Err(error)) => Outcome::NoAnswer(causes(&error)),
            Ok(Ok(response)) if response.status().is_success() => {
                let head = Head::of(&response);
                self.journal(to, &Method::GET, path, &Outcome::Answered(head.reply(Bytes::new())));
                return Ok(response);
            }
            Ok(Ok(response)) => {
                let head = Head::of(&response);
                let body = response.bytes().await.unwrap_or_default();
                Outcome::Answered(head.reply(body))
            }
        };
        self.journal(to, &Method::GET, path, &outcome);
        Err(outcome)
    }

    /// Counts the outcome, and holds an error answer to the API's promise.
    fn journal(&self, to: &Endpoint, method: &Method, path: &str, outcome: &Outcome) {
        let at = self.started.elapsed().as_secs_f64();
        let mut tally = self.tally.lock().expect("tally");
        let reply = match outcome {
            Outcome::Answered(reply) => reply,
            Outcome::NotSent(_) => {
                *tally.not_sent.entry(to.name.clone()).or_default() += 1;
                return;
            }
            Outcome::NoAnswer(why) => {
                *tally.no_answer.entry(to.name.clone()).or_default() += 1;
                if tally.no_answer_samples.len() < 5 {
                    tally.no_answer_samples.push(format!("{method} {path} via {} at {at:.1} s: {why}", to.name));
                }
                return;
            }
        };
        *tally.statuses.entry((to.name.clone(), reply.status)).or_default() += 1;
        if reply.status == 503 {
            if reply.answered_by_balancer() {
                tally.unavailable_from_balancer += 1;
            } else {
                tally.unavailable_from_instances += 1;
            }
            if reply.outcome_unknown() {
                tally.unavailable_unknown += 1;
            }
        }
        drop(tally);
        let request_id = reply.request_id.as_deref().unwrap_or("none: HAProxy answered");
        let what = || format!("{method} {path} via {} at {at:.1} s (request id {request_id})", to.name);
        if reply.status >= 500 && reply.status != 503 {
            self.violations.add("5xx other than 503", format!("{}: {}", what(), reply.describe()));
        }
        if reply.status == 503 && reply.retry_after.is_none() {
            self.violations.add("503 without Retry-After", format!("{}: {}", what(), reply.describe()));
        }
        if reply.status >= 400 && !reply.problem_json {
            self.violations.add("error that is not problem+json", format!("{}: {}", what(), reply.describe()));
        }
    }
}

/// What a response's head says, before its body is read.
struct Head {
    status: u16,
    retry_after: Option<String>,
    problem_json: bool,
    replayed: bool,
    request_id: Option<String>,
}

impl Head {
    fn of(response: &reqwest::Response) -> Head {
        let header = |name: &str| response.headers().get(name).and_then(|value| value.to_str().ok()).map(str::to_owned);
        Head {
            status: response.status().as_u16(),
            retry_after: header("retry-after"),
            problem_json: header("content-type")
                .is_some_and(|value| value.starts_with(haggle_api::problem::PROBLEM_JSON)),
            replayed: header("idempotent-replayed").as_deref() == Some("true"),
            request_id: header("x-request-id"),
        }
    }

    fn reply(self, body: Bytes) -> Reply {
        Reply {
            status: self.status,
            retry_after: self.retry_after,
            problem_json: self.problem_json,
            replayed: self.replayed,
            request_id: self.request_id,
            body,
            answered: Instant::now(),
        }
    }
}

/// The causes of a transport error, which say more than its own message.
fn causes(error: &reqwest::Error) -> String {
    let mut parts = vec![if error.is_timeout() { "timed out".to_owned() } else { error.to_string() }];
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        parts.push(cause.to_string());
        source = cause.source();
    }
    parts.dedup();
    parts.join(": ")
}

/// An agent the run acts as.
#[derive(Debug, Clone)]
pub struct Agent {
    pub id: Uuid,
    pub key: String,
}

/// A state-changing request, and how hard to try.
pub struct Move<'a> {
    pub to: &'a Endpoint,
    pub method: Method,
    pub path: String,
    /// The API key (or the operator token) it is sent with; none for registration.
    pub auth: Option<&'a str>,
    pub body: Value,
    /// With a key the move is sent again, under the same key, until it is answered for sure or
    /// `patience` runs out; without one it is sent again only when nothing was done.
    pub keyed: bool,
    pub patience: Duration,
}

/// How a move ended.
#[derive(Debug, Clone)]
pub struct Sent {
    pub last: Outcome,
    pub verdict: Verdict,
    /// Whether any answer along the way left the outcome unknown.
    pub was_unclear: bool,
}

impl Sent {
    pub fn reply(&self) -> Option<&Reply> {
        match &self.last {
            Outcome::Answered(reply) if self.verdict == Verdict::Done => Some(reply),
            _ => None,
        }
    }

    /// Every answer said nothing was done.
    pub fn claims_not_made(&self) -> bool {
        !self.was_unclear && matches!(self.verdict, Verdict::NotDone | Verdict::Refused | Verdict::KeyBusy)
    }
}

impl Api {
    /// Makes a move as a careful agent does: honours `Retry-After`, and sends it again only
    /// when that is safe (see [`Move::keyed`]). `stop` cuts the retries short.
    pub async fn make(&self, request: Move<'_>, stop: &tokio_util::sync::CancellationToken) -> Sent {
        let key = request.keyed.then(|| Uuid::now_v7().to_string());
        let deadline = Instant::now() + request.patience;
        let mut was_unclear = false;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let sending = Request {
                method: request.method.clone(),
                path: &request.path,
                auth: request.auth,
                idempotency_key: key.as_deref(),
                body: Some(&request.body),
                wait: Duration::ZERO,
            };
            let outcome = self.send(request.to, sending).await;
            let verdict = verdict(&outcome);
            was_unclear |= verdict == Verdict::Unclear;
            let again = match verdict {
                Verdict::Done | Verdict::Refused => false,
                Verdict::NotDone => true,
                Verdict::Unclear | Verdict::KeyBusy => key.is_some(),
            };
            if !again || Instant::now() >= deadline || stop.is_cancelled() {
                return Sent { last: outcome, verdict, was_unclear };
            }
            tokio::time::sleep(pause(&outcome, attempts)).await;
        }
    }

    /// A read, sent again until it is answered 2xx or `patience` runs out.
    pub async fn read(&self, to: &Endpoint, path: &str, agent: &Agent, patience: Duration) -> Result<Reply, Outcome> {
        let deadline = Instant::now() + patience;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let outcome = self.send(to, Request::get(path, &agent.key)).await;
            match outcome {
                Outcome::Answered(reply) if reply.success() => return Ok(reply),
                Outcome::Answered(reply) if reply.status < 500 && reply.status != 429 => {
                    return Err(Outcome::Answered(reply));
                }
                outcome if Instant::now() >= deadline => return Err(outcome),
                outcome => tokio::time::sleep(pause(&outcome, attempts)).await,
            }
        }
    }
}

/// How long to wait before sending again: what `Retry-After` says (at most 2 s: the run wants
/// to see recovery as it happens), else a short, growing pause.
fn pause(outcome: &Outcome, attempt: u32) -> Duration {
    let told = match outcome {
        Outcome::Answered(reply) => reply.retry_after.as_deref().and_then(|value| value.trim().parse::<u64>().ok()),
        Outcome::NotSent(_) | Outcome::NoAnswer(_) => None,
    };
    match told {
        Some(seconds) => Duration::from_secs(seconds.min(2)),
        None => Duration::from_millis(100 * u64::from(attempt.min(10))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, body: Value, request_id: Option<&str>) -> Outcome {
        Outcome::Answered(Reply {
            status,
            retry_after: Some("1".to_owned()),
            problem_json: true,
            replayed: false,
            request_id: request_id.map(str::to_owned),
            body: Bytes::from(serde_json::to_vec(&body).unwrap()),
            answered: Instant::now(),
        })
    }

    fn problem(status: u16, code: &str, detail: &str) -> Value {
        serde_json::json!({ "status": status, "code": code, "detail": detail })
    }

    #[test]
    fn answers_say_whether_the_move_was_made() {
        let id = Some("r-1");
        assert_eq!(verdict(&reply(201, serde_json::json!({}), id)), Verdict::Done);
        let unreachable = problem(503, "unavailable", "the database is unreachable; retry shortly");
        assert_eq!(verdict(&reply(503, unreachable, id)), Verdict::NotDone);
        let unknown =
            problem(503, "unavailable", "the database did not confirm the change, so whether it was made is unknown");
        assert_eq!(verdict(&reply(503, unknown, id)), Verdict::Unclear);
        let busy = problem(409, "idempotency_key_in_use", "the first request is still running");
        assert_eq!(verdict(&reply(409, busy, id)), Verdict::KeyBusy);
        let lost = problem(409, "invalid_transition", "the bid is ACCEPTED");
        assert_eq!(verdict(&reply(409, lost, id)), Verdict::Refused);
        assert_eq!(verdict(&reply(500, problem(500, "internal", "oops"), id)), Verdict::Unclear);
        assert_eq!(verdict(&Outcome::NotSent("refused".into())), Verdict::NotDone);
        assert_eq!(verdict(&Outcome::NoAnswer("reset".into())), Verdict::Unclear);
    }

    #[test]
    fn haproxy_answers_carry_no_request_id() {
        let Outcome::Answered(ours) = reply(503, problem(503, "unavailable", "x"), None) else { unreachable!() };
        assert!(ours.answered_by_balancer());
        let Outcome::Answered(theirs) = reply(503, problem(503, "unavailable", "x"), Some("r")) else { unreachable!() };
        assert!(!theirs.answered_by_balancer());
    }

    #[test]
    fn retry_after_is_honoured_but_capped() {
        let told = reply(503, problem(503, "unavailable", "x"), None);
        assert_eq!(pause(&told, 1), Duration::from_secs(1));
        assert_eq!(pause(&Outcome::NotSent("x".into()), 3), Duration::from_millis(300));
        assert_eq!(pause(&Outcome::NotSent("x".into()), 50), Duration::from_secs(1));
    }
}
