//! `haggle sim --issues`: a market with issues beside price, played twice on the same draws:
//! once on price alone (every bid keeps the listing's middle terms) and once by the multi-issue
//! negotiator, which trades issues against each other. It reports how often each reaches a deal,
//! the joint utility of the deals, and their distance from the Pareto frontier (found by
//! enumerating a grid of price and issue values).
//!
//! Every listing asks 10000 minor units for the same three issues: quantity (1 to 100, the buyer
//! wants more), delivery days (1 to 30, the buyer wants fewer) and warranty (none, 6m, 1y, 2y,
//! the buyer wants longer). Each side draws its own weights over price and issues, its price
//! limit and its reservation utility; both concede linearly in utility over the listing's rounds.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use haggle_domain::bid::{self, Party};
use haggle_domain::issues::{self, Issues, Offer, Prices, Utility, Valuation};
use haggle_domain::strategy::{Decision, MultiIssue, MultiState};
use serde::Serialize;

use super::rng::Rng;

const ASK: i64 = 10_000;
/// The Pareto frontier is enumerated over this many values per integer issue and prices.
const FRONTIER_PER_ISSUE: usize = 11;
const FRONTIER_PRICES: usize = 41;

/// The issues every listing of the simulation declares.
pub fn market_issues() -> Issues {
    serde_json::from_value(serde_json::json!([
        {"name": "quantity", "type": "integer", "min": 1, "max": 100, "buyer_prefers": "higher"},
        {"name": "delivery_days", "type": "integer", "min": 1, "max": 30, "buyer_prefers": "lower"},
        {"name": "warranty", "type": "enum", "values": ["none", "6m", "1y", "2y"], "buyer_prefers": "higher"}
    ]))
    .expect("the simulation's issues are well formed")
}

/// How one way of playing did over every negotiation.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Figures {
    pub negotiations: usize,
    pub deals: usize,
    pub agreement_rate: f64,
    /// Mean over deals of the buyer's plus the seller's utility (each 0 to 1).
    pub joint_utility: f64,
    /// Mean over deals of the Euclidean distance, in the plane of the two utilities, from the
    /// deal to the nearest point of the Pareto frontier (0 on it).
    pub pareto_distance: f64,
    /// Share of deals within 0.05 of the frontier.
    pub near_frontier: f64,
    /// Mean bids per negotiation.
    pub rounds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IssuesReport {
    pub seed: u64,
    pub max_rounds: i32,
    pub price_only: Figures,
    pub multi_issue: Figures,
}

/// One negotiation's two sides.
struct Pair {
    buyer: Valuation,
    seller: Valuation,
}

fn draw_pair(rng: &mut Rng, issues: &Issues) -> Pair {
    let utility = |rng: &mut Rng| {
        let mut weights = BTreeMap::new();
        weights.insert(issues::PRICE.to_owned(), 0.2 + rng.unit());
        for issue in issues.iter() {
            weights.insert(issue.name.clone(), rng.unit());
        }
        Utility { weights, reservation: 0.2 + 0.3 * rng.unit(), best_price: None }
    };
    let seller_limit = rng.range(4_000, 8_000);
    let buyer_limit = rng.range(7_000, 11_000);
    let seller = utility(rng).valuation(Party::Seller, issues, Prices { limit: seller_limit, ask: ASK });
    let buyer = utility(rng).valuation(Party::Buyer, issues, Prices { limit: buyer_limit, ask: ASK });
    Pair { buyer, seller }
}

/// Plays one negotiation; the deal, if any, and the number of bids.
fn play(pair: &Pair, issues: &Issues, max_rounds: i32, fixed: Option<Vec<i64>>) -> (Option<Offer>, usize) {
    let side = |valuation: &Valuation| MultiIssue { valuation: valuation.clone(), e: 1.0, fixed_terms: fixed.clone() };
    let (buyer, seller) = (side(&pair.buyer), side(&pair.seller));
    let mut offers: Vec<Offer> = Vec::new();
    let mut pending_final = false;
    loop {
        let round = offers.len() as i32 + 1;
        let mover = Party::author_of_round(round);
        let negotiator = match mover {
            Party::Buyer => &buyer,
            Party::Seller => &seller,
        };
        let state = MultiState { mover, ask: ASK, max_rounds, issues, offers: offers.clone(), pending_final };
        let made = negotiator.decide(&state);
        match made.decision {
            Decision::Accept { .. } => return (offers.last().cloned(), offers.len()),
            Decision::Reject { .. } | Decision::Stop { .. } => return (None, offers.len()),
            Decision::Counter { amount, is_final } => {
                let values = made.values.unwrap_or_else(|| issues.midpoint());
                offers.push(Offer { amount, values });
                pending_final = is_final || bid::is_final(round, max_rounds, false);
                if round > max_rounds {
                    return (None, offers.len());
                }
            }
        }
    }
}

