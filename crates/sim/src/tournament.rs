//! `haggle sim --tournament`: the market played once per seed, every strategy against every
//! other, and each strategy's surplus compared with its side's baseline (balanced for buyers, the
//! tier engine for sellers), with 95 % confidence intervals over the seeds.
//!
//! **Draws.** Every seed is a market of its own (fresh values and costs). Within a seed the
//! draws are paired (common random numbers): the i-th agent of every strategy on a side has the
//! same private price, so two strategies are compared on the same pairs and the differences
//! between them are the strategies', not the draws'.
//!
//! **Figures.** For strategy X against opponent Y, per seed s: X's surplus per negotiation,
//! S(X, Y, s), and its agreement rate over feasible pairs. The ratio to the baseline B is
//! r_s = S(X, Y, s) / S(B, Y, s) (seeds where the baseline earned nothing are left out). The
//! table shows the mean of r_s over seeds with a 95 % Student-t interval, mean ± t(0.975, n − 1)·sd/√n.
//! "all" pools every opponent of a seed. Nothing depends on a clock or on the order work is
//! done in: the same flags give the same bytes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use haggle_domain::bid::Party;

use super::market::{Books, Market, Outcome};
use super::roster::{Kind, ProfileKey};
use super::svg;

/// The baselines of the comparison.
pub const BUYER_BASELINE: Kind = Kind::Threshold(ProfileKey::Balanced);
pub const SELLER_BASELINE: Kind = Kind::Tier;

/// A mean over seeds with its 95 % confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub mean: f64,
    pub low: f64,
    pub high: f64,
    /// Seeds the mean is over.
    pub n: usize,
}

/// t(0.975, df) for df = 1..=30; beyond, the normal 1.96 is within 2 %.
const T_975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
    2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
];

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

impl Interval {
    pub fn of(samples: &[f64]) -> Option<Interval> {
        let n = samples.len();
        if n == 0 {
            return None;
        }
        let mean = samples.iter().sum::<f64>() / n as f64;
        let half = if n < 2 {
            0.0
        } else {
            let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            let t = T_975.get(n - 2).copied().unwrap_or(1.96);
            t * (var / n as f64).sqrt()
        };
        Some(Interval { mean: round6(mean), low: round6(mean - half), high: round6(mean + half), n })
    }
}

/// One strategy against one opponent (or "all"), over the seeds.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub strategy: String,
    pub opponent: String,
    /// The strategy's own surplus per negotiation.
    pub surplus_per_negotiation: Option<Interval>,
    /// That surplus over the baseline's against the same opponent on the same draws.
    pub ratio_to_baseline: Option<Interval>,
    pub agreement_rate: Option<Interval>,
    /// The baseline's agreement rate against the same opponent.
    pub baseline_agreement_rate: Option<Interval>,
}

#[derive(Debug, Serialize)]
pub struct Side {
    pub baseline: String,
    pub strategies: Vec<String>,
    pub opponents: Vec<String>,
    pub rows: Vec<Row>,
}

#[derive(Debug, Serialize)]
pub struct Tournament {
    pub seeds: Vec<u64>,
    pub buyers: String,
    pub sellers: String,
    pub values: (i64, i64),
    pub costs: (i64, i64),
    pub markup: f64,
    pub tier: String,
    pub max_rounds: i32,
    pub rounds: usize,
    pub buyer_side: Side,
    pub seller_side: Side,
}

/// The books of one seed by (buyer strategy, seller strategy).
pub type SeedBooks = BTreeMap<(Kind, Kind), Books>;

pub fn books_of(outcomes: &[Outcome]) -> SeedBooks {
    let mut books = SeedBooks::new();
    for o in outcomes {
        books.entry((o.buyer_kind, o.seller_kind)).or_default().record(o);
    }
    books
}

/// The tournament's figures from the books of every seed.
pub fn summarise(market: &Market, seeds: &[u64], per_seed: &[SeedBooks]) -> Tournament {
    Tournament {
        seeds: seeds.to_vec(),
        buyers: market.buyers.to_string(),
        sellers: market.sellers.to_string(),
        values: market.ranges.values,
        costs: market.ranges.costs,
        markup: market.ranges.markup,
        tier: market.ranges.tier.to_string(),
        max_rounds: market.max_rounds,
        rounds: market.rounds,
        buyer_side: side(Party::Buyer, market, per_seed),
        seller_side: side(Party::Seller, market, per_seed),
    }
}

