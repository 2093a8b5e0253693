//! The Q-table and the player that plays from it (see [`crate::learn`] for how tables are
//! trained): states, actions, and the moves a table chooses within the protocol's rules.

use std::cell::RefCell;

use haggle_domain::bid::{self, Party};
use haggle_domain::strategy::{Aim, Decision, NegotiationState, Negotiator, Rationale, Strategy, settle};

use super::rng::Rng;

pub const LEVELS: usize = 5;
pub const STEPS: usize = 5;
pub const STATES: usize = 1 + LEVELS * STEPS;
/// Offers P_0..P_4, then accept, then reject.
pub const ACTIONS: usize = LEVELS + 2;
pub(crate) const ACCEPT: usize = LEVELS;
pub(crate) const REJECT: usize = LEVELS + 1;

#[derive(Debug, Clone, PartialEq)]
pub struct QTable {
    pub values: Vec<[f64; ACTIONS]>,
}

impl Default for QTable {
    fn default() -> Self {
        QTable { values: vec![[0.0; ACTIONS]; STATES] }
    }
}

impl QTable {
    /// The table as a policy's counter strategy, `{"strategy": "learned", ...}`, which the
    /// domain plays greedily exactly as [`QPlayer::greedy`] does in the market.
    pub fn to_strategy(&self) -> Strategy {
        Strategy::Learned {
            levels: LEVELS as u8,
            steps: STEPS as u8,
            q: self.values.iter().map(|row| row.to_vec()).collect(),
        }
    }

    pub(crate) fn best_value(&self, state: usize) -> f64 {
        self.values[state].iter().copied().fold(f64::NEG_INFINITY, f64::max)
    }
}

/// Who made the first move of a game, which fixes what a Q player reads its state from.
///
/// The marketplace has no move before the buyer's opening bid: a thread starts with it, and the
/// seller's only earlier word is the listing's ask, which it states first and the buyer answers.
/// So the paper's "the seller opens" is played here as the seller *choosing* that ask: from the
/// start state it picks a point of the grid on the list price (at or above its cost), the
/// thread is played with that quote as its ask, and the buyer answers it from the state (level
/// of the quote, t = 0), where it may take it (a bid at the ask, which the seller accepts), walk
/// away, or open lower. The quote counts as the first of the game's moves, so such a thread has
/// one bid fewer than `max_rounds` (but at least one) and the other side gets the last word, as
/// in the paper. Every bid still goes through the domain's rules, so the game is a legal thread
/// of the marketplace.
///
/// The market plays only [`Opening::Buyer`]: there the listing's ask is drawn (cost ×
/// (1 + markup)), the grid is on it, and the buyer opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// The buyer's opening bid is the first move; the grid is on the thread's ask.
    Buyer,
    /// The seller quoted the thread's ask at a point of the grid on `list`.
    Seller { list: i64 },
}

/// The grid point P_k for a listing with this list price.
pub fn level_price(list: i64, level: usize) -> i64 {
    let price = list as f64 * (0.5 + 0.125 * level as f64);
    price.round() as i64
}

pub(crate) fn level_of(list: i64, amount: i64) -> usize {
    let x = ((amount as f64 / list as f64) - 0.5) / 0.125;
    x.round().clamp(0.0, (LEVELS - 1) as f64) as usize
}

impl Opening {
    /// The list price the grid is on.
    pub(crate) fn list(self, state: &NegotiationState) -> i64 {
        match self {
            Opening::Buyer => state.ask,
            Opening::Seller { list } => list,
        }
    }

    /// Whether the mover faces the seller's quote, with no bid in the thread yet.
    pub(crate) fn facing_quote(self, state: &NegotiationState) -> bool {
        matches!(self, Opening::Seller { .. }) && state.bids.is_empty()
    }
}

/// The state index of the thread as the mover sees it, in a game opened as `opening` says.
pub fn state_of(state: &NegotiationState, opening: Opening) -> usize {
    let bids = i64::try_from(state.bids.len()).unwrap_or(i64::MAX);
    let max_rounds = i64::from(state.max_rounds.max(1));
    let (pending, made, allowed) = match (opening, state.pending()) {
        (Opening::Buyer, None) => return 0,
        (Opening::Buyer, Some(pending)) => (pending, bids, max_rounds),
        // The quote was the first move, pending until the buyer's first bid.
        (Opening::Seller { .. }, pending) => (pending.unwrap_or(state.ask), bids + 1, max_rounds + 1),
    };
    let step = ((5 * made) / allowed).clamp(0, (STEPS - 1) as i64) as usize;
    1 + level_of(opening.list(state), pending) * STEPS + step
}

