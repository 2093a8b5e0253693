//! Deadlocks: a thread whose two positions stopped converging, and the mediator's suggestion
//! for it.
//!
//! The gap between the two sides after a bid is the distance between that bid and the one it
//! answered: the price difference as a share of the ask, plus, per issue, the difference of the
//! two values as a share of the issue's scale. A thread is deadlocked when the gap has narrowed
//! by less than `min_progress` of itself over the last `rounds` bids.
//!
//! The suggestion is a counter the side whose turn it is could legally make: for price alone
//! the midpoint of the two positions; with issues, and both sides' utilities known, the point
//! of a grid over price and issues that maximises the Nash product of the two utilities above
//! their reservations (a point on the Pareto frontier that both prefer to walking away, when
//! one exists); without both utilities, the midpoint of every dimension.
//!
//! A thread stays marked: each later counter renews the suggestion for the new pending bid, by
//! the same method, and an agreement already given carries over to the renewed suggestion when
//! it does not move against the party who gave it ([`carries_over`]).

use serde::{Deserialize, Serialize};

use super::bid::{self, Party};
use super::issues::{self, Issues, Offer, Valuation};

pub const DEFAULT_ROUNDS: u32 = 4;
pub const DEFAULT_MIN_PROGRESS: f64 = 0.05;
/// Values per integer issue, and prices, that the mediator's grid tries.
const GRID_PER_ISSUE: usize = 11;
const GRID_PRICES: usize = 21;
/// The most points the mediator evaluates; a larger issue space gets a coarser grid.
const MAX_GRID_POINTS: usize = 200_000;

/// When a thread counts as deadlocked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// How many bids back the gap is compared with; 0 turns detection off.
    pub rounds: u32,
    /// The least share of the gap that must have closed over those bids.
    pub min_progress: f64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings { rounds: DEFAULT_ROUNDS, min_progress: DEFAULT_MIN_PROGRESS }
    }
}

impl Settings {
    /// How many of a thread's latest bids [`is_deadlocked`] reads, or `None` when detection is
    /// off.
    pub fn window(&self) -> Option<usize> {
        (self.rounds > 0).then(|| self.rounds as usize + 2)
    }
}

/// The distance between two offers on a listing with `ask` and `issues`.
pub fn gap(a: &Offer, b: &Offer, ask: i64, issues: &Issues) -> f64 {
    let price = (a.amount - b.amount).unsigned_abs() as f64 / ask.max(1) as f64;
    let terms: f64 = issues
        .iter()
        .zip(a.values.iter().zip(&b.values))
        .map(|(issue, (&x, &y))| (issue.position(x) - issue.position(y)).abs())
        .sum();
    price + terms
}

/// Whether the thread whose bids (latest last, at least the last `rounds + 2`) are `offers`
/// has stopped converging: the gap after the latest bid is not `min_progress` of the gap
/// `rounds` bids earlier smaller than it.
pub fn is_deadlocked(offers: &[Offer], ask: i64, issues: &Issues, settings: Settings) -> bool {
    let Some(window) = settings.window() else {
        return false;
    };
    if offers.len() < window || !settings.min_progress.is_finite() {
        return false;
    }
    let n = offers.len();
    let now = gap(&offers[n - 1], &offers[n - 2], ask, issues);
    let k = settings.rounds as usize;
    let then = gap(&offers[n - 1 - k], &offers[n - 2 - k], ask, issues);
    then > 0.0 && now > 0.0 && then - now < settings.min_progress * then
}

/// The two positions a counter answering `pending` lies between.
fn positions(pending: &Offer, own_previous: &Offer) -> bid::Positions {
    bid::Positions { pending: pending.amount, own_previous: own_previous.amount }
}

/// The mediator's suggestion: a counter by `mover` (`amount` and issue `values`), to be
/// accepted by the other side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suggestion {
    pub amount: i64,
    pub values: Vec<i64>,
    /// How it was found: `midpoint` or `nash` (the Nash product of the declared utilities).
    pub method: Method,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    Midpoint,
    Nash,
}

