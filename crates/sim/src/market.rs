//! The market: who meets whom, each negotiation played by the domain's rules, and the accounting.
//!
//! **Pairing.** The market runs `rounds` rounds. In each round every buyer draws a fresh value and
//! every seller a fresh cost (uniform in the given ranges, whole minor units), each seller lists
//! at ask = cost·(1 + markup) rounded, and every buyer negotiates once with every seller: N × M
//! independent one-to-one negotiations, each a thread of its own (a seller can sell to all of
//! its buyers; nobody's deal affects another's). The tournament table is the same negotiations
//! grouped by (buyer strategy, seller strategy).
//!
//! **Accounting.** A pair is feasible when value ≥ cost. A deal at price p gives the buyer
//! value − p and the seller p − cost. The best possible for a pair is value − cost when it is
//! feasible and 0 otherwise (in pairwise bargaining every feasible pair could agree), so
//! welfare = Σ realised surplus / Σ max(0, value − cost), over the same negotiations. The
//! agreement rate is deals on feasible pairs / feasible pairs; deals on infeasible pairs are
//! counted apart and are 0 whenever every move keeps its side's limit.
//!
//! **Venues.** The strategies decide every move on this side; a [`Venue`] carries the moves out.
//! In-process, every move goes through the domain's `simulate`, which refuses what the server
//! refuses (a counter that is not a concession, a counter on a final bid, an opening above the
//! ask); over HTTP (`remote`), every move is an API call and the server refuses. The draws, the
//! order of the books and the accounting are the same for both, and the market checks each bid
//! and deal against the two private limits either way.

use futures::StreamExt as _;
use serde::Serialize;

use haggle_domain::bid::Party;
use haggle_domain::strategy::{self, Setting, Transcript, simulate};
use haggle_domain::strategy::{Negotiator, PlacedBid};
use haggle_domain::tier::Tier;

use super::rng::Rng;
use super::roster::{self, Kind, Mix, Tables};

/// Where private prices come from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ranges {
    /// Buyers' values, inclusive, in minor units.
    pub values: (i64, i64),
    /// Sellers' costs, inclusive, in minor units.
    pub costs: (i64, i64),
    /// The ask is the cost times (1 + markup).
    pub markup: f64,
    /// The tier every buyer has (the seller tier engine reads it).
    #[serde(skip)]
    pub tier: Tier,
}

/// One buyer's value and one seller's cost and ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair {
    pub value: i64,
    pub cost: i64,
    pub ask: i64,
}

impl Ranges {
    pub fn ask_for(&self, cost: i64) -> i64 {
        let ask = (cost as f64 * (1.0 + self.markup)).round() as i64;
        ask.max(cost).max(1)
    }

    pub fn draw_value(&self, rng: &mut Rng) -> i64 {
        rng.range(self.values.0, self.values.1)
    }

    pub fn draw_cost(&self, rng: &mut Rng) -> i64 {
        rng.range(self.costs.0, self.costs.1)
    }

    pub fn draw(&self, rng: &mut Rng) -> Pair {
        let value = self.draw_value(rng);
        let cost = self.draw_cost(rng);
        Pair { value, cost, ask: self.ask_for(cost) }
    }
}

/// How a negotiation ended, for the books.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Deal(i64),
    /// Rejected or stopped, by whom.
    NoDeal(Party),
    /// A move the server would have refused, by whom: a broken strategy.
    Refused(Party),
}

/// One negotiation, as the books see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub buyer: usize,
    pub seller: usize,
    pub buyer_kind: Kind,
    pub seller_kind: Kind,
    pub value: i64,
    pub cost: i64,
    pub ask: i64,
    pub bids: Vec<PlacedBid>,
    pub ending: Ending,
    /// A bid or deal past a side's private limit.
    pub limit_violation: bool,
}

impl Outcome {
    pub fn feasible(&self) -> bool {
        self.value >= self.cost
    }
}

/// The result of one negotiation between a buyer with `value` and a seller with `cost`.
pub struct Played {
    pub bids: Vec<PlacedBid>,
    pub ending: Ending,
    pub limit_violation: bool,
}

impl Played {
    /// A negotiation's bids and ending, checked against both private limits.
    pub fn checked(value: i64, cost: i64, bids: Vec<PlacedBid>, ending: Ending) -> Played {
        let bid_past_limit = bids.iter().any(|bid| match bid.author {
            Party::Buyer => bid.amount > value,
            Party::Seller => bid.amount < cost,
        });
        let deal_past_limit = matches!(ending, Ending::Deal(price) if price > value || price < cost);
        Played { bids, ending, limit_violation: bid_past_limit || deal_past_limit }
    }
}

