//! Tabular Q-learning negotiators, after "Reinforcement Learning Negotiations"
//! (github.com/AdrKacz/IA-Negotiation): a small state space, concurrent training of a buyer and a
//! seller, each in turn the trainee while the other is a fixed trainer.
//!
//! - **States** (26): the start (nothing received yet: the opening move) and, for every other
//!   move, the price level of the pending amount received × the time step. The 5 price levels are
//!   the points P_k = list·(0.5 + 0.125·k), k = 0..4, of a grid both sides share, on the public
//!   list price (the listing's ask); a pending amount falls on the nearest point. The 5 time steps
//!   cut the game's moves into fifths: t = ⌊5·(moves made) / (moves allowed)⌋.
//! - **Actions** (7): offer P_0 … P_4, accept, reject. The opening can only be an offer; a final
//!   pending bid can only be accepted or rejected (the protocol's rule, where the paper forced
//!   its last round); accepting is only allowed within the agent's own limit. An offer goes
//!   through the domain's `settle`, which keeps it within the limit and inside the legal
//!   concession range (or accepts, when the pending amount is already as good).
//! - **Reward**: on a deal at price p, (value − p)/ask for the buyer, (p − cost)/ask for the
//!   seller; 0 without a deal. The update is Bellman's, Q(s,a) ← (1−α)·Q(s,a) + α·(r + γ·max Q(s')),
//!   with the value of the end state 0.
//! - **Training**: episodes run in cycles of `cycle` negotiations. In each cycle one side is the
//!   trainee (ε-greedy, learning) and the other the trainer (greedy, not learning); the roles
//!   swap after every cycle, buyer first unless told otherwise. As in the paper, the trainer plays
//!   with the table its side had *before* its own last training cycle, so that a freshly trained
//!   side does not face an opponent it has just outgrown. ε decays linearly from `epsilon` to a
//!   hundredth of it over the training.
//! - **Who opens** alternates between episodes, as in the paper, so that both sides learn both
//!   the start state and the last states: see [`Opening`].

use serde::Serialize;

use haggle_domain::bid::Party;
use haggle_domain::strategy::{Negotiator, Setting};

use super::market::{Ending, Ranges, negotiate};
pub use super::qtable::*;
use super::rng::Rng;
#[cfg(test)]
use super::roster::{self, Kind, Tables};

/// The learning parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Learning {
    pub episodes: usize,
    pub cycle: usize,
    pub alpha: f64,
    pub gamma: f64,
    pub epsilon: f64,
    /// The side trained in the first cycle.
    pub first: Party,
}

/// Bellman updates along the moves of one negotiation, whose end paid `reward`.
fn learn(table: &mut QTable, trace: &[(usize, usize)], reward: f64, alpha: f64, gamma: f64) {
    for (i, &(s, a)) in trace.iter().enumerate() {
        let target = match trace.get(i + 1) {
            Some(&(next, _)) => gamma * table.best_value(next),
            None => reward,
        };
        let q = &mut table.values[s][a];
        *q = (1.0 - alpha) * *q + alpha * target;
    }
}

/// The reward of `side` for a negotiation that ended as `ending`.
pub fn reward(side: Party, ending: &Ending, value: i64, cost: i64, ask: i64) -> f64 {
    match ending {
        Ending::Deal(price) => {
            let surplus = match side {
                Party::Buyer => value - price,
                Party::Seller => price - cost,
            };
            surplus as f64 / ask as f64
        }
        Ending::NoDeal(_) | Ending::Refused(_) => 0.0,
    }
}

/// Who the learner faces.
#[derive(Debug, Clone, Copy)]
pub enum Opponent<'a> {
    /// A Q-table played greedily.
    Table(&'a QTable),
    /// A fixed strategy of the roster (the tests' fixed opponent).
    #[cfg(test)]
    Fixed(Kind),
}

/// One training negotiation: who learns, against whom, over which prices.
#[derive(Debug, Clone, Copy)]
pub struct Episode<'a> {
    pub side: Party,
    /// The side that makes the first move (see [`Opening`]).
    pub opening: Party,
    pub opponent: Opponent<'a>,
    pub ranges: &'a Ranges,
    pub max_rounds: i32,
    pub epsilon: f64,
}

