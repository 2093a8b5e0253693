//! `bayes`: Haggle's own opponent-modelling strategy, for either side (SPEC §5).
//!
//! The mover keeps a belief about the other side's private limit, a discrete distribution on a
//! grid of candidate limits, and chooses the amount that maximises its expected surplus under it.
//! The belief is rebuilt from the thread at every turn (the strategy keeps no memory, so a
//! server that restarts decides the same way):
//!
//! - **Prior.** A seller's floor is taken to lie between 30 % of the ask and the ask; a buyer's
//!   ceiling between its opening bid and 1/0.3 times it (buyers open at a share of their limit).
//! - **Hard evidence.** Nobody bids past its own limit, so the seller's floor is at most its
//!   latest counter and the buyer's ceiling at least its latest bid.
//! - **Regression of the concession curve** (Hou 2004, after Faratin, Sierra & Jennings 1998).
//!   The other side's moves are fitted to a time-dependent tactic, a straight line in log–log
//!   coordinates. For the seller, ask − price(t) = (ask − floor)·t^(1/β), whose intercept gives
//!   the floor; for the buyer, bid(τ) − opening = (ceiling − opening)·τ^(1/β) on the buyer's own
//!   clock τ (0 at its opening, 1 at the deadline), whose intercept gives the ceiling: a linear
//!   buyer is extrapolated to the deadline, a Boulware one is not mistaken for a buyer near its
//!   limit because its early steps are small. The estimate enters the belief as a Gaussian
//!   likelihood (σ = 10 % of the ask), so a poor fit only nudges it.
//! - **Bayesian update on refusals** (Zeng & Sycara 1998), weighted by time. A buyer who answers
//!   the seller's counter with a counter of its own, rather than accepting it, more likely has a
//!   ceiling below it; but a buyer with many rounds left refuses a price within its limit as a
//!   matter of course (Boulware tactics hold back until the deadline). A price refused at time t
//!   multiplies the belief in ceilings at or above it by 1 − 0.8·t: an early refusal says little,
//!   one at the deadline much.
//!
//! **The seller** counters, each turn, with the price p that maximises (p − floor)·P(ceiling ≥ p),
//! always at least half a percent below its previous price (a seller who stands still is taken
//! for one who will not move), and accepts a bid worth at least that expectation. Since early
//! refusals weigh little, it does not fall toward its floor against a patient buyer who concedes
//! only near the deadline. When its counter would be final (it reaches the listing's last round),
//! a refusal ends the thread with nothing: there the seller is risk-averse, maximising
//! (p − floor)·P(ceiling ≥ p)^50 (and accepting a bid worth as much), which puts the price where
//! the belief is all but sure of a deal.
//!
//! **The buyer** opens at [`BAYES_OPENING`] of the ask, then follows a time-dependent
//! (Boulware, `e` < 1) schedule from its opening to its planned last price T, the price that
//! maximises (ceiling − T)·P(floor ≤ T), reached at its last bid before the deadline. Holding back
//! early costs it nothing against sellers whose price falls with time (they reach their floor at
//! the deadline), while its late concessions are returned by sellers who reciprocate. When its
//! own next bid would be final, it accepts the seller's price if that is worth at least the
//! expected surplus of the final bid.
//!
//! As with every strategy, [`super::settle`] has the last word: the counter never crosses the
//! mover's limit and always lies in the legal range.

use super::super::bid::Party;
use super::super::issues::Prices;
pub use super::buyer::BayesBuyer;
use super::{NegotiationState, Proposal, Rationale, Turn, round_price, step_of_ask};

/// The buyer's opening bid, as a share of the ask.
pub const BAYES_OPENING: f64 = 0.35;
/// The default concession exponent of the buyer's schedule: Boulware.
pub const DEFAULT_BAYES_E: f64 = 0.5;
/// The smallest and largest concession exponents a policy may give.
pub const MIN_BAYES_E: f64 = 0.05;
pub const MAX_BAYES_E: f64 = 20.0;

