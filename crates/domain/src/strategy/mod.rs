//! Auto-negotiation (SPEC §5): what a policy or a client agent does when it is its turn.
//!
//! Everything here is pure. A [`NegotiationState`] is a thread as the side about to move sees it;
//! a server-side [`Policy`] ([`decide`]) or a client-side buyer strategy ([`SimpleThreshold`],
//! [`Adaptive`], [`Competitive`]) turns it into a [`Decision`]. Whatever a strategy computes, one
//! function has the last word on a counter ([`settle`]): it never crosses the mover's private
//! limit, and the amount always lies in the range [`bid::Positions::counter_range`] allows, so it passes
//! [`bid::check_counter`]. When no such amount exists the mover does not counter: it accepts,
//! rejects or stops, according to its limit.
//!
//! Amounts are integer minor units. Prices computed in floating point are rounded toward the
//! mover's own side (up for the seller, down for the buyer) and then clamped, so rounding can
//! never concede more than a rule says.

mod buyer;
mod closer;
mod counter;
pub mod learned;
pub mod model;
mod multi;
mod policy;
mod proposal;
mod refund;
pub mod schedule;
mod simulate;
mod tier_engine;

#[cfg(test)]
mod tests;

use serde::Serialize;

use super::bid::{self, Party};
use super::tier::Tier;

pub use buyer::{Adaptive, Competitive, Profile, SimpleThreshold};
pub use counter::Strategy;
pub use multi::{MultiIssue, MultiMove, MultiState};
pub use policy::{DEFAULT_MAX_AUTO_ROUNDS, MAX_AUTO_ROUNDS, Policy, decide};
pub use proposal::Proposal;
pub use refund::{RefundPolicy, RefundState, concession_exponent, decide_refund};
pub use simulate::{Ending, PlacedBid, Setting, Transcript, simulate, state_after};
pub use tier_engine::TierTerms;

/// Amounts beyond this are not amounts of this marketplace (the configurable maximum is far
/// below); a state holding one is refused rather than risking overflow in the arithmetic.
const MAX_SANE_AMOUNT: i64 = 1 << 60;

/// A thread as the side about to move sees it.
///
/// The private limit is not part of the state: it belongs to whoever decides (the [`Policy`], or
/// a buyer strategy's `max`), so that there is one place it is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NegotiationState {
    /// The side about to move.
    pub mover: Party,
    /// The listing's ask: the seller's position before its first counter.
    pub ask: i64,
    /// The listing's `max_rounds`: the bid that reaches it is final.
    pub max_rounds: i32,
    /// The buyer's tier, which the seller tier engine reads.
    pub buyer_tier: Tier,
    /// The amounts of the thread's bids in order, round 1 first. The buyer opens and the sides
    /// alternate, so the author of each is known and the last one is the pending bid, by the
    /// other side. Empty before the buyer's opening bid.
    pub bids: Vec<i64>,
    /// Whether the pending bid is `final` (it can then only be accepted or rejected).
    pub pending_final: bool,
    /// How many counters the policy has already made automatically in this thread.
    pub auto_moves: u32,
}

/// The three amounts a move is made against, once the state is known to be coherent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    /// The other side's latest amount.
    pub pending: i64,
    /// The mover's own previous amount; the ask for the seller's first counter.
    pub own_previous: i64,
    /// The round of the bid the mover would make.
    pub round: i32,
}

impl Turn {
    /// The two positions the mover's counter lies between.
    pub fn positions(&self) -> bid::Positions {
        bid::Positions { pending: self.pending, own_previous: self.own_previous }
    }
}

impl NegotiationState {
    /// The round of the bid the mover would make.
    pub fn round(&self) -> i32 {
        i32::try_from(self.bids.len()).map_or(i32::MAX, |n| n.saturating_add(1))
    }

    /// The other side's latest amount.
    pub fn pending(&self) -> Option<i64> {
        self.bids.last().copied()
    }

    /// The mover's previous amount: its latest bid, or the ask before the seller's first counter.
    pub fn own_previous(&self) -> Option<i64> {
        let n = self.bids.len();
        match (n, self.mover) {
            (2.., _) => Some(self.bids[n - 2]),
            (1, Party::Seller) => Some(self.ask),
            (_, Party::Seller | Party::Buyer) => None,
        }
    }

