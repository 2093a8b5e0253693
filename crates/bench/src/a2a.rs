//! `haggle bench --workload a2a`: w1's negotiation (place, counter, counter, accept) as A2A
//! messages over the JSON-RPC binding at `/a2a`, beside the same over REST with an
//! `Idempotency-Key` on every move, in one run on the same agents.
//!
//! Per concurrency level, after w1's setup (one seller and one AGENCY buyer per worker, enough
//! listings), two phases run one after the other, each with its warm-up. REST with keys is the
//! like-for-like one: an A2A move is keyed by its message id, so it is made as a keyed REST move
//! is. In the A2A phase each move is a `SendMessage` whose data part names it (`place` opens the
//! task; `counter` and `accept` name the task by `taskId` and answer its pending bid, as an A2A
//! client does), with `returnImmediately`, since each side of the bench makes its own moves and
//! has no other side to wait for. The A2A client is a JSON-RPC client over one shared
//! keep-alive connection pool, as the typed client's; a call is timed from the request to its
//! decoded answer. With `--server-pid` and `--postgres-pid`, each phase's CPU per call is read
//! from `/proc` as well. Each phase prints w1's table; a last table sets them side by side, with
//! A2A's cost per move against keyed REST's.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use reqwest::header::{AUTHORIZATION, HeaderValue};
use serde_json::{Value, json};
use uuid::Uuid;

use super::api::CallFailed;
use super::args::BenchArgs;
use super::cpu::{CpuPerCall, CpuSampler};
use super::level::{Making, Moves, measure_level, set_up_workers};
use super::report::{self, LevelReport};
use super::stats::{ALL_CALLS, Call, Failure, Recorder};
use super::workload::{BUYER_COUNTER, OPENING_BID, Parties, SELLER_COUNTER, Workload};

/// How a phase reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    RestKeys,
    A2a,
}

impl Transport {
    const ALL: [Transport; 2] = [Transport::RestKeys, Transport::A2a];

    fn name(self) -> &'static str {
        match self {
            Transport::RestKeys => "a2a/rest+keys",
            Transport::A2a => "a2a/jsonrpc",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Transport::RestKeys => "REST, an idempotency key on every move",
            Transport::A2a => "A2A SendMessage over JSON-RPC, the message id as the key, returnImmediately",
        }
    }
}

/// One worker's two A2A agents: the shared HTTP client, and each side's credential.
struct Agents {
    http: reqwest::Client,
    endpoint: Arc<str>,
    seller: HeaderValue,
    buyer: HeaderValue,
}

impl Moves for Arc<Agents> {
    fn make(
        &self,
        _: &Parties,
        listing: Uuid,
        recorder: &mut Recorder,
    ) -> impl Future<Output = Result<(), CallFailed>> + Send {
        negotiate(self, listing, recorder)
    }
}

fn bearer(key: &str) -> anyhow::Result<HeaderValue> {
    HeaderValue::from_str(&format!("Bearer {key}")).context("an API key that is no header value")
}

