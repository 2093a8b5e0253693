//! `learned`: a Q-table trained by `haggle sim --learn q`, played greedily as a policy.
//!
//! The table is the simulator's (see the sim crate's `learn` module). States: 0 before anything
//! was received, else 1 + level·steps + step, where `level` is the nearest point of a grid of
//! `levels` prices P_k = ask·(0.5 + 0.5·k/(levels − 1)) to the pending amount and
//! `step` = ⌊steps·(bids so far)/max_rounds⌋. Actions: offer P_0 … P_{levels−1}, accept, reject.
//! A final pending bid can only be accepted or rejected; accepting is only allowed within the
//! mover's limit; an offer goes through [`super::settle`] like any counter.
//!
//! Exported as JSON, `{"strategy": "learned", "levels": 5, "steps": 5, "q": [[...], ...]}`, with
//! one row of `levels + 2` numbers per state. Size is bounded ([`MAX_LEVELS`], [`MAX_STEPS`]):
//! 10 × 10 is 101 rows of 12 numbers, well within a request body.

use super::super::bid::Party;
use super::super::issues::Prices;
use super::{NegotiationState, Proposal, Rationale, Turn};

pub const MAX_LEVELS: u8 = 10;
pub const MAX_STEPS: u8 = 10;
/// Q-values beyond this are not rewards of a negotiation (rewards are surpluses over the ask).
pub const MAX_Q: f64 = 1.0e6;

/// The table's shape, checked: `Ok(rows, actions)` or the problem, for the `q` field.
pub fn check_shape(levels: u8, steps: u8, q: &[Vec<f64>]) -> Result<(), (&'static str, String)> {
    if !(2..=MAX_LEVELS).contains(&levels) {
        return Err(("counter.levels", format!("must be between 2 and {MAX_LEVELS}")));
    }
    if !(1..=MAX_STEPS).contains(&steps) {
        return Err(("counter.steps", format!("must be between 1 and {MAX_STEPS}")));
    }
    let rows = 1 + usize::from(levels) * usize::from(steps);
    let actions = usize::from(levels) + 2;
    if q.len() != rows {
        return Err(("counter.q", format!("must have 1 + levels × steps = {rows} rows, one per state")));
    }
    if q.iter().any(|row| row.len() != actions) {
        return Err(("counter.q", format!("every row must have levels + 2 = {actions} numbers")));
    }
    if q.iter().flatten().any(|v| !(v.is_finite() && v.abs() <= MAX_Q)) {
        return Err(("counter.q", format!("every value must be a finite number of magnitude at most {MAX_Q}")));
    }
    Ok(())
}

/// The grid point P_k.
pub fn level_price(ask: i64, levels: u8, level: usize) -> i64 {
    let span = f64::from(levels.max(2) - 1);
    (ask as f64 * (0.5 + 0.5 * level as f64 / span)).round() as i64
}

/// The grid point nearest `amount`.
pub fn level_of(ask: i64, levels: u8, amount: i64) -> usize {
    let span = f64::from(levels.max(2) - 1);
    let x = ((amount as f64 / ask as f64) - 0.5) / (0.5 / span);
    x.round().clamp(0.0, span) as usize
}

/// The state of a thread the buyer opened, as the mover sees it.
pub fn state_index(state: &NegotiationState, levels: u8, steps: u8) -> usize {
    let Some(pending) = state.pending() else { return 0 };
    let made = i64::try_from(state.bids.len()).unwrap_or(i64::MAX);
    let allowed = i64::from(state.max_rounds.max(1));
    let step = ((i64::from(steps) * made) / allowed).clamp(0, i64::from(steps) - 1) as usize;
    1 + level_of(state.ask, levels, pending) * usize::from(steps) + step
}

/// The greedy action: the best allowed value; of equals, the offer most favourable to the mover
/// (the lowest price for the buyer, the highest for the seller), as in an unvisited state.
pub fn greedy(row: &[f64], allowed: &[bool], mover: Party, offers: usize) -> Option<usize> {
    let choices: Vec<usize> = (0..row.len().min(allowed.len())).filter(|&a| allowed[a]).collect();
    let best = choices.iter().map(|&a| row[a]).fold(f64::NEG_INFINITY, f64::max);
    let ties: Vec<usize> = choices.into_iter().filter(|&a| row[a] >= best).collect();
    match mover {
        Party::Buyer => ties.first().copied(),
        Party::Seller => ties.iter().copied().filter(|&a| a < offers).max().or(ties.first().copied()),
    }
}

