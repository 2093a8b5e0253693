//! Money is an integer count of minor units with its currency; never a float inside the server.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// The smallest amount anyone may offer: one unit of the currency.
pub const MIN_AMOUNT: i64 = 100;
/// The default ceiling on any amount (10^11 minor units), configurable by the operator.
pub const DEFAULT_MAX_AMOUNT: i64 = 100_000_000_000;

/// Inclusive bounds on amounts, as configured for this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmountLimits {
    pub max: i64,
}

impl Default for AmountLimits {
    fn default() -> Self {
        AmountLimits { max: DEFAULT_MAX_AMOUNT }
    }
}

/// A validated amount in minor units (`131000` is 1,310.00 of the currency).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Amount(i64);

impl Amount {
    pub fn new(minor_units: i64, limits: AmountLimits) -> Result<Amount, String> {
        if (MIN_AMOUNT..=limits.max).contains(&minor_units) {
            Ok(Amount(minor_units))
        } else {
            Err(range_message(limits))
        }
    }

    pub fn minor_units(self) -> i64 {
        self.0
    }
}

fn range_message(limits: AmountLimits) -> String {
    format!("must be an integer number of minor units between {MIN_AMOUNT} and {}", limits.max)
}

/// A JSON number as it arrived, before it is known to be a valid amount.
///
/// Deserializing accepts any JSON number, so that an amount too large for 64 bits or with a
/// fraction is reported as a validation failure on its field rather than as unreadable JSON.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RawAmount {
    Integer(i128),
    Float(f64),
}

impl From<i64> for RawAmount {
    fn from(minor_units: i64) -> RawAmount {
        RawAmount::Integer(minor_units.into())
    }
}

impl Serialize for RawAmount {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match *self {
            RawAmount::Integer(n) => match i64::try_from(n) {
                Ok(n) => serializer.serialize_i64(n),
                Err(_) => serializer.serialize_i128(n),
            },
            RawAmount::Float(x) => serializer.serialize_f64(x),
        }
    }
}

/// An amount is an integer of minor units in JSON Schema's sense (`2.0` is one too); the range
/// and the fraction are checked with the rest of the request, so that they are named as its fields.
#[cfg(feature = "schemars")]
impl schemars::JsonSchema for RawAmount {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Amount".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "integer",
            "minimum": MIN_AMOUNT,
            "description": "An amount in minor units of the currency, a whole number: 120000 is 1,200.00.",
        })
    }
}

impl RawAmount {
    pub fn validate(self, limits: AmountLimits) -> Result<Amount, String> {
        match self {
            RawAmount::Integer(n) => {
                i64::try_from(n).map_err(|_| range_message(limits)).and_then(|n| Amount::new(n, limits))
            }
            RawAmount::Float(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Amount::new(x as i64, limits),
            RawAmount::Float(x) if x.fract() != 0.0 && x.is_finite() => {
                Err("must be an integer number of minor units (100 is one unit of the currency), not a fraction".into())
            }
            RawAmount::Float(_) => Err(range_message(limits)),
        }
    }
}

impl<'de> Deserialize<'de> for RawAmount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RawAmountVisitor;

        impl Visitor<'_> for RawAmountVisitor {
            type Value = RawAmount;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer number of minor units")
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawAmount, E> {
                Ok(RawAmount::Integer(v.into()))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawAmount, E> {
                Ok(RawAmount::Integer(v.into()))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawAmount, E> {
                Ok(RawAmount::Float(v))
            }
        }

        deserializer.deserialize_any(RawAmountVisitor)
    }
}

/// Minor units in one unit of any currency: Haggle counts every currency in hundredths.
pub const MINOR_PER_UNIT: i64 = 100;
/// Micros (millionths of a unit, as `Money {amount_micros}` counts them) in one minor unit.
pub const MICROS_PER_MINOR: i64 = 10_000;