fn side(party: Party, market: &Market, per_seed: &[SeedBooks]) -> Side {
    let (own, other, baseline) = match party {
        Party::Buyer => (market.buyers.kinds(), market.sellers.kinds(), BUYER_BASELINE),
        Party::Seller => (market.sellers.kinds(), market.buyers.kinds(), SELLER_BASELINE),
    };
    // The books of `kind` against `opponent` (None: every opponent) in one seed.
    let pooled = |books: &SeedBooks, kind: Kind, opponent: Option<Kind>| {
        let mut total = Books::default();
        for (&(b, s), cell) in books {
            let (mine, theirs) = match party {
                Party::Buyer => (b, s),
                Party::Seller => (s, b),
            };
            if mine == kind && opponent.is_none_or(|o| o == theirs) {
                add(&mut total, cell);
            }
        }
        total
    };
    let surplus = |books: &Books| match party {
        Party::Buyer => books.buyer_surplus_per_negotiation(),
        Party::Seller => books.seller_surplus_per_negotiation(),
    };
    let has_baseline = own.contains(&baseline);
    let mut rows = Vec::new();
    for &kind in &own {
        for opponent in other.iter().copied().map(Some).chain([None]) {
            let mine: Vec<Books> = per_seed.iter().map(|b| pooled(b, kind, opponent)).collect();
            let base: Vec<Books> = per_seed.iter().map(|b| pooled(b, baseline, opponent)).collect();
            let ratios: Vec<f64> = mine
                .iter()
                .zip(&base)
                .filter_map(|(m, b)| match (surplus(m), surplus(b)) {
                    (Some(m), Some(b)) if b > 0.0 => Some(m / b),
                    _ => None,
                })
                .collect();
            let rates = |books: &[Books]| books.iter().filter_map(Books::agreement_rate).collect::<Vec<f64>>();
            rows.push(Row {
                strategy: kind.to_string(),
                opponent: opponent.map_or_else(|| "all".to_owned(), |o| o.to_string()),
                surplus_per_negotiation: Interval::of(&mine.iter().filter_map(surplus).collect::<Vec<f64>>()),
                ratio_to_baseline: if has_baseline { Interval::of(&ratios) } else { None },
                agreement_rate: Interval::of(&rates(&mine)),
                baseline_agreement_rate: if has_baseline { Interval::of(&rates(&base)) } else { None },
            });
        }
    }
    Side {
        baseline: baseline.to_string(),
        strategies: own.iter().map(|k| k.to_string()).collect(),
        opponents: other.iter().map(|k| k.to_string()).chain(["all".to_owned()]).collect(),
        rows,
    }
}

fn add(total: &mut Books, cell: &Books) {
    total.negotiations += cell.negotiations;
    total.feasible += cell.feasible;
    total.deals += cell.deals;
    total.deals_feasible += cell.deals_feasible;
    total.deals_infeasible += cell.deals_infeasible;
    total.rule_breaks += cell.rule_breaks;
    total.limit_violations += cell.limit_violations;
    total.bids += cell.bids;
    total.buyer_surplus += cell.buyer_surplus;
    total.seller_surplus += cell.seller_surplus;
    total.potential += cell.potential;
}

fn ratio_cell(i: Option<Interval>) -> String {
    i.map_or_else(|| "–".into(), |i| format!("{:.2} [{:.2}, {:.2}]", i.mean, i.low, i.high))
}

fn rate_cell(i: Option<Interval>) -> String {
    i.map_or_else(|| "–".into(), |i| format!("{:.1}% ±{:.1}", i.mean * 100.0, (i.high - i.mean) * 100.0))
}

