//! The API's request and response bodies, as a client sends and reads them (see openapi.yaml):
//! the wire types of `haggle_api`, shared with the server, and where a policy applies.

use uuid::Uuid;

use haggle_domain::Party;

pub use haggle_api::{
    Acceptance, AdminAgent, AdminAgentQuery, AdminOrderQuery, AdminPageQuery, AdminThreadQuery, AdminWebhook,
    AdminWebhookQuery, Agent, AgentStatus, Answered, Appointment, Attempt, Bid, BidAndThread, CounterOffer, Decided,
    Delivery, DeliveryStatus, DisputeDecision, Escalation, Event, EventPage, EventQuery, EventType, Fulfil, IssuedKey,
    KeyRecord, Listing, ListingPatch, ListingQuery, MarketStats, NewListing, NewPayment, NewWebhook, OpenNegotiation,
    Order, OrderQuery, OrderStatus, OrderWithPayments, Page, PageQuery, Payment, PaymentAndOrder, PaymentDispute,
    PaymentStatus, Placement, PlannedInstallment, PolicyLevel, ProfilePatch, Purchased, Registered, Registration,
    StatsQuery, StoredPolicy, StreamQuery, Thread, ThreadQuery, ThreadWithBids, WaitQuery, Webhook, WebhookCreated,
    WebhookStatus,
};
pub use haggle_api::{
    Approval, ApprovalDenial, ApprovalFailure, ApprovalGrant, ApprovalOutcome, ApprovalQuery, ApprovalRules,
    ApprovalStatus, ApproverIssued, Budget, BudgetScope, Held, HeldMove, NewApprover, Rule, StoredApprovalRules,
};

/// Where a policy applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyScope {
    /// The agent's default in one role.
    Agent(Party),
    /// One listing: its seller's policy, or a buyer's for it.
    Listing(Uuid),
    /// One thread.
    Thread(Uuid),
}

impl PolicyScope {
    pub(crate) fn path(self) -> String {
        match self {
            PolicyScope::Agent(role) => format!("/v1/agents/me/policies/{}", role.as_str()),
            PolicyScope::Listing(id) => format!("/v1/listings/{id}/policy"),
            PolicyScope::Thread(id) => format!("/v1/threads/{id}/policy"),
        }
    }
}
