//! Amounts as the terminal prints them.

use std::fmt;

use haggle_domain::money::Currency;

/// An amount of minor units in a currency, printed in major units with thousands separators and
/// the currency's code: 125000 USD is `1,250.00 USD`. The terminal prints no amount otherwise,
/// so that a figure is never read in the wrong unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Money {
    pub minor: i64,
    pub currency: Currency,
}

impl Money {
    pub fn new(minor: i64, currency: Currency) -> Money {
        Money { minor, currency }
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = format!("{} {}", major_units(self.minor), self.currency);
        // Padded as a whole, so that `{:>16}` aligns amounts in a column.
        f.pad(&text)
    }
}

/// Minor units as major units with thousands separators: 125000 is `1,250.00`.
fn major_units(minor: i64) -> String {
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
    fn money_is_major_units_grouped_by_thousands_with_its_currency() {
        assert_eq!(major_units(0), "0.00");
        assert_eq!(major_units(2010), "20.10");
        assert_eq!(major_units(125_000), "1,250.00");
        assert_eq!(major_units(13_800_000), "138,000.00");
        assert_eq!(major_units(100_000_000_000), "1,000,000,000.00");
        assert_eq!(major_units(-5), "-0.05");
        let eur = Currency::parse("EUR").unwrap();
        assert_eq!(Money::new(35_000, eur).to_string(), "350.00 EUR");
        assert_eq!(format!("{:>12}", Money::new(2_000, Currency::USD)), "   20.00 USD");
    }
}