/// Plays one training negotiation of `side`'s table and learns from it; returns (buyer reward,
/// seller reward, deal). `max_rounds` counts every move of the game, the seller's quote included
/// when it opens.
pub fn episode(table: &mut QTable, episode: &Episode<'_>, learning: &Learning, rng: &mut Rng) -> (f64, f64, bool) {
    let Episode { side, opening, opponent, ranges, max_rounds, epsilon } = *episode;
    let pair = ranges.draw(rng);
    let opening = match opening {
        Party::Buyer => Opening::Buyer,
        Party::Seller => Opening::Seller { list: pair.ask },
    };
    let own_limit = match side {
        Party::Buyer => pair.value,
        Party::Seller => pair.cost,
    };
    let other_limit = match side {
        Party::Buyer => pair.cost,
        Party::Seller => pair.value,
    };
    let (transcript_ending, trace) = {
        let learner = QPlayer::exploring(table, side, own_limit, epsilon, rng.fork(0x5EED)).in_game(opening);
        let setting = match opening {
            Opening::Buyer => Setting { ask: pair.ask, max_rounds, buyer_tier: ranges.tier },
            Opening::Seller { list } => {
                let ask = match (side, opponent) {
                    (Party::Seller, _) => learner.quote(list),
                    (Party::Buyer, Opponent::Table(seller)) => {
                        QPlayer::greedy(seller, Party::Seller, other_limit).quote(list)
                    }
                    // A fixed strategy has no say in its ask: it quotes the list price.
                    #[cfg(test)]
                    (Party::Buyer, Opponent::Fixed(_)) => list,
                };
                Setting { ask, max_rounds: (max_rounds - 1).max(1), buyer_tier: ranges.tier }
            }
        };
        let other: Box<dyn Negotiator> = match opponent {
            Opponent::Table(other) => Box::new(QPlayer::greedy(other, side.other(), other_limit).in_game(opening)),
            #[cfg(test)]
            Opponent::Fixed(kind) => {
                roster::negotiator(side.other(), kind, other_limit, Tables { buyer: None, seller: None })
            }
        };
        let ending = match side {
            Party::Buyer => negotiate(&setting, pair.value, pair.cost, &learner, other.as_ref()).ending,
            Party::Seller => negotiate(&setting, pair.value, pair.cost, other.as_ref(), &learner).ending,
        };
        let explore = learner.explore.expect("an exploring player").into_inner();
        *rng = explore.rng;
        (ending, explore.trace)
    };
    let buyer = reward(Party::Buyer, &transcript_ending, pair.value, pair.cost, pair.ask);
    let seller = reward(Party::Seller, &transcript_ending, pair.value, pair.cost, pair.ask);
    let own = if side == Party::Buyer { buyer } else { seller };
    learn(table, &trace, own, learning.alpha, learning.gamma);
    (buyer, seller, matches!(transcript_ending, Ending::Deal(_)))
}

/// One point of the training curve: the means over a cycle.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CurvePoint {
    pub cycle: usize,
    pub episodes: usize,
    pub trainee: Party,
    pub buyer_reward: f64,
    pub seller_reward: f64,
    pub agreement_rate: f64,
}

#[derive(Debug, Clone)]
pub struct Trained {
    pub buyer: QTable,
    pub seller: QTable,
    pub curve: Vec<CurvePoint>,
}

/// The ε of episode `e` out of `total`: linear from `epsilon` down to a hundredth of it.
fn epsilon_at(epsilon: f64, e: usize, total: usize) -> f64 {
    let progress = e as f64 / total.max(1) as f64;
    (epsilon * (1.0 - progress)).max(epsilon / 100.0)
}

