//! The `approvals` workload: the cost of a held and approved move beside the same move made
//! directly, in one run. Each worker has, besides its seller and buyer, a second AGENCY buyer
//! whose approval rules hold every acceptance, and an approver of that buyer. One unit is two
//! negotiations on one listing: the buyer bids, the seller counters, and the buyer accepts
//! (`accept`, made at once); then the ruled buyer bids, the seller counters, and the ruled buyer
//! accepts, held (`hold`, answered 202), and the approver approves (`approve`, which makes the
//! acceptance). `hold+appr` is the two together, per move; the level ends with the medians and
//! their ratio.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use super::api::{self, CallFailed, timed};
use super::args::BenchArgs;
use super::level::{self, Making, Moves};
use super::report::LevelReport;
use super::stats::{Call, Failure, Recorder};
use super::workload::{OPENING_BID, Parties, SELLER_COUNTER, Workload};
use haggle_client::{Client, CounterOffer, Placement};

/// The ruled buyer's rules: every acceptance held.
fn rules() -> Value {
    json!({ "rules": [{ "move": "accept" }], "ttl_seconds": 3600 })
}

/// A worker's way of making a unit: the plain buyer's key, the ruled buyer (typed, for its bids,
/// and its key) and its approver's token. The three timed moves go through one plain HTTP
/// client alike, so that they compare.
pub struct HeldMoves {
    http: reqwest::Client,
    base: String,
    timeout: Duration,
    plain_key: String,
    ruled: Client,
    ruled_key: String,
    approver: String,
}

impl HeldMoves {
    /// A timed POST expected to answer `expected`; gives its JSON body.
    async fn post(
        &self,
        recorder: &mut Recorder,
        call: Call,
        key: &str,
        path: &str,
        expected: StatusCode,
    ) -> Result<(Value, Duration), CallFailed> {
        let started = Instant::now();
        let sent = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(key)
            .timeout(self.timeout)
            .json(&json!({}))
            .send()
            .await;
        let outcome = match sent {
            Ok(response) => {
                let status = response.status();
                match response.bytes().await {
                    Ok(body) if status == expected => match serde_json::from_slice::<Value>(&body) {
                        Ok(value) => Ok(value),
                        Err(_) => Err((Failure::Unreadable, String::from_utf8_lossy(&body).into_owned())),
                    },
                    Ok(body) => Err((Failure::Status(status.as_u16()), String::from_utf8_lossy(&body).into_owned())),
                    Err(error) => Err((Failure::Transport, error.to_string())),
                }
            }
            Err(error) => Err((Failure::Transport, error.to_string())),
        };
        let latency = started.elapsed();
        match outcome {
            Ok(value) => {
                recorder.success(call, latency);
                Ok((value, latency))
            }
            Err((failure, body)) => {
                recorder.failure(call, failure, &body);
                Err(CallFailed)
            }
        }
    }

    /// A bid of `buyer` on `listing` and the seller's counter (timed as `place` and `counter`);
    /// gives the counter's id.
    async fn countered(
        &self,
        buyer: &Client,
        seller: &Client,
        listing: Uuid,
        recorder: &mut Recorder,
    ) -> Result<Uuid, CallFailed> {
        let placed = timed(recorder, Call::Place, buyer.place_bid(listing, &Placement::new(OPENING_BID))).await?;
        let offer = CounterOffer::new(SELLER_COUNTER, false);
        Ok(timed(recorder, Call::Counter, seller.counter(placed.bid.id, &offer)).await?.bid.id)
    }
}

impl Moves for HeldMoves {
    async fn make(&self, parties: &Parties, listing: Uuid, recorder: &mut Recorder) -> Result<(), CallFailed> {
        // The move made directly.
        let bid = self.countered(&parties.buyer, &parties.seller, listing, recorder).await?;
        let path = format!("/v1/bids/{bid}/accept");
        let (answer, _) = self.post(recorder, Call::Accept, &self.plain_key, &path, StatusCode::OK).await?;
        if answer["order"].is_null() {
            recorder.failure(Call::Accept, Failure::Unreadable, "an acceptance without its order");
            return Err(CallFailed);
        }
        // The same move held, then approved.
        let bid = self.countered(&self.ruled, &parties.seller, listing, recorder).await?;
        let path = format!("/v1/bids/{bid}/accept");
        let (held, hold) = self.post(recorder, Call::Hold, &self.ruled_key, &path, StatusCode::ACCEPTED).await?;
        let Some(approval) = held["approval"]["id"].as_str() else {
            recorder.failure(Call::Hold, Failure::Unreadable, "a 202 without its approval");
            return Err(CallFailed);
        };
        let path = format!("/v1/approvals/{approval}/approve");
        let (approved, approve) = self.post(recorder, Call::Approve, &self.approver, &path, StatusCode::OK).await?;
        if approved["approval"]["status"] != "APPROVED" || approved["order"].is_null() {
            let detail = format!("the approval did not make the move: {}", approved["approval"]);
            recorder.failure(Call::Approve, Failure::Unreadable, &detail);
            return Err(CallFailed);
        }
        recorder.success(Call::HeldMove, hold + approve);
        Ok(())
    }
}