/// Plays one negotiation by the domain's rules and checks it against both limits.
pub fn negotiate(setting: &Setting, value: i64, cost: i64, buyer: &dyn Negotiator, seller: &dyn Negotiator) -> Played {
    let Transcript { bids, ending } = simulate(setting, buyer, seller);
    let ending = match ending {
        strategy::Ending::Accepted { amount, .. } => Ending::Deal(amount),
        strategy::Ending::Rejected { by, .. } | strategy::Ending::Stopped { by, .. } => Ending::NoDeal(by),
        strategy::Ending::Refused { by, .. } => Ending::Refused(by),
    };
    Played::checked(value, cost, bids, ending)
}

/// The market's parameters.
#[derive(Debug, Clone)]
pub struct Market {
    pub buyers: Mix,
    pub sellers: Mix,
    pub ranges: Ranges,
    pub max_rounds: i32,
    pub rounds: usize,
    /// Common random numbers: the i-th agent of every strategy on a side draws the same private
    /// price, so that strategies are compared on the same pairs (the tournament's draws).
    pub paired: bool,
}

/// One negotiation of the market: which buyer meets which seller in which round, with their
/// private prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meeting {
    pub round: usize,
    pub buyer: usize,
    pub seller: usize,
    pub buyer_kind: Kind,
    pub seller_kind: Kind,
    pub value: i64,
    pub cost: i64,
    pub ask: i64,
}

impl Meeting {
    pub fn setting(&self, market: &Market) -> Setting {
        Setting { ask: self.ask, max_rounds: market.max_rounds, buyer_tier: market.ranges.tier }
    }

    /// The buyer's and the seller's negotiators, each holding its own private price.
    pub fn negotiators<'a>(&self, tables: Tables<'a>) -> (Box<dyn Negotiator + 'a>, Box<dyn Negotiator + 'a>) {
        (
            roster::negotiator(Party::Buyer, self.buyer_kind, self.value, tables),
            roster::negotiator(Party::Seller, self.seller_kind, self.cost, tables),
        )
    }

    pub fn outcome(&self, played: Played) -> Outcome {
        Outcome {
            buyer: self.buyer,
            seller: self.seller,
            buyer_kind: self.buyer_kind,
            seller_kind: self.seller_kind,
            value: self.value,
            cost: self.cost,
            ask: self.ask,
            bids: played.bids,
            ending: played.ending,
            limit_violation: played.limit_violation,
        }
    }
}

/// Every negotiation of the market in order (round, buyer, seller). In each round every buyer
/// draws its value, then every seller its cost, from `rng`.
pub fn meetings(market: &Market, rng: &mut Rng) -> Vec<Meeting> {
    let buyers = market.buyers.agents();
    let sellers = market.sellers.agents();
    let mut meetings = Vec::with_capacity(market.rounds * buyers.len() * sellers.len());
    for round in 0..market.rounds {
        let (values, costs) = if market.paired {
            let largest = |mix: &Mix| mix.0.iter().map(|(_, n)| *n).max().unwrap_or(0);
            let values: Vec<i64> = (0..largest(&market.buyers)).map(|_| market.ranges.draw_value(rng)).collect();
            let costs: Vec<i64> = (0..largest(&market.sellers)).map(|_| market.ranges.draw_cost(rng)).collect();
            (in_group_order(&market.buyers, &values), in_group_order(&market.sellers, &costs))
        } else {
            let values: Vec<i64> = buyers.iter().map(|_| market.ranges.draw_value(rng)).collect();
            let costs: Vec<i64> = sellers.iter().map(|_| market.ranges.draw_cost(rng)).collect();
            (values, costs)
        };
        for (buyer, &buyer_kind) in buyers.iter().enumerate() {
            for (seller, &seller_kind) in sellers.iter().enumerate() {
                meetings.push(Meeting {
                    round,
                    buyer,
                    seller,
                    buyer_kind,
                    seller_kind,
                    value: values[buyer],
                    cost: costs[seller],
                    ask: market.ranges.ask_for(costs[seller]),
                });
            }
        }
    }
    meetings
}

