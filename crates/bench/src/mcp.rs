//! `haggle bench --workload mcp`: w1's negotiation (place, counter, counter, accept) through
//! the MCP server at `/mcp`, beside the same over REST, in one run on the same agents.
//!
//! Per concurrency level, after w1's setup (one seller and one AGENCY buyer per worker, enough
//! listings), four phases run one after the other, each with its warm-up: REST as w1 measures it
//! (no idempotency keys), REST with an `Idempotency-Key` on every move (as every MCP move carries
//! one), MCP over Streamable HTTP with sessions (`initialize`, `Mcp-Session-Id`: the protocol
//! versions before 2026-07-28), and MCP on the stateless 2026-07-28 protocol. An MCP client is
//! the official SDK's, one per agent, each with its own connection pool; a call is timed from
//! `tools/call` to its decoded result. Each phase prints w1's table; a last table sets them side
//! by side.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use serde_json::{Value, json};
use uuid::Uuid;

use super::api::CallFailed;
use super::args::BenchArgs;
use super::level::{Making, Moves, measure_level, set_up_workers};
use super::report::{self, LevelReport};
use super::stats::{Call, Failure, Recorder};
use super::workload::{BUYER_COUNTER, OPENING_BID, Parties, SELLER_COUNTER, Workload};

/// How a phase reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Rest { keys: bool },
    Mcp { stateless: bool },
}

impl Transport {
    const ALL: [Transport; 4] = [
        Transport::Rest { keys: false },
        Transport::Rest { keys: true },
        Transport::Mcp { stateless: false },
        Transport::Mcp { stateless: true },
    ];

    fn name(self) -> &'static str {
        match self {
            Transport::Rest { keys: false } => "mcp/rest",
            Transport::Rest { keys: true } => "mcp/rest+keys",
            Transport::Mcp { stateless: false } => "mcp/mcp-session",
            Transport::Mcp { stateless: true } => "mcp/mcp-stateless",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Transport::Rest { keys: false } => "REST, no idempotency keys (as w1)",
            Transport::Rest { keys: true } => "REST, an idempotency key on every move",
            Transport::Mcp { stateless: false } => "MCP over Streamable HTTP, sessions (before 2026-07-28)",
            Transport::Mcp { stateless: true } => "MCP over Streamable HTTP, stateless (2026-07-28)",
        }
    }
}

type Session = RunningService<RoleClient, ()>;

/// One worker's two MCP clients.
struct Sessions {
    seller: Session,
    buyer: Session,
}

/// w1's moves through the worker's sessions rather than its REST clients.
impl Moves for Arc<Sessions> {
    fn make(
        &self,
        _: &Parties,
        listing: Uuid,
        recorder: &mut Recorder,
    ) -> impl Future<Output = Result<(), CallFailed>> + Send {
        negotiate(self, listing, recorder)
    }
}

async fn open(url: &str, key: &str, stateless: bool) -> anyhow::Result<Session> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("{url}/mcp")).auth_header(key),
    );
    let session = if stateless {
        let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
        ().serve_with_lifecycle(transport, lifecycle).await?
    } else {
        ().serve(transport).await?
    };
    Ok(session)
}

/// The levels' reports, four phases each.
pub async fn run(
    client: &haggle_client::Client,
    admin: &haggle_client::Client,
    args: &BenchArgs,
    run_id: &str,
    concurrency: usize,
) -> anyhow::Result<Vec<LevelReport>> {
    let (mut workers, listings_per_worker) = set_up_workers(client, admin, args, run_id, concurrency).await?;
    let mut levels = Vec::new();
    for transport in Transport::ALL {
        let label = format!("[{} c={concurrency}]", transport.name());
        let sessions = match transport {
            Transport::Rest { keys } => {
                for worker in &mut workers {
                    worker.parties.seller = worker.parties.seller.clone().idempotency_keys(keys);
                    worker.parties.buyer = worker.parties.buyer.clone().idempotency_keys(keys);
                }
                None
            }
            Transport::Mcp { stateless } => {
                let url = client.base_url();
                let opened = futures::future::try_join_all(workers.iter().map(|worker| async move {
                    Ok::<_, anyhow::Error>(Arc::new(Sessions {
                        seller: open(url, &worker.seller_key, stateless).await?,
                        buyer: open(url, &worker.buyer_key, stateless).await?,
                    }))
                }))
                .await
                .context("opening the bench agents' MCP sessions")?;
                Some(opened)
            }
        };
        let (back, mut level) = match &sessions {
            None => {
                let workers = workers.into_iter().map(|worker| Making { worker, moves: Workload::W1 }).collect();
                measure_level(client, args, &label, Workload::W1, listings_per_worker, workers).await?
            }
            Some(sessions) => {
                let workers =
                    workers.into_iter().zip(sessions.iter().cloned()).map(|(worker, moves)| Making { worker, moves });
                measure_level(client, args, &label, Workload::W1, listings_per_worker, workers.collect()).await?
            }
        };
        workers = back;
        level.conditions.workload = transport.name();
        level.conditions.idempotency_keys = !matches!(transport, Transport::Rest { keys: false });
        print!("{}", report::level_table(&level, Workload::Mcp));
        levels.push(level);
        if let Some(sessions) = sessions {
            for sessions in sessions {
                if let Ok(sessions) = Arc::try_unwrap(sessions) {
                    let _ = sessions.seller.cancel().await;
                    let _ = sessions.buyer.cancel().await;
                }
            }
        }
    }
    print!("{}", side_by_side(&levels));
    Ok(levels)
}

