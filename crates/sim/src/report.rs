//! What a run reports: the JSON summary and the tables printed for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use haggle_domain::bid::Party;

use super::learn::{CurvePoint, Learning};
use super::market::{Books, Ending, Market, Outcome, Ranges};
use super::roster::Kind;

/// The JSON summary. Field order is fixed and every number is derived from the seed, so the same
/// seed and flags give the same bytes.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub conditions: Conditions,
    pub overall: Figures,
    pub buyers: Vec<Ranked>,
    pub sellers: Vec<Ranked>,
    pub tournament: Vec<Cell>,
    pub samples: Vec<Sample>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub training: Option<Training>,
}

#[derive(Debug, Serialize)]
pub struct Conditions {
    pub seed: u64,
    pub buyers: String,
    pub sellers: String,
    pub buyer_agents: usize,
    pub seller_agents: usize,
    pub ranges: Ranges,
    pub tier: String,
    pub max_rounds: i32,
    pub rounds: usize,
}

/// The books of a set of negotiations with their ratios; a ratio over nothing is null.
#[derive(Debug, Serialize)]
pub struct Figures {
    pub negotiations: u64,
    pub feasible: u64,
    pub deals: u64,
    pub deals_feasible: u64,
    pub deals_infeasible: u64,
    pub rule_breaks: u64,
    pub limit_violations: u64,
    pub agreement_rate: Option<f64>,
    pub mean_rounds: Option<f64>,
    pub buyer_surplus: i64,
    pub seller_surplus: i64,
    pub potential_surplus: i64,
    pub buyer_share: Option<f64>,
    pub seller_share: Option<f64>,
    pub mean_buyer_surplus: Option<f64>,
    pub mean_seller_surplus: Option<f64>,
    pub welfare: Option<f64>,
}

/// Six decimals: enough for any ratio a market yields, and stable to read.
fn round6(x: Option<f64>) -> Option<f64> {
    x.map(|x| (x * 1e6).round() / 1e6)
}

fn saturate(x: i128) -> i64 {
    i64::try_from(x).unwrap_or(if x < 0 { i64::MIN } else { i64::MAX })
}

impl From<&Books> for Figures {
    fn from(b: &Books) -> Figures {
        Figures {
            negotiations: b.negotiations,
            feasible: b.feasible,
            deals: b.deals,
            deals_feasible: b.deals_feasible,
            deals_infeasible: b.deals_infeasible,
            rule_breaks: b.rule_breaks,
            limit_violations: b.limit_violations,
            agreement_rate: round6(b.agreement_rate()),
            mean_rounds: round6(b.mean_rounds()),
            buyer_surplus: saturate(b.buyer_surplus),
            seller_surplus: saturate(b.seller_surplus),
            potential_surplus: saturate(b.potential),
            buyer_share: round6(b.buyer_share()),
            seller_share: round6(b.seller_share()),
            mean_buyer_surplus: round6(b.mean_buyer_surplus()),
            mean_seller_surplus: round6(b.mean_seller_surplus()),
            welfare: round6(b.welfare()),
        }
    }
}

/// A strategy's standing on its side: its own surplus per negotiation, over every opponent.
#[derive(Debug, Serialize)]
pub struct Ranked {
    pub rank: usize,
    pub strategy: String,
    pub agents: usize,
    pub surplus_per_negotiation: Option<f64>,
    #[serde(flatten)]
    pub figures: Figures,
}

#[derive(Debug, Serialize)]
pub struct Cell {
    pub buyer: String,
    pub seller: String,
    #[serde(flatten)]
    pub figures: Figures,
}

/// A negotiation kept whole for the price chart.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub buyer: String,
    pub seller: String,
    pub value: i64,
    pub cost: i64,
    pub ask: i64,
    /// Bid amounts in order; the buyer's are the odd rounds.
    pub bids: Vec<i64>,
    pub price: Option<i64>,
}

#[derive(Debug, Serialize)]
pub struct Training {
    pub parameters: Learning,
    pub curve: Vec<CurvePoint>,
}

/// How many negotiations the price chart shows.
const SAMPLES: usize = 4;