/// Each agent's price when the i-th agent of every group takes the i-th draw.
fn in_group_order(mix: &Mix, draws: &[i64]) -> Vec<i64> {
    mix.0.iter().flat_map(|&(_, n)| draws[..n].iter().copied()).collect()
}

/// Where negotiations are played. The strategies decide every move on the caller's side either
/// way; the venue carries each move out and says how the negotiation ended: in-process by the
/// domain's rules ([`InProcess`]), or as API calls to a running server (`remote::Server`).
pub trait Venue {
    fn play(
        &self,
        meeting: &Meeting,
        setting: &Setting,
        buyer: &dyn Negotiator,
        seller: &dyn Negotiator,
    ) -> impl Future<Output = anyhow::Result<Played>>;
}

/// The domain's `simulate`, in memory.
pub struct InProcess;

impl Venue for InProcess {
    fn play(
        &self,
        meeting: &Meeting,
        setting: &Setting,
        buyer: &dyn Negotiator,
        seller: &dyn Negotiator,
    ) -> impl Future<Output = anyhow::Result<Played>> {
        std::future::ready(Ok(negotiate(setting, meeting.value, meeting.cost, buyer, seller)))
    }
}

/// Plays `meetings` at `venue`, up to `concurrency` at a time, and returns their outcomes in the
/// meetings' order, whatever order they finish in. `progress` hears (negotiations done,
/// negotiations) after each one. The first failure of the venue ends the market.
pub async fn play(
    market: &Market,
    meetings: &[Meeting],
    tables: Tables<'_>,
    venue: &impl Venue,
    concurrency: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> anyhow::Result<Vec<Outcome>> {
    let mut played = futures::stream::iter(meetings)
        .map(|meeting| async move {
            let (buyer, seller) = meeting.negotiators(tables);
            let played = venue.play(meeting, &meeting.setting(market), buyer.as_ref(), seller.as_ref()).await?;
            Ok::<_, anyhow::Error>(meeting.outcome(played))
        })
        .buffered(concurrency.max(1));
    let mut outcomes = Vec::with_capacity(meetings.len());
    while let Some(outcome) = played.next().await {
        outcomes.push(outcome?);
        progress(outcomes.len(), meetings.len());
    }
    Ok(outcomes)
}

/// Runs every round of the market in-process: all buyer × seller pairs, in order (round, buyer,
/// seller). `progress` hears (rounds done, rounds) after every tenth of the rounds.
pub fn run(market: &Market, tables: Tables<'_>, rng: &mut Rng, progress: &mut dyn FnMut(usize, usize)) -> Vec<Outcome> {
    let meetings = meetings(market, rng);
    let per_round = (meetings.len() / market.rounds.max(1)).max(1);
    let mut by_round = |done: usize, _total: usize| {
        let round = done / per_round;
        if done.is_multiple_of(per_round) && market.rounds >= 10 && round.is_multiple_of(market.rounds / 10) {
            progress(round, market.rounds);
        }
    };
    // Nothing in-process waits, so the future is done as soon as it is polled.
    futures::executor::block_on(play(market, &meetings, tables, &InProcess, 1, &mut by_round))
        .expect("the in-process venue does not fail")
}

/// The books of a set of negotiations. Sums are exact integers; the ratios are derived.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Books {
    pub negotiations: u64,
    pub feasible: u64,
    pub deals: u64,
    pub deals_feasible: u64,
    pub deals_infeasible: u64,
    /// Moves the server would have refused.
    pub rule_breaks: u64,
    pub limit_violations: u64,
    pub bids: u64,
    pub buyer_surplus: i128,
    pub seller_surplus: i128,
    /// Σ max(0, value − cost): the surplus if every feasible pair agreed.
    pub potential: i128,
}

impl Books {
    pub fn record(&mut self, outcome: &Outcome) {
        self.negotiations += 1;
        self.bids += outcome.bids.len() as u64;
        let feasible = outcome.feasible();
        if feasible {
            self.feasible += 1;
            self.potential += i128::from(outcome.value - outcome.cost);
        }
        self.limit_violations += u64::from(outcome.limit_violation);
        match outcome.ending {
            Ending::Deal(price) => {
                self.deals += 1;
                if feasible {
                    self.deals_feasible += 1;
                } else {
                    self.deals_infeasible += 1;
                }
                self.buyer_surplus += i128::from(outcome.value - price);
                self.seller_surplus += i128::from(price - outcome.cost);
            }
            Ending::NoDeal(_) => {}
            Ending::Refused(_) => self.rule_breaks += 1,
        }
    }

