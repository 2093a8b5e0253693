//! The counter strategies of a policy (SPEC §5): how far to move when countering.
//!
//! A strategy only proposes; [`super::decide`] applies the policy's limits and
//! [`super::settle`] makes the amount legal.

use serde::{Deserialize, Serialize};

use super::super::bid::Party;
use super::proposal::Proposal;
use super::{
    NegotiationState, Rationale, Turn, closer, concede, learned, model, round_concession, round_price, tier_engine,
};

/// A policy's counter strategy, as stored and as sent in JSON: `{"strategy": "step", "fraction": 0.25}`.
///
/// Variants without parameters are written `Split {}` rather than `Split` because serde ignores
/// unknown fields on unit variants of an internally tagged enum; an empty struct variant refuses them.
///
/// Not `Copy`: a learned strategy carries its table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(tag = "strategy", rename_all = "snake_case", deny_unknown_fields)]
pub enum Strategy {
    /// The midpoint of the two latest positions.
    Split {},
    /// A fixed `amount` (minor units) or a `fraction` of the gap, toward the other side; exactly one.
    Step {
        #[serde(default, deserialize_with = "crate::whole::option", skip_serializing_if = "Option::is_none")]
        amount: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fraction: Option<f64>,
    },
    /// Faratin's time-dependent tactic: with t = round / max_rounds,
    /// f(t) = k + (1 − k)·t^(1/e) and price = limit + (start − limit)·(1 − f(t)).
    /// `e` < 1 is Boulware (holds, then concedes late), 1 (the default) linear, > 1 Conceder.
    /// `start` is the opening position; by default the ask for a seller, the opening bid for a buyer.
    Time {
        #[serde(default)]
        k: f64,
        #[serde(default = "linear")]
        e: f64,
        #[serde(default, deserialize_with = "crate::whole::option", skip_serializing_if = "Option::is_none")]
        start: Option<i64>,
    },
    /// Mirror the other side's last concession, times (1 + `kindness`). `kindness` lies in
    /// [−1, 1]: −1 never concedes, 0 mirrors exactly, 1 gives back twice what was given.
    TitForTat {
        #[serde(default)]
        kindness: f64,
    },
    /// The seller tier engine (see `tier_engine`): the buyer's tier picks the concession limits.
    Tier {},
    /// Opponent modelling (see `model`): a belief about the other side's limit, from its
    /// opening, its concession curve and the time left, and the counter of most expected surplus.
    /// `e` is the buyer's concession exponent (below 1: Boulware).
    Bayes {
        #[serde(default = "default_bayes_e")]
        e: f64,
    },
    /// Haggle's seller for negotiations decided at the deadline (see `closer`): a Boulware hold,
    /// the buyer's concession curve met late, and a closing price for the last counter; a buyer
    /// who has not bid above its opening is held near the ask. Sellers only.
    Closer {},
    /// A buyer shopping elsewhere too (the library's `Competitive` as a policy): it steps `step`
    /// minor units a counter, never offers or accepts more than `best_elsewhere` (a standing
    /// offer it holds on another listing), and stops, leaving the thread to its owner, when it
    /// cannot move without paying more than elsewhere. Buyers only.
    Competitive {
        #[serde(deserialize_with = "crate::whole::number")]
        step: i64,
        #[serde(default, deserialize_with = "crate::whole::option", skip_serializing_if = "Option::is_none")]
        best_elsewhere: Option<i64>,
    },
    /// A Q-table trained by `haggle sim --learn q` (see `learned`), played greedily.
    Learned {
        levels: u8,
        steps: u8,
        /// One row of `levels + 2` values per state: offer each level, accept, reject.
        q: Vec<Vec<f64>>,
    },
}

fn default_bayes_e() -> f64 {
    model::DEFAULT_BAYES_E
}

/// The time tactic's `e` when none is given: it concedes at a steady pace.
fn linear() -> f64 {
    1.0
}

/// Bounds on the parameters, checked by `Policy::validate`.
pub const MAX_KINDNESS: f64 = 1.0;
pub const MIN_KINDNESS: f64 = -1.0;
/// Beyond this, t^(1/e) is indistinguishable from its limit for any round count a listing allows.
pub const MAX_E: f64 = 100.0;

