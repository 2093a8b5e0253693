//! Properties of the strategies as a whole: whatever the parameters and the thread, a policy never
//! crosses its limit, never counters illegally, never retracts a concession, and marks `final`
//! where the rules say.

use proptest::prelude::*;

use super::super::bid::{self, Party};
use super::super::tier::Tier;
use super::model::BayesBuyer;
use super::{
    Adaptive, Competitive, Decision, Ending, MAX_AUTO_ROUNDS, NegotiationState, Negotiator, PlacedBid, Policy,
    Proposal, Setting, SimpleThreshold, TierTerms, Transcript, Turn, at_or_better, counter, decide, open, simulate,
};

fn tiers() -> impl Strategy<Value = Tier> {
    prop::sample::select(Tier::ALL.to_vec())
}

/// Any counter strategy with parameters in their valid ranges: a seller's (with `tier`) if
/// `with_tier`, else a buyer's (with `competitive`).
fn strategies(with_tier: bool) -> BoxedStrategy<counter::Strategy> {
    let plain = prop_oneof![
        Just(counter::Strategy::Split {}),
        (1i64..50_000).prop_map(|amount| counter::Strategy::Step { amount: Some(amount), fraction: None }),
        (0.001f64..=1.0).prop_map(|fraction| counter::Strategy::Step { amount: None, fraction: Some(fraction) }),
        (0.0f64..=1.0, 0.05f64..=20.0).prop_map(|(k, e)| counter::Strategy::Time { k, e, start: None }),
        (-1.0f64..=1.0).prop_map(|kindness| counter::Strategy::TitForTat { kindness }),
        (0.05f64..=20.0).prop_map(|e| counter::Strategy::Bayes { e }),
        (2u8..=4, 1u8..=3)
            .prop_flat_map(|(levels, steps)| {
                let rows = 1 + usize::from(levels) * usize::from(steps);
                let row = prop::collection::vec(-1.0f64..1.0, usize::from(levels) + 2);
                (Just(levels), Just(steps), prop::collection::vec(row, rows))
            })
            .prop_map(|(levels, steps, q)| counter::Strategy::Learned { levels, steps, q }),
    ];
    let competitive = (1i64..50_000, prop::option::of(100i64..2_000_000))
        .prop_map(|(step, best_elsewhere)| counter::Strategy::Competitive { step, best_elsewhere });
    if with_tier {
        prop_oneof![plain, Just(counter::Strategy::Tier {}), Just(counter::Strategy::Closer {})].boxed()
    } else {
        prop_oneof![plain, competitive].boxed()
    }
}