/// The phases of one level in one table.
fn side_by_side(levels: &[LevelReport]) -> String {
    let mut out = String::new();
    let concurrency = levels.first().map_or(0, |level| level.conditions.concurrency);
    let _ = writeln!(out, "\n== haggle bench: w1 over REST and MCP, concurrency {concurrency} (p50 / p99 ms) ==");
    let _ = writeln!(
        out,
        "{:<18} {:>8} {:>8} {:>15} {:>15} {:>15} {:>15}",
        "transport", "neg/s", "calls/s", "place", "counter", "accept", "all"
    );
    for level in levels {
        let f = &level.figures;
        let cell = |call: &str| {
            f.row(call).map_or_else(
                || "-".to_owned(),
                |row| format!("{} / {}", report::ms(row.p50_ms), report::ms(row.p99_ms)),
            )
        };
        let calls = f.row(super::stats::ALL_CALLS).map_or(0.0, |row| row.calls_per_second);
        let _ = writeln!(
            out,
            "{:<18} {:>8.1} {:>8.1} {:>15} {:>15} {:>15} {:>15}",
            level.conditions.workload,
            f.units_per_second,
            calls,
            cell("place"),
            cell("counter"),
            cell("accept"),
            cell(super::stats::ALL_CALLS)
        );
    }
    for transport in Transport::ALL {
        let _ = writeln!(out, "  {:<18} {}", transport.name(), transport.describe());
    }
    out
}

/// w1's negotiation through the tools.
async fn negotiate(sessions: &Sessions, listing: Uuid, recorder: &mut Recorder) -> Result<(), CallFailed> {
    let placed = tool(
        recorder,
        Call::Place,
        &sessions.buyer,
        "place_bid",
        json!({ "listing_id": listing, "amount": OPENING_BID }),
    )
    .await?;
    let countered = tool(
        recorder,
        Call::Counter,
        &sessions.seller,
        "counter_bid",
        json!({ "bid_id": placed["bid"]["id"], "amount": SELLER_COUNTER }),
    )
    .await?;
    let answered = tool(
        recorder,
        Call::Counter,
        &sessions.buyer,
        "counter_bid",
        json!({ "bid_id": countered["bid"]["id"], "amount": BUYER_COUNTER }),
    )
    .await?;
    tool(recorder, Call::Accept, &sessions.seller, "accept_bid", json!({ "bid_id": answered["bid"]["id"] })).await?;
    Ok(())
}

/// A timed tool call: its structured result, or a failure counted by the refusal's status.
async fn tool(
    recorder: &mut Recorder,
    call: Call,
    session: &Session,
    name: &'static str,
    arguments: Value,
) -> Result<Value, CallFailed> {
    let arguments = arguments.as_object().cloned().unwrap_or_default();
    let started = Instant::now();
    let outcome = session.call_tool(CallToolRequestParams::new(name).with_arguments(arguments)).await;
    let latency = started.elapsed();
    match outcome {
        Ok(result) if result.is_error != Some(true) => {
            recorder.success(call, latency);
            Ok(result.structured_content.unwrap_or(Value::Null))
        }
        Ok(result) => {
            let document = result.structured_content.unwrap_or(Value::Null);
            let status = document["status"].as_u64().and_then(|status| u16::try_from(status).ok());
            recorder.failure(call, status.map_or(Failure::Unreadable, Failure::Status), &document.to_string());
            Err(CallFailed)
        }
        Err(error) => {
            recorder.failure(call, Failure::Transport, &error.to_string());
            Err(CallFailed)
        }
    }
}