    /// The other side's amount before its pending one: its previous bid, or the ask when the
    /// other side is the seller and the pending bid is its first counter.
    pub fn other_previous(&self) -> Option<i64> {
        let n = self.bids.len();
        match (n, self.mover) {
            (3.., _) => Some(self.bids[n - 3]),
            (2, Party::Buyer) => Some(self.ask),
            (_, Party::Seller | Party::Buyer) => None,
        }
    }

    /// How far the other side moved toward the mover with its pending bid (0 when it did not
    /// move, or has made only one bid, the buyer's opening).
    pub fn other_concession(&self) -> i64 {
        match (self.other_previous(), self.pending()) {
            (Some(before), Some(now)) => match self.mover {
                Party::Seller => now.saturating_sub(before).max(0),
                Party::Buyer => before.saturating_sub(now).max(0),
            },
            _ => 0,
        }
    }

    /// How many bids `party` has made in the thread.
    pub fn bids_by(&self, party: Party) -> usize {
        match party {
            Party::Buyer => self.bids.len().div_ceil(2),
            Party::Seller => self.bids.len() / 2,
        }
    }

    /// The mover's opening position: the ask for the seller, the opening bid for the buyer.
    pub fn own_opening(&self) -> Option<i64> {
        match self.mover {
            Party::Seller => Some(self.ask),
            Party::Buyer => self.bids.first().copied(),
        }
    }

    /// The amounts to move against, or why there is nothing to answer.
    pub fn turn(&self) -> Result<Turn, Rationale> {
        let round = self.round();
        if Party::author_of_round(round) != self.mover {
            return Err(Rationale::NotYourTurn);
        }
        let sane = |amount: i64| (1..=MAX_SANE_AMOUNT).contains(&amount);
        if !sane(self.ask) || !self.bids.iter().copied().all(sane) {
            return Err(Rationale::OutOfRange);
        }
        match (self.pending(), self.own_previous()) {
            (Some(pending), Some(own_previous)) => Ok(Turn { pending, own_previous, round }),
            _ => Err(Rationale::NothingToAnswer),
        }
    }
}

/// What the mover does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Decision {
    /// Accept the pending bid.
    Accept { rationale: Rationale },
    /// Counter with `amount`. For a buyer with no bid yet in the thread, this is its opening bid.
    Counter {
        amount: i64,
        #[serde(rename = "final")]
        is_final: bool,
    },
    /// Reject the pending bid, ending the thread.
    Reject { rationale: Rationale },
    /// Do nothing automatically: the owner decides (`negotiation.action_required`).
    Stop { rationale: Rationale },
}

/// Why a decision was taken: a stable code for events and logs, and a sentence for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rationale {
    /// The pending amount is at or better than the policy's `accept_at`.
    AcceptAt,
    /// The pending amount is at least as good as the counter the strategy would make.
    AsGoodAsCounter,
    /// The seller tier engine's rule: the buyer reached the tier price or the seller's last price.
    TierTarget,
    /// A buyer strategy's `max` covers the seller's price.
    WithinMax,
    /// No legal counter is left short of the limit.
    NoRoomLeft,
    /// The pending amount is worse than the policy's `reject_beyond`.
    RejectBeyond,
    /// The pending bid is final and past the private limit.
    FinalPastLimit,
    /// The pending bid is final and within the limit: a deal within the limit beats no deal.
    FinalWithinLimit,
    /// The strategy has used all of its rounds.
    RoundsExhausted,
    /// The seller did not move since its previous counter.
    SellerNotMoving,
    /// A better standing counter exists on another listing.
    BetterElsewhere,
    /// The policy has made `max_auto_rounds` counters in this thread.
    MaxAutoRounds,
    /// The policy asks its owner to approve every move.
    ApprovalRequired,
    /// There is no pending bid to answer.
    NothingToAnswer,
    /// The pending bid is the mover's own.
    NotYourTurn,
    /// The strategy is not one this side can play (the tier engine is the seller's).
    WrongSide,
    /// An amount of the thread is outside any amount the marketplace allows.
    OutOfRange,
}

