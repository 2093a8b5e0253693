//! Moves held for approval (SPEC §10), through MCP: the tools that list and answer the agent's
//! requests, and the person asked through the host.
//!
//! A move the agent's approval rules hold is not a refusal. When the client declared the
//! elicitation capability (form mode) on a session that may send it requests, the held tool
//! call asks the person through the host, with the move and its amount: approved, the server
//! approves the request with the agent's key (which SPEC §10 lets answer its own requests) and
//! the call completes with what the move made, or with the request FAILED and the move's own
//! refusal; answered "no" or declined, the request is denied, with the person's note. Dismissed
//! (cancelled), or without a host to ask, the call answers the pending request as its
//! structured result, and the request waits for an approver (list_my_approvals,
//! answer_approval, the page at `/approve`, or the API).

use std::time::Duration;

use chrono::Utc;
use haggle_client::{
    Approval, ApprovalDenial, ApprovalGrant, ApprovalOutcome, ApprovalQuery, ApprovalStatus, Budget, ClientError,
};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{ElicitationMode, RequestContext};
use rmcp::{RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

use crate::Haggle;
use crate::answer::{done, held, money, refused};
use crate::caller::Acting;
use crate::keyed::{Answer, IdempotencyKey, with_key};

/// The longest a held tool call waits for the person's answer through the host, whatever the
/// request's own time left.
pub(crate) const LONGEST_ASK: Duration = Duration::from_secs(600);

/// The person's answer through the host.
#[derive(Debug, Deserialize)]
struct Decision {
    approve: bool,
    #[serde(default)]
    note: Option<String>,
}

/// What to do with a request.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
    /// Make the held move now (with a budget, let later moves within it through).
    Approve,
    /// Refuse it; the note says why.
    Deny,
    /// Take back your own request (the agent only).
    Withdraw,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AnswerApproval {
    /// The request (`approval.id` in a held move's answer, or in list_my_approvals).
    pub approval_id: Uuid,
    pub decision: Verdict,
    /// A word to the agent, up to 500 characters (approve or deny).
    #[schemars(length(max = 500))]
    pub note: Option<String>,
    /// With approve only: later moves within it go through without asking, on the thread or
    /// the listing, for expires_in seconds ({amount, expires_in, scope: thread|listing}).
    pub budget: Option<Budget>,
    pub idempotency_key: Option<IdempotencyKey>,
}

/// What a held move became once the person answered through the host.
fn settled(outcome: &ApprovalOutcome) -> CallToolResult {
    let approval = &outcome.approval;
    let summary = match (approval.status, &approval.failure) {
        (ApprovalStatus::Approved, _) => {
            let made = match (&outcome.order, &outcome.bid) {
                (Some(order), _) => format!(" Order {} is {}.", order.id, order.status),
                (None, Some(bid)) => format!(" Bid {} is {}.", bid.id, bid.status),
                (None, None) => String::new(),
            };
            format!(
                "Approved by {}: your {} of {} is made.{made}",
                approval.approver.as_deref().unwrap_or("agent"),
                approval.held.kind.as_str(),
                money(approval.held.amount, approval.held.currency)
            )
        }
        (status, Some(failure)) => format!(
            "Approved, but the move could not be made ({status}, {}): {}",
            failure.code,
            failure.detail.trim_end_matches('.')
        ),
        (status, None) => format!("Request {} is {status}.", approval.id),
    };
    done(
        summary,
        &json!({ "outcome": "approved", "approval": approval, "bid": outcome.bid,
                            "thread": outcome.thread, "order": outcome.order }),
    )
}

fn denied(approval: &Approval) -> CallToolResult {
    let summary = format!(
        "Denied through the host: your {} of {} was not made{}.",
        approval.held.kind.as_str(),
        money(approval.held.amount, approval.held.currency),
        approval.note.as_deref().map(|note| format!(" (\"{note}\")")).unwrap_or_default()
    );
    done(summary, &json!({ "outcome": "denied", "approval": approval }))
}

/// What the person is asked.
fn question(approval: &Approval) -> String {
    let held = &approval.held;
    let finality = if held.is_final { ", as a final offer" } else { "" };
    let message = held.message.as_deref().map(|message| format!(" Message: \"{message}\".")).unwrap_or_default();
    format!(
        "Approve this move? As {} on listing {}: {} of {}{finality} ({}).{message} The request expires at {}.",
        held.party.as_str(),
        held.listing_id,
        held.kind.as_str(),
        money(held.amount, held.currency),
        held.route,
        approval.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    )
}

/// A move's answer that the API refused or held: a held move asks the person through the host
/// when it can (see the module), else it is the pending request; a refusal is the tool error.
pub(crate) async fn settle(acting: &Acting, context: &RequestContext<RoleServer>, error: ClientError) -> Answer {
    let ClientError::Held(approval) = error else { return Ok(refused(error)) };
    if !context.peer.supported_elicitation_modes().contains(&ElicitationMode::Form) {
        return Ok(held(&approval));
    }
    let Ok(schema) = ElicitationSchema::builder()
        .required_bool_with("approve", |schema| {
            schema.title("Approve").description("Yes makes the move now; no denies it.")
        })
        .optional_string_with("note", |schema| {
            schema.title("Note").description("A word to the agent (up to 500 characters).").max_length(500)
        })
        .build()
    else {
        return Ok(held(&approval));
    };
    let left = (approval.expires_at - Utc::now()).to_std().unwrap_or_default().min(LONGEST_ASK);
    let asked = context
        .peer
        .create_elicitation_with_timeout(
            ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: question(&approval),
                requested_schema: schema,
            },
            Some(left),
        )
        .await;
    // No answer (the host could not ask, or the time ran out): the request waits, as without a host.
    let Ok(answer) = asked else { return Ok(held(&approval)) };
    let decision = match answer.action {
        ElicitationAction::Accept => match answer.content.map(serde_json::from_value::<Decision>) {
            Some(Ok(decision)) => decision,
            _ => return Ok(held(&approval)),
        },
        ElicitationAction::Decline => Decision { approve: false, note: None },
        // Dismissed (cancelled), or an action this server does not know: the request waits.
        _ => return Ok(held(&approval)),
    };
    let note = decision.note.filter(|note| !note.trim().is_empty());
    if decision.approve {
        match acting.client.approve(approval.id, &ApprovalGrant { budget: None, note }).await {
            Ok(outcome) => Ok(settled(&outcome)),
            Err(error) => Ok(refused(error)),
        }
    } else {
        let note = note.or_else(|| Some("declined through the MCP host".to_owned()));
        match acting.client.deny(approval.id, &ApprovalDenial { note }).await {
            Ok(approval) => Ok(denied(&approval)),
            Err(error) => Ok(refused(error)),
        }
    }
}

