//! Negotiations on an order already made: a refund the buyer asks for (a condition dispute),
//! the order's cancellation, the handover's schedule and a payment plan (`installments`). Each is a thread of its `kind` between the order's two parties,
//! moved by the same state machine as the price (`bid::apply`: turns, rounds, `final`, expiry);
//! what differs is here: who may open one and on which order, what its `terms` say, which
//! amounts a counter may name, and when a refund that found no agreement goes to the operator.
//!
//! A refund's concession runs the other way from a price's: the buyer asks for money back and
//! comes down, the seller offers some and goes up. A cancellation carries no amount: its first
//! bid is final, so the other side accepts or rejects it. A schedule and a plan carry no amount
//! either and no concession rule: their terms are what is negotiated (`appointment`, `plan`).

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::appointment::{self, ScheduleTerms};

use crate::bid::Positions;
use crate::order::OrderStatus;
use crate::party::Party;
use crate::plan::{self, InstallmentTerms};
use crate::rejection::{Rejection, Validator, text};
use crate::thread::{ThreadKind, ThreadStatus};

/// The most evidence URLs a refund's terms may list.
pub const MAX_EVIDENCE: usize = 10;
/// The longest evidence URL, in bytes.
pub const MAX_EVIDENCE_URL: usize = 2000;
/// The longest reason for a cancellation, and the longest note of an operator's decision.
pub const MAX_REASON_CHARS: usize = 500;

/// Why the buyer asks for money back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefundReason {
    NotAsDescribed,
    Damaged,
    Missing,
    Late,
    Other,
}

/// A refund's terms: why, with up to [`MAX_EVIDENCE`] `https` URLs showing it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefundTerms {
    pub reason: RefundReason,
    #[serde(default)]
    pub evidence: Vec<String>,
}

/// A cancellation's terms: why, in words.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelTerms {
    pub reason: String,
}

/// The terms of a negotiation on an order, as read for its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Terms {
    Refund(RefundTerms),
    Cancel(CancelTerms),
    Schedule(ScheduleTerms),
    Installments(InstallmentTerms),
}

/// A price is negotiated on a listing (`POST /v1/listings/{id}/bids`), never on an order.
fn price_on_an_order() -> Rejection {
    Rejection::invalid(
        "kind",
        "a price is negotiated on a listing; on an order, one of refund, cancel, schedule, installments",
    )
}

/// Reads and checks `terms` for a negotiation of `kind`: every mistake reported at once, under
/// `terms` (or `terms.<field>`).
pub fn read_terms(kind: ThreadKind, terms: Option<&serde_json::Value>) -> Result<Terms, Rejection> {
    let Some(terms) = terms.filter(|terms| !terms.is_null()) else {
        return match kind {
            ThreadKind::Price => Err(price_on_an_order()),
            ThreadKind::Refund | ThreadKind::Cancel | ThreadKind::Schedule | ThreadKind::Installments => {
                Err(Rejection::invalid("terms", "is required"))
            }
        };
    };
    let malformed = |error: serde_json::Error| Rejection::invalid("terms", error.to_string());
    let mut check = Validator::new();
    let read = match kind {
        ThreadKind::Price => return Err(price_on_an_order()),
        ThreadKind::Refund => {
            let refund: RefundTerms = serde_json::from_value(terms.clone()).map_err(malformed)?;
            if refund.evidence.len() > MAX_EVIDENCE {
                check.fail("terms.evidence", format!("must list at most {MAX_EVIDENCE} URLs"));
            }
            for (i, url) in refund.evidence.iter().enumerate() {
                if let Err(message) = evidence_url(url) {
                    check.fail(&format!("terms.evidence[{i}]"), message);
                }
            }
            Terms::Refund(refund)
        }
        ThreadKind::Cancel => {
            let cancel: CancelTerms = serde_json::from_value(terms.clone()).map_err(malformed)?;
            check.check("terms.reason", text(&cancel.reason, true, MAX_REASON_CHARS));
            Terms::Cancel(cancel)
        }
        ThreadKind::Schedule => {
            let schedule: ScheduleTerms = serde_json::from_value(terms.clone()).map_err(malformed)?;
            appointment::check_shape(&schedule, &mut check);
            Terms::Schedule(schedule)
        }
        ThreadKind::Installments => {
            let installments: InstallmentTerms = serde_json::from_value(terms.clone()).map_err(malformed)?;
            plan::check_shape(&installments, &mut check);
            Terms::Installments(installments)
        }
    };
    check.finish()?;
    Ok(read)
}