impl Rationale {
    pub fn as_str(self) -> &'static str {
        match self {
            Rationale::AcceptAt => "accept_at",
            Rationale::AsGoodAsCounter => "as_good_as_counter",
            Rationale::TierTarget => "tier_target",
            Rationale::WithinMax => "within_max",
            Rationale::NoRoomLeft => "no_room_left",
            Rationale::RejectBeyond => "reject_beyond",
            Rationale::FinalPastLimit => "final_past_limit",
            Rationale::FinalWithinLimit => "final_within_limit",
            Rationale::RoundsExhausted => "rounds_exhausted",
            Rationale::SellerNotMoving => "seller_not_moving",
            Rationale::BetterElsewhere => "better_elsewhere",
            Rationale::MaxAutoRounds => "max_auto_rounds",
            Rationale::ApprovalRequired => "approval_required",
            Rationale::NothingToAnswer => "nothing_to_answer",
            Rationale::NotYourTurn => "not_your_turn",
            Rationale::WrongSide => "wrong_side",
            Rationale::OutOfRange => "out_of_range",
        }
    }

    /// A sentence for the owner or the counterparty; it never names a private value.
    pub fn describe(self) -> &'static str {
        match self {
            Rationale::AcceptAt => "The amount meets the policy's acceptance threshold.",
            Rationale::AsGoodAsCounter => "The amount is at least as good as our next counter would be.",
            Rationale::TierTarget => "The amount meets the price for the buyer's tier.",
            Rationale::WithinMax => "The price is within our budget.",
            Rationale::NoRoomLeft => "There is no amount left between the two positions.",
            Rationale::RejectBeyond => "The amount is beyond what the policy will consider.",
            Rationale::FinalPastLimit => "The final offer is beyond what we can accept.",
            Rationale::FinalWithinLimit => "The final offer is acceptable.",
            Rationale::RoundsExhausted => "The negotiation has used all of its rounds.",
            Rationale::SellerNotMoving => "The seller has not moved since its previous counter.",
            Rationale::BetterElsewhere => "A better offer stands elsewhere.",
            Rationale::MaxAutoRounds => "The policy has made its maximum number of automatic counters.",
            Rationale::ApprovalRequired => "The policy requires the owner's approval.",
            Rationale::NothingToAnswer => "There is no pending bid to answer.",
            Rationale::NotYourTurn => "The pending bid is our own.",
            Rationale::WrongSide => "The strategy does not apply to this side of the thread.",
            Rationale::OutOfRange => "An amount of the thread is out of range.",
        }
    }
}

/// Anything that can take a turn: a server-side [`Policy`] or a client-side buyer strategy.
pub trait Negotiator {
    fn next(&self, state: &NegotiationState) -> Decision;
}

/// Whether `a` is at least as good as `b` for `mover`: higher for the seller, lower for the buyer.
pub(crate) fn at_or_better(mover: Party, a: i64, b: i64) -> bool {
    match mover {
        Party::Seller => a >= b,
        Party::Buyer => a <= b,
    }
}

/// The mover's position after conceding `by` from `from`.
pub(crate) fn concede(mover: Party, from: i64, by: i64) -> i64 {
    match mover {
        Party::Seller => from.saturating_sub(by),
        Party::Buyer => from.saturating_add(by),
    }
}

/// Floating point noise below this (in minor units) is not a reason to round a whole unit away.
/// Legality never depends on it: every counter is clamped afterwards.
const FLOAT_SLACK: f64 = 1e-6;

/// A price computed in floating point, rounded toward the mover's own side.
pub(crate) fn round_price(mover: Party, price: f64) -> i64 {
    // `as` saturates at the bounds of i64 and maps NaN to 0; settle clamps whatever comes out.
    match mover {
        Party::Seller => (price - FLOAT_SLACK).ceil() as i64,
        Party::Buyer => (price + FLOAT_SLACK).floor() as i64,
    }
}

/// The least step a counter makes when it is `share` of the ask, rounded up: at least one unit.
pub(crate) fn step_of_ask(ask: i64, share: f64) -> i64 {
    ((ask as f64 * share).ceil() as i64).max(1)
}

/// A concession computed in floating point, rounded down: the mover gives no more than the rule.
pub(crate) fn round_concession(concession: f64) -> i64 {
    ((concession + FLOAT_SLACK).floor() as i64).max(0)
}

/// Where a mover wants its counter, `target`, and the private `limit` it never crosses (the
/// seller's floor, the buyer's ceiling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aim {
    pub limit: i64,
    pub target: i64,
}