/// The Pareto frontier of the grid: the (buyer, seller) utilities no other point beats on both.
fn frontier(pair: &Pair, issues: &Issues) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = Vec::new();
    let prices = issues::price_steps(pair.seller.worst_price.min(pair.buyer.best_price)..=ASK, FRONTIER_PRICES);
    for values in issues::grid(issues, FRONTIER_PER_ISSUE, &[]) {
        for &amount in &prices {
            let offer = Offer { amount, values: values.clone() };
            points.push((pair.buyer.value(&offer), pair.seller.value(&offer)));
        }
    }
    points.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1)));
    let mut front = Vec::new();
    let mut best_seller = f64::NEG_INFINITY;
    for (b, s) in points {
        if s > best_seller {
            front.push((b, s));
            best_seller = s;
        }
    }
    front
}

fn distance(point: (f64, f64), front: &[(f64, f64)]) -> f64 {
    // How far the point must move, up and right, to reach a frontier point that dominates it.
    front
        .iter()
        .filter(|&&(b, s)| b >= point.0 - 1e-12 && s >= point.1 - 1e-12)
        .map(|&(b, s)| ((b - point.0).max(0.0).powi(2) + (s - point.1).max(0.0).powi(2)).sqrt())
        .fold(None, |best: Option<f64>, d| Some(best.map_or(d, |b| b.min(d))))
        // No frontier point of the grid dominates it: it is on the frontier.
        .unwrap_or(0.0)
}

#[derive(Default)]
struct Tally {
    negotiations: usize,
    deals: usize,
    joint: f64,
    distance: f64,
    near: usize,
    bids: usize,
}

impl Tally {
    fn add(&mut self, pair: &Pair, front: &[(f64, f64)], outcome: (Option<Offer>, usize)) {
        self.negotiations += 1;
        self.bids += outcome.1;
        if let Some(deal) = outcome.0 {
            let point = (pair.buyer.value(&deal), pair.seller.value(&deal));
            let d = distance(point, front);
            self.deals += 1;
            self.joint += point.0 + point.1;
            self.distance += d;
            self.near += usize::from(d <= 0.05);
        }
    }

    fn figures(&self) -> Figures {
        let per_deal = |x: f64| if self.deals == 0 { 0.0 } else { x / self.deals as f64 };
        Figures {
            negotiations: self.negotiations,
            deals: self.deals,
            agreement_rate: self.deals as f64 / self.negotiations.max(1) as f64,
            joint_utility: per_deal(self.joint),
            pareto_distance: per_deal(self.distance),
            near_frontier: per_deal(self.near as f64),
            rounds: self.bids as f64 / self.negotiations.max(1) as f64,
        }
    }
}

/// Plays `negotiations` pairs drawn from `seed`, each both ways.
pub fn simulate(seed: u64, negotiations: usize, max_rounds: i32) -> IssuesReport {
    let issues = market_issues();
    let mut rng = Rng::seed(seed).fork(0x155E5);
    let (mut price_only, mut multi) = (Tally::default(), Tally::default());
    for _ in 0..negotiations {
        let pair = draw_pair(&mut rng, &issues);
        let front = frontier(&pair, &issues);
        price_only.add(&pair, &front, play(&pair, &issues, max_rounds, Some(issues.midpoint())));
        multi.add(&pair, &front, play(&pair, &issues, max_rounds, None));
    }
    IssuesReport { seed, max_rounds, price_only: price_only.figures(), multi_issue: multi.figures() }
}

pub fn render(report: &IssuesReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "multi-issue market: {} negotiations, seed {}, max_rounds {}",
        report.price_only.negotiations, report.seed, report.max_rounds
    );
    let _ = writeln!(
        out,
        "{:<12} {:>9} {:>14} {:>16} {:>14} {:>7}",
        "play", "agreement", "joint utility", "Pareto distance", "near frontier", "bids"
    );
    for (name, f) in [("price only", &report.price_only), ("multi-issue", &report.multi_issue)] {
        let _ = writeln!(
            out,
            "{:<12} {:>8.1}% {:>14.3} {:>16.4} {:>13.1}% {:>7.1}",
            name,
            100.0 * f.agreement_rate,
            f.joint_utility,
            f.pareto_distance,
            100.0 * f.near_frontier,
            f.rounds
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trading_issues_brings_deals_closer_to_the_frontier() {
        let report = simulate(7, 60, 10);
        assert_eq!(report, simulate(7, 60, 10), "a seed means one market");
        let (p, m) = (&report.price_only, &report.multi_issue);
        assert!(m.deals > 0 && p.deals > 0, "{report:?}");
        assert!(m.pareto_distance < p.pareto_distance, "{report:?}");
        assert!(m.joint_utility > p.joint_utility, "{report:?}");
    }

    #[test]
    fn the_frontier_distance_is_zero_on_it() {
        let front = vec![(1.0, 0.0), (0.5, 0.5), (0.0, 1.0)];
        assert_eq!(distance((0.5, 0.5), &front), 0.0);
        assert!((distance((0.4, 0.5), &front) - 0.1).abs() < 1e-9);
        assert!((distance((0.4, 0.4), &front) - 0.1f64.hypot(0.1)).abs() < 1e-9);
    }
}