/// The checks of terms that depend on the clock and on the order, run under the order's lock: a
/// schedule's windows all lie ahead of `now`; a plan sums to `total` exactly (the order's
/// outstanding amount when it opens, the answered bid's sum on a counter) and falls due ahead,
/// the first installment within 30 days. Refunds and cancellations have none.
pub fn check_terms_at(terms: &Terms, now: DateTime<Utc>, total: i64) -> Result<(), Rejection> {
    let mut check = Validator::new();
    match terms {
        Terms::Refund(_) | Terms::Cancel(_) => {}
        Terms::Schedule(schedule) => appointment::check_future(schedule, now, &mut check),
        Terms::Installments(installments) => plan::check_against(installments, total, now, &mut check),
    }
    check.finish()
}

/// An evidence URL: `https`, with a host, no spaces, at most [`MAX_EVIDENCE_URL`] bytes.
fn evidence_url(url: &str) -> Result<(), String> {
    let host = url.strip_prefix("https://").ok_or("must be an https URL")?;
    if url.len() > MAX_EVIDENCE_URL {
        return Err(format!("must be at most {MAX_EVIDENCE_URL} bytes"));
    }
    if host.is_empty() || host.starts_with('/') {
        return Err("must name a host".into());
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain spaces or control characters".into());
    }
    Ok(())
}

/// Whether a negotiation of `kind` names an amount: a refund does (the money asked back); a
/// cancellation, a schedule and a plan (whose amounts are in its terms) do not.
pub fn has_amount(kind: ThreadKind) -> bool {
    match kind {
        ThreadKind::Price | ThreadKind::Refund => true,
        ThreadKind::Cancel | ThreadKind::Schedule | ThreadKind::Installments => false,
    }
}

/// Whether its first bid is final whatever the opener asks: a cancellation is accepted or
/// rejected, never countered.
pub fn opens_final(kind: ThreadKind) -> bool {
    match kind {
        ThreadKind::Price | ThreadKind::Refund | ThreadKind::Schedule | ThreadKind::Installments => false,
        ThreadKind::Cancel => true,
    }
}

/// May `party` open a negotiation of `kind` on an order in `status`? Checks run: the kind, who,
/// then the order's status ([`may_agree`]). The buyer alone asks for a refund or proposes a
/// plan; either party asks to cancel or proposes a schedule.
pub fn may_open(kind: ThreadKind, party: Party, status: OrderStatus) -> Result<(), Rejection> {
    match (kind, party) {
        (ThreadKind::Price, _) => return Err(price_on_an_order()),
        (ThreadKind::Refund | ThreadKind::Installments, Party::Buyer)
        | (ThreadKind::Cancel | ThreadKind::Schedule, Party::Buyer | Party::Seller) => {}
        (ThreadKind::Refund, Party::Seller) => {
            return Err(Rejection::forbidden("only the order's buyer asks for a refund"));
        }
        (ThreadKind::Installments, Party::Seller) => {
            return Err(Rejection::forbidden("only the order's buyer proposes a payment plan"));
        }
    }
    may_agree(kind, status)
}