/// Concurrent training of a buyer and a seller table (see the module's comment).
pub fn train(
    learning: &Learning,
    ranges: &Ranges,
    max_rounds: i32,
    rng: &mut Rng,
    progress: &mut dyn FnMut(usize, usize),
) -> Trained {
    let mut tables = [QTable::default(), QTable::default()];
    // The table each side had before its last training cycle: what it plays as trainer.
    let mut frozen = [QTable::default(), QTable::default()];
    let mut curve = Vec::new();
    let cycle_len = learning.cycle.max(1);
    let mut done = 0;
    let mut cycle = 0;
    while done < learning.episodes {
        let trainee = if cycle % 2 == 0 { learning.first } else { learning.first.other() };
        let (me, other) = match trainee {
            Party::Buyer => (0, 1),
            Party::Seller => (1, 0),
        };
        frozen[me] = tables[me].clone();
        let n = cycle_len.min(learning.episodes - done);
        let (mut buyer_sum, mut seller_sum, mut deals) = (0.0, 0.0, 0usize);
        for i in 0..n {
            let e = done + i;
            let epsilon = epsilon_at(learning.epsilon, e, learning.episodes);
            let opening = if e % 2 == 0 { Party::Buyer } else { Party::Seller };
            let opponent = frozen[other].clone();
            let setup =
                Episode { side: trainee, opening, opponent: Opponent::Table(&opponent), ranges, max_rounds, epsilon };
            let (b, s, deal) = episode(&mut tables[me], &setup, learning, rng);
            buyer_sum += b;
            seller_sum += s;
            deals += usize::from(deal);
            let finished = e + 1;
            if learning.episodes >= 10 && finished % (learning.episodes / 10) == 0 {
                progress(finished, learning.episodes);
            }
        }
        done += n;
        curve.push(CurvePoint {
            cycle,
            episodes: done,
            trainee,
            buyer_reward: buyer_sum / n as f64,
            seller_reward: seller_sum / n as f64,
            agreement_rate: deals as f64 / n as f64,
        });
        cycle += 1;
    }
    let [buyer, seller] = tables;
    Trained { buyer, seller, curve }
}

#[cfg(test)]
mod tests {
    use super::*;
    use haggle_domain::strategy::{Decision, NegotiationState};
    use haggle_domain::tier::Tier;

    fn ranges() -> Ranges {
        Ranges { values: (6_000, 14_000), costs: (4_000, 12_000), markup: 0.5, tier: Tier::Agency }
    }

    fn learning(episodes: usize) -> Learning {
        Learning { episodes, cycle: 100, alpha: 0.1, gamma: 0.9, epsilon: 0.5, first: Party::Buyer }
    }

    #[test]
    fn states_follow_the_grid_and_the_clock() {
        let state = |bids: &[i64], max_rounds| NegotiationState {
            mover: Party::author_of_round(bids.len() as i32 + 1),
            ask: 10_000,
            max_rounds,
            buyer_tier: Tier::Agency,
            bids: bids.to_vec(),
            pending_final: false,
            auto_moves: 0,
        };
        let market = Opening::Buyer;
        assert_eq!(state_of(&state(&[], 10), market), 0);
        // 5000 is P_0 at t = 0 (round 2 of 10): state 1.
        assert_eq!(state_of(&state(&[5_000], 10), market), 1);
        // 9400 is nearest P_4 (10000 · 0.5 + 4 · 1250 = 10000; P_3 = 8750): level 4, round 3 → t = 1.
        assert_eq!(state_of(&state(&[5_000, 9_400], 10), market), 1 + 4 * STEPS + 1);
        // Round 10 of 10: t = 4.
        assert_eq!(state_of(&state(&[1; 9], 10), market), 1 + 4);
        assert_eq!(level_price(10_000, 0), 5_000);
        assert_eq!(level_price(10_000, 4), 10_000);

        // The seller quoted 7500 (P_2 of a 10000 list) as the ask of a 9-bid thread: the buyer
        // answers it at t = 0, and the quote counts as the first of 10 moves.
        let quoted = Opening::Seller { list: 10_000 };
        let thread = |bids: &[i64]| NegotiationState { ask: 7_500, ..state(bids, 9) };
        assert_eq!(state_of(&thread(&[]), quoted), 1 + 2 * STEPS);
        assert_eq!(state_of(&thread(&[5_000]), quoted), 1 + 1);
        assert_eq!(state_of(&thread(&[1; 8]), quoted), 1 + 4);
    }

    #[test]
    fn a_q_player_never_accepts_past_its_limit() {
        // A seller at 9000 facing a buyer ceiling of 8000: accept is masked whatever the table says.
        let mut table = QTable::default();
        for row in &mut table.values {
            row[ACCEPT] = 1.0;
        }
        let player = QPlayer::greedy(&table, Party::Buyer, 8_000);
        let state = NegotiationState {
            mover: Party::Buyer,
            ask: 10_000,
            max_rounds: 10,
            buyer_tier: Tier::Agency,
            bids: vec![5_000, 9_000],
            pending_final: false,
            auto_moves: 0,
        };
        assert!(!matches!(player.next(&state), Decision::Accept { .. }));
        let cheap = NegotiationState { bids: vec![5_000, 7_500], ..state };
        assert!(matches!(player.next(&cheap), Decision::Accept { .. }));
    }