/// The suggestion for a thread where `mover` is to answer `pending` (the other side's offer),
/// its own previous position being `own_previous` (for the seller's first counter, the ask with
/// the pending bid's terms). `None` when no legal counter is left between the positions.
/// `utilities` are both sides' valuations, buyer first, when both declared one.
pub fn suggest(
    mover: Party,
    pending: &Offer,
    own_previous: &Offer,
    issues: &Issues,
    utilities: Option<(&Valuation, &Valuation)>,
) -> Option<Suggestion> {
    let (low, high) = positions(pending, own_previous).counter_range(mover);
    if low > high {
        return None;
    }
    match utilities {
        Some((buyer, seller)) if !issues.is_empty() => {
            Some(nash(low, high, pending, own_previous, issues, buyer, seller))
        }
        _ => {
            let amount = midpoint(pending.amount, own_previous.amount).clamp(low, high);
            let values = pending.values.iter().zip(&own_previous.values).map(|(&a, &b)| midpoint(a, b)).collect();
            Some(Suggestion { amount, values, method: Method::Midpoint })
        }
    }
}

fn midpoint(a: i64, b: i64) -> i64 {
    a.min(b) + (a.max(b) - a.min(b)) / 2
}

/// The grid point maximising the Nash product above both reservations, or, when no point
/// clears both, the plain product of the utilities.
fn nash(
    low: i64,
    high: i64,
    pending: &Offer,
    own_previous: &Offer,
    issues: &Issues,
    buyer: &Valuation,
    seller: &Valuation,
) -> Suggestion {
    let mut per_issue = GRID_PER_ISSUE;
    let mut points = issues::grid(issues, per_issue, &[&pending.values, &own_previous.values]);
    while points.len() * GRID_PRICES > MAX_GRID_POINTS && per_issue > 2 {
        per_issue -= 1;
        points = issues::grid(issues, per_issue, &[&pending.values, &own_previous.values]);
    }
    let prices = issues::price_steps(low..=high, GRID_PRICES);
    let mut best: Option<(bool, f64, Offer)> = None;
    for values in &points {
        for &amount in &prices {
            let offer = Offer { amount, values: values.clone() };
            let (ub, us) = (buyer.value(&offer), seller.value(&offer));
            let clears = ub + 1e-9 >= buyer.reservation && us + 1e-9 >= seller.reservation;
            let score = if clears { (ub - buyer.reservation) * (us - seller.reservation) } else { ub * us };
            let better = match &best {
                None => true,
                Some((best_clears, best_score, _)) => (clears, score) > (*best_clears, *best_score),
            };
            if better {
                best = Some((clears, score, offer));
            }
        }
    }
    let offer = best.map_or_else(|| Offer { amount: low, values: pending.values.clone() }, |(_, _, offer)| offer);
    Suggestion { amount: offer.amount, values: offer.values, method: Method::Nash }
}

/// Whether `party`'s agreement to the suggestion `agreed` carries over to the suggestion
/// `renewed` that replaced it: the renewed one must be at least as good for the party.
///
/// Precisely: its price is not worse (for the buyer not higher, for the seller not lower); and,
/// on a listing with issues, when the party's `valuation` is known (its policy on the thread
/// declares a utility) the renewed offer is worth at least as much to it as the agreed one,
/// and when it is not known, no issue's value is worse for the party than it was (by the
/// issue's `buyer_prefers`). So an agreement never carries a party somewhere it had not
/// agreed to go: a renewed suggestion within the price and utility a party accepted stays so.
pub fn carries_over(
    party: Party,
    agreed: &Offer,
    renewed: &Offer,
    issues: &Issues,
    valuation: Option<&Valuation>,
) -> bool {
    let price_holds = match party {
        Party::Buyer => renewed.amount <= agreed.amount,
        Party::Seller => renewed.amount >= agreed.amount,
    };
    if !price_holds {
        return false;
    }
    if issues.is_empty() {
        return true;
    }
    match valuation {
        Some(valuation) => valuation.value(renewed) + 1e-9 >= valuation.value(agreed),
        None => issues
            .iter()
            .zip(agreed.values.iter().zip(&renewed.values))
            .all(|(issue, (&before, &after))| issue.value_for(party, after) + 1e-9 >= issue.value_for(party, before)),
    }
}

