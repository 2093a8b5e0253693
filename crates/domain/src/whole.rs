//! Whole numbers as JSON writes them: `2` and `2.0` alike (JSON Schema calls both an integer),
//! for the integer fields of request bodies and, written as text, of query strings. A fraction,
//! or a number past what an `f64` holds exactly, is refused as the field's type error.

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

/// A whole number written as text, as a query string carries every value: `2`, or `2.0`; or,
/// from JSON, the number itself.
struct WholeText;

impl Visitor<'_> for WholeText {
    type Value = i64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number")
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<i64, E> {
        WholeNumber.visit_i64(value)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<i64, E> {
        WholeNumber.visit_u64(value)
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<i64, E> {
        WholeNumber.visit_f64(value)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<i64, E> {
        let refused = || E::invalid_value(de::Unexpected::Str(text), &self);
        match text.parse::<i64>() {
            Ok(value) => Ok(value),
            // Past i64, or not an integer's digits: a whole number written as a float, or nothing.
            Err(_) => match text.parse::<f64>() {
                Ok(value) if value.is_finite() => WholeNumber.visit_f64(value).map_err(|_: E| refused()),
                _ => Err(refused()),
            },
        }
    }
}

/// For `#[serde(deserialize_with = "whole::number")]` on an `i64`.
pub fn number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    deserializer.deserialize_any(WholeNumber)
}

/// For `#[serde(deserialize_with = "whole::small")]` on an `i32`; a whole number past it is
/// refused as a value out of range.
pub fn small<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i32, D::Error> {
    let value = deserializer.deserialize_any(WholeNumber)?;
    i32::try_from(value)
        .map_err(|_| de::Error::invalid_value(de::Unexpected::Signed(value), &"a whole number within 32 bits"))
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

/// For `#[serde(default, deserialize_with = "whole::text_option")]` on an `Option<i64>` of a
/// query string; the same parameters read from JSON (a tool's arguments) may be numbers.
pub fn text_option<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    struct Maybe;

    impl<'de> Visitor<'de> for Maybe {
        type Value = Option<i64>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a whole number")
        }

        fn visit_none<E: de::Error>(self) -> Result<Option<i64>, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Option<i64>, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<i64>, D::Error> {
            deserializer.deserialize_any(WholeText).map(Some)
        }
    }

    deserializer.deserialize_option(Maybe)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde::de::IntoDeserializer;
    use serde::de::value::{Error, StrDeserializer};

    #[derive(Debug, Deserialize)]
    struct Body {
        #[serde(default, deserialize_with = "super::option")]
        n: Option<i64>,
    }

    fn n(json: &str) -> Result<Option<i64>, String> {
        serde_json::from_str::<Body>(json).map(|body| body.n).map_err(|e| e.to_string())
    }

    fn text(value: &str) -> Result<i64, String> {
        let deserializer: StrDeserializer<'_, Error> = value.into_deserializer();
        serde::Deserializer::deserialize_str(deserializer, super::WholeText).map_err(|e| e.to_string())
    }

    #[test]
    fn whole_numbers_written_as_text_are_integers_and_fractions_are_not() {
        assert_eq!(text("2"), Ok(2));
        assert_eq!(text("2.0"), Ok(2));
        assert_eq!(text("-3e2"), Ok(-300));
        assert_eq!(text("9223372036854775807"), Ok(i64::MAX));
        for refused in ["2.5", "", "two", "1e300", "inf", "NaN", "9223372036854775808", "0x10"] {
            assert!(text(refused).unwrap_err().contains("a whole number"), "{refused}");
        }
    }

    #[derive(Debug, Deserialize)]
    struct Required {
        #[serde(deserialize_with = "super::number")]
        n: i64,
        #[serde(deserialize_with = "super::small")]
        m: i32,
    }

    #[test]
    fn required_whole_numbers_take_floats_without_a_fraction() {
        let read = |json: &str| serde_json::from_str::<Required>(json).map(|r| (r.n, r.m)).map_err(|e| e.to_string());
        assert_eq!(read(r#"{"n": 2.0, "m": 3}"#), Ok((2, 3)));
        assert_eq!(read(r#"{"n": 2, "m": 3.0}"#), Ok((2, 3)));
        assert!(read(r#"{"n": 2.5, "m": 3}"#).unwrap_err().contains("a whole number"));
        assert!(read(r#"{"n": 2, "m": 3000000000}"#).unwrap_err().starts_with("invalid value"));
        assert!(read(r#"{"n": null, "m": 3}"#).is_err());
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