/// Builds the summary of a run.
pub fn summarise(seed: u64, market: &Market, outcomes: &[Outcome], training: Option<Training>) -> Summary {
    let agents = |side: Party, kind: Kind| {
        let mix = match side {
            Party::Buyer => &market.buyers,
            Party::Seller => &market.sellers,
        };
        mix.0.iter().find(|(k, _)| *k == kind).map_or(0, |(_, n)| *n)
    };
    let rank = |side: Party, kinds: Vec<Kind>| {
        let mut rows: Vec<(Kind, Books)> = kinds
            .into_iter()
            .map(|kind| {
                let books = Books::of(outcomes.iter().filter(|o| match side {
                    Party::Buyer => o.buyer_kind == kind,
                    Party::Seller => o.seller_kind == kind,
                }));
                (kind, books)
            })
            .collect();
        let score = |books: &Books| match side {
            Party::Buyer => books.buyer_surplus_per_negotiation(),
            Party::Seller => books.seller_surplus_per_negotiation(),
        };
        // Best first; equal scores keep the order of the mix.
        rows.sort_by(|a, b| score(&b.1).unwrap_or(f64::MIN).total_cmp(&score(&a.1).unwrap_or(f64::MIN)));
        rows.into_iter()
            .enumerate()
            .map(|(i, (kind, books))| Ranked {
                rank: i + 1,
                strategy: kind.to_string(),
                agents: agents(side, kind),
                surplus_per_negotiation: round6(score(&books)),
                figures: Figures::from(&books),
            })
            .collect::<Vec<_>>()
    };
    let mut cells: BTreeMap<(usize, usize), Books> = BTreeMap::new();
    let buyer_kinds = market.buyers.kinds();
    let seller_kinds = market.sellers.kinds();
    let index = |kinds: &[Kind], kind: Kind| kinds.iter().position(|k| *k == kind).unwrap_or(usize::MAX);
    for outcome in outcomes {
        let key = (index(&buyer_kinds, outcome.buyer_kind), index(&seller_kinds, outcome.seller_kind));
        cells.entry(key).or_default().record(outcome);
    }
    let tournament = cells
        .iter()
        .map(|(&(b, s), books)| Cell {
            buyer: buyer_kinds[b].to_string(),
            seller: seller_kinds[s].to_string(),
            figures: Figures::from(books),
        })
        .collect();
    Summary {
        conditions: Conditions {
            seed,
            buyers: market.buyers.to_string(),
            sellers: market.sellers.to_string(),
            buyer_agents: market.buyers.total(),
            seller_agents: market.sellers.total(),
            ranges: market.ranges,
            tier: market.ranges.tier.to_string(),
            max_rounds: market.max_rounds,
            rounds: market.rounds,
        },
        overall: Figures::from(&Books::of(outcomes)),
        buyers: rank(Party::Buyer, buyer_kinds.clone()),
        sellers: rank(Party::Seller, seller_kinds.clone()),
        tournament,
        samples: samples(outcomes),
        training,
    }
}

/// The longest feasible negotiations of the first round, one per buyer strategy where possible:
/// the ones where there is most to see.
fn samples(outcomes: &[Outcome]) -> Vec<Sample> {
    let mut candidates: Vec<&Outcome> = outcomes.iter().filter(|o| o.feasible() && o.bids.len() >= 2).collect();
    // Stable sort: equal lengths keep the market's order.
    candidates.sort_by_key(|o| std::cmp::Reverse(o.bids.len()));
    let mut chosen: Vec<&Outcome> = Vec::new();
    for o in &candidates {
        if chosen.len() < SAMPLES && !chosen.iter().any(|c| c.buyer_kind == o.buyer_kind) {
            chosen.push(o);
        }
    }
    for o in &candidates {
        if chosen.len() < SAMPLES && !chosen.iter().any(|c| std::ptr::eq(*c, *o)) {
            chosen.push(o);
        }
    }
    chosen
        .into_iter()
        .map(|o| Sample {
            buyer: o.buyer_kind.to_string(),
            seller: o.seller_kind.to_string(),
            value: o.value,
            cost: o.cost,
            ask: o.ask,
            bids: o.bids.iter().map(|bid| bid.amount).collect(),
            price: match o.ending {
                Ending::Deal(price) => Some(price),
                Ending::NoDeal(_) | Ending::Refused(_) => None,
            },
        })
        .collect()
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), |x| format!("{:.1}%", x * 100.0))
}

fn num(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| "–".into(), |x| format!("{x:.decimals$}"))
}