/// May a negotiation of `kind` be opened or agreed on an order in `status`? A refund and a plan
/// while the order is neither COMPLETED nor CANCELLED; a cancellation and a schedule only before
/// fulfilment (the handover is what fulfilment records).
pub fn may_agree(kind: ThreadKind, status: OrderStatus) -> Result<(), Rejection> {
    let invalid = |detail: String| Rejection::InvalidTransition { current_status: status.as_str(), detail };
    match (kind, status) {
        (ThreadKind::Price, _) => Err(price_on_an_order()),
        (ThreadKind::Refund | ThreadKind::Installments, OrderStatus::Confirmed | OrderStatus::Fulfilled)
        | (ThreadKind::Cancel | ThreadKind::Schedule, OrderStatus::Confirmed) => Ok(()),
        (ThreadKind::Refund, OrderStatus::Completed | OrderStatus::Cancelled) => {
            Err(invalid(format!("the order is {status}: a refund is negotiated before the order completes")))
        }
        (ThreadKind::Installments, OrderStatus::Completed | OrderStatus::Cancelled) => {
            Err(invalid(format!("the order is {status}: a payment plan is agreed before the order completes")))
        }
        (ThreadKind::Cancel, OrderStatus::Fulfilled | OrderStatus::Completed | OrderStatus::Cancelled) => {
            Err(invalid(format!("the order is {status}: it can be cancelled only before it is fulfilled")))
        }
        (ThreadKind::Schedule, OrderStatus::Fulfilled | OrderStatus::Completed | OrderStatus::Cancelled) => {
            Err(invalid(format!("the order is {status}: a handover is scheduled only before it is fulfilled")))
        }
    }
}

/// What the buyer may still get back of an order: the confirmed payments less the refunds
/// already agreed or decided, in minor units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refunds {
    pub paid: i64,
    pub refunded: i64,
}

impl Refunds {
    pub fn refundable(self) -> i64 {
        self.paid - self.refunded
    }

    /// May a refund of `amount` be asked, agreed or decided? Never one past what is refundable,
    /// so the refunded amount never exceeds what was paid.
    pub fn admit(self, amount: i64) -> Result<(), Rejection> {
        if (0..=self.refundable()).contains(&amount) {
            Ok(())
        } else {
            Err(Rejection::ExceedsRefundable { refundable: self.refundable() })
        }
    }
}

/// The seller's position before its first counter on a refund: nothing back.
pub const SELLER_FIRST_POSITION: i64 = 0;

/// The inclusive range of amounts `mover` may counter a refund with: the price's rule with the
/// sides exchanged, since here the buyer asks and the seller offers. The buyer's counters never
/// rise (`(pending, own_previous]`), the seller's never fall (`[own_previous, pending)`); each
/// lies strictly between the two latest positions. Empty (`min > max`) when there is no room.
pub fn refund_counter_range(mover: Party, positions: Positions) -> (i64, i64) {
    positions.counter_range(mover.other())
}

/// Whether `mover` may counter the pending refund with `amount`: within
/// [`refund_counter_range`].
pub fn check_refund_counter(mover: Party, amount: i64, positions: Positions) -> Result<(), Rejection> {
    let (min, max) = refund_counter_range(mover, positions);
    if min > max {
        return Err(Rejection::NotAConcession {
            min,
            max,
            detail: "there is no amount left between the two positions; accept or reject the pending bid".into(),
        });
    }
    if amount < min || amount > max {
        let Positions { pending, own_previous } = positions;
        let detail = match mover {
            Party::Buyer => format!(
                "a buyer's counter on a refund must be above the seller's pending offer ({pending}) and at most \
                 its own previous ask ({own_previous}): {min} to {max}"
            ),
            Party::Seller => format!(
                "a seller's counter on a refund must be at least its own previous offer ({own_previous}) and below \
                 the buyer's pending ask ({pending}): {min} to {max}"
            ),
        };
        return Err(Rejection::NotAConcession { min, max, detail });
    }
    Ok(())
}

