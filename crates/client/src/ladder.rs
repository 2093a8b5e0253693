//! The price ladder `haggle negotiate` prints: one line per round, the buyer's and the seller's
//! latest positions drawn on one scale, so the gap is seen closing.
//!
//! ```text
//! round 1  buyer        20.00  ●━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━○
//! round 2  seller       32.49  ─●━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━○──────
//! round 3  buyer        22.00  ─────────●━━━━━━━━━━━━━━━━━━━━━━━━○──────
//! ```
//!
//! The scale runs from the buyer's opening bid to the ask, which bound every amount of a thread
//! (counters lie between the two latest positions). `●` is the buyer, `○` the seller; the thick
//! stretch between them is what is still to be agreed.

use haggle_domain::Party;

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

/// A scale from `low` to `high` (minor units), drawn with `glyphs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ladder {
    pub low: i64,
    pub high: i64,
    pub glyphs: Glyphs,
}

impl Ladder {
    pub fn new(low: i64, high: i64, glyphs: Glyphs) -> Ladder {
        Ladder { low: low.min(high), high: high.max(low), glyphs }
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

    /// The bar with the buyer at `buyer` and the seller at `seller` (either unknown yet).
    pub fn bar(&self, buyer: Option<i64>, seller: Option<i64>) -> String {
        let g = self.glyphs;
        let mut cells = vec![g.outside; WIDTH];
        let b = buyer.map(|amount| self.cell(amount));
        let s = seller.map(|amount| self.cell(amount));
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

    /// One round's line: its number, who moved, the amount, and the bar after the move.
    pub fn line(&self, round: i32, author: Party, amount: i64, buyer: Option<i64>, seller: Option<i64>) -> String {
        format!("round {round:<2} {:<6} {:>12}  {}", author.as_str(), money(amount), self.bar(buyer, seller))
    }
}

/// An amount in minor units as currency units with thousands separators: 125000 is `1,250.00`.
pub fn money(minor: i64) -> String {
    let units = minor.unsigned_abs() / 100;
    let cents = minor.unsigned_abs() % 100;
    let digits = units.to_string();
    let mut grouped = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    let sign = if minor < 0 { "-" } else { "" };
    format!("{sign}{grouped}.{cents:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_groups_thousands() {
        assert_eq!(money(0), "0.00");
        assert_eq!(money(2010), "20.10");
        assert_eq!(money(125_000), "1,250.00");
        assert_eq!(money(13_800_000), "138,000.00");
        assert_eq!(money(100_000_000_000), "1,000,000,000.00");
        assert_eq!(money(-5), "-0.05");
    }

    #[test]
    fn the_bar_shows_both_positions_on_one_scale() {
        let ladder = Ladder::new(1000, 2000, Glyphs::ASCII);
        let bar = ladder.bar(Some(1000), Some(2000));
        assert_eq!(bar.len(), WIDTH);
        assert!(bar.starts_with('B') && bar.ends_with('S'), "{bar}");
        assert_eq!(bar.matches('=').count(), WIDTH - 2);

        let bar = ladder.bar(Some(1500), Some(1500));
        assert_eq!(bar.matches('*').count(), 1);
        assert!(!bar.contains('B') && !bar.contains('S'));

        let bar = ladder.bar(Some(1250), None);
        assert_eq!(bar.find('B'), Some(10));
        assert!(!bar.contains('='));

        // Amounts off the scale are pinned to its ends; an empty scale does not divide by zero.
        assert_eq!(ladder.bar(Some(10), Some(9999)), ladder.bar(Some(1000), Some(2000)));
        assert_eq!(Ladder::new(5, 5, Glyphs::ASCII).bar(Some(5), Some(5)).find('*'), Some(0));
    }

    #[test]
    fn a_line_names_the_round_the_mover_and_the_amount() {
        let ladder = Ladder::new(2000, 3800, Glyphs::UNICODE);
        let line = ladder.line(2, Party::Seller, 3249, Some(2000), Some(3249));
        assert!(line.starts_with("round 2  seller"), "{line}");
        assert!(line.contains("32.49"), "{line}");
        assert!(line.contains('●') && line.contains('○'), "{line}");
    }
}