impl Strategy {
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Split {} => "split",
            Strategy::Step { .. } => "step",
            Strategy::Time { .. } => "time",
            Strategy::TitForTat { .. } => "tit_for_tat",
            Strategy::Tier {} => "tier",
            Strategy::Bayes { .. } => "bayes",
            Strategy::Closer { .. } => "closer",
            Strategy::Competitive { .. } => "competitive",
            Strategy::Learned { .. } => "learned",
        }
    }

    /// The strategy's move for `state`, whose mover has private limit `limit`.
    pub fn propose(&self, state: &NegotiationState, turn: Turn, limit: i64) -> Proposal {
        let mover = state.mover;
        let counter = |amount| Proposal::Counter { amount, is_final: false };
        match self {
            Strategy::Split {} => counter(midpoint(mover, turn.pending, turn.own_previous)),
            Strategy::Step { amount: Some(amount), .. } => counter(concede(mover, turn.own_previous, *amount)),
            Strategy::Step { amount: None, fraction } => {
                let gap = turn.pending.abs_diff(turn.own_previous) as f64;
                let by = round_concession(gap * fraction.unwrap_or(0.0));
                counter(concede(mover, turn.own_previous, by))
            }
            Strategy::Time { k, e, start } => {
                let start = start.or(state.own_opening()).unwrap_or(turn.own_previous);
                counter(time_price(mover, *k, *e, start, limit, turn.round, state.max_rounds))
            }
            Strategy::TitForTat { kindness } => {
                let by = round_concession(state.other_concession() as f64 * (1.0 + kindness));
                counter(concede(mover, turn.own_previous, by))
            }
            Strategy::Tier {} => tier_engine::propose(state, turn, limit),
            Strategy::Bayes { e } => model::propose(state, turn, limit, *e),
            Strategy::Closer {} => closer::propose(state, turn, limit),
            Strategy::Competitive { step, best_elsewhere } => competitive(state, turn, limit, *step, *best_elsewhere),
            Strategy::Learned { levels, steps, q } => learned::propose(state, turn, limit, *levels, *steps, q),
        }
    }
}

/// [`Strategy::Competitive`]'s move: the library's `Competitive` without its walk-away rules
/// (a policy's `max_auto_rounds` bounds its counters).
fn competitive(state: &NegotiationState, turn: Turn, limit: i64, step: i64, best_elsewhere: Option<i64>) -> Proposal {
    if state.mover != Party::Buyer {
        return Proposal::Stop(Rationale::WrongSide);
    }
    let cap = best_elsewhere.map_or(limit, |best| best.min(limit));
    if turn.pending <= cap {
        return Proposal::Accept(Rationale::WithinMax);
    }
    if turn.pending <= limit && state.pending_final {
        // Within the ceiling but worse than elsewhere, and it cannot be countered.
        return Proposal::Stop(Rationale::BetterElsewhere);
    }
    if turn.own_previous > cap {
        return Proposal::Stop(Rationale::BetterElsewhere);
    }
    Proposal::Counter { amount: turn.own_previous.saturating_add(step.max(0)).min(cap), is_final: false }
}

/// The midpoint of two positions, rounded toward the mover's side, in exact integer arithmetic.
fn midpoint(mover: Party, pending: i64, own_previous: i64) -> i64 {
    let sum = i128::from(pending) + i128::from(own_previous);
    let half = match mover {
        Party::Seller => sum.div_euclid(2) + sum.rem_euclid(2),
        Party::Buyer => sum.div_euclid(2),
    };
    // The midpoint of two i64 values is an i64.
    half as i64
}