/// A level: the workers set up as every workload's (a seller and a buyer each), each given a
/// ruled buyer and an approver; warmed up and measured.
pub async fn run_level(
    client: &Client,
    admin: &Client,
    args: &BenchArgs,
    run_id: &str,
    concurrency: usize,
) -> anyhow::Result<LevelReport> {
    let label = format!("[{} c={concurrency}]", Workload::Approvals.name());
    let (workers, listings_per_worker) = level::set_up_workers(client, admin, args, run_id, concurrency).await?;
    let http = reqwest::Client::builder().build().context("building the HTTP client")?;
    let mut making = Vec::with_capacity(workers.len());
    for (index, worker) in workers.into_iter().enumerate() {
        let name = format!("bench-{run_id}-c{concurrency}-w{index}-ruled-buyer");
        let ruled_key = api::register_buyer(client, admin, &name).await?;
        let approver = set_up_rules(&http, client.base_url(), &ruled_key).await?;
        let moves = HeldMoves {
            http: http.clone(),
            base: client.base_url().to_owned(),
            timeout: args.timeout,
            plain_key: worker.buyer_key.clone(),
            ruled: client.with_api_key(ruled_key.clone()),
            ruled_key,
            approver,
        };
        making.push(Making { worker, moves });
    }
    let (_, level) =
        level::measure_level(client, args, &label, Workload::Approvals, listings_per_worker, making).await?;
    Ok(level)
}

/// Sets the ruled buyer's rules and adds its approver; gives the approver's token.
async fn set_up_rules(http: &reqwest::Client, base: &str, key: &str) -> anyhow::Result<String> {
    let put = http.put(format!("{base}/v1/agents/me/approval-rules")).bearer_auth(key).json(&rules()).send().await?;
    if !put.status().is_success() {
        bail!("setting a bench buyer's approval rules: {} {}", put.status(), put.text().await.unwrap_or_default());
    }
    let added = http
        .post(format!("{base}/v1/agents/me/approvers"))
        .bearer_auth(key)
        .json(&json!({ "name": "bench approver" }))
        .send()
        .await?;
    if !added.status().is_success() {
        bail!("adding a bench approver: {} {}", added.status(), added.text().await.unwrap_or_default());
    }
    let issued: Value = added.json().await.context("reading the approver's token")?;
    issued["token"].as_str().map(str::to_owned).context("the approver's token is missing")
}

/// The medians side by side: the move made directly, held and approved, and their ratio.
pub fn comparison(level: &LevelReport) -> String {
    let p50 = |call: Call| level.figures.row(call.name()).and_then(|row| row.p50_ms);
    let mut out = String::new();
    match (p50(Call::Accept), p50(Call::Hold), p50(Call::Approve), p50(Call::HeldMove)) {
        (Some(direct), Some(hold), Some(approve), Some(held)) => {
            let _ = writeln!(
                out,
                "held move    median {held:.3} ms held and approved (hold {hold:.3} + approve {approve:.3}) \
                 against {direct:.3} ms made directly: {:.2} ×",
                held / direct
            );
        }
        _ => {
            let _ = writeln!(out, "held move    no comparison: a call has no successful sample");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_hold_every_acceptance_and_the_rows_put_the_moves_side_by_side() {
        let rules: haggle_domain::approval::ApprovalRules = serde_json::from_value(rules()).unwrap();
        assert_eq!(serde_json::to_value(&rules).unwrap()["rules"][0]["move"], "accept");
        let names: Vec<&str> = Workload::Approvals.calls().iter().map(|call| call.name()).collect();
        assert_eq!(names, ["place", "counter", "accept", "hold", "approve", "hold+appr"]);
    }
}
