//! The moves the load makes, each sent as a careful agent sends it and entered in the ledger:
//! acknowledged with what its answer said was made, or unacknowledged with whether every
//! answer claimed nothing was done. Also the setup calls (agents, tiers, policies, webhooks),
//! made before the faults start.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::http::{Agent, Api, Endpoint, Move};
use super::record::{Ack, Ledger, MoveKind, Unacknowledged, Violations, Workload};
use haggle_api::{
    Answered, Approval, ApproverIssued, BidAndThread, Held, Listing, NewListing, OrderWithPayments, PaymentAndOrder,
    Registered, WebhookCreated,
};
use haggle_domain::Tier;
use haggle_domain::strategy::Policy;

/// How long a move is retried (under its key, or while nothing was done) before it is given
/// up: longer than any outage the run causes.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// An answer to a bid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Accept,
    Reject,
    Withdraw,
}

impl Answer {
    pub fn kind(self) -> MoveKind {
        match self {
            Answer::Accept => MoveKind::Accept,
            Answer::Reject => MoveKind::Reject,
            Answer::Withdraw => MoveKind::Withdraw,
        }
    }

    pub fn path(self, bid: Uuid) -> String {
        match self {
            Answer::Accept => format!("/v1/bids/{bid}/accept"),
            Answer::Reject => format!("/v1/bids/{bid}/reject"),
            Answer::Withdraw => format!("/v1/bids/{bid}/withdraw"),
        }
    }
}

/// What a move is, for the ledger.
struct Step<'a> {
    workload: Workload,
    kind: MoveKind,
    /// The bid moved, the listing bid on, or the seller listing.
    target: Uuid,
    agent: &'a Agent,
    keyed: bool,
}

#[derive(Clone)]
pub struct Moves {
    pub api: Api,
    pub to: Endpoint,
    pub ledger: Arc<Ledger>,
    pub violations: Arc<Violations>,
    pub stop: CancellationToken,
}

/// A move that was not acknowledged (already in the ledger).
#[derive(Debug)]
pub struct NotMade;

impl Moves {
    async fn make<T: DeserializeOwned>(
        &self,
        step: Step<'_>,
        path: String,
        body: Value,
    ) -> Result<(T, bool, std::time::Instant), NotMade> {
        let Step { workload, kind, target, agent, keyed } = step;
        let request =
            Move { to: &self.to, method: Method::POST, path, auth: Some(&agent.key), body, keyed, patience: PATIENCE };
        let sent = self.api.make(request, &self.stop).await;
        if let Some(reply) = sent.reply() {
            match reply.json::<T>() {
                Ok(answer) => return Ok((answer, reply.replayed, reply.answered)),
                Err(error) => self.violations.add(
                    "2xx answer that cannot be read",
                    format!("{} {target}: {error}: {}", kind.as_str(), String::from_utf8_lossy(&reply.body)),
                ),
            }
        }
        self.ledger.unacknowledged(Unacknowledged {
            workload,
            kind,
            target,
            agent: agent.id,
            claims_not_made: sent.claims_not_made(),
            last: sent.last.describe(),
        });
        Err(NotMade)
    }

    pub async fn list(&self, workload: Workload, seller: &Agent, listing: &NewListing) -> Result<Uuid, NotMade> {
        let body = serde_json::to_value(listing).expect("listings serialize");
        let (made, replayed, at) = self
            .make::<Listing>(step(workload, MoveKind::List, seller.id, seller, true), "/v1/listings".into(), body)
            .await?;
        self.ledger.ack(workload, seller.id, at, replayed, Ack::Listed { listing: made.id });
        Ok(made.id)
    }

    pub async fn place(
        &self,
        workload: Workload,
        buyer: &Agent,
        listing: Uuid,
        amount: i64,
        keyed: bool,
    ) -> Result<BidAndThread, NotMade> {
        let path = format!("/v1/listings/{listing}/bids");
        let (made, replayed, at) = self
            .make::<BidAndThread>(
                step(workload, MoveKind::Place, listing, buyer, keyed),
                path,
                json!({ "amount": amount }),
            )
            .await?;
        self.ledger.ack(
            workload,
            buyer.id,
            at,
            replayed,
            Ack::Placed { listing, thread: made.thread.id, bid: made.bid.id },
        );
        Ok(made)
    }

    pub async fn counter(
        &self,
        workload: Workload,
        agent: &Agent,
        bid: Uuid,
        amount: i64,
        keyed: bool,
    ) -> Result<BidAndThread, NotMade> {
        let path = format!("/v1/bids/{bid}/counter");
        let (made, replayed, at) = self
            .make::<BidAndThread>(
                step(workload, MoveKind::Counter, bid, agent, keyed),
                path,
                json!({ "amount": amount }),
            )
            .await?;
        self.ledger.ack(workload, agent.id, at, replayed, Ack::Countered { parent: bid, bid: made.bid.id });
        Ok(made)
    }