/// Faratin's time-dependent price for the bid of `round` out of `max_rounds`.
fn time_price(mover: Party, k: f64, e: f64, start: i64, limit: i64, round: i32, max_rounds: i32) -> i64 {
    let t = if max_rounds > 0 { (f64::from(round) / f64::from(max_rounds)).clamp(0.0, 1.0) } else { 1.0 };
    let f = k + (1.0 - k) * t.powf(1.0 / e);
    let price = limit as f64 + (start as f64 - limit as f64) * (1.0 - f);
    round_price(mover, price)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::state;
    use super::*;

    fn proposed(strategy: Strategy, bids: &[i64], limit: i64) -> i64 {
        let s = state(100_000, bids);
        match strategy.propose(&s, s.turn().unwrap(), limit) {
            Proposal::Counter { amount, .. } => amount,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn split_takes_the_midpoint_rounded_toward_the_mover() {
        let split = Strategy::Split {};
        // (bids, expected): the ask is 100000.
        let cases: &[(&[i64], i64)] = &[
            (&[80_000], 90_000),                 // seller: (80000 + 100000) / 2
            (&[80_001], 90_001),                 // seller: 90000.5 rounds up
            (&[80_000, 90_000], 85_000),         // buyer: (90000 + 80000) / 2
            (&[80_000, 90_001], 85_000),         // buyer: 85000.5 rounds down
            (&[80_000, 90_000, 85_000], 87_500), // seller: (85000 + 90000) / 2
            (&[499, 500], 499),                  // buyer: 499.5 down, its previous
        ];
        for (bids, want) in cases {
            assert_eq!(proposed(split.clone(), bids, 0), *want, "{bids:?}");
        }
    }

    #[test]
    fn step_moves_a_fixed_amount_or_a_fraction_of_the_gap() {
        let amount = |a| Strategy::Step { amount: Some(a), fraction: None };
        let fraction = |f| Strategy::Step { amount: None, fraction: Some(f) };
        let cases: &[(Strategy, &[i64], i64)] = &[
            (amount(2_500), &[80_000], 97_500),         // seller: 100000 − 2500
            (amount(2_500), &[80_000, 97_500], 82_500), // buyer: 80000 + 2500
            (fraction(0.25), &[80_000], 95_000),        // seller: gap 20000 · 0.25 = 5000
            (fraction(0.3), &[80_000, 90_000], 83_000), // buyer: gap 10000 · 0.3 = 3000
            (fraction(0.3), &[80_000, 90_001], 83_000), // buyer: 3000.3 rounds down to 3000
            (fraction(0.3), &[80_001], 94_001),         // seller: 5999.7 rounds down to 5999
            (fraction(1.0), &[80_000], 80_000),         // all the way: settle will accept
        ];
        for (strategy, bids, want) in cases {
            assert_eq!(proposed(strategy.clone(), bids, 0), *want, "{strategy:?} {bids:?}");
        }
    }

    #[test]
    fn time_follows_faratin() {
        let time = |k, e| Strategy::Time { k, e, start: None };
        // Seller: floor 80000, start = ask 100000, max_rounds 20 (the fixture). Round = bids + 1.
        // t = 2/20 = 0.1.
        let cases: &[(Strategy, &[i64], i64)] = &[
            // linear: f = 0.1; 80000 + 20000 · 0.9 = 98000
            (time(0.0, 1.0), &[70_000], 98_000),
            // Boulware e = 0.5: f = 0.1² = 0.01; 80000 + 20000 · 0.99 = 99800
            (time(0.0, 0.5), &[70_000], 99_800),
            // Conceder e = 2: f = √0.1 = 0.316227766; 80000 + 20000 · 0.683772234 = 93675.44 → up: 93676
            (time(0.0, 2.0), &[70_000], 93_676),
            // k = 0.2, linear, round 6 (t = 0.3): f = 0.2 + 0.8 · 0.3 = 0.44; 80000 + 20000 · 0.56 = 91200
            (time(0.2, 1.0), &[70_000, 99_000, 71_000, 95_000, 72_000], 91_200),
            // Buyer: ceiling 80000, start = its opening 60000, round 3 (t = 0.15), linear:
            // 80000 + (60000 − 80000) · 0.85 = 63000
            (time(0.0, 1.0), &[60_000, 99_000], 63_000),
            // Buyer, Conceder e = 2, round 5 (t = 0.25): f = 0.5; 80000 − 20000 · 0.5 = 70000
            (time(0.0, 2.0), &[60_000, 99_000, 61_000, 98_000], 70_000),
            // Buyer, e = 3, round 3: f = 0.15^(1/3) = 0.531329; 80000 − 20000 · 0.468671 = 70626.58 → down
            (time(0.0, 3.0), &[60_000, 99_000], 70_626),
        ];
        for (strategy, bids, want) in cases {
            assert_eq!(proposed(strategy.clone(), bids, 80_000), *want, "{strategy:?} {bids:?}");
        }
        // At the last round the price is the limit itself.
        let mut s = state(100_000, &[70_000]);
        s.max_rounds = 2;
        assert_eq!(
            time(0.0, 0.5).propose(&s, s.turn().unwrap(), 80_000),
            Proposal::Counter { amount: 80_000, is_final: false }
        );
        // An explicit start replaces the ask: 90000 → 80000, linear, t = 0.1: 89000.
        let custom = Strategy::Time { k: 0.0, e: 1.0, start: Some(90_000) };
        assert_eq!(proposed(custom, &[70_000], 80_000), 89_000);
    }

    #[test]
    fn tit_for_tat_mirrors_the_last_concession() {
        let tft = |kindness| Strategy::TitForTat { kindness };
        let cases: &[(Strategy, &[i64], i64)] = &[
            // Seller's first counter: the buyer has not conceded yet, so it holds at the ask.
            (tft(0.0), &[80_000], 100_000),
            // Buyer: the seller came down 100000 → 96000; the buyer gives 4000: 80000 → 84000.
            (tft(0.0), &[80_000, 96_000], 84_000),
            // Seller: the buyer came up 80000 → 84000; kindness 0.5 gives 6000: 96000 → 90000.
            (tft(0.5), &[80_000, 96_000, 84_000], 90_000),
            // Kindness −0.5 gives half: 2000.
            (tft(-0.5), &[80_000, 96_000, 84_000], 94_000),
            // Kindness −1 never concedes.
            (tft(-1.0), &[80_000, 96_000, 84_000], 96_000),
            // Buyer: the seller came down 96000 → 93001 = 2999; kindness 0.1 → 3298.9 → 3298.
            (tft(0.1), &[80_000, 96_000, 84_000, 93_001], 87_298),
        ];
        for (strategy, bids, want) in cases {
            assert_eq!(proposed(strategy.clone(), bids, 0), *want, "{strategy:?} {bids:?}");
        }
    }

    #[test]
    fn strategies_parse_from_tagged_json() {
        let parse = |json: &str| serde_json::from_str::<Strategy>(json);
        assert_eq!(parse(r#"{"strategy":"split"}"#).unwrap(), Strategy::Split {});
        assert_eq!(parse(r#"{"strategy":"tier"}"#).unwrap(), Strategy::Tier {});
        assert_eq!(
            parse(r#"{"strategy":"step","amount":500}"#).unwrap(),
            Strategy::Step { amount: Some(500), fraction: None }
        );
        assert_eq!(parse(r#"{"strategy":"time","e":0.5}"#).unwrap(), Strategy::Time { k: 0.0, e: 0.5, start: None });
        assert_eq!(parse(r#"{"strategy":"time","k":0.1}"#).unwrap(), Strategy::Time { k: 0.1, e: 1.0, start: None });
        assert_eq!(parse(r#"{"strategy":"tit_for_tat"}"#).unwrap(), Strategy::TitForTat { kindness: 0.0 });
        assert_eq!(
            parse(r#"{"strategy":"step","amount":500.0}"#).unwrap(),
            Strategy::Step { amount: Some(500), fraction: None }
        );
        for bad in [
            r#"{"strategy":"boulware"}"#,
            r#"{"strategy":"split","amount":5}"#,
            r#"{"strategy":"tier","discount":0.5}"#,
            r#"{"strategy":"step","amount":500,"extra":1}"#,
            r#"{"strategy":"time","k":"0.1"}"#,
            r#"{"strategy":"step","amount":5.5}"#,
            r#"{"strategy":"time","start":1000.5}"#,
            r#"{"amount":500}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let json = serde_json::to_string(&Strategy::Step { amount: None, fraction: Some(0.25) }).unwrap();
        assert_eq!(json, r#"{"strategy":"step","fraction":0.25}"#);
        assert_eq!(serde_json::to_string(&Strategy::Split {}).unwrap(), r#"{"strategy":"split"}"#);
    }

    #[test]
    fn competitive_caps_the_buyer_by_its_offer_elsewhere() {
        let competitive = |best_elsewhere| Strategy::Competitive { step: 2_000, best_elsewhere };
        let propose = |strategy: Strategy, bids: &[i64], limit: i64| {
            let s = state(100_000, bids);
            strategy.propose(&s, s.turn().unwrap(), limit)
        };
        // Ceiling 90000, nothing elsewhere: step 2000 from 80000.
        assert_eq!(
            propose(competitive(None), &[80_000, 96_000], 90_000),
            Proposal::Counter { amount: 82_000, is_final: false }
        );
        // 81000 elsewhere caps the counter, and a seller at 81000 is accepted.
        assert_eq!(
            propose(competitive(Some(81_000)), &[80_000, 96_000], 90_000),
            Proposal::Counter { amount: 81_000, is_final: false }
        );
        assert_eq!(
            propose(competitive(Some(81_000)), &[80_000, 81_000], 90_000),
            Proposal::Accept(Rationale::WithinMax)
        );
        // Already above the offer elsewhere: nothing to gain here; the owner decides.
        assert_eq!(
            propose(competitive(Some(79_000)), &[80_000, 96_000], 90_000),
            Proposal::Stop(Rationale::BetterElsewhere)
        );
        // Not a seller's strategy.
        assert_eq!(propose(competitive(None), &[80_000], 90_000), Proposal::Stop(Rationale::WrongSide));
    }
}