/// The report for people, as printed on stdout.
pub fn render(summary: &Summary) -> String {
    let mut out = String::new();
    let c = &summary.conditions;
    let o = &summary.overall;
    let _ = writeln!(
        out,
        "haggle sim: seed {}, {} round(s), max_rounds {}, buyer tier {}",
        c.seed, c.rounds, c.max_rounds, c.tier
    );
    let _ =
        writeln!(out, "  {} buyers  {}  values {}..{}", c.buyer_agents, c.buyers, c.ranges.values.0, c.ranges.values.1);
    let _ = writeln!(
        out,
        "  {} sellers {}  costs {}..{}, ask = cost × {}",
        c.seller_agents,
        c.sellers,
        c.ranges.costs.0,
        c.ranges.costs.1,
        1.0 + c.ranges.markup
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "market");
    let rows = [
        ("negotiations", o.negotiations.to_string()),
        ("feasible pairs (value ≥ cost)", o.feasible.to_string()),
        (
            "agreement rate over feasible pairs",
            format!("{} ({}/{})", pct(o.agreement_rate), o.deals_feasible, o.feasible),
        ),
        ("deals on infeasible pairs", o.deals_infeasible.to_string()),
        ("moves past a private limit", o.limit_violations.to_string()),
        ("moves the server would refuse", o.rule_breaks.to_string()),
        ("mean rounds (bids per negotiation)", num(o.mean_rounds, 2)),
        ("mean buyer surplus per deal", num(o.mean_buyer_surplus, 1)),
        ("mean seller surplus per deal", num(o.mean_seller_surplus, 1)),
        ("surplus split buyer / seller", format!("{} / {}", pct(o.buyer_share), pct(o.seller_share))),
        ("welfare (realised / every feasible pair agrees)", pct(o.welfare)),
    ];
    for (label, value) in rows {
        let _ = writeln!(out, "  {label:<48} {value}");
    }
    for (title, ranked) in [("buyer strategies", &summary.buyers), ("seller strategies", &summary.sellers)] {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{title:<18} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9}",
            "agents", "surplus/n", "agree", "own share", "welfare", "rounds"
        );
        for r in ranked.iter() {
            let own = if title.starts_with("buyer") { r.figures.buyer_share } else { r.figures.seller_share };
            let _ = writeln!(
                out,
                "{:<18} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9}",
                format!("{}. {}", r.rank, r.strategy),
                r.agents,
                num(r.surplus_per_negotiation, 1),
                pct(r.figures.agreement_rate),
                pct(own),
                pct(r.figures.welfare),
                num(r.figures.mean_rounds, 2)
            );
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "tournament: agreement rate over feasible pairs / buyer share of the surplus / welfare");
    let mut sellers: Vec<&str> = Vec::new();
    let mut buyers: Vec<&str> = Vec::new();
    for cell in &summary.tournament {
        if !sellers.contains(&cell.seller.as_str()) {
            sellers.push(&cell.seller);
        }
        if !buyers.contains(&cell.buyer.as_str()) {
            buyers.push(&cell.buyer);
        }
    }
    let width = 20;
    let _ = write!(out, "{:<14}", "buyer \\ seller");
    for s in &sellers {
        let _ = write!(out, " {s:>width$}");
    }
    let _ = writeln!(out);
    for b in &buyers {
        let _ = write!(out, "{b:<14}");
        for s in &sellers {
            let text = summary.tournament.iter().find(|c| c.buyer == *b && c.seller == *s).map_or_else(
                || "–".to_string(),
                |c| {
                    let short = |x: Option<f64>| x.map_or_else(|| "–".into(), |x| format!("{:.0}", x * 100.0));
                    format!(
                        "{}/{}/{}",
                        short(c.figures.agreement_rate),
                        short(c.figures.buyer_share),
                        short(c.figures.welfare)
                    )
                },
            );
            let _ = write!(out, " {text:>width$}");
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out, "(percentages; – where there was nothing to measure)");
    if let Some(training) = &summary.training {
        let _ = writeln!(out);
        let p = &training.parameters;
        let _ = writeln!(
            out,
            "q-learning: {} episodes in cycles of {}, alpha {}, gamma {}, epsilon {} → {}",
            p.episodes,
            p.cycle,
            p.alpha,
            p.gamma,
            p.epsilon,
            p.epsilon / 100.0
        );
        let _ = writeln!(
            out,
            "  {:>9} {:>8} {:>13} {:>14} {:>9}",
            "episodes", "trainee", "buyer reward", "seller reward", "agree"
        );
        for point in shown_cycles(&training.curve) {
            let _ = writeln!(
                out,
                "  {:>9} {:>8} {:>13.4} {:>14.4} {:>9}",
                point.episodes,
                point.trainee.as_str(),
                point.buyer_reward,
                point.seller_reward,
                pct(Some(point.agreement_rate))
            );
        }
    }
    out
}

/// The training cycles the printed table shows: about five evenly spaced pairs of consecutive
/// cycles and the last pair. The trainee swaps every cycle, so every pair shows both trainees.
fn shown_cycles(curve: &[CurvePoint]) -> impl Iterator<Item = &CurvePoint> {
    let step = (curve.len() / 5).max(1);
    let last_pair = curve.len().saturating_sub(2);
    curve.iter().enumerate().filter(move |(i, _)| i % step <= 1 || *i >= last_pair).map(|(_, point)| point)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_training_table_shows_both_trainees_alike() {
        for cycles in [1, 2, 7, 20, 21, 200] {
            let curve: Vec<CurvePoint> = (0..cycles)
                .map(|cycle| CurvePoint {
                    cycle,
                    episodes: 100 * (cycle + 1),
                    trainee: if cycle % 2 == 0 { Party::Buyer } else { Party::Seller },
                    buyer_reward: 0.0,
                    seller_reward: 0.0,
                    agreement_rate: 0.0,
                })
                .collect();
            let shown: Vec<&CurvePoint> = shown_cycles(&curve).collect();
            let count = |side| shown.iter().filter(|p| p.trainee == side).count();
            let (buyers, sellers) = (count(Party::Buyer), count(Party::Seller));
            // Short trainings show every cycle, so an odd count has one buyer cycle more.
            assert!(buyers.abs_diff(sellers) <= usize::from(cycles < 10), "{cycles} cycles: {buyers} / {sellers}");
            assert!(cycles < 2 || sellers > 0, "{cycles} cycles: no seller trainee shown");
            assert!(shown.len() <= 12, "{cycles} cycles: {} rows", shown.len());
            assert_eq!(shown.last().map(|p| p.cycle), curve.last().map(|p| p.cycle), "the last cycle is shown");
        }
    }
}
