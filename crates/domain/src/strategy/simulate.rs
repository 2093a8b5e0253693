//! A negotiation between two [`Negotiator`]s, played by the rules of SPEC §2, without a server.
//!
//! Each move is checked the way the server checks it (`bid::check_opening`, `bid::check_counter`,
//! no counter on a final bid), so a strategy that breaks a rule ends the run with `Refused`.

use super::super::bid::{self, Party};
use super::super::rejection::Rejection;
use super::super::tier::Tier;
use super::{Decision, NegotiationState, Negotiator, Rationale};

/// The listing and buyer a simulated thread is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub ask: i64,
    pub max_rounds: i32,
    pub buyer_tier: Tier,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacedBid {
    pub author: Party,
    pub amount: i64,
    /// As the server records it: requested by the author, or reaching `max_rounds`.
    pub is_final: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Accepted {
        by: Party,
        amount: i64,
    },
    Rejected {
        by: Party,
        rationale: Rationale,
    },
    Stopped {
        by: Party,
        rationale: Rationale,
    },
    /// A move the server would have refused.
    Refused {
        by: Party,
        rejection: Rejection,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transcript {
    pub bids: Vec<PlacedBid>,
    pub ending: Ending,
}

/// The thread as `mover` sees it after `bids`: what a negotiator is handed to decide its move,
/// here and by any venue that keeps the thread elsewhere (a server).
pub fn state_after(setting: &Setting, bids: &[PlacedBid], mover: Party) -> NegotiationState {
    let own_bids = bids.iter().filter(|bid| bid.author == mover).count();
    NegotiationState {
        mover,
        ask: setting.ask,
        max_rounds: setting.max_rounds,
        buyer_tier: setting.buyer_tier,
        bids: bids.iter().map(|bid| bid.amount).collect(),
        pending_final: bids.last().is_some_and(|bid| bid.is_final),
        // Counters only: the buyer's opening bid is not one.
        auto_moves: u32::try_from(if mover == Party::Buyer { own_bids.saturating_sub(1) } else { own_bids })
            .unwrap_or(u32::MAX),
    }
}

/// Plays `buyer` against `seller` until one accepts, rejects, stops, or breaks a rule.
pub fn simulate(setting: &Setting, buyer: &dyn Negotiator, seller: &dyn Negotiator) -> Transcript {
    let mut bids: Vec<PlacedBid> = Vec::new();
    loop {
        let round = i32::try_from(bids.len()).map_or(i32::MAX, |n| n.saturating_add(1));
        let mover = Party::author_of_round(round);
        let state = state_after(setting, &bids, mover);
        let negotiator = match mover {
            Party::Buyer => buyer,
            Party::Seller => seller,
        };
        let decision = negotiator.next(&state);
        let pending = state.pending();
        let ending = match (decision, pending) {
            (Decision::Accept { .. }, Some(amount)) => Ending::Accepted { by: mover, amount },
            (Decision::Reject { rationale }, Some(_)) => Ending::Rejected { by: mover, rationale },
            (Decision::Accept { .. } | Decision::Reject { .. }, None) => {
                Ending::Refused { by: mover, rejection: Rejection::NotFound { what: "bid" } }
            }
            (Decision::Stop { rationale }, _) => Ending::Stopped { by: mover, rationale },
            (Decision::Counter { amount, is_final }, pending) => {
                let checked = match (pending, state.own_previous()) {
                    (None, _) => bid::check_opening(amount, bid::Ask(setting.ask)),
                    (Some(_), _) if state.pending_final => Err(Rejection::FinalOffer),
                    (Some(pending), Some(previous)) => {
                        bid::check_counter(mover, amount, bid::Positions { pending, own_previous: previous })
                    }
                    (Some(_), None) => Err(Rejection::NotYourTurn { turn: mover.other() }),
                };
                match checked {
                    Ok(()) => {
                        let is_final = bid::is_final(round, setting.max_rounds, is_final);
                        bids.push(PlacedBid { author: mover, amount, is_final });
                        continue;
                    }
                    Err(rejection) => Ending::Refused { by: mover, rejection },
                }
            }
        };
        return Transcript { bids, ending };
    }
}