/// Candidate limits in the belief.
const GRID: usize = 81;
/// The lowest seller floor believed possible, as a share of the ask.
const FLOOR_PRIOR_LOW: f64 = 0.3;
/// The lowest opening bid believed possible, as a share of the buyer's ceiling.
const OPENING_PRIOR_LOW: f64 = 0.3;
/// The width of the regression's likelihood, as a share of the ask.
const SIGMA: f64 = 0.1;
/// How much a refused counter lowers the belief in ceilings at or above it, by the time t of the
/// refusal: they are multiplied by 1 − REFUSAL_WEIGHT·t (an early refusal says little).
const REFUSAL_WEIGHT: f64 = 0.8;
/// The exponent on the probability of a deal when the seller's counter is final.
const FINAL_RISK_AVERSION: f64 = 50.0;
/// Candidate ceilings in the seller's belief (finer than [`GRID`]: its final counter lands on one).
const CEILING_GRID: usize = 321;
/// The seller's least concession per counter, as a share of the ask.
const MIN_STEP: f64 = 0.005;

/// A discrete belief about the other side's limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Belief {
    /// Candidate limits, ascending.
    pub limits: Vec<f64>,
    /// Their weights (not normalised); zero where excluded.
    pub weights: Vec<f64>,
}

impl Belief {
    fn uniform(low: f64, high: f64) -> Belief {
        Belief::uniform_on(low, high, GRID)
    }

    fn uniform_on(low: f64, high: f64, size: usize) -> Belief {
        let high = high.max(low);
        let size = size.max(2);
        let limits: Vec<f64> = (0..size).map(|j| low + (high - low) * j as f64 / (size - 1) as f64).collect();
        Belief { weights: vec![1.0; limits.len()], limits }
    }

    fn total(&self) -> f64 {
        self.weights.iter().sum()
    }

    /// P(limit ≤ x).
    pub fn at_most(&self, x: f64) -> f64 {
        let total = self.total();
        if total <= 0.0 {
            return 0.0;
        }
        self.limits.iter().zip(&self.weights).filter(|(l, _)| **l <= x).map(|(_, w)| w).sum::<f64>() / total
    }

    /// P(limit ≥ x).
    pub fn at_least(&self, x: f64) -> f64 {
        let total = self.total();
        if total <= 0.0 {
            return 0.0;
        }
        self.limits.iter().zip(&self.weights).filter(|(l, _)| **l >= x).map(|(_, w)| w).sum::<f64>() / total
    }

    /// Multiplies the weights by a Gaussian likelihood around `mean`.
    fn observe(&mut self, mean: f64, sigma: f64) {
        if !(mean.is_finite() && sigma > 0.0) {
            return;
        }
        let before = self.total();
        let updated: Vec<f64> = self
            .limits
            .iter()
            .zip(&self.weights)
            .map(|(l, w)| w * (-0.5 * ((l - mean) / sigma).powi(2)).exp())
            .collect();
        // A likelihood that rules out every candidate says more about the fit than the limit.
        if updated.iter().sum::<f64>() > before * 1e-9 {
            self.weights = updated;
        }
    }

    fn keep(&mut self, mut allowed: impl FnMut(f64) -> bool) {
        let kept: Vec<f64> =
            self.limits.iter().zip(&self.weights).map(|(l, w)| if allowed(*l) { *w } else { 0.0 }).collect();
        if kept.iter().sum::<f64>() > 0.0 {
            self.weights = kept;
        }
    }
}

/// The amounts of `party`'s bids with their rounds.
fn bids_of(state: &NegotiationState, party: Party) -> Vec<(i32, f64)> {
    state
        .bids
        .iter()
        .enumerate()
        .map(|(i, &amount)| (i32::try_from(i + 1).unwrap_or(i32::MAX), amount as f64))
        .filter(|(round, _)| Party::author_of_round(*round) == party)
        .collect()
}

/// The share of the listing's time a round stands at.
fn time(round: i32, max_rounds: i32) -> f64 {
    if max_rounds <= 0 { 1.0 } else { (f64::from(round) / f64::from(max_rounds)).clamp(0.0, 1.0) }
}

/// The distance at t = 1 of a time-dependent tactic gap(t) = gap(1)·t^(1/β), fitted by least
/// squares of ln gap on ln t (the intercept is ln gap(1)). Points outside 0 < t < 1 or with no
/// gap are left out; `None` without two points left at distinct times.
fn fitted_gap(points: impl Iterator<Item = (f64, f64)>) -> Option<f64> {
    power_fit(&log_points(points)).map(|(gap, _)| gap)
}