/// May a thread of `kind` in `status` (its effective status) go to the operator? A refund that
/// ended without agreement, REJECTED or EXPIRED, and only once.
pub fn may_escalate(kind: ThreadKind, status: ThreadStatus, escalated: bool) -> Result<(), Rejection> {
    let invalid = |detail: String| Rejection::InvalidTransition { current_status: status.as_str(), detail };
    match kind {
        ThreadKind::Refund => {}
        ThreadKind::Price | ThreadKind::Cancel | ThreadKind::Schedule | ThreadKind::Installments => {
            return Err(invalid(format!("a {kind} negotiation is not escalated; only a refund is")));
        }
    }
    if escalated {
        return Err(invalid("the refund was escalated already".into()));
    }
    match status {
        ThreadStatus::Rejected | ThreadStatus::Expired => Ok(()),
        ThreadStatus::Accepted => Err(invalid("the refund was agreed: there is nothing to decide".into())),
        ThreadStatus::Active => Err(invalid("the refund is still being negotiated: answer or reject it first".into())),
        ThreadStatus::Closed => Err(invalid("the refund negotiation was closed".into())),
    }
}

/// May the operator decide `amount` (with `note`) on an escalated refund? Once, at most what is
/// refundable; the note says why, 1 to [`MAX_REASON_CHARS`] characters.
pub fn check_decision(
    escalated: bool,
    decided: bool,
    refunds: Refunds,
    amount: i64,
    note: &str,
) -> Result<(), Rejection> {
    let mut check = Validator::new();
    if amount < 0 {
        check.fail("amount", "must be at least 0");
    }
    check.check("note", text(note, true, MAX_REASON_CHARS));
    check.finish()?;
    if !escalated {
        return Err(Rejection::InvalidTransition {
            current_status: "NOT_ESCALATED",
            detail: "only an escalated refund is decided".into(),
        });
    }
    if decided {
        return Err(Rejection::InvalidTransition {
            current_status: "DECIDED",
            detail: "the refund was decided already".into(),
        });
    }
    refunds.admit(amount)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejection::Code;
    use proptest::prelude::*;
    use serde_json::json;

    const PARTIES: [Party; 2] = [Party::Buyer, Party::Seller];

    #[test]
    fn refund_terms_take_a_reason_and_https_evidence() {
        let terms = json!({"reason": "damaged", "evidence": ["https://example.com/photo.jpg"]});
        let read = read_terms(ThreadKind::Refund, Some(&terms)).unwrap();
        assert_eq!(
            read,
            Terms::Refund(RefundTerms {
                reason: RefundReason::Damaged,
                evidence: vec!["https://example.com/photo.jpg".into()]
            })
        );
        for bad in [
            json!({"reason": "bored"}),
            json!({"reason": "late", "evidence": ["http://example.com/a"]}),
            json!({"reason": "late", "evidence": vec!["https://example.com/a"; 11]}),
            json!({"reason": "late", "colour": "red"}),
            json!({}),
        ] {
            assert_eq!(read_terms(ThreadKind::Refund, Some(&bad)).unwrap_err().code(), Code::ValidationFailed, "{bad}");
        }
        assert!(read_terms(ThreadKind::Refund, None).is_err());
        assert!(read_terms(ThreadKind::Cancel, Some(&json!({"reason": " "}))).is_err());
        assert!(read_terms(ThreadKind::Cancel, Some(&json!({"reason": "changed plans"}))).is_ok());
        assert!(read_terms(ThreadKind::Price, Some(&json!({}))).is_err());
    }

    #[test]
    fn schedule_and_plan_terms_are_read_for_their_kind_and_checked_against_the_clock() {
        let now: DateTime<Utc> = "2027-01-04T00:00:00Z".parse().unwrap();
        let schedule = json!({
            "windows": [{"start": "2027-01-05T09:00:00Z", "end": "2027-01-05T11:00:00Z"}],
            "method": "delivery",
            "place": "Dock 4",
        });
        let read = read_terms(ThreadKind::Schedule, Some(&schedule)).unwrap();
        assert!(matches!(read, Terms::Schedule(_)));
        assert_eq!(check_terms_at(&read, now, 0), Ok(()));
        let later: DateTime<Utc> = "2027-01-05T09:00:00Z".parse().unwrap();
        assert_eq!(check_terms_at(&read, later, 0).unwrap_err().code(), Code::ValidationFailed);
        for bad in [
            json!({"windows": [], "method": "pickup"}),
            json!({"windows": [{"start": "2027-01-05T09:00:00Z", "end": "2027-01-13T09:00:00Z"}], "method": "pickup"}),
            json!({"windows": [{"start": "2027-01-05T09:00:00Z", "end": "2027-01-05T11:00:00Z"}], "method": "drone"}),
            json!({"windows": [{"start": "2027-01-05T09:00:00Z", "end": "2027-01-05T11:00:00Z"}]}),
        ] {
            assert_eq!(
                read_terms(ThreadKind::Schedule, Some(&bad)).unwrap_err().code(),
                Code::ValidationFailed,
                "{bad}"
            );
        }
        let plan = json!({"installments": [
            {"amount": 6000, "due": "2027-01-10T00:00:00Z"},
            {"amount": 4000, "due": "2027-02-10T00:00:00Z"},
        ]});
        let read = read_terms(ThreadKind::Installments, Some(&plan)).unwrap();
        assert_eq!(check_terms_at(&read, now, 10_000), Ok(()));
        assert_eq!(check_terms_at(&read, now, 10_001).unwrap_err().code(), Code::ValidationFailed);
        let fractional = json!({"installments": [
            {"amount": 60.5, "due": "2027-01-10T00:00:00Z"},
            {"amount": 4000, "due": "2027-02-10T00:00:00Z"},
        ]});
        assert!(read_terms(ThreadKind::Installments, Some(&fractional)).is_err());
    }

    /// The table of kinds: which name an amount, which open final, which escalate. A schedule
    /// and a plan name none, are countered, and never go to the operator.
    #[test]
    fn every_kind_says_whether_it_names_an_amount_and_opens_final() {
        for kind in ThreadKind::ALL {
            let (amount, final_) = match kind {
                ThreadKind::Price | ThreadKind::Refund => (true, false),
                ThreadKind::Cancel => (false, true),
                ThreadKind::Schedule | ThreadKind::Installments => (false, false),
            };
            assert_eq!((has_amount(kind), opens_final(kind)), (amount, final_), "{kind}");
            for status in ThreadStatus::ALL {
                if kind != ThreadKind::Refund {
                    assert!(may_escalate(kind, status, false).is_err(), "{kind} {status}");
                }
            }
        }
    }

    #[test]
    fn a_refund_decision_is_made_once_and_within_what_was_paid() {
        let refunds = Refunds { paid: 5_000, refunded: 1_000 };
        assert_eq!(check_decision(true, false, refunds, 4_000, "half the damage"), Ok(()));
        assert_eq!(check_decision(true, false, refunds, 0, "no damage shown"), Ok(()));
        assert_eq!(
            check_decision(true, false, refunds, 4_001, "too much"),
            Err(Rejection::ExceedsRefundable { refundable: 4_000 })
        );
        assert_eq!(check_decision(false, false, refunds, 1, "x").unwrap_err().code(), Code::InvalidTransition);
        assert_eq!(check_decision(true, true, refunds, 1, "x").unwrap_err().code(), Code::InvalidTransition);
        assert_eq!(check_decision(true, false, refunds, 1, "").unwrap_err().code(), Code::ValidationFailed);
    }

    proptest! {
        /// Who may open what on which order: the buyer alone a refund or a plan, before the
        /// order completes or is cancelled; either party a cancellation or a schedule, only
        /// while CONFIRMED; never a price. A refusal is `forbidden` for the wrong party and `invalid_transition`,
        /// naming the order's status, for the wrong status.
        #[test]
        fn who_opens_what_on_which_order(
            kind in prop::sample::select(ThreadKind::ALL.to_vec()),
            party in prop::sample::select(PARTIES.to_vec()),
            status in prop::sample::select(OrderStatus::ALL.to_vec()),
        ) {
            let allowed_party = match kind {
                ThreadKind::Price => false,
                ThreadKind::Refund | ThreadKind::Installments => party == Party::Buyer,
                ThreadKind::Cancel | ThreadKind::Schedule => true,
            };
            let allowed_status = match kind {
                ThreadKind::Price => false,
                ThreadKind::Refund | ThreadKind::Installments => {
                    matches!(status, OrderStatus::Confirmed | OrderStatus::Fulfilled)
                }
                ThreadKind::Cancel | ThreadKind::Schedule => status == OrderStatus::Confirmed,
            };
            match may_open(kind, party, status) {
                Ok(()) => prop_assert!(allowed_party && allowed_status),
                Err(Rejection::Validation(_)) => prop_assert_eq!(kind, ThreadKind::Price),
                Err(Rejection::Forbidden { .. }) => prop_assert!(!allowed_party),
                Err(Rejection::InvalidTransition { current_status, .. }) => {
                    prop_assert!(allowed_party && !allowed_status);
                    prop_assert_eq!(current_status, status.as_str());
                }
                Err(other) => prop_assert!(false, "unexpected refusal {:?}", other),
            }
        }

        /// A refund's concession runs the other way from a price's: whatever the positions, a
        /// counter allowed to the buyer never rises above its previous ask, one allowed to the
        /// seller never falls below its previous offer, and each lies strictly between the two
        /// latest positions' sides as the price's rule has them.
        #[test]
        fn a_refund_counter_concedes_the_other_way(
            mover in prop::sample::select(PARTIES.to_vec()),
            pending in 0i64..100_000,
            own_previous in 0i64..100_000,
            amount in 0i64..100_000,
        ) {
            let positions = Positions { pending, own_previous };
            match check_refund_counter(mover, amount, positions) {
                Ok(()) => match mover {
                    Party::Buyer => prop_assert!(pending < amount && amount <= own_previous),
                    Party::Seller => prop_assert!(own_previous <= amount && amount < pending),
                },
                Err(Rejection::NotAConcession { min, max, .. }) => {
                    prop_assert!(amount < min || amount > max);
                    prop_assert_eq!((min, max), refund_counter_range(mover, positions));
                }
                Err(other) => prop_assert!(false, "unexpected refusal {:?}", other),
            }
        }

        /// Whatever refunds are agreed or decided in whatever order, each is admitted only while
        /// it fits, so the refunded amount never passes what was paid.
        #[test]
        fn refunds_never_pass_what_was_paid(
            paid in 0i64..10_000_000,
            refunds in prop::collection::vec(0i64..5_000_000, 0..20),
        ) {
            let mut ledger = Refunds { paid, refunded: 0 };
            for refund in refunds {
                let before = ledger;
                match ledger.admit(refund) {
                    Ok(()) => ledger.refunded += refund,
                    Err(Rejection::ExceedsRefundable { refundable }) => {
                        prop_assert_eq!(refundable, before.refundable());
                        prop_assert!(refund > refundable);
                    }
                    Err(other) => prop_assert!(false, "unexpected refusal {:?}", other),
                }
                prop_assert!(ledger.refunded <= ledger.paid);
            }
        }

        /// Only a refund that ended without agreement (REJECTED, EXPIRED) goes to the operator,
        /// once; an accepted one, a live one, a closed one and any other kind are refused as
        /// invalid transitions naming the thread's status.
        #[test]
        fn only_a_refund_without_agreement_is_escalated(
            kind in prop::sample::select(ThreadKind::ALL.to_vec()),
            status in prop::sample::select(ThreadStatus::ALL.to_vec()),
            escalated in any::<bool>(),
        ) {
            let allowed = kind == ThreadKind::Refund
                && !escalated
                && matches!(status, ThreadStatus::Rejected | ThreadStatus::Expired);
            match may_escalate(kind, status, escalated) {
                Ok(()) => prop_assert!(allowed),
                Err(Rejection::InvalidTransition { current_status, .. }) => {
                    prop_assert!(!allowed);
                    prop_assert_eq!(current_status, status.as_str());
                }
                Err(other) => prop_assert!(false, "unexpected refusal {:?}", other),
            }
        }
    }
}