/// How often each arm of a property's match ran: a property that asserts only inside some
/// arms would pass, proving nothing, if the generated cases never reached them.
#[derive(Debug, Default)]
pub(super) struct Arms(std::sync::Mutex<std::collections::BTreeMap<&'static str, usize>>);

impl Arms {
    pub(super) fn ran(&self, arm: &'static str) {
        *self.0.lock().expect("no case panics while counting").entry(arm).or_default() += 1;
    }

    /// Fails unless each arm ran at least its number of times.
    #[track_caller]
    pub(super) fn assert_each_ran(&self, least: &[(&'static str, usize)]) {
        let counts = self.0.lock().expect("no case panics while counting");
        for (arm, least) in least {
            let ran = counts.get(arm).copied().unwrap_or(0);
            assert!(ran >= *least, "the {arm} arm ran {ran} times, fewer than {least}: {counts:?}");
        }
    }
}

fn within_limit(mover: Party, amount: i64, limit: i64) -> bool {
    at_or_better(mover, amount, limit)
}

/// A buyer that opens at a fixed amount, then lets a policy answer (a server-side policy never opens).
struct OpenThen {
    opening: i64,
    then: Policy,
}

impl Negotiator for OpenThen {
    fn next(&self, state: &NegotiationState) -> Decision {
        if state.bids.is_empty() { open(state, self.opening) } else { decide(&self.then, state) }
    }
}

fn seller_bids(run: &Transcript) -> Vec<PlacedBid> {
    run.bids.iter().copied().filter(|bid| bid.author == Party::Seller).collect()
}

fn buyer_bids(run: &Transcript) -> Vec<PlacedBid> {
    run.bids.iter().copied().filter(|bid| bid.author == Party::Buyer).collect()
}

/// What every transcript must show, whoever played it.
fn assert_by_the_rules(run: &Transcript, setting: &Setting) -> Result<(), TestCaseError> {
    prop_assert!(!matches!(run.ending, Ending::Refused { .. }), "refused: {:?}", run);
    prop_assert!(run.bids.len() <= setting.max_rounds.max(1) as usize, "too many rounds: {:?}", run);
    for (i, bid) in run.bids.iter().enumerate() {
        let round = i as i32 + 1;
        prop_assert_eq!(bid.author, Party::author_of_round(round));
        if round >= setting.max_rounds {
            prop_assert!(bid.is_final, "round {} of {} not final: {:?}", round, setting.max_rounds, run);
        }
    }
    // No side retracts a concession.
    let sellers = seller_bids(run);
    prop_assert!(sellers.windows(2).all(|w| w[1].amount <= w[0].amount), "seller retracted: {:?}", run);
    prop_assert!(sellers.iter().all(|bid| bid.amount <= setting.ask));
    let buyers = buyer_bids(run);
    prop_assert!(buyers.windows(2).all(|w| w[1].amount >= w[0].amount), "buyer retracted: {:?}", run);
    Ok(())
}

#[test]
fn extreme_parameters_do_not_overflow() {
    let extremes = [i64::MIN, -1, 0, 1, i64::MAX];
    let strategies = [
        counter::Strategy::Step { amount: Some(i64::MAX), fraction: None },
        counter::Strategy::Step { amount: Some(i64::MIN), fraction: None },
        counter::Strategy::Step { amount: None, fraction: Some(f64::NAN) },
        counter::Strategy::Time { k: f64::INFINITY, e: 0.0, start: Some(i64::MAX) },
        counter::Strategy::Time { k: -1.0, e: -1.0, start: Some(i64::MIN) },
        counter::Strategy::TitForTat { kindness: f64::MAX },
        counter::Strategy::Tier {},
        counter::Strategy::Bayes { e: f64::NAN },
        counter::Strategy::Closer {},
        counter::Strategy::Bayes { e: 0.0 },
        counter::Strategy::Competitive { step: i64::MAX, best_elsewhere: Some(i64::MIN) },
        counter::Strategy::Learned { levels: 200, steps: 0, q: vec![vec![f64::NAN]] },
    ];
    for limit in extremes {
        for counter in strategies.clone() {
            let policy = Policy { max_auto_rounds: i32::MAX, ..Policy::new(limit, counter) };
            for bids in [vec![], vec![500], vec![500, 900], vec![500, 900, 600], vec![i64::MAX], vec![0, -5]] {
                for ask in [1_000, i64::MAX] {
                    let mover = Party::author_of_round(bids.len() as i32 + 1);
                    let state = NegotiationState {
                        mover,
                        ask,
                        max_rounds: 0,
                        buyer_tier: Tier::Advertiser,
                        bids: bids.clone(),
                        pending_final: false,
                        auto_moves: 0,
                    };
                    if let Decision::Counter { amount, .. } = decide(&policy, &state) {
                        let turn = state.turn().unwrap();
                        assert!(bid::check_counter(mover, amount, turn.positions()).is_ok());
                        assert!(at_or_better(mover, amount, limit));
                    }
                    let budget = SimpleThreshold { target: limit, max: limit, step: i64::MAX, max_rounds: i32::MAX };
                    let _ = budget.next(&state);
                    let _ = Adaptive::from(budget).next(&state);
                    let _ = Competitive { best_elsewhere: Some(i64::MIN), ..Competitive::from(budget) }.next(&state);
                    let _ = BayesBuyer { max: limit, e: f64::NAN }.next(&state);
                }
            }
        }
    }
}

/// Any policy on any thread (even one no real negotiation produces): no panic, and whatever
/// it decides keeps the rules. The rules are checked in the counter and accept arms, so the
/// cases must reach each of them often.
#[test]
fn decide_keeps_the_rules_on_any_thread() {
    let arms = Arms::default();
    // Few arbitrary threads allow a counter (some 2 %), so many cases are drawn.
    proptest!(ProptestConfig { cases: 2048, ..ProptestConfig::default() }, |(
        counter in prop_oneof![strategies(true), strategies(false)],
        limit in 100i64..2_000_000,
        accept_at in prop::option::of(100i64..2_000_000),
        reject_beyond in prop::option::of(100i64..2_000_000),
        max_auto_rounds in 1i32..10,
        require_approval in prop::bool::weighted(0.1),
        ask in 100i64..2_000_000,
        bids in prop::collection::vec(100i64..2_000_000, 0..14),
        buyer_tier in tiers(),
        max_rounds in 1i32..30,
        pending_final in any::<bool>(),
        auto_moves in 0u32..10,
        wrong_side in prop::bool::weighted(0.05),
    )| {
        let policy = Policy {
            limit,
            accept_at,
            reject_beyond,
            max_auto_rounds,
            require_approval,
            counter: counter.clone(),
            utility: None,
            accept_mediation: false,
            schedule: None,
            refund: None,
        };
        let mut mover = Party::author_of_round(bids.len() as i32 + 1);
        if wrong_side {
            mover = mover.other();
        }
        let state = NegotiationState { mover, ask, max_rounds, buyer_tier, bids, pending_final, auto_moves };
        let decision = decide(&policy, &state);
        match decision {
            Decision::Counter { amount, is_final } => {
                arms.ran("counter");
                let turn = state.turn().expect("a counter needs a coherent turn");
                prop_assert!(!pending_final, "countered a final bid");
                prop_assert!(!require_approval && auto_moves < max_auto_rounds as u32);
                prop_assert!(bid::check_counter(mover, amount, turn.positions()).is_ok(),
                    "illegal counter {} to {} from {}", amount, turn.pending, turn.own_previous);
                prop_assert!(within_limit(mover, amount, limit), "counter {} crosses limit {}", amount, limit);
                // Only the tier engine marks a counter final before the listing's last round.
                if turn.round >= max_rounds {
                    prop_assert!(is_final);
                } else if !matches!(counter, counter::Strategy::Tier {}) {
                    prop_assert!(!is_final);
                }
            }
            Decision::Accept { .. } => {
                arms.ran("accept");
                let pending = state.pending().expect("accepted nothing");
                prop_assert!(within_limit(mover, pending, limit), "accepted {} past limit {}", pending, limit);
                prop_assert!(!require_approval);
            }
            Decision::Reject { .. } | Decision::Stop { .. } => {}
        }
    });
    arms.assert_each_ran(&[("counter", 16), ("accept", 100)]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Two policies negotiating: every bid legal, concessions monotonic, limits never crossed,
    /// `final` at the listing's last round, automatic counters bounded.
    #[test]
    fn policies_negotiate_by_the_rules(
        seller_counter in strategies(true),
        buyer_counter in strategies(false),
        ask in 1_000i64..1_000_000,
        floor_share in 0.3f64..=1.0,
        ceiling_share in 0.3f64..=1.3,
        opening_share in 0.1f64..=1.0,
        buyer_tier in tiers(),
        max_rounds in 1i32..25,
        seller_auto in 1i32..15,
        buyer_auto in 1i32..15,
    ) {
        let floor = ((ask as f64 * floor_share) as i64).clamp(100, ask);
        let ceiling = ((ask as f64 * ceiling_share) as i64).max(100);
        let opening = ((ask as f64 * opening_share) as i64).clamp(100, ceiling.min(ask));
        let seller = Policy { max_auto_rounds: seller_auto, ..Policy::new(floor, seller_counter) };
        prop_assert!(seller.validate(Party::Seller, Some(ask), Default::default()).is_ok());
        let buyer = OpenThen { opening, then: Policy { max_auto_rounds: buyer_auto, ..Policy::new(ceiling, buyer_counter) } };
        prop_assert!(buyer.then.validate(Party::Buyer, Some(ask), Default::default()).is_ok());
        let setting = Setting { ask, max_rounds, buyer_tier };
        let run = simulate(&setting, &buyer, &seller);

        assert_by_the_rules(&run, &setting)?;
        let sellers = seller_bids(&run);
        let buyers = buyer_bids(&run);
        prop_assert!(sellers.iter().all(|bid| bid.amount >= floor), "below the floor: {:?}", run);
        prop_assert!(buyers.iter().all(|bid| bid.amount <= ceiling), "above the ceiling: {:?}", run);
        prop_assert!(sellers.len() <= seller_auto as usize);
        prop_assert!(buyers.len() <= buyer_auto as usize + 1);
        match run.ending {
            Ending::Accepted { by: Party::Seller, amount } => prop_assert!(amount >= floor),
            Ending::Accepted { by: Party::Buyer, amount } => prop_assert!(amount <= ceiling),
            _ => {}
        }
    }

    /// The tier engine against a stepping buyer: never below max(floor, base·(1 − total cap)),
    /// never more than the per-round cap at once, at most the tier's rounds, and `final` exactly
    /// when the budget is nearly spent, the tier's last round or the listing's is reached.
    #[test]
    fn the_tier_engine_keeps_its_budget(
        ask in 10_000i64..10_000_000,
        floor_share in 0.5f64..=1.0,
        opening_share in 0.3f64..=0.95,
        buyer_step in 0.0f64..=0.5,
        tier in tiers(),
        max_rounds in 2i32..25,
    ) {
        let floor = (ask as f64 * floor_share) as i64;
        let opening = (ask as f64 * opening_share) as i64;
        let seller = Policy { max_auto_rounds: MAX_AUTO_ROUNDS, ..Policy::new(floor, counter::Strategy::Tier {}) };
        let buyer_counter = counter::Strategy::Step { amount: None, fraction: Some(buyer_step.max(0.001)) };
        let buyer = OpenThen { opening, then: Policy { max_auto_rounds: MAX_AUTO_ROUNDS, ..Policy::new(ask, buyer_counter) } };
        let setting = Setting { ask, max_rounds, buyer_tier: tier };
        let run = simulate(&setting, &buyer, &seller);
        assert_by_the_rules(&run, &setting)?;

        let terms = TierTerms::for_tier(tier);
        let base = terms.base(ask);
        let lowest = floor.max(terms.cap_floor(base));
        let per_round = terms.per_round_cap(base);
        let mut last = base;
        for (i, bid) in run.bids.iter().enumerate().filter(|(_, bid)| bid.author == Party::Seller) {
            let k = i.div_ceil(2);
            let round = i as i32 + 1;
            prop_assert!(k as i32 <= terms.max_rounds, "counter {} past the tier's rounds: {:?}", k, run);
            prop_assert!(bid.amount >= lowest, "{} below the lowest {}: {:?}", bid.amount, lowest, run);
            prop_assert!(last - bid.amount <= per_round, "conceded {} > {}: {:?}", last - bid.amount, per_round, run);
            let nearly_spent = bid.amount <= lowest || 5 * (bid.amount - lowest) <= last - lowest;
            let want_final = nearly_spent || k as i32 == terms.max_rounds || round >= max_rounds;
            prop_assert_eq!(bid.is_final, want_final, "counter {} of {:?}", k, run);
            last = bid.amount;
        }
        if let Ending::Accepted { by: Party::Seller, amount } = run.ending {
            prop_assert!(amount >= floor);
        }
    }

    /// Faratin's price concedes monotonically from `start` at t = 0 to the limit at t = 1.
    #[test]
    fn time_concedes_monotonically_to_the_limit(
        k in 0.0f64..=1.0,
        e in 0.05f64..=20.0,
        limit in 100i64..1_000_000,
        spread in 0i64..1_000_000,
        max_rounds in 1i32..40,
        seller: bool,
    ) {
        let mover = if seller { Party::Seller } else { Party::Buyer };
        let start = match mover { Party::Seller => limit + spread, Party::Buyer => (limit - spread).max(1) };
        let time = counter::Strategy::Time { k, e, start: Some(start) };
        let mut previous: Option<i64> = None;
        for round in 1..=max_rounds {
            let state = NegotiationState {
                mover,
                ask: limit + spread,
                max_rounds,
                buyer_tier: Tier::Agency,
                bids: vec![1; round as usize - 1],
                pending_final: false,
                auto_moves: 0,
            };
            let turn = Turn { pending: 1, own_previous: start, round };
            let price = match time.propose(&state, turn, limit) {
                Proposal::Counter { amount, .. } => amount,
                other => return Err(TestCaseError::fail(format!("{other:?}"))),
            };
            let (low, high) = if seller { (limit, start) } else { (start, limit) };
            prop_assert!((low..=high).contains(&price), "round {}: {} outside [{}, {}]", round, price, low, high);
            if let Some(previous) = previous {
                prop_assert!(at_or_better(mover, previous, price), "round {}: {} after {}", round, price, previous);
            }
            previous = Some(price);
        }
        prop_assert_eq!(previous, Some(limit));
    }

    /// Client strategies against any seller policy: legal, within `max`, and Competitive never
    /// above the best standing counter elsewhere.
    #[test]
    fn buyer_strategies_stay_within_their_budget(
        seller_counter in strategies(true),
        ask in 1_000i64..1_000_000,
        floor_share in 0.3f64..=1.0,
        target_share in 0.1f64..=1.0,
        max_share in 0.0f64..=0.6,
        step_share in 0.001f64..=0.2,
        max_offers in 1i32..12,
        best_elsewhere_share in prop::option::of(0.1f64..=1.2),
        which in 0usize..3,
        buyer_tier in tiers(),
        max_rounds in 1i32..25,
    ) {
        let floor = ((ask as f64 * floor_share) as i64).clamp(100, ask);
        let target = ((ask as f64 * target_share) as i64).max(100);
        let max = target + (ask as f64 * max_share) as i64;
        let step = ((ask as f64 * step_share) as i64).max(1);
        let budget = SimpleThreshold { target, max, step, max_rounds: max_offers };
        prop_assert!(budget.validate().is_ok());
        let best_elsewhere = best_elsewhere_share.map(|share| ((ask as f64 * share) as i64).max(1));
        let seller = Policy::new(floor, seller_counter);
        let setting = Setting { ask, max_rounds, buyer_tier };
        let (run, cap) = match which {
            0 => (simulate(&setting, &budget, &seller), max),
            1 => (simulate(&setting, &Adaptive::from(budget), &seller), max),
            _ => {
                let competitive = Competitive { best_elsewhere, ..Competitive::from(budget) };
                (simulate(&setting, &competitive, &seller), competitive.cap())
            }
        };
        assert_by_the_rules(&run, &setting)?;
        let buyers = buyer_bids(&run);
        prop_assert!(buyers.iter().all(|bid| bid.amount <= cap), "above the cap {}: {:?}", cap, run);
        prop_assert!(buyers.len() <= max_offers as usize, "too many offers: {:?}", run);
        if let Ending::Accepted { by: Party::Buyer, amount } = run.ending {
            prop_assert!(amount <= cap);
        }
    }

    /// The `bayes` buyer (client opening, then its policy) against any seller policy, and the
    /// `bayes` seller against any client buyer: every move legal, neither limit ever crossed.
    #[test]
    fn bayes_keeps_both_limits_against_anyone(
        seller_counter in strategies(true),
        ask in 1_000i64..1_000_000,
        floor_share in 0.3f64..=1.0,
        value_share in 0.2f64..=1.5,
        e in 0.05f64..=20.0,
        which in 0usize..3,
        buyer_tier in tiers(),
        max_rounds in 1i32..25,
    ) {
        let floor = ((ask as f64 * floor_share) as i64).clamp(100, ask);
        let value = ((ask as f64 * value_share) as i64).max(100);
        let setting = Setting { ask, max_rounds, buyer_tier };
        let bayes_seller = Policy { max_auto_rounds: MAX_AUTO_ROUNDS, ..Policy::new(floor, counter::Strategy::Bayes { e }) };
        let budget = SimpleThreshold { target: (value / 2).max(100), max: value.max(100), step: (value / 15).max(1), max_rounds: 5 };
        let run = match which {
            0 => simulate(&setting, &BayesBuyer { max: value, e }, &Policy::new(floor, seller_counter)),
            1 => simulate(&setting, &BayesBuyer { max: value, e }, &bayes_seller),
            _ => simulate(&setting, &budget, &bayes_seller),
        };
        assert_by_the_rules(&run, &setting)?;
        let cap = if which == 2 { budget.max } else { value };
        prop_assert!(buyer_bids(&run).iter().all(|bid| bid.amount <= cap), "above the ceiling {}: {:?}", cap, run);
        if which >= 1 {
            prop_assert!(seller_bids(&run).iter().all(|bid| bid.amount >= floor), "below the floor {}: {:?}", floor, run);
        }
        if let Ending::Accepted { amount, .. } = run.ending {
            prop_assert!(amount <= cap, "deal {} above the ceiling {}", amount, cap);
            if which >= 1 {
                prop_assert!(amount >= floor, "deal {} below the floor {}", amount, floor);
            }
        }
    }

    /// The `closer` seller against every buyer: the client strategies (threshold, adaptive,
    /// competitive, `bayes`) and a policy buyer of any counter strategy, on listings of 1 to 60
    /// rounds. Every move legal, the floor never crossed, and every counter below the seller's
    /// previous one unless the floor or the buyer's bid leaves no lower price.
    #[test]
    fn closer_keeps_its_floor_against_every_buyer(
        buyer_counter in strategies(false),
        ask in 1_000i64..1_000_000,
        floor_share in 0.1f64..=1.0,
        value_share in 0.1f64..=1.5,
        opening_share in 0.05f64..=1.0,
        step_share in 0.001f64..=0.3,
        max_offers in 1i32..30,
        e in 0.05f64..=20.0,
        which in 0usize..5,
        buyer_tier in tiers(),
        max_rounds in 1i32..60,
    ) {
        let floor = ((ask as f64 * floor_share) as i64).clamp(100, ask);
        let value = ((ask as f64 * value_share) as i64).max(100);
        let opening = ((ask as f64 * opening_share) as i64).clamp(100, value.min(ask));
        let step = ((ask as f64 * step_share) as i64).max(1);
        let seller = Policy { max_auto_rounds: MAX_AUTO_ROUNDS, ..Policy::new(floor, counter::Strategy::Closer {}) };
        prop_assert!(seller.validate(Party::Seller, Some(ask), Default::default()).is_ok());
        let setting = Setting { ask, max_rounds, buyer_tier };
        let budget = SimpleThreshold { target: opening, max: value.max(opening), step, max_rounds: max_offers };
        let policy_buyer = OpenThen { opening, then: Policy { max_auto_rounds: MAX_AUTO_ROUNDS, ..Policy::new(value, buyer_counter) } };
        let run = match which {
            0 => simulate(&setting, &budget, &seller),
            1 => simulate(&setting, &Adaptive::from(budget), &seller),
            2 => simulate(&setting, &Competitive::from(budget), &seller),
            3 => simulate(&setting, &BayesBuyer { max: value, e }, &seller),
            _ => simulate(&setting, &policy_buyer, &seller),
        };
        assert_by_the_rules(&run, &setting)?;
        prop_assert!(seller_bids(&run).iter().all(|bid| bid.amount >= floor), "below the floor {}: {:?}", floor, run);
        let amounts: Vec<i64> = run.bids.iter().map(|bid| bid.amount).collect();
        for k in (3..amounts.len()).step_by(2) {
            // amounts[k] is a seller counter, amounts[k - 2] its previous one, amounts[k - 1] the buyer's bid.
            let lowest = floor.max(amounts[k - 1] + 1);
            prop_assert!(amounts[k] < amounts[k - 2] || amounts[k] == lowest, "stood still at {}: {:?}", amounts[k], run);
        }
        if let Ending::Accepted { amount, .. } = run.ending {
            prop_assert!(amount >= floor, "deal {} below the floor {}", amount, floor);
        }
    }
}
