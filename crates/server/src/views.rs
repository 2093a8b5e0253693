//! What agents are shown of the rows `db/` reads: each row's API view (`haggle_api`), made here
//! and nowhere else, so that the database layer knows nothing of the wire.

use chrono::{DateTime, Utc};

use crate::db::admin::{AgentRecord, WebhookRecord};
use crate::db::events::EventRow;
use crate::db::orders::Payment;
use crate::db::policies::StoredPolicy;
use crate::db::webhooks::{Delivery, Webhook};
use crate::db::{Agent, ApiKey, Bid, Listing, Order, Thread};
use haggle_api::{self as api, DeliveryCounts, Event};
use haggle_domain::order::OrderStatus;
use haggle_domain::{Party, Reason, bid, plan, thread};

impl Thread {
    /// The deadlock mark as agents see it.
    pub fn deadlock(&self) -> Option<api::Deadlock> {
        let (detected_at, suggestion) = (self.deadlock_at?, self.mediation.clone()?);
        Some(api::Deadlock { detected_at, suggestion, agreed: self.mediation_agreed.clone() })
    }

    /// The escalation of a refund to the operator, with the decision once made.
    pub fn escalation(&self) -> Option<api::Escalation> {
        let (escalated_at, escalated_by) = (self.escalated_at?, self.escalated_by?);
        let decision = match (self.decided_amount, self.decision_note.clone(), self.decided_at) {
            (Some(amount), Some(note), Some(decided_at)) => Some(api::Decision { amount, note, decided_at }),
            _ => None,
        };
        Some(api::Escalation { escalated_at, escalated_by, decision })
    }

    /// The thread as it truly is at `now`, before the sweeper has caught up, with whose turn it
    /// is: what agents are shown.
    pub fn at(&self, now: DateTime<Utc>) -> api::Thread {
        let mut view = api::Thread {
            id: self.id,
            listing_id: self.listing_id,
            buyer_id: self.buyer_id,
            seller_id: self.seller_id,
            status: self.status,
            rounds: self.rounds,
            turn: None,
            last_bid_id: self.last_bid_id,
            expires_at: self.expires_at,
            closed_reason: self.closed_reason,
            deadlock: self.deadlock().map(Box::new),
            kind: self.kind,
            order_id: self.order_id,
            escalation: self.escalation().map(Box::new),
            created_at: self.created_at,
            updated_at: self.updated_at,
        };
        let effective = thread::effective_status(self.status, self.expires_at, now);
        if effective != self.status {
            // Exactly what the sweeper will write.
            view.status = effective;
            view.closed_reason = Some(Reason::Expired);
            view.expires_at = None;
        }
        // The thread's own turns: on an order, the seller may have opened it.
        view.turn = thread::turn(view.status, view.rounds).map(|turn| match self.opened_by {
            Party::Buyer => turn,
            Party::Seller => turn.other(),
        });
        view
    }
}

impl Bid {
    /// The bid as it truly is at `now`: a PENDING bid past its time reads EXPIRED.
    pub fn at(&self, now: DateTime<Utc>) -> api::Bid {
        let mut view = api::Bid::from(self.clone());
        let effective = bid::effective_status(self.status, self.expires_at, now);
        if effective != self.status {
            // Exactly what the sweeper will write: a bid expires at its deadline.
            view.status = effective;
            view.reason = Some(Reason::Expired);
            view.responded_at = Some(self.expires_at);
        }
        view
    }
}

impl From<Bid> for api::Bid {
    fn from(bid: Bid) -> api::Bid {
        api::Bid {
            id: bid.id,
            thread_id: bid.thread_id,
            author: bid.author,
            author_id: bid.author_id,
            kind: bid.kind,
            amount: bid.amount,
            currency: bid.currency,
            message: bid.message,
            terms: bid.terms,
            is_final: bid.is_final,
            status: bid.status,
            reason: bid.reason,
            parent_bid_id: bid.parent_bid_id,
            round: bid.round,
            expires_at: bid.expires_at,
            responded_at: bid.responded_at,
            approval: bid.approval.and_then(|mark| serde_json::from_value(mark).ok()),
            created_at: bid.created_at,
            updated_at: bid.updated_at,
        }
    }
}