#[tool_router(router = approval_router, vis = "pub(crate)")]
impl Haggle {
    #[tool(
        description = "List your requests for approval, newest first: the moves your approval rules held \
                       (a held place_bid, counter_bid, accept_bid or buy_now answers with one, outcome held). \
                       Each has its exact move and amount, status (PENDING, APPROVED, DENIED, EXPIRED, FAILED, \
                       WITHDRAWN), expires_at, who may approve it, and once answered the note, the failure \
                       or what the approved move made. Filter by status; page with limit and cursor.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_my_approvals(
        &self,
        Parameters(query): Parameters<ApprovalQuery>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let acting = self.acting_in(&context)?;
        match acting.client.list_approvals(&query).await {
            Ok(page) => {
                let pending = page.data.iter().filter(|approval| approval.status == ApprovalStatus::Pending).count();
                let more =
                    page.next_cursor.map(|cursor| format!(" Pass cursor {cursor} for more.")).unwrap_or_default();
                Ok(done(format!("{} requests, {pending} pending.{more}", page.data.len()), &page))
            }
            Err(error) => Ok(refused(error)),
        }
    }

    #[tool(
        description = "Answer a request for approval of yours: approve makes the held move now, as if you sent \
                       it at this moment (if the bid expired, the other side moved or the listing sold, the \
                       request ends FAILED with the move's own refusal and nothing is made); approve with \
                       budget {amount, expires_in, scope: thread|listing} also lets later moves within it \
                       through; deny refuses it with a note; withdraw takes your own request back. Only a \
                       PENDING request before its expires_at may be answered, once.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn answer_approval(
        &self,
        Parameters(args): Parameters<AnswerApproval>,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let acting = self.acting_in(&context)?;
        let client = with_key(&acting.client, args.idempotency_key);
        match args.decision {
            Verdict::Approve => {
                match client.approve(args.approval_id, &ApprovalGrant { budget: args.budget, note: args.note }).await {
                    Ok(outcome) => Ok(settled(&outcome)),
                    Err(error) => Ok(refused(error)),
                }
            }
            Verdict::Deny => match client.deny(args.approval_id, &ApprovalDenial { note: args.note }).await {
                Ok(approval) => Ok(done(
                    format!("Request {} is {}.", approval.id, approval.status),
                    &json!({ "approval": approval }),
                )),
                Err(error) => Ok(refused(error)),
            },
            Verdict::Withdraw => match client.withdraw_approval(args.approval_id).await {
                Ok(approval) => Ok(done(
                    format!("Request {} is {}.", approval.id, approval.status),
                    &json!({ "approval": approval }),
                )),
                Err(error) => Ok(refused(error)),
            },
        }
    }
}

/// The approval tools' router, to join the others.
pub(crate) fn router() -> ToolRouter<Haggle> {
    Haggle::approval_router()
}