/// Whether a side with `valuation` (its price `limit` included) agrees to settle at the
/// suggestion: the price within the limit and, with a utility, the offer at or above the
/// reservation utility.
pub fn agrees(party: Party, limit: i64, valuation: Option<&Valuation>, offer: &Offer) -> bool {
    let within_limit = match party {
        Party::Seller => offer.amount >= limit,
        Party::Buyer => offer.amount <= limit,
    };
    within_limit && valuation.is_none_or(|valuation| valuation.acceptable(offer))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::issues::{Prices, Utility};

    fn price_only(amounts: &[i64]) -> Vec<Offer> {
        amounts.iter().map(|&amount| Offer { amount, values: Vec::new() }).collect()
    }

    fn stuck(amounts: &[i64]) -> bool {
        is_deadlocked(&price_only(amounts), 100_000, &Issues::default(), Settings::default())
    }

    #[test]
    fn converging_threads_are_not_deadlocked() {
        // Too short to tell: fewer than rounds + 2 bids.
        assert!(!stuck(&[50_000, 99_000, 50_001, 98_999, 50_002]));
        // Halving the gap each time.
        assert!(!stuck(&[50_000, 100_000, 75_000, 87_500, 81_250, 84_375]));
        // Detection off.
        let off = Settings { rounds: 0, ..Settings::default() };
        assert!(!is_deadlocked(
            &price_only(&[50_000, 99_000, 50_001, 98_999, 50_002, 98_998]),
            100_000,
            &Issues::default(),
            off
        ));
    }

    #[test]
    fn crawling_threads_are_deadlocked() {
        // Both sides move by one unit a round: the gap closes by far less than 5 %.
        assert!(stuck(&[50_000, 99_000, 50_001, 98_999, 50_002, 98_998]));
        // 4 % over four bids is under 5 %; 6 % is not.
        let (b, s) = (50_000, 90_000);
        assert!(stuck(&[b, s, b + 400, s, b + 800, s - 800]));
        assert!(!stuck(&[b, s, b + 1000, s - 1000, b + 1200, s - 1300]));
    }

    #[test]
    fn issues_count_in_the_gap() {
        let issues: Issues = serde_json::from_value(json!([
            {"name": "days", "type": "integer", "min": 0, "max": 10, "buyer_prefers": "lower"}
        ]))
        .unwrap();
        let offer = |amount, days| Offer { amount, values: vec![days] };
        // Prices crawl but the delivery days converge: not deadlocked.
        let moving = [
            offer(50_000, 0),
            offer(60_000, 10),
            offer(50_001, 2),
            offer(59_999, 8),
            offer(50_002, 4),
            offer(59_998, 6),
        ];
        assert!(!is_deadlocked(&moving, 100_000, &issues, Settings::default()));
        let frozen = [
            offer(50_000, 0),
            offer(60_000, 10),
            offer(50_001, 0),
            offer(59_999, 10),
            offer(50_002, 0),
            offer(59_998, 10),
        ];
        assert!(is_deadlocked(&frozen, 100_000, &issues, Settings::default()));
    }

    #[test]
    fn the_midpoint_is_a_legal_counter() {
        // The seller is to answer 50002, its own previous position 98999.
        let pending = Offer { amount: 50_002, values: vec![] };
        let own = Offer { amount: 98_999, values: vec![] };
        let s = suggest(Party::Seller, &pending, &own, &Issues::default(), None).unwrap();
        assert_eq!((s.amount, s.method), (74_500, Method::Midpoint));
        assert!(bid::check_counter(Party::Seller, s.amount, positions(&pending, &own)).is_ok());
        // One unit apart: the seller may only repeat its previous price.
        let s = suggest(
            Party::Seller,
            &Offer { amount: 100, values: vec![] },
            &Offer { amount: 101, values: vec![] },
            &Issues::default(),
            None,
        );
        assert_eq!(s.map(|s| s.amount), Some(101));
        // No room at all for a buyer one unit below the seller.
        let none = suggest(
            Party::Buyer,
            &Offer { amount: 101, values: vec![] },
            &Offer { amount: 100, values: vec![] },
            &Issues::default(),
            None,
        );
        assert_eq!(none.map(|s| s.amount), Some(100));
        assert!(
            suggest(
                Party::Buyer,
                &Offer { amount: 100, values: vec![] },
                &Offer { amount: 100, values: vec![] },
                &Issues::default(),
                None
            )
            .is_none()
        );
    }

    fn delivery() -> Issues {
        serde_json::from_value(json!([
            {"name": "days", "type": "integer", "min": 1, "max": 30, "buyer_prefers": "lower"}
        ]))
        .unwrap()
    }

    #[test]
    fn an_agreement_carries_over_only_when_the_suggestion_does_not_move_against_its_giver() {
        let price = |amount| Offer { amount, values: vec![] };
        let none = Issues::default();
        // The buyer agreed at 75,000: a lower or equal price keeps its agreement, a higher drops it.
        assert!(carries_over(Party::Buyer, &price(75_000), &price(74_000), &none, None));
        assert!(carries_over(Party::Buyer, &price(75_000), &price(75_000), &none, None));
        assert!(!carries_over(Party::Buyer, &price(75_000), &price(75_001), &none, None));
        // The seller the other way round.
        assert!(carries_over(Party::Seller, &price(75_000), &price(76_000), &none, None));
        assert!(!carries_over(Party::Seller, &price(75_000), &price(74_999), &none, None));

        // With issues and no utility known: no issue may get worse for the party.
        let issues = delivery();
        let offer = |amount, days| Offer { amount, values: vec![days] };
        assert!(carries_over(Party::Buyer, &offer(75_000, 10), &offer(75_000, 5), &issues, None));
        assert!(!carries_over(Party::Buyer, &offer(75_000, 10), &offer(70_000, 11), &issues, None));
        assert!(carries_over(Party::Seller, &offer(75_000, 10), &offer(75_000, 11), &issues, None));
        assert!(!carries_over(Party::Seller, &offer(75_000, 10), &offer(80_000, 9), &issues, None));

        // With its utility: the price still may not get worse, and the offer must be worth at
        // least as much; a slower delivery paid for by a lower price can be.
        let utility: Utility =
            serde_json::from_value(json!({"weights": {"price": 1, "days": 1}, "reservation": 0.2})).unwrap();
        let buyer = utility.valuation(Party::Buyer, &issues, Prices { limit: 100_000, ask: 100_000 });
        assert!(carries_over(Party::Buyer, &offer(75_000, 10), &offer(60_000, 11), &issues, Some(&buyer)));
        assert!(!carries_over(Party::Buyer, &offer(75_000, 10), &offer(74_999, 30), &issues, Some(&buyer)));
        assert!(!carries_over(Party::Buyer, &offer(75_000, 10), &offer(75_001, 1), &issues, Some(&buyer)));
    }

    proptest::proptest! {
        /// An agreement carries over exactly when the renewed suggestion is no worse for its
        /// giver on every dimension (no utility known), never when the price moved against it,
        /// always to the same suggestion; with a utility, only to an offer worth at least as much.
        #[test]
        fn carrying_over_never_moves_against_the_giver(
            buyer_side: bool,
            agreed_amount in 100i64..200_000,
            renewed_amount in 100i64..200_000,
            agreed_days in 1i64..=30,
            renewed_days in 1i64..=30,
            price_weight in 0.1f64..10.0,
            days_weight in 0.0f64..10.0,
        ) {
            let party = if buyer_side { Party::Buyer } else { Party::Seller };
            let issues = delivery();
            let agreed = Offer { amount: agreed_amount, values: vec![agreed_days] };
            let renewed = Offer { amount: renewed_amount, values: vec![renewed_days] };
            let price_not_worse = match party {
                Party::Buyer => renewed_amount <= agreed_amount,
                Party::Seller => renewed_amount >= agreed_amount,
            };
            let days_not_worse = match party {
                Party::Buyer => renewed_days <= agreed_days,
                Party::Seller => renewed_days >= agreed_days,
            };
            proptest::prop_assert_eq!(
                carries_over(party, &agreed, &renewed, &issues, None),
                price_not_worse && days_not_worse
            );
            proptest::prop_assert!(carries_over(party, &agreed, &agreed, &issues, None));
            let utility: Utility = serde_json::from_value(
                json!({"weights": {"price": price_weight, "days": days_weight}, "reservation": 0.1}),
            ).unwrap();
            let valuation = utility.valuation(party, &issues, Prices { limit: 150_000, ask: 150_000 });
            let with_utility = carries_over(party, &agreed, &renewed, &issues, Some(&valuation));
            if with_utility {
                proptest::prop_assert!(price_not_worse);
                proptest::prop_assert!(valuation.value(&renewed) + 1e-9 >= valuation.value(&agreed));
            }
            if price_not_worse && days_not_worse {
                proptest::prop_assert!(with_utility, "no worse on every dimension is no worse in utility");
            }
            // Price alone: only the price decides.
            let (a, r) = (Offer { amount: agreed_amount, values: vec![] }, Offer { amount: renewed_amount, values: vec![] });
            proptest::prop_assert_eq!(carries_over(party, &a, &r, &Issues::default(), None), price_not_worse);
        }
    }

    #[test]
    fn the_nash_point_trades_issues() {
        let issues: Issues = serde_json::from_value(json!([
            {"name": "days", "type": "integer", "min": 1, "max": 30, "buyer_prefers": "lower"},
            {"name": "warranty", "type": "integer", "min": 0, "max": 24, "buyer_prefers": "higher"}
        ]))
        .unwrap();
        // The buyer cares about delivery, the seller about warranty: the Nash point gives the
        // buyer fast delivery and the seller no warranty.
        let buyer: Utility =
            serde_json::from_value(json!({"weights": {"price": 1, "days": 3}, "reservation": 0.3})).unwrap();
        let seller: Utility =
            serde_json::from_value(json!({"weights": {"price": 1, "warranty": 3}, "reservation": 0.3})).unwrap();
        let buyer = buyer.valuation(Party::Buyer, &issues, Prices { limit: 100_000, ask: 100_000 });
        let seller = seller.valuation(Party::Seller, &issues, Prices { limit: 60_000, ask: 100_000 });
        let pending = Offer { amount: 70_000, values: vec![1, 24] };
        let own = Offer { amount: 95_000, values: vec![30, 0] };
        let s = suggest(Party::Seller, &pending, &own, &issues, Some((&buyer, &seller))).unwrap();
        assert_eq!(s.method, Method::Nash);
        assert_eq!(s.values, [1, 0]);
        assert!(bid::check_counter(Party::Seller, s.amount, positions(&pending, &own)).is_ok());
        assert!(buyer.acceptable(&Offer { amount: s.amount, values: s.values.clone() }));
        assert!(seller.acceptable(&Offer { amount: s.amount, values: s.values.clone() }));
        // Without both utilities, every dimension is split.
        let m = suggest(Party::Seller, &pending, &own, &issues, None).unwrap();
        assert_eq!((m.amount, m.values, m.method), (82_500, vec![15, 12], Method::Midpoint));
    }
}