/// Turns the counter a strategy wishes for into a decision that keeps every rule.
///
/// In order: the target is pulled back to the private `limit`; if the pending amount is already
/// at least as good as that target, the mover accepts (the literature's AC_next: why counter
/// with something worse than what is on the table?); a final pending bid cannot be countered,
/// so the mover accepts it within its limit (a deal there beats none) or rejects it past the
/// limit; otherwise the
/// target is clamped into the legal range intersected with the limit. If that range is empty,
/// the mover accepts when the pending amount is within its limit and stops otherwise (this only
/// happens when an earlier manual move already went past the limit). The bid that reaches
/// `max_rounds` is final whatever the strategy said.
pub fn settle(state: &NegotiationState, turn: Turn, Aim { limit, target }: Aim, strategy_final: bool) -> Decision {
    let mover = state.mover;
    let target = if at_or_better(mover, target, limit) { target } else { limit };
    if at_or_better(mover, turn.pending, target) {
        return Decision::Accept { rationale: Rationale::AsGoodAsCounter };
    }
    let pending_within_limit = at_or_better(mover, turn.pending, limit);
    if state.pending_final {
        return if pending_within_limit {
            Decision::Accept { rationale: Rationale::FinalWithinLimit }
        } else {
            Decision::Reject { rationale: Rationale::FinalPastLimit }
        };
    }
    let (mut low, mut high) = turn.positions().counter_range(mover);
    match mover {
        Party::Seller => low = low.max(limit),
        Party::Buyer => high = high.min(limit),
    }
    if low > high {
        return if pending_within_limit {
            Decision::Accept { rationale: Rationale::NoRoomLeft }
        } else {
            Decision::Stop { rationale: Rationale::NoRoomLeft }
        };
    }
    let amount = target.clamp(low, high);
    if bid::check_counter(mover, amount, turn.positions()).is_err() {
        // Unreachable by construction (the amount lies in counter_range); never counter illegally.
        debug_assert!(false, "settle produced an illegal counter");
        return Decision::Stop { rationale: Rationale::NoRoomLeft };
    }
    Decision::Counter { amount, is_final: bid::is_final(turn.round, state.max_rounds, strategy_final) }
}

/// A buyer's opening bid: `amount`, at most the ask (a bid above the ask is refused; at the ask,
/// the seller's policy accepts it).
pub(crate) fn open(state: &NegotiationState, amount: i64) -> Decision {
    if !(1..=MAX_SANE_AMOUNT).contains(&state.ask) {
        return Decision::Stop { rationale: Rationale::OutOfRange };
    }
    Decision::Counter { amount: amount.min(state.ask), is_final: bid::is_final(1, state.max_rounds, false) }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    /// A state whose mover is the author of the next round.
    pub fn state(ask: i64, bids: &[i64]) -> NegotiationState {
        let mover = Party::author_of_round(bids.len() as i32 + 1);
        NegotiationState {
            mover,
            ask,
            max_rounds: 20,
            buyer_tier: Tier::Agency,
            bids: bids.to_vec(),
            pending_final: false,
            auto_moves: 0,
        }
    }
}

#[cfg(test)]
mod state_tests {
    use super::fixtures::state;
    use super::*;

    #[test]
    fn the_state_knows_who_said_what() {
        // Ask 1000. Buyer 600; seller 900; buyer 700; the seller is to move (round 4).
        let s = state(1000, &[600, 900, 700]);
        assert_eq!(s.mover, Party::Seller);
        assert_eq!(s.round(), 4);
        assert_eq!(s.pending(), Some(700));
        assert_eq!(s.own_previous(), Some(900));
        assert_eq!(s.other_previous(), Some(600));
        assert_eq!(s.other_concession(), 100); // 700 − 600
        assert_eq!((s.bids_by(Party::Buyer), s.bids_by(Party::Seller)), (2, 1));
        assert_eq!(s.turn(), Ok(Turn { pending: 700, own_previous: 900, round: 4 }));

        // The seller's first counter starts from the ask; the buyer has not conceded yet.
        let s = state(1000, &[600]);
        assert_eq!((s.own_previous(), s.other_previous(), s.other_concession()), (Some(1000), None, 0));

        // The buyer's first counter: the seller's first move is measured from the ask.
        let s = state(1000, &[600, 900]);
        assert_eq!((s.own_previous(), s.other_previous(), s.other_concession()), (Some(600), Some(1000), 100));
        assert_eq!(s.own_opening(), Some(600));

        // Nothing to answer before the opening; the wrong side is refused.
        assert_eq!(state(1000, &[]).turn(), Err(Rationale::NothingToAnswer));
        let wrong = NegotiationState { mover: Party::Buyer, ..state(1000, &[600]) };
        assert_eq!(wrong.turn(), Err(Rationale::NotYourTurn));
        assert_eq!(state(1000, &[0]).turn(), Err(Rationale::OutOfRange));
    }