    pub fn of<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>) -> Books {
        let mut books = Books::default();
        for outcome in outcomes {
            books.record(outcome);
        }
        books
    }

    fn ratio(num: f64, den: f64) -> Option<f64> {
        if den == 0.0 { None } else { Some(num / den) }
    }

    /// Deals on feasible pairs / feasible pairs.
    pub fn agreement_rate(&self) -> Option<f64> {
        Books::ratio(self.deals_feasible as f64, self.feasible as f64)
    }

    /// Bids per negotiation.
    pub fn mean_rounds(&self) -> Option<f64> {
        Books::ratio(self.bids as f64, self.negotiations as f64)
    }

    pub fn realised(&self) -> i128 {
        self.buyer_surplus + self.seller_surplus
    }

    /// The buyers' part of the realised surplus.
    pub fn buyer_share(&self) -> Option<f64> {
        Books::ratio(self.buyer_surplus as f64, self.realised() as f64)
    }

    pub fn seller_share(&self) -> Option<f64> {
        Books::ratio(self.seller_surplus as f64, self.realised() as f64)
    }

    /// Mean buyer surplus per deal, minor units.
    pub fn mean_buyer_surplus(&self) -> Option<f64> {
        Books::ratio(self.buyer_surplus as f64, self.deals as f64)
    }

    pub fn mean_seller_surplus(&self) -> Option<f64> {
        Books::ratio(self.seller_surplus as f64, self.deals as f64)
    }

    /// Realised surplus / the surplus if every feasible pair agreed.
    pub fn welfare(&self) -> Option<f64> {
        Books::ratio(self.realised() as f64, self.potential as f64)
    }

    /// The buyers' surplus per negotiation: what a buyer strategy earns on average per meeting.
    pub fn buyer_surplus_per_negotiation(&self) -> Option<f64> {
        Books::ratio(self.buyer_surplus as f64, self.negotiations as f64)
    }

    pub fn seller_surplus_per_negotiation(&self) -> Option<f64> {
        Books::ratio(self.seller_surplus as f64, self.negotiations as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use haggle_domain::strategy::{Decision, NegotiationState, Rationale, state_after};

    /// A side that plays a fixed script of decisions, one per own turn.
    struct Script(Vec<Decision>);

    impl Negotiator for Script {
        fn next(&self, state: &NegotiationState) -> Decision {
            let turn = state.bids_by(state.mover);
            self.0.get(turn).copied().unwrap_or(Decision::Stop { rationale: Rationale::NothingToAnswer })
        }
    }

    fn counter(amount: i64) -> Decision {
        Decision::Counter { amount, is_final: false }
    }

    fn accept() -> Decision {
        Decision::Accept { rationale: Rationale::WithinMax }
    }

    fn outcome(value: i64, cost: i64, buyer: Script, seller: Script) -> Outcome {
        let setting = Setting { ask: 120, max_rounds: 10, buyer_tier: Tier::Agency };
        let played = negotiate(&setting, value, cost, &buyer, &seller);
        Outcome {
            buyer: 0,
            seller: 0,
            buyer_kind: Kind::Split,
            seller_kind: Kind::Split,
            value,
            cost,
            ask: 120,
            bids: played.bids,
            ending: played.ending,
            limit_violation: played.limit_violation,
        }
    }

    #[test]
    fn a_deal_at_80_between_100_and_60_splits_the_surplus_evenly() {
        // Buyer (value 100) opens at 70; seller (cost 60) counters 80; the buyer accepts.
        let deal = outcome(100, 60, Script(vec![counter(70), accept()]), Script(vec![counter(80)]));
        assert_eq!(deal.ending, Ending::Deal(80));
        assert!(!deal.limit_violation);
        let books = Books::of([&deal]);
        assert_eq!((books.buyer_surplus, books.seller_surplus, books.potential), (20, 20, 40));
        assert_eq!(books.welfare(), Some(1.0));
        assert_eq!(books.buyer_share(), Some(0.5));
        assert_eq!(books.agreement_rate(), Some(1.0));
        assert_eq!(books.mean_rounds(), Some(2.0));

        // At 90 the split is 10 / 30: a quarter to the buyer.
        let dear = outcome(100, 60, Script(vec![counter(70), accept()]), Script(vec![counter(90)]));
        let books = Books::of([&dear]);
        assert_eq!((books.buyer_surplus, books.seller_surplus), (10, 30));
        assert_eq!((books.buyer_share(), books.seller_share(), books.welfare()), (Some(0.25), Some(0.75), Some(1.0)));
        assert_eq!((books.mean_buyer_surplus(), books.mean_seller_surplus()), (Some(10.0), Some(30.0)));

        // A feasible pair that fails to agree halves the welfare when it holds the same surplus.
        let missed = outcome(
            100,
            60,
            Script(vec![counter(70)]),
            Script(vec![Decision::Reject { rationale: Rationale::RejectBeyond }]),
        );
        assert_eq!(missed.ending, Ending::NoDeal(Party::Seller));
        let books = Books::of([&deal, &missed]);
        assert_eq!(books.welfare(), Some(0.5));
        assert_eq!(books.agreement_rate(), Some(0.5));
        assert_eq!((books.deals, books.feasible, books.potential), (1, 2, 80));
    }

    #[test]
    fn an_infeasible_pair_adds_no_potential_and_a_deal_there_is_flagged() {
        // Value 50 < cost 60: the potential is 0. A (broken) buyer that pays 65 is caught.
        let bad = outcome(50, 60, Script(vec![counter(65)]), Script(vec![accept()]));
        assert_eq!(bad.ending, Ending::Deal(65));
        assert!(bad.limit_violation);
        let books = Books::of([&bad]);
        assert_eq!((books.potential, books.deals_infeasible, books.limit_violations), (0, 1, 1));
        assert_eq!(books.agreement_rate(), None);
        assert_eq!(books.welfare(), None);
        // A move the server refuses (the seller raising its price) is counted as a rule break.
        let raise = outcome(100, 60, Script(vec![counter(70)]), Script(vec![counter(130)]));
        assert_eq!(raise.ending, Ending::Refused(Party::Seller));
        assert_eq!(Books::of([&raise]).rule_breaks, 1);
    }

    #[test]
    fn an_infeasible_pair_never_agrees_whatever_the_strategies() {
        // Value 5000 below cost 6000: no strategy pair may close, at any round limit.
        let none = Tables { buyer: None, seller: None };
        for buyer_kind in Kind::BUYERS {
            for seller_kind in Kind::SELLERS {
                for max_rounds in [1, 2, 3, 10, 25] {
                    let buyer = roster::negotiator(Party::Buyer, buyer_kind, 5_000, none);
                    let seller = roster::negotiator(Party::Seller, seller_kind, 6_000, none);
                    let setting = Setting { ask: 9_000, max_rounds, buyer_tier: Tier::Agency };
                    let played = negotiate(&setting, 5_000, 6_000, buyer.as_ref(), seller.as_ref());
                    assert!(
                        matches!(played.ending, Ending::NoDeal(_)),
                        "{buyer_kind} vs {seller_kind}, {max_rounds} rounds: {:?}",
                        played.ending
                    );
                    assert!(!played.limit_violation);
                }
            }
        }
    }

    #[test]
    fn the_asks_carry_the_markup() {
        let ranges = Ranges { values: (1, 1), costs: (1, 1), markup: 0.5, tier: Tier::Agency };
        assert_eq!(ranges.ask_for(8_000), 12_000);
        assert_eq!(ranges.ask_for(1), 2); // 1.5 rounds half away from zero
        let flat = Ranges { markup: 0.0, ..ranges };
        assert_eq!(flat.ask_for(8_000), 8_000);
    }

    #[test]
    fn every_pair_meets_once_per_round() {
        let market = Market {
            buyers: Mix::parse(Party::Buyer, "balanced:2,split:1").unwrap(),
            sellers: Mix::parse(Party::Seller, "tier:1,split:1").unwrap(),
            ranges: Ranges { values: (6_000, 14_000), costs: (4_000, 12_000), markup: 0.5, tier: Tier::Agency },
            max_rounds: 10,
            rounds: 2,
            paired: false,
        };
        let outcomes = run(&market, Tables { buyer: None, seller: None }, &mut Rng::seed(1), &mut |_, _| {});
        assert_eq!(outcomes.len(), 2 * 3 * 2);
        let pairs: Vec<(usize, usize)> = outcomes[..6].iter().map(|o| (o.buyer, o.seller)).collect();
        assert_eq!(pairs, [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]);
        // A buyer keeps its value within a round, and draws a new one in the next.
        assert_eq!(outcomes[0].value, outcomes[1].value);
        assert_eq!(outcomes[0].ask, outcomes[2].ask);
    }

    #[test]
    fn a_thread_rebuilt_from_its_bids_gets_the_same_decisions() {
        // What a venue that keeps the thread elsewhere does: it rebuilds the state from the bids
        // so far and asks the mover. Each answer must be the move `simulate` recorded.
        let none = Tables { buyer: None, seller: None };
        for buyer_kind in Kind::BUYERS {
            for seller_kind in Kind::SELLERS {
                for (value, cost, max_rounds) in
                    [(8_000, 6_000, 10), (9_000, 5_000, 3), (7_000, 6_900, 1), (5_000, 6_000, 6)]
                {
                    let buyer = roster::negotiator(Party::Buyer, buyer_kind, value, none);
                    let seller = roster::negotiator(Party::Seller, seller_kind, cost, none);
                    let side = |party: Party| match party {
                        Party::Buyer => buyer.as_ref(),
                        Party::Seller => seller.as_ref(),
                    };
                    let setting = Setting { ask: (cost * 3) / 2, max_rounds, buyer_tier: Tier::Agency };
                    let Transcript { bids, ending } = simulate(&setting, buyer.as_ref(), seller.as_ref());
                    let case = format!("{buyer_kind} vs {seller_kind}, {value}/{cost}, {max_rounds} rounds");
                    for (i, bid) in bids.iter().enumerate() {
                        let decision = side(bid.author).next(&state_after(&setting, &bids[..i], bid.author));
                        let Decision::Counter { amount, is_final } = decision else {
                            panic!("{case}: bid {i} replays as {decision:?}");
                        };
                        assert_eq!(amount, bid.amount, "{case}: bid {i}");
                        assert_eq!(haggle_domain::bid::is_final(i as i32 + 1, max_rounds, is_final), bid.is_final);
                    }
                    let mover = Party::author_of_round(bids.len() as i32 + 1);
                    let last = side(mover).next(&state_after(&setting, &bids, mover));
                    let agrees = match ending {
                        strategy::Ending::Accepted { by, .. } => by == mover && matches!(last, Decision::Accept { .. }),
                        strategy::Ending::Rejected { by, .. } => by == mover && matches!(last, Decision::Reject { .. }),
                        strategy::Ending::Stopped { by, .. } => by == mover && matches!(last, Decision::Stop { .. }),
                        strategy::Ending::Refused { .. } => true,
                    };
                    assert!(agrees, "{case}: ended {ending:?}, replays as {last:?}");
                }
            }
        }
    }

    /// The in-process venue, finishing its negotiations out of order.
    struct OutOfOrder;

    impl Venue for OutOfOrder {
        async fn play(
            &self,
            meeting: &Meeting,
            setting: &Setting,
            buyer: &dyn Negotiator,
            seller: &dyn Negotiator,
        ) -> anyhow::Result<Played> {
            for _ in 0..(meeting.buyer * 7 + meeting.seller * 3) % 11 {
                yield_once().await;
            }
            InProcess.play(meeting, setting, buyer, seller).await
        }
    }

    /// Gives the executor back once, so that the other futures run first.
    async fn yield_once() {
        let mut yielded = false;
        std::future::poll_fn(|cx| {
            if yielded {
                return std::task::Poll::Ready(());
            }
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        })
        .await
    }

    #[test]
    fn concurrent_play_books_in_the_market_order() {
        let market = Market {
            buyers: Mix::parse(Party::Buyer, "balanced:3,tft:2").unwrap(),
            sellers: Mix::parse(Party::Seller, "tier:2,time-boulware:2").unwrap(),
            ranges: Ranges { values: (6_000, 14_000), costs: (4_000, 12_000), markup: 0.5, tier: Tier::Agency },
            max_rounds: 10,
            rounds: 3,
            paired: false,
        };
        let none = Tables { buyer: None, seller: None };
        let in_order = run(&market, none, &mut Rng::seed(4), &mut |_, _| {});
        let meetings = meetings(&market, &mut Rng::seed(4));
        let mut heard = Vec::new();
        let shuffled =
            futures::executor::block_on(play(&market, &meetings, none, &OutOfOrder, 8, &mut |done, total| {
                heard.push((done, total))
            }))
            .unwrap();
        assert_eq!(shuffled, in_order);
        assert_eq!(heard.len(), 3 * 5 * 4);
        assert_eq!(heard.last(), Some(&(60, 60)));
    }
}