/// The table's move for `state`, whose mover has private `limit`.
pub(super) fn propose(
    state: &NegotiationState,
    turn: Turn,
    limit: i64,
    levels: u8,
    steps: u8,
    q: &[Vec<f64>],
) -> Proposal {
    if check_shape(levels, steps, q).is_err() {
        return Proposal::Stop(Rationale::OutOfRange);
    }
    let offers = usize::from(levels);
    let (accept, reject) = (offers, offers + 1);
    let mut allowed = vec![!state.pending_final; offers + 2];
    allowed[accept] = match state.mover {
        Party::Buyer => turn.pending <= limit,
        Party::Seller => turn.pending >= limit,
    };
    allowed[reject] = true;
    let row = &q[state_index(state, levels, steps)];
    match greedy(row, &allowed, state.mover, offers) {
        Some(a) if a == accept => Proposal::Accept(Rationale::WithinMax),
        Some(a) if a < offers => Proposal::Counter { amount: level_price(state.ask, levels, a), is_final: false },
        Some(_) | None => Proposal::Reject(Rationale::RejectBeyond),
    }
}

/// A learned buyer's opening bid: the greedy offer from the start state, within its limit.
pub fn opening(Prices { limit, ask }: Prices, levels: u8, q: &[Vec<f64>]) -> i64 {
    let offers = usize::from(levels);
    let allowed: Vec<bool> = (0..offers + 2).map(|a| a < offers).collect();
    let level = q.first().and_then(|row| greedy(row, &allowed, Party::Buyer, offers)).unwrap_or(0);
    level_price(ask, levels, level).min(limit).min(ask).max(1)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::state;
    use super::super::{Decision, Policy, Strategy, decide};
    use super::*;

    fn table(levels: u8, steps: u8, fill: impl Fn(usize, usize) -> f64) -> Vec<Vec<f64>> {
        let rows = 1 + usize::from(levels) * usize::from(steps);
        (0..rows).map(|s| (0..usize::from(levels) + 2).map(|a| fill(s, a)).collect()).collect()
    }

    #[test]
    fn the_grid_and_the_states_are_the_simulators() {
        // Five levels on an ask of 10000: 5000, 6250, 7500, 8750, 10000.
        let prices: Vec<i64> = (0..5).map(|k| level_price(10_000, 5, k)).collect();
        assert_eq!(prices, [5_000, 6_250, 7_500, 8_750, 10_000]);
        assert_eq!(level_of(10_000, 5, 6_800), 1);
        assert_eq!(level_of(10_000, 5, 6_900), 2); // nearer 7500 than 6250
        assert_eq!(level_of(10_000, 5, 6_875), 2); // exactly between rounds away from zero
        assert_eq!(level_of(10_000, 5, 100), 0);
        assert_eq!(level_of(10_000, 5, 50_000), 4);
        // max_rounds 20: three bids made is step ⌊5·3/20⌋ = 0; pending 9000 is level 3.
        assert_eq!(state_index(&state(10_000, &[5_000, 9_500, 9_000]), 5, 5), 1 + 3 * 5);
        assert_eq!(state_index(&state(10_000, &[]), 5, 5), 0);
    }

    #[test]
    fn the_table_is_played_greedily_within_the_rules() {
        // Every state prefers offering P_1 (6250); state 1 + 4·5 (the seller's 10000, early)
        // prefers accepting, which the buyer may only do within its limit.
        let q = table(5, 5, |s, a| match (s, a) {
            (21, 5) => 2.0,
            (_, 1) => 1.0,
            _ => 0.0,
        });
        let learned = Strategy::Learned { levels: 5, steps: 5, q };
        let buyer = Policy::new(12_000, learned.clone());
        assert!(matches!(decide(&buyer, &state(10_000, &[5_000, 10_000])), Decision::Accept { .. }));
        // Past the limit, accepting is not allowed: the next best is the offer of 6250.
        let poor = Policy::new(9_000, learned.clone());
        assert_eq!(
            decide(&poor, &state(10_000, &[5_000, 10_000])),
            Decision::Counter { amount: 6_250, is_final: false }
        );
        // A seller offering P_1 below its floor is held at the floor by settle.
        let seller = Policy::new(8_000, learned);
        assert_eq!(decide(&seller, &state(10_000, &[5_000])), Decision::Counter { amount: 8_000, is_final: false });
    }

    #[test]
    fn malformed_tables_are_named() {
        let ok = table(5, 5, |_, _| 0.0);
        assert_eq!(check_shape(5, 5, &ok), Ok(()));
        assert_eq!(check_shape(1, 5, &ok).unwrap_err().0, "counter.levels");
        assert_eq!(check_shape(5, 11, &ok).unwrap_err().0, "counter.steps");
        assert_eq!(check_shape(5, 4, &ok).unwrap_err().0, "counter.q");
        let mut short = ok.clone();
        short[3].pop();
        assert_eq!(check_shape(5, 5, &short).unwrap_err().0, "counter.q");
        let mut huge = ok;
        huge[0][0] = f64::INFINITY;
        assert_eq!(check_shape(5, 5, &huge).unwrap_err().0, "counter.q");
    }
}