/// The report for people.
pub fn render(t: &Tournament) -> String {
    let mut out = String::new();
    let first = t.seeds.first().copied().unwrap_or(0);
    let last = t.seeds.last().copied().unwrap_or(0);
    let _ = writeln!(
        out,
        "haggle sim --tournament: {} seeds ({first}..={last}), {} round(s) each, max_rounds {}, buyer tier {}",
        t.seeds.len(),
        t.rounds,
        t.max_rounds,
        t.tier
    );
    let _ = writeln!(out, "  buyers  {}  values {}..{}", t.buyers, t.values.0, t.values.1);
    let _ =
        writeln!(out, "  sellers {}  costs {}..{}, ask = cost × {}", t.sellers, t.costs.0, t.costs.1, 1.0 + t.markup);
    let _ = writeln!(out, "  paired draws within a seed; [low, high] and ± are 95% Student-t intervals over the seeds");
    for (title, side, mover) in [("buyer", &t.buyer_side, "buyer"), ("seller", &t.seller_side, "seller")] {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{title}s: surplus per negotiation relative to {} against the same opponent (mean [95% CI])",
            side.baseline
        );
        table(&mut out, side, mover, |row| ratio_cell(row.ratio_to_baseline));
        let _ = writeln!(out);
        let _ = writeln!(out, "{title}s: surplus per negotiation, minor units (mean ±95%)");
        table(&mut out, side, mover, |row| {
            row.surplus_per_negotiation.map_or_else(|| "–".into(), |i| format!("{:.1} ±{:.1}", i.mean, i.high - i.mean))
        });
        let _ = writeln!(out);
        let _ = writeln!(out, "{title}s: agreement rate over feasible pairs (mean ±95%)");
        table(&mut out, side, mover, |row| rate_cell(row.agreement_rate));
    }
    out
}

fn table(out: &mut String, side: &Side, mover: &str, cell: impl Fn(&Row) -> String) {
    let width = 21;
    let corner = format!("{mover} \\ opponent");
    let _ = write!(out, "{corner:<18}");
    for o in &side.opponents {
        let _ = write!(out, " {o:>width$}");
    }
    let _ = writeln!(out);
    for s in &side.strategies {
        let _ = write!(out, "{s:<18}");
        for o in &side.opponents {
            let text =
                side.rows.iter().find(|r| &r.strategy == s && &r.opponent == o).map_or_else(|| "–".into(), &cell);
            let _ = write!(out, " {text:>width$}");
        }
        let _ = writeln!(out);
    }
}

/// The charts: each side's ratios to its baseline with their intervals.
pub fn charts(t: &Tournament) -> Vec<(&'static str, String)> {
    vec![
        (
            "tournament_buyers.svg",
            svg::ratio_bars(
                &bars(&t.buyer_side),
                &format!(
                    "Buyers: surplus per negotiation / {}'s, 95% CI over {} seeds",
                    t.buyer_side.baseline,
                    t.seeds.len()
                ),
            ),
        ),
        (
            "tournament_sellers.svg",
            svg::ratio_bars(
                &bars(&t.seller_side),
                &format!(
                    "Sellers: surplus per negotiation / {}'s, 95% CI over {} seeds",
                    t.seller_side.baseline,
                    t.seeds.len()
                ),
            ),
        ),
    ]
}

fn bars(side: &Side) -> Vec<svg::Bar> {
    side.strategies
        .iter()
        .filter(|s| **s != side.baseline)
        .map(|s| svg::Bar {
            strategy: s.clone(),
            cells: side
                .opponents
                .iter()
                .map(|o| {
                    let ratio = side
                        .rows
                        .iter()
                        .find(|r| &r.strategy == s && &r.opponent == o)
                        .and_then(|r| r.ratio_to_baseline);
                    (o.clone(), ratio.map(|i| (i.mean, i.low, i.high)))
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_student_t() {
        // 1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.303: 2 ± 4.303/√3 = 2 ± 2.484338.
        let i = Interval::of(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!((i.mean, i.n), (2.0, 3));
        assert!((i.high - 4.484_338).abs() < 1e-5 && (i.low + 0.484_338).abs() < 1e-5, "{i:?}");
        assert_eq!(Interval::of(&[5.0]).map(|i| (i.low, i.high)), Some((5.0, 5.0)));
        assert_eq!(Interval::of(&[]), None);
    }
}
