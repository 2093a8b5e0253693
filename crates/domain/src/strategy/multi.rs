//! A multi-issue negotiator: it concedes in utility rather than in price, and trades issues
//! against each other (logrolling).
//!
//! Its aspiration falls with time as Faratin's time-dependent tactic does, from 1 to the
//! reservation utility at the listing's last round: with t = round / max_rounds,
//! aspiration = 1 − (1 − reservation)·t^(1/e). Of the counters worth at least the aspiration to
//! it (over a grid of price and issue values, the price within the legal counter range and its
//! private limit), it makes the one its model of the other side likes best. The model is the
//! frequency heuristic: an issue the other side keeps unchanged from bid to bid matters more to
//! it, and the other side prefers the other end of every scale. So it concedes where the other
//! side cares and holds where it cares itself.
//!
//! It accepts an offer at least as good as its own next counter, and never one worth less than
//! its reservation utility or priced past its limit (a property test holds it to this).

use super::super::bid::{self, Party};
use super::super::issues::{self, Issues, Offer, Valuation};
use super::{Decision, Rationale};

/// Values per integer issue and prices the grid tries, and the most points it evaluates.
const GRID_PER_ISSUE: usize = 11;
const GRID_PRICES: usize = 21;
const MAX_GRID_POINTS: usize = 100_000;

/// A thread with issues, as the side about to move sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiState<'a> {
    pub mover: Party,
    pub ask: i64,
    pub max_rounds: i32,
    pub issues: &'a Issues,
    /// The thread's bids in order, round 1 first.
    pub offers: Vec<Offer>,
    pub pending_final: bool,
}

/// The multi-issue negotiator of one side: its valuation (whose `worst_price` is its private
/// price limit) and its concession exponent `e` (below 1 Boulware, 1 linear, above 1 Conceder).
#[derive(Debug, Clone, PartialEq)]
pub struct MultiIssue {
    pub valuation: Valuation,
    pub e: f64,
    /// Negotiate price only: every counter keeps these issue values (the comparison the
    /// simulator draws).
    pub fixed_terms: Option<Vec<i64>>,
}

/// A decision with the issue values of a counter.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiMove {
    pub decision: Decision,
    /// For a counter, its issue values.
    pub values: Option<Vec<i64>>,
}

impl MultiMove {
    fn only(decision: Decision) -> MultiMove {
        MultiMove { decision, values: None }
    }
}

impl MultiIssue {
    fn limit(&self) -> i64 {
        self.valuation.worst_price
    }

    fn within_limit(&self, amount: i64) -> bool {
        match self.valuation.party {
            Party::Seller => amount >= self.limit(),
            Party::Buyer => amount <= self.limit(),
        }
    }

    /// Whether the side would agree to `offer` at all.
    pub fn agreeable(&self, offer: &Offer) -> bool {
        self.within_limit(offer.amount) && self.valuation.acceptable(offer)
    }

    /// The utility the side asks for when making the bid of `round`.
    pub fn aspiration(&self, round: i32, max_rounds: i32) -> f64 {
        let t = (f64::from(round) / f64::from(max_rounds.max(1))).clamp(0.0, 1.0);
        let e = if self.e.is_finite() && self.e > 0.0 { self.e } else { 1.0 };
        let r = self.valuation.reservation;
        1.0 - (1.0 - r) * t.powf(1.0 / e)
    }