/// ln t and ln gap of the points within 0 < t < 1 that have a gap, the coordinates a
/// time-dependent tactic is fitted in.
pub(super) fn log_points(points: impl Iterator<Item = (f64, f64)>) -> Vec<(f64, f64)> {
    points.filter(|(t, gap)| *t > 0.0 && *t < 1.0 && *gap > 0.0).map(|(t, gap)| (t.ln(), gap.ln())).collect()
}

/// gap(t) = g·t^s fitted to points in log–log coordinates ([`log_points`]) by least squares:
/// (g, s), the exponent kept within [0.05, 20]. `None` without two points at distinct times.
pub(super) fn power_fit(logs: &[(f64, f64)]) -> Option<(f64, f64)> {
    if logs.len() < 2 {
        return None;
    }
    let n = logs.len() as f64;
    let (mx, my) = (logs.iter().map(|p| p.0).sum::<f64>() / n, logs.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = logs.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx < 1e-12 {
        return None;
    }
    let slope = (logs.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx).clamp(0.05, 20.0);
    Some(((my - slope * mx).exp(), slope))
}

/// The seller's floor fitted to its counters: ask − price(t) = (ask − floor)·t^(1/β).
/// `None` without two counters below the ask at distinct times.
pub fn fitted_floor(ask: f64, counters: &[(f64, f64)]) -> Option<f64> {
    let floor = ask - fitted_gap(counters.iter().map(|&(t, price)| (t, ask - price)))?;
    floor.is_finite().then_some(floor)
}

/// The buyer's belief about the seller's floor.
pub fn seller_floor_belief(state: &NegotiationState, pending: i64) -> Belief {
    let ask = state.ask as f64;
    let pending = pending as f64;
    let low = (FLOOR_PRIOR_LOW * ask).min(pending / 2.0);
    let mut belief = Belief::uniform(low, pending);
    let counters: Vec<(f64, f64)> = bids_of(state, Party::Seller)
        .into_iter()
        .map(|(round, price)| (time(round, state.max_rounds), price))
        .collect();
    if let Some(floor) = fitted_floor(ask, &counters) {
        belief.observe(floor, SIGMA * ask);
    }
    belief
}

/// The buyer's ceiling fitted to its bids: bid(t) − opening = (ceiling − opening)·t^(1/β).
/// `None` without two bids above the opening at distinct times.
pub fn fitted_ceiling(opening: f64, bids: &[(f64, f64)]) -> Option<f64> {
    let ceiling = opening + fitted_gap(bids.iter().map(|&(t, price)| (t, price - opening)))?;
    ceiling.is_finite().then_some(ceiling)
}

/// The buyer's own clock: 0 at its opening (round 1), 1 at the deadline.
pub(super) fn buyer_time(round: i32, max_rounds: i32) -> f64 {
    if max_rounds <= 1 { 1.0 } else { (f64::from(round - 1) / f64::from(max_rounds - 1)).clamp(0.0, 1.0) }
}

/// The seller's belief about the buyer's ceiling.
pub fn buyer_ceiling_belief(state: &NegotiationState, pending: i64) -> Belief {
    let ask = state.ask as f64;
    let bids = bids_of(state, Party::Buyer);
    let opening = bids.first().map_or(pending as f64, |b| b.1).max(1.0);
    let latest = pending as f64;
    let mut belief = Belief::uniform_on(latest, (opening / OPENING_PRIOR_LOW).max(latest).max(ask), CEILING_GRID);
    // The prior is uniform in the opening's share of the ceiling, not in the ceiling: weight
    // each candidate by the density of opening / ceiling, ∝ 1 / ceiling².
    for (l, w) in belief.limits.iter().zip(belief.weights.iter_mut()) {
        *w = if *l * OPENING_PRIOR_LOW <= opening + 1e-9 { 1.0 / (l * l).max(1.0) } else { 0.0 };
    }
    if belief.total() <= 0.0 {
        belief = Belief::uniform_on(latest, latest.max(ask), CEILING_GRID);
    }
    // Regression: the buyer's bids fitted to a time-dependent tactic that reaches its ceiling
    // at the deadline.
    let points: Vec<(f64, f64)> =
        bids.iter().map(|(round, price)| (buyer_time(*round, state.max_rounds), *price)).collect();
    if let Some(ceiling) = fitted_ceiling(opening, &points) {
        belief.observe(ceiling.max(latest), SIGMA * ask);
    }
    // Every seller counter the buyer answered with a counter was, more likely, above its ceiling;
    // the later the refusal, the stronger the evidence.
    let counters = bids_of(state, Party::Seller);
    for (round, price) in counters {
        let answered = usize::try_from(round).unwrap_or(usize::MAX) < state.bids.len();
        if answered {
            // The refusal came with the buyer's bid of the next round.
            let likelihood = 1.0 - REFUSAL_WEIGHT * time(round + 1, state.max_rounds);
            for (l, w) in belief.limits.iter().zip(belief.weights.iter_mut()) {
                if *l >= price {
                    *w *= likelihood;
                }
            }
        }
    }
    belief.keep(|l| l >= latest);
    belief
}

/// The price maximising the mover's expected surplus against `belief`, with that expectation:
/// for the seller (p − floor)·P(ceiling ≥ p), for the buyer (ceiling − p)·P(floor ≤ p).
pub fn best_price(mover: Party, belief: &Belief, limit: f64) -> Option<(f64, f64)> {
    best_price_averse(mover, belief, limit, 1.0)
}

/// As [`best_price`], with the probability of a deal raised to `gamma` (≥ 1: risk aversion).
pub fn best_price_averse(mover: Party, belief: &Belief, limit: f64, gamma: f64) -> Option<(f64, f64)> {
    let total = belief.total();
    if total <= 0.0 {
        return None;
    }
    // P(limit ≤ l_j) and P(limit ≥ l_j) for every candidate, by running sums (limits ascend).
    let mut at_most = Vec::with_capacity(belief.limits.len());
    let mut sum = 0.0;
    for w in &belief.weights {
        sum += w;
        at_most.push(sum / total);
    }
    let mut best: Option<(f64, f64)> = None;
    let mut below = 0.0;
    for (j, &p) in belief.limits.iter().enumerate() {
        let at_least = 1.0 - below / total;
        below += belief.weights[j];
        let value = match mover {
            Party::Seller if p >= limit => (p - limit) * at_least.max(0.0).powf(gamma),
            Party::Buyer if p <= limit => (limit - p) * at_most[j].powf(gamma),
            Party::Seller | Party::Buyer => continue,
        };
        // The first of equals: the lowest price, which for a seller also keeps the deal likelier.
        if best.is_none_or(|(_, v)| value > v) {
            best = Some((p, value));
        }
    }
    best
}

/// The buyer's opening bid.
pub fn opening(Prices { limit, ask }: Prices) -> i64 {
    let amount = (ask as f64 * BAYES_OPENING).floor() as i64;
    amount.min(limit).min(ask).max(1)
}

/// The strategy's move for `state`, whose mover has private `limit`.
pub(super) fn propose(state: &NegotiationState, turn: Turn, limit: i64, e: f64) -> Proposal {
    match state.mover {
        Party::Seller => propose_seller(state, turn, limit),
        Party::Buyer => propose_buyer(state, turn, limit, e),
    }
}

fn propose_seller(state: &NegotiationState, turn: Turn, floor: i64) -> Proposal {
    let belief = buyer_ceiling_belief(state, turn.pending);
    // A refused final counter ends the thread with nothing: the seller is then risk-averse.
    let gamma = if turn.round >= state.max_rounds { FINAL_RISK_AVERSION } else { 1.0 };
    let Some((price, expected)) = best_price_averse(Party::Seller, &belief, floor as f64, gamma) else {
        return Proposal::Counter { amount: floor, is_final: false };
    };
    if turn.pending >= floor && (turn.pending as f64 - floor as f64) >= expected {
        return Proposal::Accept(Rationale::AsGoodAsCounter);
    }
    let least_step = step_of_ask(state.ask, MIN_STEP);
    let amount = round_price(Party::Seller, price).min(turn.own_previous.saturating_sub(least_step));
    Proposal::Counter { amount, is_final: false }
}

fn propose_buyer(state: &NegotiationState, turn: Turn, ceiling: i64, e: f64) -> Proposal {
    let belief = seller_floor_belief(state, turn.pending);
    let (planned, expected) = best_price(Party::Buyer, &belief, ceiling as f64).unwrap_or((ceiling as f64, 0.0));
    // The buyer's last bid before the deadline: the listing's last round, or the one before it.
    let last = if Party::author_of_round(state.max_rounds.max(1)) == Party::Buyer {
        state.max_rounds.max(1)
    } else {
        state.max_rounds.saturating_sub(1)
    };
    if turn.round >= state.max_rounds && turn.pending <= ceiling && (ceiling as f64 - turn.pending as f64) >= expected {
        // A final bid of ours could be refused; the seller's price is worth at least as much.
        return Proposal::Accept(Rationale::AsGoodAsCounter);
    }
    let opening = state.own_opening().unwrap_or(turn.own_previous) as f64;
    let share =
        if last <= 1 { 1.0 } else { (f64::from(turn.round.saturating_sub(1)) / f64::from(last - 1)).clamp(0.0, 1.0) };
    let e = if e.is_finite() && e > 0.0 { e } else { DEFAULT_BAYES_E };
    let price = opening + (planned - opening).max(0.0) * share.powf(1.0 / e);
    Proposal::Counter { amount: round_price(Party::Buyer, price), is_final: false }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::state;
    use super::super::{Decision, Ending, MAX_AUTO_ROUNDS, Policy, Setting, Strategy, decide, simulate};
    use super::*;

    fn policy_of(floor: i64) -> Policy {
        Policy::new(floor, Strategy::Bayes { e: DEFAULT_BAYES_E })
    }

    #[test]
    fn the_floor_is_fitted_from_a_time_dependent_seller() {
        // A linear seller from 10000 to a floor of 6000 over 10 rounds: 9200 at t = 0.2, 8400 at 0.4.
        let floor = fitted_floor(10_000.0, &[(0.2, 9_200.0), (0.4, 8_400.0)]).unwrap();
        assert!((floor - 6_000.0).abs() < 1e-6, "{floor}");
        // Boulware e = 0.5: ask − price = 4000·t²: 160 at 0.2, 640 at 0.4, 1440 at 0.6.
        let floor = fitted_floor(10_000.0, &[(0.2, 9_840.0), (0.4, 9_360.0), (0.6, 8_560.0)]).unwrap();
        assert!((floor - 6_000.0).abs() < 1e-6, "{floor}");
        // A seller who has not moved, or moved once, says nothing fit to regress.
        assert_eq!(fitted_floor(10_000.0, &[(0.2, 10_000.0), (0.4, 10_000.0)]), None);
        assert_eq!(fitted_floor(10_000.0, &[(0.2, 9_000.0)]), None);
    }

    #[test]
    fn the_best_price_maximises_expected_surplus() {
        // Floors uniform on 0..=100 (101 points would be exact; the grid has 81): a buyer of
        // ceiling 100 maximises (100 − p)·p/100 at p = 50.
        let belief = Belief::uniform(0.0, 100.0);
        let (price, expected) = best_price(Party::Buyer, &belief, 100.0).unwrap();
        assert!((price - 50.0).abs() <= 1.25, "{price}");
        assert!((expected - 25.0).abs() < 1.0, "{expected}");
        // A seller of floor 0 against ceilings uniform on 0..=100: (p)·(1 − p/100), also 50.
        let (price, _) = best_price(Party::Seller, &belief, 0.0).unwrap();
        assert!((price - 50.0).abs() <= 1.25, "{price}");
        // A seller whose floor is above every candidate has nothing to offer.
        assert_eq!(best_price(Party::Seller, &belief, 101.0), None);
    }

    #[test]
    fn the_buyer_opens_low_and_holds_early() {
        assert_eq!(opening(Prices { limit: 9_000, ask: 10_000 }), 3_500);
        assert_eq!(opening(Prices { limit: 2_000, ask: 10_000 }), 2_000);
        let policy = Policy::new(9_000, Strategy::Bayes { e: DEFAULT_BAYES_E });
        // Ask 10000, max_rounds 20 (the fixture); the seller came down to 9500 at round 2.
        // The buyer's last bid is round 19: at round 3 it has used 2/18 of its time, and
        // (1/9)² of its planned concession: a small step above 3500.
        let Decision::Counter { amount, is_final: false } = decide(&policy, &state(10_000, &[3_500, 9_500])) else {
            panic!("expected a counter");
        };
        assert!((3_500..3_700).contains(&amount), "{amount}");
        // At its last bid it has reached its planned price, which is below its ceiling.
        let mut late = state(10_000, &[3_500, 9_500, 3_600, 9_000, 3_700, 8_500, 3_800, 8_000, 3_900, 7_500]);
        late.max_rounds = 11;
        let Decision::Counter { amount, is_final: true } = decide(&policy, &late) else {
            panic!("expected a final counter");
        };
        assert!((5_000..7_500).contains(&amount), "{amount}");
    }

    #[test]
    fn the_ceiling_is_fitted_from_a_time_dependent_buyer() {
        // The buyer's clock runs from its opening (round 1) to the deadline (round 10): a linear
        // buyer from 6000 to a ceiling of 9000 bids 6000 + 3000·(round − 1)/9.
        let linear = [(2.0 / 9.0, 6_666.666_666_666_667), (4.0 / 9.0, 7_333.333_333_333_333)];
        let ceiling = fitted_ceiling(6_000.0, &linear).unwrap();
        assert!((ceiling - 9_000.0).abs() < 1e-6, "{ceiling}");
        // Boulware, e = 0.5: bid − opening = 3000·τ².
        let boulware: Vec<(f64, f64)> =
            [2.0, 4.0, 6.0].iter().map(|r| (r / 9.0, 6_000.0 + 3_000.0 * (r / 9.0_f64).powi(2))).collect();
        let ceiling = fitted_ceiling(6_000.0, &boulware).unwrap();
        assert!((ceiling - 9_000.0).abs() < 1e-6, "{ceiling}");
        // A buyer who has not moved says nothing fit to regress.
        assert_eq!(fitted_ceiling(6_000.0, &[(0.2, 6_000.0), (0.4, 6_000.0)]), None);
    }

    #[test]
    fn an_early_refusal_says_little() {
        let policy = Policy::new(5_000, Strategy::Bayes { e: DEFAULT_BAYES_E });
        // Ask 10000, 20 rounds: the buyer opened at 3500 and refused the first counter at round 3,
        // holding at 3500 (a patient buyer). Early on, that is weak evidence of a low ceiling:
        // the seller concedes little, nowhere near the buyer's bid.
        let Decision::Counter { amount: first, .. } = decide(&policy, &state(10_000, &[3_500])) else {
            panic!("expected a counter");
        };
        let Decision::Counter { amount: second, .. } = decide(&policy, &state(10_000, &[3_500, first, 3_500])) else {
            panic!("expected a counter");
        };
        assert!(second < first, "{first} then {second}");
        assert!(first - second <= (first - 3_500) / 4, "{first} then {second}");
        // The same refusal at the end of the listing weighs more.
        let mut late = state(10_000, &[3_500, first, 3_500]);
        late.max_rounds = 4;
        let Decision::Counter { amount: last, .. } = decide(&policy, &late) else {
            panic!("expected a counter");
        };
        assert!(last < second, "{second} early, {last} late");
    }

    #[test]
    fn the_seller_holds_against_a_boulware_buyer() {
        // The bayes buyer (ceiling 9000) against the bayes seller (floor 5000), ask 10000, 10
        // rounds: the buyer holds low until late; the seller must not concede to its floor.
        let setting = Setting { ask: 10_000, max_rounds: 10, buyer_tier: crate::tier::Tier::Agency };
        let seller = Policy { max_auto_rounds: MAX_AUTO_ROUNDS, ..policy_of(5_000) };
        let transcript = simulate(&setting, &BayesBuyer::new(9_000), &seller);
        let Ending::Accepted { amount, .. } = transcript.ending else {
            panic!("no deal: {transcript:?}");
        };
        assert!((7_000..=9_000).contains(&amount), "{amount}: {transcript:?}");
    }

    #[test]
    fn the_seller_prices_against_its_belief_and_always_moves() {
        let policy = Policy::new(5_000, Strategy::Bayes { e: DEFAULT_BAYES_E });
        // A buyer opening at 6000: its ceiling is believed between 6000 and 20000, likelier low.
        let Decision::Counter { amount: first, .. } = decide(&policy, &state(10_000, &[6_000])) else {
            panic!("expected a counter");
        };
        assert!((6_001..=9_950).contains(&first), "{first}");
        // Refused, and the buyer stepped up by 600: the next price is lower, by at least 50.
        let Decision::Counter { amount: second, .. } = decide(&policy, &state(10_000, &[6_000, first, 6_600])) else {
            panic!("expected a counter");
        };
        assert!(second <= first - 50, "{first} then {second}");
        // A bid worth as much as the expected surplus of countering is accepted.
        assert!(matches!(decide(&policy, &state(10_000, &[6_000, first, first - 1])), Decision::Accept { .. }));
    }
}