impl From<StoredPolicy> for api::StoredPolicy {
    fn from(row: StoredPolicy) -> api::StoredPolicy {
        api::StoredPolicy {
            scope: row.scope,
            role: row.role,
            listing_id: row.listing_id,
            thread_id: row.thread_id,
            policy: row.policy.0,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

impl From<AgentRecord> for api::AdminAgent {
    fn from(row: AgentRecord) -> api::AdminAgent {
        api::AdminAgent {
            id: row.id,
            name: row.name,
            tier: row.tier,
            agency_id: row.agency_id,
            advertiser_id: row.advertiser_id,
            seat_id: row.seat_id,
            created_at: row.created_at,
            updated_at: row.updated_at,
            last_active_at: row.last_active_at,
            suspended_at: row.suspended_at,
            suspended_reason: row.suspended_reason,
            open_threads: row.open_threads,
        }
    }
}

impl From<WebhookRecord> for api::AdminWebhook {
    fn from(row: WebhookRecord) -> api::AdminWebhook {
        api::AdminWebhook {
            id: row.id,
            agent_id: row.agent_id,
            agent_name: row.agent_name,
            url: row.url,
            events: row.events,
            status: row.status,
            disabled_reason: row.disabled_reason,
            created_at: row.created_at,
            updated_at: row.updated_at,
            deliveries: DeliveryCounts { pending: row.pending, succeeded: row.succeeded, failed: row.failed },
            last_failure_at: row.last_failure_at,
        }
    }
}

impl From<Agent> for api::Agent {
    fn from(row: Agent) -> api::Agent {
        api::Agent {
            id: row.id,
            name: row.name,
            tier: row.tier,
            agency_id: row.agency_id,
            advertiser_id: row.advertiser_id,
            seat_id: row.seat_id,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

impl From<ApiKey> for api::KeyRecord {
    fn from(row: ApiKey) -> api::KeyRecord {
        api::KeyRecord { id: row.id, prefix: row.prefix, created_at: row.created_at, revoked_at: row.revoked_at }
    }
}

impl From<Listing> for api::Listing {
    fn from(row: Listing) -> api::Listing {
        api::Listing {
            id: row.id,
            seller_id: row.seller_id,
            title: row.title,
            description: row.description,
            ask_amount: row.ask_amount,
            currency: row.currency,
            quantity: row.quantity,
            quantity_available: row.quantity_available,
            status: row.status,
            negotiable: row.negotiable,
            min_negotiation_tier: row.min_negotiation_tier,
            max_rounds: row.max_rounds,
            bid_ttl_seconds: row.bid_ttl_seconds,
            max_threads_per_buyer: row.max_threads_per_buyer,
            issues: row.issues,
            concession_rule: row.concession_rule,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

impl From<Order> for api::Order {
    fn from(row: Order) -> api::Order {
        // A cancelled order owes nothing more; what was paid of it is owed back.
        let (outstanding, refund_due) = match row.status {
            OrderStatus::Cancelled => (0, row.refunds().refundable()),
            OrderStatus::Confirmed | OrderStatus::Fulfilled | OrderStatus::Completed => (row.ledger().outstanding(), 0),
        };
        let appointment = match (row.appointment_start, row.appointment_end, row.appointment_thread_id) {
            (Some(start), Some(end), Some(thread_id)) => {
                row.appointment_method.as_deref().and_then(|method| method.parse().ok()).map(|method| {
                    api::Appointment { start, end, method, place: row.appointment_place.clone(), thread_id }
                })
            }
            _ => None,
        };
        let plan = row.plan().map(|installments| {
            let paid = row.paid_amount - row.plan_base.unwrap_or(0);
            let statuses = plan::statuses(&installments, paid, Utc::now());
            installments
                .into_iter()
                .zip(statuses)
                .map(|(installment, status)| api::PlannedInstallment {
                    amount: installment.amount,
                    due: installment.due,
                    status,
                })
                .collect()
        });
        let fulfilment = row.fulfilled_at.map(|fulfilled_at| api::Fulfilment {
            fulfilled_at,
            reference: row.fulfilment_reference,
            note: row.fulfilment_note,
        });
        api::Order {
            id: row.id,
            listing_id: row.listing_id,
            thread_id: row.thread_id,
            bid_id: row.bid_id,
            buyer_id: row.buyer_id,
            seller_id: row.seller_id,
            amount: row.amount,
            currency: row.currency,
            terms: row.terms,
            status: row.status,
            paid_amount: row.paid_amount,
            outstanding,
            refunded_amount: row.refunded_amount,
            refund_due,
            cancelled_at: row.cancelled_at,
            appointment,
            plan,
            fulfilment,
            completed_at: row.completed_at,
            approval: row.approval.and_then(|mark| serde_json::from_value(mark).ok()),
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

impl From<Payment> for api::Payment {
    fn from(row: Payment) -> api::Payment {
        api::Payment {
            id: row.id,
            order_id: row.order_id,
            amount: row.amount,
            currency: row.currency,
            reference: row.reference,
            status: row.status,
            dispute_reason: row.dispute_reason,
            answered_at: row.answered_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

/// An order with its payments, oldest first.
pub fn order_with_payments(order: Order, payments: Vec<Payment>) -> api::OrderWithPayments {
    api::OrderWithPayments { order: order.into(), payments: payments.into_iter().map(api::Payment::from).collect() }
}

impl From<Webhook> for api::Webhook {
    fn from(row: Webhook) -> api::Webhook {
        api::Webhook {
            id: row.id,
            url: row.url,
            events: row.events,
            status: row.status,
            disabled_reason: row.disabled_reason,
            secret_prefix: row.secret_prefix,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

impl From<Delivery> for api::Delivery {
    fn from(row: Delivery) -> api::Delivery {
        api::Delivery {
            id: row.id,
            webhook_id: row.webhook_id,
            event_id: row.event_id,
            event_type: row.event_type,
            status: row.status,
            attempts: row.attempts,
            next_attempt_at: row.next_attempt_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
            attempt_log: row.attempt_log,
        }
    }
}

impl From<EventRow> for Event {
    fn from(row: EventRow) -> Event {
        Event {
            id: row.id,
            kind: row.kind,
            created_at: row.created_at,
            listing_id: row.listing_id,
            thread_id: row.thread_id,
            bid_id: row.bid_id,
            order_id: row.order_id,
            data: row.data,
        }
    }
}

impl crate::db::approvals::Approval {
    /// The request as the agent and its approvers read it at `now` (a pending request past its
    /// time reads EXPIRED), with who may answer it: the agent, and its approvers by name.
    pub fn at(self, approvers: &[String], now: DateTime<Utc>) -> api::Approval {
        let failure = self
            .failure_code
            .map(|code| api::ApprovalFailure { code, detail: self.failure_detail.unwrap_or_default() });
        let budget = match (self.budget_amount, self.budget_scope, self.budget_expires_at) {
            (Some(amount), Some(scope), Some(expires_at)) => Some(api::GrantedBudget {
                amount,
                scope,
                scope_id: match scope {
                    api::BudgetScope::Thread => self.made_thread_id,
                    api::BudgetScope::Listing => Some(self.listing_id),
                },
                expires_at,
            }),
            _ => None,
        };
        api::Approval {
            id: self.id,
            agent_id: self.agent_id,
            status: self.status.at(self.expires_at, now),
            held: self.held,
            move_hash: self.move_hash,
            approvers: std::iter::once("agent".to_owned()).chain(approvers.iter().cloned()).collect(),
            expires_at: self.expires_at,
            answered_at: self.answered_at,
            approver: self.approver,
            note: self.note,
            failure,
            budget,
            bid_id: self.made_bid_id,
            order_id: self.made_order_id,
            receipt: self.receipt,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

impl From<crate::db::approvals::StoredRules> for api::StoredApprovalRules {
    fn from(stored: crate::db::approvals::StoredRules) -> api::StoredApprovalRules {
        api::StoredApprovalRules {
            scope: stored.scope,
            listing_id: stored.listing_id,
            thread_id: stored.thread_id,
            rules: stored.rules.0,
            created_at: stored.created_at,
            updated_at: stored.updated_at,
        }
    }
}

impl From<crate::db::approvals::Approver> for api::Approver {
    fn from(approver: crate::db::approvals::Approver) -> api::Approver {
        api::Approver {
            id: approver.id,
            name: approver.name,
            prefix: approver.prefix,
            created_at: approver.created_at,
            revoked_at: approver.revoked_at,
        }
    }
}
