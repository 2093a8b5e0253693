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
    fn currencies_are_iso_4217() {
        assert_eq!(Currency::parse("usd").unwrap(), Currency::USD);
        assert_eq!(Currency::parse("EUR").unwrap().as_str(), "EUR");
        for bad in ["US", "USDD", "XYZ", "", "U$D"] {
            assert!(Currency::parse(bad).is_err(), "{bad}");
        }
    }
}
