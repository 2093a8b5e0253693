//! Whole numbers as JSON writes them: `2` and `2.0` alike (JSON Schema calls both an integer),
//! for the integer fields of request bodies. A fraction, or a number past what an `f64` holds
//! exactly, is refused as the field's type error.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};

/// The largest magnitude up to which every integer is exact in an `f64`.
const EXACT_IN_F64: f64 = 9_007_199_254_740_992.0;

struct WholeNumber;

impl Visitor<'_> for WholeNumber {
    type Value = i64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number")
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<i64, E> {
        Ok(value)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<i64, E> {
        i64::try_from(value).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(value), &self))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<i64, E> {
        if value.fract() == 0.0 && value.abs() <= EXACT_IN_F64 {
            Ok(value as i64)
        } else {
            Err(E::invalid_value(de::Unexpected::Float(value), &self))
        }
    }
}

/// For `#[serde(default, deserialize_with = "whole::option")]` on an `Option<i64>`.
pub fn option<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    struct Maybe;

    impl<'de> Visitor<'de> for Maybe {
        type Value = Option<i64>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a whole number or null")
        }

        fn visit_none<E: de::Error>(self) -> Result<Option<i64>, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Option<i64>, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<i64>, D::Error> {
            deserializer.deserialize_any(WholeNumber).map(Some)
        }
    }

    deserializer.deserialize_option(Maybe)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Body {
        #[serde(default, deserialize_with = "super::option")]
        n: Option<i64>,
    }

    fn n(json: &str) -> Result<Option<i64>, String> {
        serde_json::from_str::<Body>(json).map(|body| body.n).map_err(|e| e.to_string())
    }

    #[test]
    fn whole_floats_are_integers_and_fractions_are_not() {
        assert_eq!(n(r#"{"n": 2}"#), Ok(Some(2)));
        assert_eq!(n(r#"{"n": 2.0}"#), Ok(Some(2)));
        assert_eq!(n(r#"{"n": -3e2}"#), Ok(Some(-300)));
        assert_eq!(n(r#"{"n": null}"#), Ok(None));
        assert_eq!(n(r#"{}"#), Ok(None));
        assert!(n(r#"{"n": 2.5}"#).unwrap_err().contains("a whole number"));
        assert!(n(r#"{"n": 1e300}"#).is_err());
        assert!(n(r#"{"n": "2"}"#).is_err());
        assert!(n(r#"{"n": 18446744073709551615}"#).is_err());
    }
}