    /// What the side does in `state`.
    pub fn decide(&self, state: &MultiState) -> MultiMove {
        let round = i32::try_from(state.offers.len()).map_or(i32::MAX, |n| n.saturating_add(1));
        if state.mover != self.valuation.party || Party::author_of_round(round) != state.mover {
            return MultiMove::only(Decision::Stop { rationale: Rationale::NotYourTurn });
        }
        let Some(pending) = state.offers.last() else {
            return self.open(state);
        };
        if pending.values.len() != state.issues.0.len() {
            return MultiMove::only(Decision::Stop { rationale: Rationale::OutOfRange });
        }
        let agreeable = self.agreeable(pending);
        if state.pending_final {
            let decision = if agreeable {
                Decision::Accept { rationale: Rationale::FinalWithinLimit }
            } else {
                Decision::Reject { rationale: Rationale::FinalPastLimit }
            };
            return MultiMove::only(decision);
        }
        let own_previous = match (state.offers.len(), state.mover) {
            (2.., _) => state.offers[state.offers.len() - 2].clone(),
            (_, Party::Seller) => Offer { amount: state.ask, values: pending.values.clone() },
            (_, Party::Buyer) => return MultiMove::only(Decision::Stop { rationale: Rationale::NothingToAnswer }),
        };
        let (mut low, mut high) =
            bid::Positions { pending: pending.amount, own_previous: own_previous.amount }.counter_range(state.mover);
        match state.mover {
            Party::Seller => low = low.max(self.limit()),
            Party::Buyer => high = high.min(self.limit()),
        }
        let counter =
            (low <= high).then(|| self.best_counter(state, round, low, high, pending, &own_previous)).flatten();
        let Some(counter) = counter else {
            let decision = if agreeable {
                Decision::Accept { rationale: Rationale::NoRoomLeft }
            } else {
                Decision::Stop { rationale: Rationale::NoRoomLeft }
            };
            return MultiMove::only(decision);
        };
        if agreeable && self.valuation.value(pending) + 1e-9 >= self.valuation.value(&counter) {
            return MultiMove::only(Decision::Accept { rationale: Rationale::AsGoodAsCounter });
        }
        let is_final = bid::is_final(round, state.max_rounds, false);
        MultiMove { decision: Decision::Counter { amount: counter.amount, is_final }, values: Some(counter.values) }
    }

    /// The buyer's opening: its best price (at most the ask) and its best end of every issue.
    fn open(&self, state: &MultiState) -> MultiMove {
        let amount = self.valuation.best_price.clamp(super::super::money::MIN_AMOUNT, state.ask.max(1));
        let values = self
            .fixed_terms
            .clone()
            .unwrap_or_else(|| state.issues.iter().map(|issue| issue.best_for(Party::Buyer)).collect());
        let is_final = bid::is_final(1, state.max_rounds, false);
        MultiMove { decision: Decision::Counter { amount, is_final }, values: Some(values) }
    }

    /// The counter worth at least the aspiration that the model of the other side likes best;
    /// when none reaches the aspiration, the one worth most to the mover (it holds firm). `None`
    /// when even that one is below the reservation utility.
    fn best_counter(
        &self,
        state: &MultiState,
        round: i32,
        low: i64,
        high: i64,
        pending: &Offer,
        own_previous: &Offer,
    ) -> Option<Offer> {
        let points = match &self.fixed_terms {
            Some(terms) => vec![terms.clone()],
            None => {
                let mut per_issue = GRID_PER_ISSUE;
                let extra: [&[i64]; 2] = [&pending.values, &own_previous.values];
                let mut points = issues::grid(state.issues, per_issue, &extra);
                while points.len() * GRID_PRICES > MAX_GRID_POINTS && per_issue > 2 {
                    per_issue -= 1;
                    points = issues::grid(state.issues, per_issue, &extra);
                }
                points
            }
        };
        let prices = issues::price_steps(low..=high, GRID_PRICES);
        let aspiration = self.aspiration(round, state.max_rounds).max(self.valuation.reservation);
        let model = OpponentModel::new(state);
        let mut best: Option<(f64, f64, Offer)> = None;
        let mut firmest: Option<(f64, Offer)> = None;
        for values in &points {
            for &amount in &prices {
                let offer = Offer { amount, values: values.clone() };
                let own = self.valuation.value(&offer);
                if firmest.as_ref().is_none_or(|(value, _)| own > *value) {
                    firmest = Some((own, offer.clone()));
                }
                if own + 1e-9 < aspiration {
                    continue;
                }
                let theirs = model.value(&offer);
                if best.as_ref().is_none_or(|(t, o, _)| (theirs, own) > (*t, *o)) {
                    best = Some((theirs, own, offer));
                }
            }
        }
        match (best, firmest) {
            (Some((_, _, offer)), _) => Some(offer),
            (None, Some((own, offer))) if own + 1e-9 >= self.valuation.reservation => Some(offer),
            _ => None,
        }
    }
}