/// The amount of a price in currency units, as IAB-style clients send it (`20.1` is 2010 minor
/// units).
///
/// A JSON float is converted through its shortest round-trip decimal form, with decimal
/// arithmetic, so the price is the one the client meant: `20.1` is 2010 although the nearest
/// double is a little below 20.1, and `0.1 + 0.2` (0.30000000000000004) is refused rather than
/// rounded. A number written with more digits than a double holds (`20.0000000000000001`) is
/// read as the double it parses to (here 20.0), as every JSON parser that uses doubles does.
pub fn amount_from_price(price: RawAmount, limits: AmountLimits) -> Result<Amount, String> {
    let hundredths = match price {
        RawAmount::Integer(units) => units.checked_mul(i128::from(MINOR_PER_UNIT)).ok_or(PriceError::OutOfRange),
        RawAmount::Float(units) if units.is_finite() => hundredths_of_decimal(&format!("{units}")),
        RawAmount::Float(_) => Err(PriceError::OutOfRange),
    };
    let message = match hundredths {
        Ok(minor) => match i64::try_from(minor).map(|minor| Amount::new(minor, limits)) {
            Ok(Ok(amount)) => return Ok(amount),
            Ok(Err(_)) | Err(_) => PriceError::OutOfRange,
        },
        Err(error) => error,
    };
    Err(match message {
        PriceError::TooPrecise => {
            "must have at most 2 decimal places (a hundredth is the smallest unit of any currency here)".to_owned()
        }
        PriceError::OutOfRange | PriceError::Malformed => format!(
            "must be a price in currency units between {} and {}",
            price_text(MIN_AMOUNT),
            price_text(limits.max)
        ),
    })
}

/// The amount of `Money.amount_micros` (a millionth of a unit): 20_000_000 micros is 2000 minor
/// units.
pub fn amount_from_micros(micros: RawAmount, limits: AmountLimits) -> Result<Amount, String> {
    let out_of_range = || {
        format!(
            "must be between {} and {} micros",
            i128::from(MIN_AMOUNT) * i128::from(MICROS_PER_MINOR),
            i128::from(limits.max) * i128::from(MICROS_PER_MINOR)
        )
    };
    let micros = match micros {
        RawAmount::Integer(micros) => micros,
        RawAmount::Float(micros) if micros.fract() == 0.0 && micros.abs() < 9.0e18 => micros as i128,
        RawAmount::Float(micros) if micros.is_finite() && micros.fract() != 0.0 => {
            return Err("must be an integer number of micros (millionths of a unit)".into());
        }
        RawAmount::Float(_) => return Err(out_of_range()),
    };
    if micros % i128::from(MICROS_PER_MINOR) != 0 {
        return Err(format!(
            "must be a multiple of {MICROS_PER_MINOR} micros: a hundredth of a unit is the smallest amount here"
        ));
    }
    i64::try_from(micros / i128::from(MICROS_PER_MINOR))
        .ok()
        .and_then(|minor| Amount::new(minor, limits).ok())
        .ok_or_else(out_of_range)
}

/// A price in currency units for IAB-style clients: the double nearest to `minor` / 100, which
/// prints as the exact decimal (2010 is `20.1`). Exact for every amount below 2^53.
pub fn price_from_minor_units(minor: i64) -> f64 {
    // One correctly rounded division of two exactly represented numbers.
    minor as f64 / MINOR_PER_UNIT as f64
}

/// `Money.amount_micros` for an amount in minor units.
pub fn micros_from_minor_units(minor: i64) -> i64 {
    minor.saturating_mul(MICROS_PER_MINOR)
}

/// An amount in minor units as a decimal in currency units: 2010 is `20.10`.
pub fn price_text(minor: i64) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let minor = minor.unsigned_abs();
    let per_unit = MINOR_PER_UNIT.unsigned_abs();
    format!("{sign}{}.{:02}", minor / per_unit, minor % per_unit)
}

/// An amount as a person reads it: currency units with thousands separators and the
/// currency's code, `1,250.00 USD` for 125000 minor units of USD. Width and alignment apply to
/// the whole (`{:>16}`). For people only: the wire gives minor units, or [`price_text`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    pub minor: i64,
    pub currency: Currency,
}

impl Price {
    pub fn new(minor: i64, currency: Currency) -> Price {
        Price { minor, currency }
    }
}

impl fmt::Display for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per_unit = MINOR_PER_UNIT.unsigned_abs();
        let digits = (self.minor.unsigned_abs() / per_unit).to_string();
        let mut grouped = String::new();
        for (i, digit) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                grouped.push(',');
            }
            grouped.push(digit);
        }
        let sign = if self.minor < 0 { "-" } else { "" };
        let cents = self.minor.unsigned_abs() % per_unit;
        f.pad(&format!("{sign}{grouped}.{cents:02} {}", self.currency))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PriceError {
    /// Not a decimal number.
    Malformed,
    /// Finer than a hundredth.
    TooPrecise,
    /// Negative, or too large for any amount.
    OutOfRange,
}