    pub async fn answer(
        &self,
        workload: Workload,
        agent: &Agent,
        bid: Uuid,
        answer: Answer,
        keyed: bool,
    ) -> Result<Answered, NotMade> {
        let (made, replayed, at) = self
            .make::<Answered>(step(workload, answer.kind(), bid, agent, keyed), answer.path(bid), json!({}))
            .await?;
        let ack = match answer {
            Answer::Accept => Ack::Accepted { bid, order: made.order.as_ref().map(|order| order.id) },
            Answer::Reject => Ack::Rejected { bid },
            Answer::Withdraw => Ack::Withdrew { bid },
        };
        self.ledger.ack(workload, agent.id, at, replayed, ack);
        Ok(made)
    }
}

impl Moves {
    /// The seller fulfils the order.
    pub async fn fulfil(&self, workload: Workload, seller: &Agent, order: Uuid, keyed: bool) -> Result<(), NotMade> {
        let path = format!("/v1/orders/{order}/fulfil");
        let (_, replayed, at) = self
            .make::<OrderWithPayments>(step(workload, MoveKind::Fulfil, order, seller, keyed), path, json!({}))
            .await?;
        self.ledger.ack(workload, seller.id, at, replayed, Ack::Fulfilled { order });
        Ok(())
    }

    /// The buyer records a payment of `amount` on the order; gives the payment's id.
    pub async fn pay(
        &self,
        workload: Workload,
        buyer: &Agent,
        order: Uuid,
        amount: i64,
        keyed: bool,
    ) -> Result<Uuid, NotMade> {
        let path = format!("/v1/orders/{order}/payments");
        let body = json!({ "amount": amount, "reference": format!("chaos {}", Uuid::now_v7()) });
        let (made, replayed, at) =
            self.make::<PaymentAndOrder>(step(workload, MoveKind::Pay, order, buyer, keyed), path, body).await?;
        self.ledger.ack(workload, buyer.id, at, replayed, Ack::Paid { order, payment: made.payment.id });
        Ok(made.payment.id)
    }

    /// The seller confirms the payment.
    pub async fn confirm(
        &self,
        workload: Workload,
        seller: &Agent,
        order: Uuid,
        payment: Uuid,
        keyed: bool,
    ) -> Result<(), NotMade> {
        let path = format!("/v1/orders/{order}/payments/{payment}/confirm");
        let (_, replayed, at) = self
            .make::<PaymentAndOrder>(step(workload, MoveKind::Confirm, payment, seller, keyed), path, json!({}))
            .await?;
        self.ledger.ack(workload, seller.id, at, replayed, Ack::Confirmed { order, payment });
        Ok(())
    }

    /// The buyer completes the order.
    pub async fn complete(&self, workload: Workload, buyer: &Agent, order: Uuid, keyed: bool) -> Result<(), NotMade> {
        let path = format!("/v1/orders/{order}/complete");
        let (_, replayed, at) = self
            .make::<OrderWithPayments>(step(workload, MoveKind::Complete, order, buyer, keyed), path, json!({}))
            .await?;
        self.ledger.ack(workload, buyer.id, at, replayed, Ack::Completed { order });
        Ok(())
    }
}

impl Moves {
    /// Opens a negotiation of `kind` (`refund` with `amount`, or `cancel`) on the order; gives
    /// its first bid.
    pub async fn open(
        &self,
        workload: Workload,
        agent: &Agent,
        order: Uuid,
        kind: &str,
        amount: Option<i64>,
    ) -> Result<BidAndThread, NotMade> {
        let path = format!("/v1/orders/{order}/negotiations");
        let body = match amount {
            Some(amount) => json!({ "kind": kind, "amount": amount, "terms": { "reason": "damaged" } }),
            None => json!({ "kind": kind, "terms": { "reason": "no longer needed" } }),
        };
        let (made, replayed, at) =
            self.make::<BidAndThread>(step(workload, MoveKind::Open, order, agent, true), path, body).await?;
        let ack = Ack::Opened { order, kind: kind.to_owned(), thread: made.thread.id, bid: made.bid.id };
        self.ledger.ack(workload, agent.id, at, replayed, ack);
        Ok(made)
    }

    /// Accepts a refund's or a cancellation's bid on the order.
    pub async fn settle(
        &self,
        workload: Workload,
        agent: &Agent,
        order: Uuid,
        kind: &str,
        bid: Uuid,
    ) -> Result<Answered, NotMade> {
        let path = Answer::Accept.path(bid);
        let (made, replayed, at) =
            self.make::<Answered>(step(workload, MoveKind::Settle, bid, agent, true), path, json!({})).await?;
        self.ledger.ack(workload, agent.id, at, replayed, Ack::Settled { order, kind: kind.to_owned(), bid });
        Ok(made)
    }

