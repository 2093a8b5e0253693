//! `closer`: Haggle's seller for negotiations decided at the deadline (SPEC §5).
//!
//! Tuned against the finalists of the Automated Negotiating Agents Competition (ANAC, 2010 to
//! 2019) and NegMAS's time-dependent agents as buyers, on listings of 5 to 50 rounds, and held to
//! the simulator's requirement (STRATEGIES.md gives the figures and how they were measured). Such
//! buyers open at the price best for them and barely move until the deadline; some concede on a
//! time-dependent curve. The strategy is rebuilt from the thread at every turn, as every
//! strategy here:
//!
//! - **The closing price** F = max(floor + 15 % of (ask − floor), opening + 30 % of
//!   (ask − opening)): what the seller offers at the end to a buyer who has not conceded, a price
//!   such buyers still take at their deadline, and never the floor itself (a deal at the floor is
//!   worth no more than none).
//! - **Boulware hold.** Before its last counter, the seller's price follows
//!   F + (ask − F)·(1 − t^(1/0.2)), t = round / the seller's last round, or / the listing's last
//!   round when the buyer's final bid ends it: it hardly moves until the last rounds, where the
//!   outcome is decided.
//! - **The buyer's curve.** The buyer's bids are fitted to a time-dependent tactic
//!   bid(τ) = opening + g·τ^β on the buyer's own clock (least squares in log–log coordinates; one
//!   step is read as a steady pace, β = 1). Its value at the deadline, C = opening + g, is where a
//!   conceding buyer is going. When C is above F the seller approaches it as time runs out,
//!   with r rounds left, price = C + (hold − C)·min(1, r/20)², and no lower: a buyer who concedes toward its limit is
//!   met there, late, rather than early halfway.
//! - **The last counter.** When the listing's last round is the buyer's (an odd `max_rounds`),
//!   the seller's last counter stays on its hold, or asks C if that is more: the buyer's final
//!   bid is still to come, and is accepted within the floor, so coming down to F there would only
//!   give away what the buyer bids anyway. When the last round is the seller's, its counter
//!   is final, take-it-or-leave-it: the seller accepts a pending bid of at least F, and otherwise
//!   offers halfway from the buyer's bid to its next bid on the fitted curve, between F and C
//!   (F when the curve ends below F).
//! - **A buyer who has not moved is held near the ask.** Until the buyer bids above its opening,
//!   the seller stays near the ask, 0.4 % of it lower each round, its final counter included. Many
//!   such buyers take whatever stands at their deadline, and coming down to the closing price
//!   only sells to them cheaply; the others give no more for it. A buyer who starts conceding
//!   is followed from there, as above.
//! - **Acceptance.** A bid at least as good as the next counter is accepted (AC_next, in
//!   [`super::settle`]); a final bid is accepted within the floor.
//!
//! Every counter is at least one unit below the previous one (a buyer may walk away from a seller
//! who stands still), never below the floor, and [`super::settle`] has the last word: the amount
//! always lies in the legal range.

use super::super::bid::Party;
use super::model::{self, buyer_time};
use super::{NegotiationState, Proposal, Rationale, Turn, round_price, step_of_ask};

/// The closing price's least share of the way from the floor to the ask.
const CLOSE_OVER_FLOOR: f64 = 0.15;
/// The closing price's least share of the way from the buyer's opening to the ask.
const CLOSE_OVER_OPENING: f64 = 0.3;
/// The hold's concession exponent (Boulware: well below 1).
const HOLD_E: f64 = 0.2;
/// How many rounds before its last counter the seller starts to approach the fitted ceiling.
const APPROACH_ROUNDS: f64 = 20.0;
/// The final counter's share of the way from the buyer's bid to its predicted next bid.
const FINAL_SHARE: f64 = 0.5;
/// Against a buyer who has not moved, each counter's step down, as a share of the ask: small,
/// but a visible concession on any reasonable price grid (a buyer may walk away from a seller
/// who stands still).
const HOLD_STEP: f64 = 0.004;