/// The hundredths in a decimal number written as `[-+]digits[.digits][e[-+]digits]`, exactly.
fn hundredths_of_decimal(text: &str) -> Result<i128, PriceError> {
    // Far beyond any amount; keeps the arithmetic inside i128.
    const MAX_DIGITS: usize = 30;
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => {
            let exponent = &unsigned[at + 1..];
            let digits = exponent.strip_prefix(['-', '+']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(PriceError::Malformed);
            }
            // An exponent this large is beyond range (or precision) whatever the mantissa.
            let exponent: i64 = exponent.parse().unwrap_or(if exponent.starts_with('-') { -1_000 } else { 1_000 });
            (&unsigned[..at], exponent.clamp(-1_000, 1_000))
        }
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if (whole.is_empty() && fraction.is_empty()) || !whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(PriceError::Malformed);
    }
    // The number is digits × 10^(exponent − fraction length); its hundredths are digits × 10^shift.
    let digits: String = whole.chars().chain(fraction.chars()).collect();
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    let shift = exponent + 2 - fraction.len() as i64;
    let digits = if shift < 0 {
        let dropped = shift.unsigned_abs() as usize;
        let kept = digits.len().checked_sub(dropped).filter(|_| digits.ends_with(&"0".repeat(dropped)));
        match kept {
            Some(kept) => &digits[..kept],
            None => return Err(PriceError::TooPrecise),
        }
    } else {
        digits
    };
    let padding = shift.max(0) as usize;
    if digits.len() + padding > MAX_DIGITS {
        return Err(PriceError::OutOfRange);
    }
    let value: i128 = format!("{digits}{}", "0".repeat(padding)).parse().map_err(|_| PriceError::Malformed)?;
    if negative && value != 0 { Err(PriceError::OutOfRange) } else { Ok(value) }
}

/// An ISO 4217 currency code in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Currency([u8; 3]);

impl Currency {
    pub const USD: Currency = Currency(*b"USD");

    pub fn parse(code: &str) -> Result<Currency, String> {
        let upper = code.to_ascii_uppercase();
        if upper.len() == 3 && ISO_4217.contains(&upper.as_str()) {
            let bytes = upper.as_bytes();
            Ok(Currency([bytes[0], bytes[1], bytes[2]]))
        } else {
            Err(format!("`{code}` is not an ISO 4217 currency code"))
        }
    }