/// Which actions the mover with private `limit` may take.
pub(crate) fn allowed(state: &NegotiationState, side: Party, limit: i64, opening: Opening) -> [bool; ACTIONS] {
    let mut mask = [false; ACTIONS];
    let pending = match state.pending() {
        Some(pending) => pending,
        None if opening.facing_quote(state) => state.ask,
        None => {
            mask[..LEVELS].fill(true);
            return mask;
        }
    };
    if !state.pending_final {
        mask[..LEVELS].fill(true);
    }
    mask[ACCEPT] = match side {
        Party::Buyer => pending <= limit,
        Party::Seller => pending >= limit,
    };
    mask[REJECT] = true;
    mask
}

/// Exploration state of a learning player: its ε, its generator, and the moves it made.
#[derive(Debug)]
pub(crate) struct Explore {
    pub(crate) epsilon: f64,
    pub(crate) rng: Rng,
    pub(crate) trace: Vec<(usize, usize)>,
}

/// A Q-table playing one side with private `limit`: greedy, or ε-greedy while learning.
pub struct QPlayer<'a> {
    table: &'a QTable,
    side: Party,
    limit: i64,
    opening: Opening,
    pub(crate) explore: Option<RefCell<Explore>>,
}

impl<'a> QPlayer<'a> {
    /// A greedy player of the market's game, where the buyer opens.
    pub fn greedy(table: &'a QTable, side: Party, limit: i64) -> QPlayer<'a> {
        QPlayer { table, side, limit, opening: Opening::Buyer, explore: None }
    }

    pub(crate) fn in_game(self, opening: Opening) -> QPlayer<'a> {
        QPlayer { opening, ..self }
    }

    pub(crate) fn exploring(table: &'a QTable, side: Party, limit: i64, epsilon: f64, rng: Rng) -> QPlayer<'a> {
        let explore = Some(RefCell::new(Explore { epsilon, rng, trace: Vec::new() }));
        QPlayer { table, side, limit, opening: Opening::Buyer, explore }
    }

    /// The seller's opening move, from the start state: the ask it quotes, a point of the grid
    /// on `list` and never below its cost.
    pub(crate) fn quote(&self, list: i64) -> i64 {
        let mut offers = [false; ACTIONS];
        offers[..LEVELS].fill(true);
        let level = self.choose(0, &offers);
        level_price(list, level).max(self.limit).max(1)
    }

    pub(crate) fn choose(&self, s: usize, mask: &[bool; ACTIONS]) -> usize {
        let choices: Vec<usize> = (0..ACTIONS).filter(|&a| mask[a]).collect();
        let row = &self.table.values[s];
        let best = choices.iter().map(|&a| row[a]).fold(f64::NEG_INFINITY, f64::max);
        let ties: Vec<usize> = choices.iter().copied().filter(|&a| row[a] >= best).collect();
        match &self.explore {
            Some(explore) => {
                let mut explore = explore.borrow_mut();
                let action = if explore.rng.unit() < explore.epsilon {
                    choices[explore.rng.below(choices.len())]
                } else {
                    ties[explore.rng.below(ties.len())]
                };
                explore.trace.push((s, action));
                action
            }
            // Greedy play without a generator: of equals, the offer most favourable to the mover
            // (the lowest price for the buyer, the highest for the seller), as in an unvisited state.
            None => match self.side {
                Party::Buyer => ties[0],
                Party::Seller => ties.iter().copied().filter(|&a| a < LEVELS).max().unwrap_or(ties[0]),
            },
        }
    }
}

impl Negotiator for QPlayer<'_> {
    fn next(&self, state: &NegotiationState) -> Decision {
        if state.mover != self.side {
            return Decision::Stop { rationale: Rationale::WrongSide };
        }
        // The buyer took the seller's quote: its bid at the ask closes the deal, as the seller's
        // policy accepts a bid at the ask.
        if matches!(self.opening, Opening::Seller { .. })
            && state.bids.len() == 1
            && state.pending().is_some_and(|p| p >= state.ask)
        {
            return Decision::Accept { rationale: Rationale::AsGoodAsCounter };
        }
        let mask = allowed(state, self.side, self.limit, self.opening);
        let action = self.choose(state_of(state, self.opening), &mask);
        let facing_quote = self.opening.facing_quote(state);
        if action == ACCEPT {
            if facing_quote {
                return Decision::Counter { amount: state.ask, is_final: bid::is_final(1, state.max_rounds, false) };
            }
            return Decision::Accept { rationale: Rationale::WithinMax };
        }
        if action == REJECT {
            // Walking away from a quote: there is no bid to reject.
            if facing_quote {
                return Decision::Stop { rationale: Rationale::RejectBeyond };
            }
            return Decision::Reject { rationale: Rationale::RejectBeyond };
        }
        let target = level_price(self.opening.list(state), action);
        if state.bids.is_empty() {
            let amount = target.min(self.limit).min(state.ask).max(1);
            return Decision::Counter { amount, is_final: bid::is_final(1, state.max_rounds, false) };
        }
        match state.turn() {
            Ok(turn) => settle(state, turn, Aim { limit: self.limit, target }, false),
            Err(rationale) => Decision::Stop { rationale },
        }
    }
}