    /// A counter (`Some(amount)`) or an acceptance of `bid` by an agent whose rules hold it:
    /// gives the request. A move made at once is a violation, and is not a request.
    pub async fn hold(
        &self,
        workload: Workload,
        agent: &Agent,
        bid: Uuid,
        counter: Option<i64>,
    ) -> Result<Approval, NotMade> {
        let (path, body) = match counter {
            Some(amount) => (format!("/v1/bids/{bid}/counter"), json!({ "amount": amount })),
            None => (Answer::Accept.path(bid), json!({})),
        };
        let (made, replayed, at) =
            self.make::<Value>(step(workload, MoveKind::Hold, bid, agent, true), path.clone(), body).await?;
        match serde_json::from_value::<Held>(made.clone()) {
            Ok(held) => {
                let ack = Ack::Held { approval: held.approval.id, bid: Some(bid) };
                self.ledger.ack(workload, agent.id, at, replayed, ack);
                Ok(held.approval)
            }
            Err(_) => {
                self.violations.add(
                    "move of a ruled agent made without an approval",
                    format!("POST {path} by agent {} was answered with the move made: {made}", agent.id),
                );
                Err(NotMade)
            }
        }
    }

    /// The agent withdraws its own pending request.
    pub async fn unhold(&self, workload: Workload, agent: &Agent, approval: Uuid) -> Result<(), NotMade> {
        let path = format!("/v1/approvals/{approval}/withdraw");
        let (_, replayed, at) =
            self.make::<Approval>(step(workload, MoveKind::Unhold, approval, agent, true), path, json!({})).await?;
        self.ledger.ack(workload, agent.id, at, replayed, Ack::Unheld { approval });
        Ok(())
    }
}

fn step(workload: Workload, kind: MoveKind, target: Uuid, agent: &Agent, keyed: bool) -> Step<'_> {
    Step { workload, kind, target, agent, keyed }
}

/// Setup calls, made through the balancer before any fault; each must succeed.
pub struct Setup<'a> {
    pub api: &'a Api,
    pub to: &'a Endpoint,
    pub admin_token: &'a str,
}

impl Setup<'_> {
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: String,
        auth: Option<&str>,
        body: Value,
    ) -> anyhow::Result<T> {
        let keyed = method == Method::POST;
        let request =
            Move { to: self.to, method: method.clone(), path: path.clone(), auth, body, keyed, patience: PATIENCE };
        let sent = self.api.make(request, &CancellationToken::new()).await;
        match sent.reply() {
            Some(reply) => reply.json().map_err(|error| anyhow::anyhow!("{method} {path}: {error}")),
            None => bail!("{method} {path}: {}", sent.last.describe()),
        }
    }

    /// Registers an agent, raised to `tier` unless that is PUBLIC.
    pub async fn agent(&self, name: &str, tier: Tier) -> anyhow::Result<Agent> {
        let registered: Registered = self
            .call(Method::POST, "/v1/agents".into(), None, json!({ "name": name }))
            .await
            .context("registering an agent")?;
        if tier != Tier::Public {
            let path = format!("/v1/admin/agents/{}", registered.agent.id);
            let _: Value = self.call(Method::PATCH, path, Some(self.admin_token), json!({ "tier": tier })).await?;
        }
        Ok(Agent { id: registered.agent.id, key: registered.api_key })
    }

    /// Sets `agent`'s default policy in `role` (`buyer` or `seller`).
    pub async fn policy(&self, agent: &Agent, role: &str, policy: &Policy) -> anyhow::Result<()> {
        let body = serde_json::to_value(policy).expect("policies serialize");
        let _: Value = self.call(Method::PUT, format!("/v1/agents/me/policies/{role}"), Some(&agent.key), body).await?;
        Ok(())
    }

    /// Sets `agent`'s approval rules (the agent-wide default).
    pub async fn approval_rules(&self, agent: &Agent, rules: Value) -> anyhow::Result<()> {
        let _: Value = self.call(Method::PUT, "/v1/agents/me/approval-rules".into(), Some(&agent.key), rules).await?;
        Ok(())
    }

    /// Adds an approver to `agent`; gives its token.
    pub async fn approver(&self, agent: &Agent, name: &str) -> anyhow::Result<String> {
        let issued: ApproverIssued = self
            .call(Method::POST, "/v1/agents/me/approvers".into(), Some(&agent.key), json!({ "name": name }))
            .await
            .context("adding an approver")?;
        Ok(issued.token)
    }

    /// Subscribes a webhook for every event of `agent` to `url`; gives its secret.
    pub async fn webhook(&self, agent: &Agent, url: &str) -> anyhow::Result<(Uuid, String)> {
        let created: WebhookCreated = self
            .call(Method::POST, "/v1/webhooks".into(), Some(&agent.key), json!({ "url": url, "events": ["*"] }))
            .await
            .context("subscribing a webhook (the instances allow private targets)")?;
        Ok((created.webhook.id, created.secret))
    }
}