    /// A buyer learning against a fixed split seller earns more at the end of training than at
    /// the start, and once trained it beats a buyer that picks its moves at random.
    #[test]
    fn the_q_buyer_improves_against_a_fixed_seller() {
        let learning = learning(4_000);
        let ranges = ranges();
        let mut rng = Rng::seed(7);
        let mut table = QTable::default();
        let mut rewards = Vec::new();
        let against_split = Episode {
            side: Party::Buyer,
            opening: Party::Buyer,
            opponent: Opponent::Fixed(Kind::Split),
            ranges: &ranges,
            max_rounds: 10,
            epsilon: 0.0,
        };
        for e in 0..learning.episodes {
            let epsilon = epsilon_at(learning.epsilon, e, learning.episodes);
            let opening = if e % 2 == 0 { Party::Buyer } else { Party::Seller };
            let setup = Episode { epsilon, opening, ..against_split };
            let (b, _, _) = episode(&mut table, &setup, &learning, &mut rng);
            rewards.push(b);
        }
        let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
        let k = 500;
        let (first, last) = (mean(&rewards[..k]), mean(&rewards[rewards.len() - k..]));
        assert!(last > first, "last {k} episodes {last:.4} ≤ first {k} {first:.4}");

        // Evaluation without learning: the trained table, greedy, against a random player.
        let evaluate = |table: &QTable, epsilon: f64| {
            let mut rng = Rng::seed(99);
            let no_learning = Learning { alpha: 0.0, ..learning };
            let setup = Episode { epsilon, ..against_split };
            let mut scratch = table.clone();
            let total: f64 = (0..1_000).map(|_| episode(&mut scratch, &setup, &no_learning, &mut rng).0).sum();
            total / 1_000.0
        };
        let trained = evaluate(&table, 0.0);
        let random = evaluate(&QTable::default(), 1.0);
        assert!(trained > random, "trained {trained:.4} ≤ random {random:.4}");
    }

    #[test]
    fn concurrent_training_is_deterministic_and_alternates() {
        let learning = Learning { episodes: 1_000, ..learning(0) };
        let run = || train(&learning, &ranges(), 10, &mut Rng::seed(3), &mut |_, _| {});
        let (a, b) = (run(), run());
        assert_eq!(a.buyer, b.buyer);
        assert_eq!(a.seller, b.seller);
        assert_eq!(a.curve.len(), 10);
        assert_eq!(a.curve[0].trainee, Party::Buyer);
        assert_eq!(a.curve[1].trainee, Party::Seller);
        assert_eq!(a.curve.last().map(|p| p.episodes), Some(1_000));
    }

    /// Who opens alternates, so each side's table learns its opening (the start state) and its
    /// answer to the other's opening: the seller's quote and the buyer's reply to one at t = 0.
    #[test]
    fn both_sides_learn_to_open_and_to_answer_an_opening() {
        let learning = Learning { episodes: 1_000, ..learning(0) };
        let trained = train(&learning, &ranges(), 10, &mut Rng::seed(5), &mut |_, _| {});
        let visited = |row: &[f64; ACTIONS]| row.iter().any(|q| *q != 0.0);
        assert!(visited(&trained.buyer.values[0]), "the buyer never opened");
        assert!(visited(&trained.seller.values[0]), "the seller never quoted");
        // t = 0 with something pending: for the buyer, only a quote; for the seller, the buyer's
        // opening bid.
        let at_start = |table: &QTable| (0..LEVELS).any(|level| visited(&table.values[1 + level * STEPS]));
        assert!(at_start(&trained.buyer), "the buyer never answered a quote");
        assert!(at_start(&trained.seller), "the seller never answered an opening bid");
    }