    pub fn as_str(&self) -> &str {
        // The bytes come from ISO_4217, which is ASCII.
        std::str::from_utf8(&self.0).unwrap_or("XXX")
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Currency {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Currency::parse(s)
    }
}

impl Serialize for Currency {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Currency {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = String::deserialize(deserializer)?;
        Currency::parse(&code).map_err(de::Error::custom)
    }
}

/// Active ISO 4217 codes.
const ISO_4217: &[&str] = &[
    "AED", "AFN", "ALL", "AMD", "ANG", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT", "BGN", "BHD", "BIF",
    "BMD", "BND", "BOB", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD", "CDF", "CHF", "CLP", "CNY", "COP", "CRC",
    "CUP", "CVE", "CZK", "DJF", "DKK", "DOP", "DZD", "EGP", "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GHS",
    "GIP", "GMD", "GNF", "GTQ", "GYD", "HKD", "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IQD", "IRR", "ISK", "JMD",
    "JOD", "JPY", "KES", "KGS", "KHR", "KMF", "KPW", "KRW", "KWD", "KYD", "KZT", "LAK", "LBP", "LKR", "LRD", "LSL",
    "LYD", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP", "MRU", "MUR", "MVR", "MWK", "MXN", "MYR", "MZN", "NAD",
    "NGN", "NIO", "NOK", "NPR", "NZD", "OMR", "PAB", "PEN", "PGK", "PHP", "PKR", "PLN", "PYG", "QAR", "RON", "RSD",
    "RUB", "RWF", "SAR", "SBD", "SCR", "SDG", "SEK", "SGD", "SHP", "SLE", "SOS", "SRD", "SSP", "STN", "SVC", "SYP",
    "SZL", "THB", "TJS", "TMT", "TND", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH", "UGX", "USD", "UYU", "UZS", "VES",
    "VND", "VUV", "WST", "XAF", "XCD", "XCG", "XOF", "XPF", "YER", "ZAR", "ZMW", "ZWG",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_price_reads_in_currency_units_grouped_by_thousands_with_its_currency() {
        let usd = |minor| Price::new(minor, Currency::USD).to_string();
        assert_eq!(usd(0), "0.00 USD");
        assert_eq!(usd(2010), "20.10 USD");
        assert_eq!(usd(125_000), "1,250.00 USD");
        assert_eq!(usd(13_800_000), "138,000.00 USD");
        assert_eq!(usd(100_000_000_000), "1,000,000,000.00 USD");
        assert_eq!(usd(-5), "-0.05 USD");
        assert_eq!(usd(-123_456), "-1,234.56 USD");
        assert_eq!(Price::new(35_000, Currency::parse("EUR").unwrap()).to_string(), "350.00 EUR");
        assert_eq!(format!("{:>12}", Price::new(2_000, Currency::USD)), "   20.00 USD");
    }

    fn raw(json: &str) -> RawAmount {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn amounts_are_validated_against_the_limits() {
        let limits = AmountLimits::default();
        let cases: &[(&str, Result<i64, ()>)] = &[
            ("100", Ok(100)),
            ("131000", Ok(131000)),
            ("100000000000", Ok(100_000_000_000)),
            ("100000000001", Err(())),
            ("99", Err(())),
            ("0", Err(())),
            ("-100", Err(())),
            ("18446744073709551615", Err(())),
            ("1e30", Err(())),
            ("100.0", Ok(100)),
            ("100.5", Err(())),
            ("-1e300", Err(())),
        ];
        for (json, expected) in cases {
            let got = raw(json).validate(limits).map(Amount::minor_units).map_err(|_| ());
            assert_eq!(&got, expected, "amount {json}");
        }
    }

    #[test]
    fn a_lower_ceiling_is_honoured() {
        let limits = AmountLimits { max: 10_000 };
        assert!(Amount::new(10_000, limits).is_ok());
        assert!(Amount::new(10_001, limits).is_err());
    }

    #[test]
    fn non_numbers_are_type_errors() {
        assert!(serde_json::from_str::<RawAmount>("\"100\"").is_err());
        assert!(serde_json::from_str::<RawAmount>("null").is_err());
    }

    #[test]
    fn decimals_convert_to_hundredths_exactly() {
        let cases: &[(&str, Result<i128, PriceError>)] = &[
            ("20", Ok(2000)),
            ("20.0", Ok(2000)),
            ("20.1", Ok(2010)),
            ("20.10", Ok(2010)),
            ("19.99", Ok(1999)),
            ("0.01", Ok(1)),
            (".5", Ok(50)),
            ("5.", Ok(500)),
            ("0", Ok(0)),
            ("-0", Ok(0)),
            ("-0.0", Ok(0)),
            ("1e2", Ok(10000)),
            ("1E+2", Ok(10000)),
            ("2.5e1", Ok(2500)),
            ("1e-2", Ok(1)),
            ("1234.5e-1", Ok(12345)),
            ("1234.5e-2", Err(PriceError::TooPrecise)),
            ("1e-3", Err(PriceError::TooPrecise)),
            ("0.001", Err(PriceError::TooPrecise)),
            ("20.005", Err(PriceError::TooPrecise)),
            ("0.30000000000000004", Err(PriceError::TooPrecise)),
            ("1500e-3", Ok(150)),
            ("1e27", Ok(100_000_000_000_000_000_000_000_000_000)),
            ("1e28", Err(PriceError::OutOfRange)),
            ("1e999999999999", Err(PriceError::OutOfRange)),
            ("1e-999999999999", Err(PriceError::TooPrecise)),
            ("0e999999999999", Ok(0)),
            ("-1", Err(PriceError::OutOfRange)),
            ("-20.5", Err(PriceError::OutOfRange)),
            ("", Err(PriceError::Malformed)),
            (".", Err(PriceError::Malformed)),
            ("1e", Err(PriceError::Malformed)),
            ("1.2.3", Err(PriceError::Malformed)),
            ("NaN", Err(PriceError::Malformed)),
            ("inf", Err(PriceError::Malformed)),
            ("0x10", Err(PriceError::Malformed)),
        ];
        for (text, expected) in cases {
            assert_eq!(&hundredths_of_decimal(text), expected, "{text:?}");
        }
    }

    #[test]
    fn prices_in_units_convert_to_minor_units_exactly() {
        let limits = AmountLimits::default();
        let cases: &[(&str, Result<i64, &str>)] = &[
            ("20.0", Ok(2000)),
            ("20", Ok(2000)),
            ("20.1", Ok(2010)),
            ("0.29e2", Ok(2900)),
            ("1e2", Ok(10000)),
            ("35.99", Ok(3599)),
            ("1", Ok(100)),
            ("1000000000", Ok(100_000_000_000)),
            ("1000000000.01", Err("between")),
            ("0.99", Err("between")),
            ("0", Err("between")),
            ("-20", Err("between")),
            ("-20.5", Err("between")),
            ("20.001", Err("2 decimal places")),
            ("0.30000000000000004", Err("2 decimal places")),
            ("1e300", Err("between")),
            ("-1e300", Err("between")),
            ("18446744073709551616", Err("between")),
            ("5e-324", Err("2 decimal places")),
        ];
        for (json, expected) in cases {
            let got = amount_from_price(raw(json), limits).map(Amount::minor_units);
            match expected {
                Ok(minor) => assert_eq!(got, Ok(*minor), "price {json}"),
                Err(part) => assert!(got.as_ref().is_err_and(|m| m.contains(part)), "price {json}: {got:?}"),
            }
        }
        assert!(amount_from_price(RawAmount::Float(f64::NAN), limits).is_err());
        assert!(amount_from_price(RawAmount::Float(f64::INFINITY), limits).is_err());
        assert!(amount_from_price(RawAmount::Float(0.1 + 0.2), limits).is_err());
    }

    #[test]
    fn every_price_sent_back_reads_as_the_same_minor_units() {
        let limits = AmountLimits::default();
        let samples = (100..200_000).chain((0..2_000).map(|i| DEFAULT_MAX_AMOUNT - i)).chain([12_345_678_901]);
        for minor in samples {
            let price = price_from_minor_units(minor);
            let json = serde_json::to_string(&price).unwrap();
            assert_eq!(json.parse::<f64>().unwrap(), price_text(minor).parse::<f64>().unwrap(), "{minor}");
            assert_eq!(
                amount_from_price(raw(&json), limits).map(Amount::minor_units),
                Ok(minor),
                "{minor} went out as {json}"
            );
        }
        assert_eq!(serde_json::to_string(&price_from_minor_units(2010)).unwrap(), "20.1");
        assert_eq!(serde_json::to_string(&price_from_minor_units(2000)).unwrap(), "20.0");
        assert_eq!(serde_json::to_string(&price_from_minor_units(1)).unwrap(), "0.01");
    }

    #[test]
    fn micros_convert_to_minor_units_exactly() {
        let limits = AmountLimits::default();
        let cases: &[(&str, Result<i64, &str>)] = &[
            ("20000000", Ok(2000)),
            ("20100000", Ok(2010)),
            ("1000000", Ok(100)),
            ("20000000.0", Ok(2000)),
            ("2e7", Ok(2000)),
            ("20000001", Err("multiple of 10000")),
            ("20005000", Err("multiple of 10000")),
            ("20000000.5", Err("integer number of micros")),
            ("990000", Err("between")),
            ("0", Err("between")),
            ("-20000000", Err("between")),
            ("1000000000000000", Ok(100_000_000_000)),
            ("1000000000010000", Err("between")),
            ("18446744073709551615000", Err("between")),
            ("1e300", Err("between")),
        ];
        for (json, expected) in cases {
            let got = amount_from_micros(raw(json), limits).map(Amount::minor_units);
            match expected {
                Ok(minor) => assert_eq!(got, Ok(*minor), "micros {json}"),
                Err(part) => assert!(got.as_ref().is_err_and(|m| m.contains(part)), "micros {json}: {got:?}"),
            }
        }
        assert_eq!(micros_from_minor_units(2010), 20_100_000);
        assert_eq!(micros_from_minor_units(i64::MAX), i64::MAX);
    }

    #[test]
    fn prices_read_as_decimals() {
        assert_eq!(price_text(2010), "20.10");
        assert_eq!(price_text(5), "0.05");
        assert_eq!(price_text(100_000_000_000), "1000000000.00");
        assert_eq!(price_text(-150), "-1.50");
    }

    #[test]
    fn currencies_are_iso_4217() {
        assert_eq!(Currency::parse("usd").unwrap(), Currency::USD);
        assert_eq!(Currency::parse("EUR").unwrap().as_str(), "EUR");
        for bad in ["US", "USDD", "XYZ", "", "U$D"] {
            assert!(Currency::parse(bad).is_err(), "{bad}");
        }
    }
}
