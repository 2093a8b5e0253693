//! The price ladder `haggle negotiate` prints: one line per round, the buyer's and the seller's
//! latest positions drawn on one scale, so the gap is seen closing.
//!
//! ```text
//! round 1  buyer         20.00 USD  ●━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━○
//! round 2  seller        32.49 USD  ─●━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━○──────
//! round 3  buyer         22.00 USD  ─────────●━━━━━━━━━━━━━━━━━━━━━━━━○──────
//! ```
//!
//! The scale runs from the buyer's opening bid to the ask, which bound every amount of a thread
//! (counters lie between the two latest positions). `●` is the buyer, `○` the seller; the thick
//! stretch between them is what is still to be agreed.

use std::ops::RangeInclusive;

use haggle_client::Bid;
use haggle_domain::Party;
use haggle_domain::money::Price;

/// Cells in the bar.
pub const WIDTH: usize = 40;

/// What the bar is drawn with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Glyphs {
    pub outside: char,
    pub gap: char,
    pub buyer: char,
    pub seller: char,
    pub meet: char,
}

impl Glyphs {
    pub const UNICODE: Glyphs = Glyphs { outside: '─', gap: '━', buyer: '●', seller: '○', meet: '◆' };
    pub const ASCII: Glyphs = Glyphs { outside: '-', gap: '=', buyer: 'B', seller: 'S', meet: '*' };
}

/// Where the two sides stand after a move (minor units): the buyer's latest offer, unknown
/// before its first, and the seller's latest price, the ask before it counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Positions {
    pub buyer: Option<i64>,
    pub seller: Option<i64>,
}

impl Positions {
    /// Each side's latest amount among `bids`, the seller standing at `ask` until it counters.
    pub fn after(bids: &[Bid], ask: i64) -> Positions {
        let latest = |party| bids.iter().rev().find(|bid| bid.author == party).map(|bid| bid.amount);
        Positions { buyer: latest(Party::Buyer), seller: Some(latest(Party::Seller).unwrap_or(ask)) }
    }
}

/// A scale over a range of amounts (minor units), drawn with `glyphs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ladder {
    low: i64,
    high: i64,
    glyphs: Glyphs,
}

impl Ladder {
    /// The scale over `range`: from the opening bid to the ask, which may come the wrong way
    /// round when the seller lowered the ask below the opening bid since.
    pub fn new(range: RangeInclusive<i64>, glyphs: Glyphs) -> Ladder {
        let (a, b) = range.into_inner();
        Ladder { low: a.min(b), high: a.max(b), glyphs }
    }

    /// The cell of `amount` on the bar, clamped to it.
    fn cell(&self, amount: i64) -> usize {
        let span = i128::from(self.high - self.low);
        if span == 0 {
            return 0;
        }
        let offset = i128::from(amount.clamp(self.low, self.high) - self.low);
        // Rounded to the nearest cell.
        ((offset * (WIDTH as i128 - 1) * 2 + span) / (span * 2)) as usize
    }

    /// The bar with each side where it stands.
    pub fn bar(&self, positions: Positions) -> String {
        let g = self.glyphs;
        let mut cells = vec![g.outside; WIDTH];
        let b = positions.buyer.map(|amount| self.cell(amount));
        let s = positions.seller.map(|amount| self.cell(amount));
        if let (Some(b), Some(s)) = (b, s) {
            for cell in cells.iter_mut().take(s.max(b)).skip(b.min(s)) {
                *cell = g.gap;
            }
        }
        if let Some(s) = s {
            cells[s] = g.seller;
        }
        if let Some(b) = b {
            cells[b] = if s == Some(b) { g.meet } else { g.buyer };
        }
        cells.into_iter().collect()
    }

    /// One bid's line: its round, who made it, its amount, and the bar after it.
    pub fn line(&self, bid: &Bid, after: Positions) -> String {
        let amount = Price::new(bid.amount, bid.currency);
        format!("round {:<2} {:<6} {amount:>16}  {}", bid.round, bid.author.as_str(), self.bar(after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(buyer: i64, seller: i64) -> Positions {
        Positions { buyer: Some(buyer), seller: Some(seller) }
    }

    #[test]
    fn the_bar_shows_both_positions_on_one_scale() {
        let ladder = Ladder::new(1000..=2000, Glyphs::ASCII);
        let bar = ladder.bar(at(1000, 2000));
        assert_eq!(bar.len(), WIDTH);
        assert!(bar.starts_with('B') && bar.ends_with('S'), "{bar}");
        assert_eq!(bar.matches('=').count(), WIDTH - 2);

        let bar = ladder.bar(at(1500, 1500));
        assert_eq!(bar.matches('*').count(), 1);
        assert!(!bar.contains('B') && !bar.contains('S'));

        let bar = ladder.bar(Positions { buyer: Some(1250), seller: None });
        assert_eq!(bar.find('B'), Some(10));
        assert!(!bar.contains('='));

        // Amounts off the scale are pinned to its ends; an empty scale does not divide by zero.
        assert_eq!(ladder.bar(at(10, 9999)), ladder.bar(at(1000, 2000)));
        assert_eq!(Ladder::new(5..=5, Glyphs::ASCII).bar(at(5, 5)).find('*'), Some(0));
    }

    #[test]
    fn a_line_names_the_round_the_mover_and_the_amount_with_its_currency() {
        let bid: Bid = serde_json::from_value(serde_json::json!({
            "id": uuid::Uuid::nil(), "thread_id": uuid::Uuid::nil(), "author": "seller",
            "author_id": uuid::Uuid::nil(), "amount": 3249, "currency": "USD", "message": null, "terms": null,
            "final": false, "status": "PENDING", "reason": null, "parent_bid_id": null, "round": 2,
            "expires_at": "2026-01-01T00:00:00Z", "responded_at": null,
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"
        }))
        .unwrap();
        let ladder = Ladder::new(2000..=3800, Glyphs::UNICODE);
        let line = ladder.line(&bid, Positions { buyer: Some(2000), seller: Some(3249) });
        assert!(line.starts_with("round 2  seller"), "{line}");
        assert!(line.contains(" 32.49 USD  "), "{line}");
        assert!(line.contains('●') && line.contains('○'), "{line}");
        let bids = [bid];
        assert_eq!(Positions::after(&bids, 3800), Positions { buyer: None, seller: Some(3249) });
        assert_eq!(Positions::after(&bids[..0], 3800), Positions { buyer: None, seller: Some(3800) });
    }
}