/// The seller's last counter: the listing's last round if it is the seller's, else the one before.
fn last_counter(max_rounds: i32) -> i32 {
    if max_rounds % 2 == 0 { max_rounds } else { max_rounds - 1 }
}

/// A time-dependent tactic bid(τ) = opening + gap·τ^β fitted to the buyer's bids (τ on its own
/// clock) by least squares of ln(bid − opening) on ln τ: (gap, β). One bid above the opening is
/// read as a steady pace (β = 1). `None` when no bid is above the opening within 0 < τ < 1.
pub(super) fn fitted_tactic(opening: f64, points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let logs = model::log_points(points.iter().map(|&(t, bid)| (t, bid - opening)));
    let fitted = match logs.as_slice() {
        [] => return None,
        [(lt, lg)] => ((lg - lt).exp(), 1.0),
        _ => model::power_fit(&logs)?,
    };
    fitted.0.is_finite().then_some(fitted)
}

/// The strategy's move for the seller; `floor` is its private floor.
pub(super) fn propose(state: &NegotiationState, turn: Turn, floor: i64) -> Proposal {
    if state.mover != Party::Seller {
        return Proposal::Stop(Rationale::WrongSide);
    }
    let (ask, s, n) = (state.ask as f64, floor as f64, state.max_rounds);
    let points: Vec<(f64, f64)> = state
        .bids
        .iter()
        .enumerate()
        .step_by(2)
        .map(|(i, &bid)| (buyer_time(i32::try_from(i + 1).unwrap_or(i32::MAX), n), bid as f64))
        .collect();
    let opening = points.first().map_or(turn.pending as f64, |p| p.1);
    let latest = turn.pending as f64;
    let close = (s + CLOSE_OVER_FLOOR * (ask - s)).max(opening + CLOSE_OVER_OPENING * (ask - opening)).min(ask);
    // When the seller's last counter is not the listing's last round (an odd `max_rounds`), the
    // buyer's final bid ends the listing after it.
    let buyer_ends = last_counter(n) < n;
    let last = last_counter(n).max(2);
    let at_last = turn.round >= last;
    let is_final = turn.round >= n;
    let t = (f64::from(turn.round) / f64::from(if buyer_ends { n } else { last })).clamp(0.0, 1.0);
    let hold = if at_last && !buyer_ends { close } else { close + (ask - close) * (1.0 - t.powf(1.0 / HOLD_E)) };
    let mut target = hold;
    let fitted = fitted_tactic(opening, &points);
    // A buyer that has not bid above its opening is not met: coming down to the closing price
    // only sells cheaply to the many such buyers who take whatever stands at their deadline, and
    // the others give no more for it. The seller stays near the ask, HOLD_STEP of it lower each
    // round, its final counter included.
    let stubborn = fitted.is_none();
    if let Some((gap, slope)) = fitted {
        let ceiling = opening + gap;
        if ceiling > close {
            let left = f64::from(last.saturating_sub(turn.round).max(0));
            let weight = (left / APPROACH_ROUNDS).min(1.0).powi(2);
            target = target.min(ceiling + (hold - ceiling).max(0.0) * weight);
            if at_last && !is_final {
                // The buyer answers with a final bid of its own: no less than where its curve ends.
                target = ceiling.max(hold);
            } else if is_final {
                let predicted = opening + gap * buyer_time(turn.round.saturating_add(1), n).powf(slope);
                target = close.max(latest + FINAL_SHARE * (predicted - latest)).min(ceiling);
            }
        }
    }
    if stubborn {
        target = ask;
    } else if is_final && latest >= close && turn.pending >= floor {
        // A refused final counter ends the thread: a bid at the closing price is taken.
        return Proposal::Accept(Rationale::AsGoodAsCounter);
    }
    let step = if stubborn { step_of_ask(state.ask, HOLD_STEP) } else { 1 };
    let amount = round_price(Party::Seller, target.max(s)).min(turn.own_previous.saturating_sub(step));
    Proposal::Counter { amount, is_final: false }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::state;
    use super::super::{Decision, MAX_AUTO_ROUNDS, Policy, Strategy, decide};
    use super::*;

    fn policy(floor: i64) -> Policy {
        Policy { max_auto_rounds: MAX_AUTO_ROUNDS, ..Policy::new(floor, Strategy::Closer {}) }
    }

    fn counter_of(decision: Decision) -> i64 {
        match decision {
            Decision::Counter { amount, .. } => amount,
            other => panic!("expected a counter, got {other:?}"),
        }
    }

    #[test]
    fn a_steady_tactic_is_fitted_to_the_buyers_bids() {
        // A linear buyer from 1000 to a ceiling of 4000 on its clock: 1600 at τ = 0.2, 2200 at 0.4.
        let (gap, slope) = fitted_tactic(1_000.0, &[(0.0, 1_000.0), (0.2, 1_600.0), (0.4, 2_200.0)]).unwrap();
        assert!((gap - 3_000.0).abs() < 1e-6 && (slope - 1.0).abs() < 1e-9, "{gap} {slope}");
        // Boulware, β = 2: 3000·τ² above the opening.
        let (gap, slope) = fitted_tactic(1_000.0, &[(0.2, 1_120.0), (0.5, 1_750.0)]).unwrap();
        assert!((gap - 3_000.0).abs() < 1e-6 && (slope - 2.0).abs() < 1e-9, "{gap} {slope}");
        // One step is read as a steady pace: 300 at τ = 0.25 gives 1200 at the deadline.
        let (gap, slope) = fitted_tactic(1_000.0, &[(0.0, 1_000.0), (0.25, 1_300.0)]).unwrap();
        assert!((gap - 1_200.0).abs() < 1e-6 && slope == 1.0, "{gap} {slope}");
        // A buyer who has not moved above its opening says nothing.
        assert_eq!(fitted_tactic(1_000.0, &[(0.0, 1_000.0), (0.5, 1_000.0), (0.7, 900.0)]), None);
    }

    #[test]
    fn it_stays_near_the_ask_against_a_buyer_who_does_not_move() {
        // Ask 10000, floor 4000, 10 rounds; the buyer sits at its opening 1000.
        let mut s = state(10_000, &[1_000]);
        s.max_rounds = 10;
        // Round 2: 0.4 % of the ask (40) below it.
        assert_eq!(counter_of(decide(&policy(4_000), &s)), 9_960);
        // Round 8: 40 below its previous counter, not down its hold (8329 at t = 0.8).
        let mut late = state(10_000, &[1_000, 9_960, 1_000, 9_920, 1_000, 9_880, 1_000]);
        late.max_rounds = 10;
        assert_eq!(counter_of(decide(&policy(4_000), &late)), 9_840);
        // Round 10, the seller's final counter: still near the ask, take-it-or-leave-it.
        let mut last = state(10_000, &[1_000, 9_960, 1_000, 9_920, 1_000, 9_880, 1_000, 9_840, 1_000]);
        last.max_rounds = 10;
        assert_eq!(decide(&policy(4_000), &last), Decision::Counter { amount: 9_800, is_final: true });
        // A buyer creeping up, 1000 to 1400 by round 9, has a curve (ending at 1450, below the
        // closing price max(4000 + 0.15·6000, 1000 + 0.3·9000) = 4900): the final counter is
        // the closing price, as the hold ends there.
        let mut creeping = last.clone();
        creeping.bids = vec![1_000, 9_960, 1_100, 9_920, 1_200, 9_880, 1_300, 9_840, 1_400];
        assert_eq!(decide(&policy(4_000), &creeping), Decision::Counter { amount: 4_900, is_final: true });
        // A buyer who jumps to the closing price is followed, and its bid there is taken rather
        // than risked on the final counter.
        last.bids[8] = 4_900;
        assert!(matches!(decide(&policy(4_000), &last), Decision::Accept { .. }));
    }

    #[test]
    fn a_conceding_buyer_is_met_at_its_fitted_ceiling_late_not_early() {
        // Ask 10000, floor 4000, 20 rounds. A linear buyer: 2000 at τ = 0, +1000 every 2/19.
        let bids = |n: usize, seller: i64| -> Vec<i64> {
            (0..n).map(|i| if i % 2 == 0 { 2_000 + 1_000 * (i as i64 / 2) } else { seller - i as i64 }).collect()
        };
        // Its curve reaches 2000 + 9500 = 11500 at the deadline, above the ask: the seller holds
        // its Boulware price (t = 4/20: all but the ask).
        let early = state(10_000, &bids(3, 10_000));
        assert!(counter_of(decide(&policy(4_000), &early)) >= 9_990);
        // A slower buyer, +200 a bid: ceiling 2000 + 200·9.5 = 3900, below the closing price
        // (4900): it is not followed below the hold.
        let slow: Vec<i64> = (0..5).map(|i| if i % 2 == 0 { 2_000 + 100 * i } else { 9_999 - i }).collect();
        assert!(counter_of(decide(&policy(4_000), &state(10_000, &slow))) >= 9_900);
        // A buyer bound for 7000 (+500 every 2/19: 2000 + 500·9.5 = 6750): at round 18, two rounds
        // from the end, the seller is within 1 % of (hold − ceiling) of the ceiling.
        let mut s =
            state(10_000, &(0..17).map(|i| if i % 2 == 0 { 2_000 + 250 * i } else { 9_999 - i }).collect::<Vec<_>>());
        s.max_rounds = 20;
        let price = counter_of(decide(&policy(4_000), &s));
        assert!((6_750..=6_850).contains(&price), "{price}");
    }

    #[test]
    fn before_the_buyers_final_bid_it_asks_where_the_buyers_curve_ends() {
        // 5 rounds: the seller's last counter is round 4; the buyer's final bid follows.
        // The buyer opened at 2000 and bid 4000 at τ = 0.5: a steady pace toward 6000, above the
        // closing price max(3000 + 0.15·7000, 2000 + 0.3·8000) = 4400. The hold, t = 4/5:
        // 4400 + 5600·(1 − 0.8⁵) = 8164.99 → 8165, more than the curve's end: it stays there.
        let mut s = state(10_000, &[2_000, 9_999, 4_000]);
        s.max_rounds = 5;
        assert_eq!(decide(&policy(3_000), &s), Decision::Counter { amount: 8_165, is_final: false });
        // Over 7 rounds, a buyer bound for 8000 (+2000 every third of its clock: 2000, 4000,
        // 6000), at round 6, t = 6/7: the hold, 4400 + 5600·(1 − (6/7)⁵) = 7409.1, is below the
        // curve's end, which is asked.
        let mut far = state(10_000, &[2_000, 9_999, 4_000, 9_998, 6_000]);
        far.max_rounds = 7;
        assert_eq!(decide(&policy(3_000), &far), Decision::Counter { amount: 8_000, is_final: false });
        // The buyer's final bid is taken within the floor, refused below it.
        let mut fin = state(10_000, &[2_000, 9_999, 4_000, 6_000, 3_500]);
        fin.max_rounds = 5;
        fin.pending_final = true;
        assert!(matches!(decide(&policy(3_000), &fin), Decision::Accept { .. }));
        assert!(matches!(decide(&policy(3_600), &fin), Decision::Reject { .. }));
    }

    #[test]
    fn it_is_a_sellers_strategy_and_never_stands_still() {
        let buyer = Policy::new(9_000, Strategy::Closer {});
        assert!(buyer.validate(Party::Buyer, None, Default::default()).is_err());
        assert!(policy(4_000).validate(Party::Seller, Some(10_000), Default::default()).is_ok());
        let mut s = state(10_000, &[1_000, 9_999, 1_000]);
        s.mover = Party::Buyer;
        assert_eq!(
            Strategy::Closer {}.propose(&s, Turn { pending: 1, own_previous: 1, round: 4 }, 9_000),
            Proposal::Stop(Rationale::WrongSide)
        );
        // Every counter is below the previous one, if only by a unit.
        let mut previous = 10_000;
        let mut bids = vec![1_000];
        for _ in 0..9 {
            let price = counter_of(decide(&policy(4_000), &state(10_000, &bids)));
            assert!(price < previous && price >= 4_000, "{price} after {previous}");
            previous = price;
            bids.extend([price, 1_000]);
        }
    }
}