/// What the mover believes the other side values: the other end of every scale, each issue
/// weighted by how often the other side left it unchanged between its bids.
struct OpponentModel<'a> {
    party: Party,
    ask: i64,
    issues: &'a Issues,
    weights: Vec<f64>,
}

impl<'a> OpponentModel<'a> {
    fn new(state: &MultiState<'a>) -> OpponentModel<'a> {
        let other = state.mover.other();
        let theirs: Vec<&Offer> = state
            .offers
            .iter()
            .enumerate()
            .filter(|(i, _)| Party::author_of_round(*i as i32 + 1) == other)
            .map(|(_, offer)| offer)
            .collect();
        let dims = state.issues.0.len() + 1;
        let mut weights = vec![1.0; dims];
        for pair in theirs.windows(2) {
            if pair[0].amount == pair[1].amount {
                weights[0] += 1.0;
            }
            for (i, (a, b)) in pair[0].values.iter().zip(&pair[1].values).enumerate() {
                if a == b {
                    weights[i + 1] += 1.0;
                }
            }
        }
        let total: f64 = weights.iter().sum();
        weights.iter_mut().for_each(|w| *w /= total);
        OpponentModel { party: other, ask: state.ask.max(1), issues: state.issues, weights }
    }

    fn value(&self, offer: &Offer) -> f64 {
        let share = (offer.amount as f64 / self.ask as f64).clamp(0.0, 1.0);
        let price = match self.party {
            Party::Seller => share,
            Party::Buyer => 1.0 - share,
        };
        let issues: f64 = self
            .issues
            .iter()
            .zip(&self.weights[1..])
            .zip(&offer.values)
            .map(|((issue, w), &v)| w * issue.value_for(self.party, v))
            .sum();
        self.weights[0] * price + issues
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::issues::{Issue, IssueType, Prices, Utility};

    fn issues() -> Issues {
        serde_json::from_value(json!([
            {"name": "days", "type": "integer", "min": 1, "max": 30, "buyer_prefers": "lower"},
            {"name": "warranty", "type": "enum", "values": ["none", "1y", "2y"], "buyer_prefers": "higher"}
        ]))
        .unwrap()
    }

    fn negotiator(party: Party, weights: serde_json::Value, reservation: f64, limit: i64) -> MultiIssue {
        let utility: Utility = serde_json::from_value(json!({"weights": weights, "reservation": reservation})).unwrap();
        MultiIssue {
            valuation: utility.valuation(party, &issues(), Prices { limit, ask: 100_000 }),
            e: 1.0,
            fixed_terms: None,
        }
    }

    #[test]
    fn it_concedes_where_the_other_side_cares() {
        let issues = issues();
        // The seller cares for price and warranty, not delivery: facing a buyer who has kept
        // asking for 1-day delivery, it gives the delivery and holds the warranty.
        let seller = negotiator(Party::Seller, json!({"price": 1, "warranty": 1}), 0.3, 60_000);
        let offers = vec![
            Offer { amount: 60_000, values: vec![1, 2] },
            Offer { amount: 100_000, values: vec![30, 0] },
            Offer { amount: 62_000, values: vec![1, 2] },
        ];
        let state = MultiState {
            mover: Party::Seller,
            ask: 100_000,
            max_rounds: 10,
            issues: &issues,
            offers,
            pending_final: false,
        };
        let made = seller.decide(&state);
        let Decision::Counter { amount, .. } = made.decision else { panic!("{made:?}") };
        assert!(
            bid::check_counter(Party::Seller, amount, bid::Positions { pending: 62_000, own_previous: 100_000 })
                .is_ok()
        );
        assert_eq!(made.values.unwrap()[0], 1, "the delivery the buyer wants costs the seller nothing");
    }

    #[test]
    fn the_buyer_opens_at_its_best() {
        let issues = issues();
        let buyer = negotiator(Party::Buyer, json!({"price": 1, "days": 1}), 0.4, 90_000);
        let state = MultiState {
            mover: Party::Buyer,
            ask: 100_000,
            max_rounds: 10,
            issues: &issues,
            offers: vec![],
            pending_final: false,
        };
        let made = buyer.decide(&state);
        assert_eq!(made.decision, Decision::Counter { amount: 45_000, is_final: false });
        assert_eq!(made.values, Some(vec![1, 2]));
    }

    fn arb_issue() -> impl Strategy<Value = Issue> {
        prop_oneof![
            (0i64..50, 1i64..50, any::<bool>()).prop_map(|(min, span, higher)| Issue {
                name: String::new(),
                kind: IssueType::Integer,
                min: Some(min),
                max: Some(min + span),
                values: None,
                buyer_prefers: if higher { issues::Direction::Higher } else { issues::Direction::Lower },
            }),
            (2usize..5, any::<bool>()).prop_map(|(n, higher)| Issue {
                name: String::new(),
                kind: IssueType::Enum,
                min: None,
                max: None,
                values: Some((0..n).map(|i| format!("v{i}")).collect()),
                buyer_prefers: if higher { issues::Direction::Higher } else { issues::Direction::Lower },
            }),
        ]
    }

    /// Whatever the thread, the negotiator never accepts an offer worth less than its
    /// reservation utility or priced past its limit, and its counters are legal; the cases
    /// reach both arms where that is checked.
    #[test]
    fn never_accepts_below_the_reservation() {
        let arms = crate::strategy::tests::Arms::default();
        proptest!(ProptestConfig::with_cases(400), |(
            raw in prop::collection::vec(arb_issue(), 0..3),
            weights in prop::collection::vec(0.0f64..5.0, 4),
            reservation in 0.0f64..1.0,
            limit in 100i64..200_000,
            seller in any::<bool>(),
            amounts in prop::collection::vec(100i64..200_000, 1..8),
            picks in prop::collection::vec(0u8..=255, 24),
            pending_final in any::<bool>(),
            e in 0.2f64..5.0,
        )| {
            let issues = Issues(raw.into_iter().enumerate().map(|(i, mut issue)| { issue.name = format!("i{i}"); issue }).collect());
            let ask = 150_000;
            let mut weight_map: std::collections::BTreeMap<String, f64> = std::collections::BTreeMap::new();
            weight_map.insert("price".into(), weights[0] + 0.01);
            for (i, issue) in issues.iter().enumerate() {
                weight_map.insert(issue.name.clone(), weights[i + 1]);
            }
            let party = if seller { Party::Seller } else { Party::Buyer };
            let utility = Utility { weights: weight_map, reservation, best_price: None };
            let me = MultiIssue { valuation: utility.valuation(party, &issues, Prices { limit, ask }), e, fixed_terms: None };
            // Any thread of the right length for the mover, amounts and issue values arbitrary.
            let mut amounts = amounts;
            if (amounts.len() % 2 == 1) != seller {
                amounts.pop();
            }
            let mut pick = picks.iter().cycle();
            let offers: Vec<Offer> = amounts.iter().map(|&amount| Offer {
                amount,
                values: issues.iter().map(|issue| {
                    let span = (issue.high() - issue.low() + 1) as u64;
                    issue.low() + (u64::from(*pick.next().unwrap()) % span) as i64
                }).collect(),
            }).collect();
            let state = MultiState { mover: party, ask, max_rounds: 10, issues: &issues, offers: offers.clone(), pending_final };
            let made = me.decide(&state);
            match made.decision {
                Decision::Accept { .. } => {
                    arms.ran("accept");
                    let pending = offers.last().unwrap();
                    prop_assert!(me.valuation.value(pending) + 1e-9 >= reservation);
                    prop_assert!(me.within_limit(pending.amount));
                }
                Decision::Counter { amount, .. } => {
                    arms.ran("counter");
                    prop_assert!(me.within_limit(amount) || offers.is_empty());
                    let values = made.values.unwrap();
                    prop_assert!(issues.read_terms(Some(&issues.terms(&values))).is_ok());
                    if let Some(pending) = offers.last() {
                        let own = if offers.len() >= 2 { offers[offers.len() - 2].amount } else { ask };
                        let positions = bid::Positions { pending: pending.amount, own_previous: own };
                        prop_assert!(bid::check_counter(party, amount, positions).is_ok());
                        let counter = Offer { amount, values };
                        prop_assert!(me.valuation.value(&counter) + 1e-9 >= reservation);
                    }
                }
                Decision::Reject { .. } | Decision::Stop { .. } => {}
            }
        });
        arms.assert_each_ran(&[("accept", 30), ("counter", 30)]);
    }
}