    /// A seller-opened game is a legal thread: the quote is the ask, at or above the cost, and
    /// taking it closes the deal at the quote.
    #[test]
    fn a_quote_is_the_ask_and_taking_it_closes_the_deal() {
        let mut table = QTable::default();
        // The seller quotes P_2; the buyer takes any quote.
        table.values[0][2] = 1.0;
        for level in 0..LEVELS {
            table.values[1 + level * STEPS][ACCEPT] = 1.0;
        }
        let seller = QPlayer::greedy(&table, Party::Seller, 4_000).in_game(Opening::Seller { list: 10_000 });
        assert_eq!(seller.quote(10_000), 7_500);
        assert_eq!(seller.quote(6_000), 4_500, "P_2 of 6000");
        let above_cost = QPlayer::greedy(&table, Party::Seller, 8_000);
        assert_eq!(above_cost.quote(10_000), 8_000, "never below the cost");

        let buyer = QPlayer::greedy(&table, Party::Buyer, 9_000).in_game(Opening::Seller { list: 10_000 });
        let setting = Setting { ask: 7_500, max_rounds: 9, buyer_tier: Tier::Agency };
        let played = negotiate(&setting, 9_000, 4_000, &buyer, &seller);
        assert_eq!(played.ending, Ending::Deal(7_500));
        assert_eq!(played.bids.len(), 1);
        // Past its value, the buyer may not take the quote.
        let poor = QPlayer::greedy(&table, Party::Buyer, 7_000).in_game(Opening::Seller { list: 10_000 });
        assert!(!matches!(negotiate(&setting, 7_000, 4_000, &poor, &seller).ending, Ending::Deal(7_500)));
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::{Learning, train};
    use crate::market::*;
    use crate::rng::Rng;
    use crate::roster::{Kind, Mix, Tables};
    use haggle_domain::bid::Party;
    use haggle_domain::tier::Tier;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// (Here rather than beside the market: it plays learned agents too.) Whatever the prices, the strategies and the round limit, no bid and no deal crosses a
        /// private limit, the server would refuse no move, and no infeasible pair agrees.
        #[test]
        fn no_move_crosses_a_limit(
            seed in any::<u64>(),
            low_value in 1i64..20_000,
            value_span in 0i64..20_000,
            low_cost in 1i64..20_000,
            cost_span in 0i64..20_000,
            markup in 0.0f64..2.0,
            max_rounds in 1i32..30,
            counts in proptest::collection::vec(1usize..3, 12),
        ) {
            let market = Market {
                buyers: Mix(Kind::BUYERS.iter().zip(&counts).map(|(&k, &n)| (k, n)).collect()),
                sellers: Mix(Kind::SELLERS.iter().zip(&counts).map(|(&k, &n)| (k, n)).collect()),
                ranges: Ranges {
                    values: (low_value, low_value + value_span),
                    costs: (low_cost, low_cost + cost_span),
                    markup,
                    tier: Tier::ALL[(seed % 4) as usize],
                },
                max_rounds,
                rounds: 1,
                paired: seed % 2 == 0,
            };
            // Learned agents too, with tables from a short training on the same prices.
            let learning = Learning { episodes: 300, cycle: 50, alpha: 0.2, gamma: 0.9, epsilon: 0.5, first: Party::Buyer };
            let trained = train(&learning, &market.ranges, max_rounds, &mut Rng::seed(seed ^ 1), &mut |_, _| {});
            let market = Market {
                buyers: Mix(market.buyers.0.iter().copied().chain([(Kind::Learned, 2)]).collect()),
                sellers: Mix(market.sellers.0.iter().copied().chain([(Kind::Learned, 2)]).collect()),
                ..market
            };
            let tables = Tables { buyer: Some(&trained.buyer), seller: Some(&trained.seller) };
            let outcomes = run(&market, tables, &mut Rng::seed(seed), &mut |_, _| {});
            prop_assert!(outcomes.iter().any(|o| o.buyer_kind == Kind::Learned && o.seller_kind == Kind::Learned));
            for o in &outcomes {
                for (i, bid) in o.bids.iter().enumerate() {
                    prop_assert_eq!(bid.author, Party::author_of_round(i as i32 + 1));
                    match bid.author {
                        Party::Buyer => prop_assert!(bid.amount <= o.value, "{:?}", o),
                        Party::Seller => prop_assert!(bid.amount >= o.cost, "{:?}", o),
                    }
                }
                prop_assert!(o.bids.len() <= max_rounds as usize, "{:?}", o);
                match o.ending {
                    Ending::Deal(price) => prop_assert!(o.cost <= price && price <= o.value, "{:?}", o),
                    Ending::NoDeal(_) => {}
                    Ending::Refused(_) => prop_assert!(false, "a refused move: {:?}", o),
                }
            }
            let books = Books::of(&outcomes);
            prop_assert_eq!((books.deals_infeasible, books.limit_violations, books.rule_breaks), (0, 0, 0));
        }
    }
}