/// The levels' reports, two phases each.
pub async fn run(
    client: &haggle_client::Client,
    admin: &haggle_client::Client,
    args: &BenchArgs,
    run_id: &str,
    concurrency: usize,
) -> anyhow::Result<Vec<LevelReport>> {
    let (mut workers, listings_per_worker) = set_up_workers(client, admin, args, run_id, concurrency).await?;
    let http = reqwest::Client::builder().timeout(args.timeout).build().context("building the A2A client")?;
    let endpoint: Arc<str> = Arc::from(format!("{}/a2a", client.base_url().trim_end_matches('/')));
    let sampler = CpuSampler::start(args.server_pid, args.postgres_pid);
    let mut levels = Vec::new();
    for transport in Transport::ALL {
        let label = format!("[{} c={concurrency}]", transport.name());
        let (back, mut level, ended) = match transport {
            Transport::RestKeys => {
                for worker in &mut workers {
                    worker.parties.seller = worker.parties.seller.clone().idempotency_keys(true);
                    worker.parties.buyer = worker.parties.buyer.clone().idempotency_keys(true);
                }
                let workers = workers.into_iter().map(|worker| Making { worker, moves: Workload::W1 }).collect();
                let (back, level) =
                    measure_level(client, args, &label, Workload::W1, listings_per_worker, workers).await?;
                (back, level, Instant::now())
            }
            Transport::A2a => {
                let making = workers
                    .into_iter()
                    .map(|worker| {
                        let agents = Agents {
                            http: http.clone(),
                            endpoint: Arc::clone(&endpoint),
                            seller: bearer(&worker.seller_key)?,
                            buyer: bearer(&worker.buyer_key)?,
                        };
                        Ok(Making { worker, moves: Arc::new(agents) })
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                let (back, level) =
                    measure_level(client, args, &label, Workload::W1, listings_per_worker, making).await?;
                (back, level, Instant::now())
            }
        };
        workers = back;
        let calls = level.figures.row(ALL_CALLS).map_or(0, |row| row.ok);
        let started = ended.checked_sub(std::time::Duration::from_secs_f64(level.figures.wall_seconds));
        level.cpu = started.and_then(|started| sampler.per_call(started, ended, calls));
        level.conditions.workload = transport.name();
        level.conditions.idempotency_keys = true;
        print!("{}", report::level_table(&level, Workload::A2a));
        levels.push(level);
    }
    sampler.stop().await;
    print!("{}", side_by_side(&levels));
    Ok(levels)
}

/// The phases of one level in one table, and A2A's cost per move against keyed REST's.
fn side_by_side(levels: &[LevelReport]) -> String {
    let mut out = String::new();
    let concurrency = levels.first().map_or(0, |level| level.conditions.concurrency);
    let _ = writeln!(
        out,
        "\n== haggle bench: w1 over REST with keys and A2A, concurrency {concurrency} (p50 / p99 ms; CPU ms a call) =="
    );
    let _ = writeln!(
        out,
        "{:<16} {:>8} {:>8} {:>15} {:>15} {:>15} {:>15} {:>7} {:>7} {:>7} {:>7}",
        "transport", "neg/s", "calls/s", "place", "counter", "accept", "all", "errors", "server", "pg", "bench"
    );
    for level in levels {
        let f = &level.figures;
        let cell = |call: &str| {
            f.row(call).map_or_else(
                || "-".to_owned(),
                |row| format!("{} / {}", report::ms(row.p50_ms), report::ms(row.p99_ms)),
            )
        };
        let all = f.row(ALL_CALLS);
        let cpu = |pick: fn(&CpuPerCall) -> Option<f64>| {
            level.cpu.as_ref().and_then(pick).map_or_else(|| "-".to_owned(), |ms| format!("{ms:.3}"))
        };
        let _ = writeln!(
            out,
            "{:<16} {:>8.1} {:>8.1} {:>15} {:>15} {:>15} {:>15} {:>7} {:>7} {:>7} {:>7}",
            level.conditions.workload,
            f.units_per_second,
            all.map_or(0.0, |row| row.calls_per_second),
            cell("place"),
            cell("counter"),
            cell("accept"),
            cell(ALL_CALLS),
            all.map_or(0, |row| row.errors),
            cpu(|cpu| cpu.server_ms),
            cpu(|cpu| cpu.postgres_ms),
            cpu(|cpu| Some(cpu.bench_ms)),
        );
    }
    for transport in Transport::ALL {
        let _ = writeln!(out, "  {:<16} {}", transport.name(), transport.describe());
    }
    if let [rest, a2a] = levels {
        let _ = writeln!(out, "A2A's cost per move against keyed REST's: {}", cost_ratio(rest, a2a));
    }
    out
}

/// How much more an A2A move costs than a keyed REST move: by calls a second, by median
/// latency, and by the deployment's CPU a call when it was read.
fn cost_ratio(rest: &LevelReport, a2a: &LevelReport) -> String {
    let (Some(rest_all), Some(a2a_all)) = (rest.figures.row(ALL_CALLS), a2a.figures.row(ALL_CALLS)) else {
        return "no calls".to_owned();
    };
    let mut parts = Vec::new();
    if a2a_all.calls_per_second > 0.0 {
        parts.push(format!("{:.2} × by calls a second", rest_all.calls_per_second / a2a_all.calls_per_second));
    }
    if let (Some(rest), Some(a2a)) = (rest_all.p50_ms, a2a_all.p50_ms) {
        parts.push(format!("{:.2} × by p50", a2a / rest));
    }
    let deployment = |level: &LevelReport| level.cpu.as_ref().and_then(|cpu| cpu.deployment_ms);
    if let (Some(rest), Some(a2a)) = (deployment(rest), deployment(a2a)) {
        parts.push(format!("{:.2} × by the server's and PostgreSQL's CPU a call", a2a / rest));
    }
    parts.join(", ")
}

/// w1's negotiation as A2A messages: the buyer's opening bid opens the task, every later move
/// answers the task's pending bid.
async fn negotiate(agents: &Agents, listing: Uuid, recorder: &mut Recorder) -> Result<(), CallFailed> {
    let place = json!({ "action": "place", "listing_id": listing, "amount": OPENING_BID });
    let task = send(agents, recorder, Call::Place, &agents.buyer, None, place).await?;
    let Some(task_id) = task["id"].as_str().map(str::to_owned) else {
        recorder.failure(Call::Place, Failure::Unreadable, &task.to_string());
        return Err(CallFailed);
    };
    let task = Some(task_id.as_str());
    let counter = |amount| json!({ "action": "counter", "amount": amount });
    send(agents, recorder, Call::Counter, &agents.seller, task, counter(SELLER_COUNTER)).await?;
    send(agents, recorder, Call::Counter, &agents.buyer, task, counter(BUYER_COUNTER)).await?;
    let done = send(agents, recorder, Call::Accept, &agents.seller, task, json!({ "action": "accept" })).await?;
    if done["status"]["state"] != "TASK_STATE_COMPLETED" {
        recorder.failure(Call::Accept, Failure::Unreadable, &done.to_string());
        return Err(CallFailed);
    }
    Ok(())
}

/// A timed `SendMessage`: the task it answers with, or a failure counted by the HTTP status or
/// the JSON-RPC error's code.
async fn send(
    agents: &Agents,
    recorder: &mut Recorder,
    call: Call,
    credential: &HeaderValue,
    task: Option<&str>,
    data: Value,
) -> Result<Value, CallFailed> {
    let mut message = json!({
        "messageId": Uuid::now_v7().to_string(),
        "role": "ROLE_USER",
        "parts": [{ "data": data, "mediaType": "application/json" }],
    });
    if let Some(task) = task {
        message["taskId"] = json!(task);
    }
    let body = json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": { "message": message, "configuration": { "returnImmediately": true } },
    });
    let started = Instant::now();
    let outcome = async {
        let response =
            agents.http.post(&*agents.endpoint).header(AUTHORIZATION, credential.clone()).json(&body).send().await?;
        let status = response.status();
        let body = response.bytes().await?;
        Ok::<_, reqwest::Error>((status, body))
    }
    .await;
    let (status, body) = match outcome {
        Ok(answer) => answer,
        Err(error) => {
            recorder.failure(call, Failure::Transport, &error.to_string());
            return Err(CallFailed);
        }
    };
    let mut answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let latency = started.elapsed();
    if !status.is_success() {
        recorder.failure(call, Failure::Status(status.as_u16()), &String::from_utf8_lossy(&body));
        return Err(CallFailed);
    }
    if let Some(code) = answer["error"]["code"].as_i64() {
        recorder.failure(call, Failure::JsonRpc(code), &answer["error"].to_string());
        return Err(CallFailed);
    }
    match answer["result"]["task"].take() {
        Value::Object(task) => {
            recorder.success(call, latency);
            Ok(Value::Object(task))
        }
        _ => {
            recorder.failure(call, Failure::Unreadable, &String::from_utf8_lossy(&body));
            Err(CallFailed)
        }
    }
}