    #[test]
    fn rounding_favours_the_mover() {
        let cases: &[(Party, f64, i64)] = &[
            (Party::Seller, 100.2, 101),
            (Party::Seller, 100.0, 100),
            (Party::Seller, 100.000_000_01, 100), // float noise is not a unit
            (Party::Buyer, 100.8, 100),
            (Party::Buyer, 99.999_999_99, 100),
            (Party::Buyer, 100.0, 100),
        ];
        for &(mover, price, want) in cases {
            assert_eq!(round_price(mover, price), want, "{mover:?} {price}");
        }
        assert_eq!(round_concession(2.9), 2);
        assert_eq!(round_concession(-3.0), 0);
        assert_eq!(round_price(Party::Seller, f64::NAN), 0);
    }

    #[test]
    fn settle_keeps_every_rule() {
        // Seller, floor 800, ask 1000, buyer pending 700. Columns: target, strategy final, expected.
        let s = state(1000, &[700]);
        let turn = s.turn().unwrap();
        let counter = |amount, is_final| Decision::Counter { amount, is_final };
        let as_good = Decision::Accept { rationale: Rationale::AsGoodAsCounter };
        let cases = [
            (900, false, counter(900, false)),
            (900, true, counter(900, true)),
            (750, false, counter(800, false)),   // pulled back to the floor
            (1200, false, counter(1000, false)), // no retraction above the ask
            (700, false, counter(800, false)),   // the floor is above the pending amount
        ];
        for (target, fin, want) in cases {
            assert_eq!(settle(&s, turn, Aim { limit: 800, target }, fin), want, "target {target}");
        }
        // Floor 650: a target at or below the pending 700 means the pending amount is good enough.
        assert_eq!(settle(&s, turn, Aim { limit: 650, target: 690 }, false), as_good);
        assert_eq!(settle(&s, turn, Aim { limit: 650, target: 700 }, false), as_good);

        // Buyer, ceiling 850: seller pending 900, own previous 700.
        let s = state(1000, &[700, 900]);
        let turn = s.turn().unwrap();
        assert_eq!(settle(&s, turn, Aim { limit: 850, target: 800 }, false), counter(800, false));
        assert_eq!(settle(&s, turn, Aim { limit: 850, target: 880 }, false), counter(850, false)); // the ceiling
        assert_eq!(settle(&s, turn, Aim { limit: 850, target: 650 }, false), counter(700, false)); // no retraction
        // Ceiling 1000: a target at or above the pending 900 accepts.
        assert_eq!(settle(&s, turn, Aim { limit: 1000, target: 950 }, false), as_good);

        // A final pending bid cannot be countered: a deal within the limit beats none, so it is
        // accepted within the limit and rejected past it.
        let fin = NegotiationState { pending_final: true, ..s.clone() };
        assert_eq!(
            settle(&fin, turn, Aim { limit: 950, target: 800 }, false),
            Decision::Accept { rationale: Rationale::FinalWithinLimit }
        );
        assert_eq!(
            settle(&fin, turn, Aim { limit: 850, target: 800 }, false),
            Decision::Reject { rationale: Rationale::FinalPastLimit }
        );

        // The bid reaching max_rounds is final whatever the strategy says.
        let last = NegotiationState { max_rounds: 3, ..s.clone() };
        assert_eq!(settle(&last, turn, Aim { limit: 850, target: 800 }, false), counter(800, true));

        // Positions one unit apart leave the seller only its previous price.
        let s = state(1000, &[600, 701, 700]);
        assert_eq!(settle(&s, s.turn().unwrap(), Aim { limit: 650, target: 690 }, false), as_good);
        assert_eq!(settle(&s, s.turn().unwrap(), Aim { limit: 650, target: 701 }, false), counter(701, false));
        // A buyer whose manual bid already passed its ceiling has no room and does not accept.
        let s = state(1000, &[900, 950]);
        assert_eq!(
            settle(&s, s.turn().unwrap(), Aim { limit: 850, target: 900 }, false),
            Decision::Stop { rationale: Rationale::NoRoomLeft }
        );
    }
}
