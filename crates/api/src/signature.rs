//! The `Haggle-Signature` header: `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
//!
//! The HMAC key is the webhook's secret exactly as it was shown (`whsec_…`, its UTF-8 bytes).
//! A receiver recomputes the MAC over the raw body it received and rejects old timestamps, so
//! that a captured delivery cannot be replayed later.

use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The header that carries the signature.
pub const HEADER: &str = "Haggle-Signature";

fn mac(secret: &str, timestamp: i64, body: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The header value signing `body` at `timestamp` (unix seconds).
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let digest = mac(secret, timestamp, body).finalize().into_bytes();
    format!("t={timestamp},v1={}", hex::encode(digest))
}

/// Whether `header` is a valid signature of `body` under `secret`, made no more than
/// `tolerance` away from `now` (unix seconds). Any of several `v1` values may match; the
/// comparison takes the same time however much of a wrong signature matches.
pub fn verify(secret: &str, header: &str, body: &[u8], now: i64, tolerance: Duration) -> bool {
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", value)) if timestamp.is_none() => match value.parse::<i64>() {
                Ok(value) => timestamp = Some(value),
                Err(_) => return false,
            },
            Some(("t", _)) => return false,
            Some(("v1", value)) => signatures.push(value),
            _ => {}
        }
    }
    let Some(timestamp) = timestamp else { return false };
    if now.abs_diff(timestamp) > tolerance.as_secs() {
        return false;
    }
    signatures.into_iter().filter_map(|signature| hex::decode(signature).ok()).any(|expected| {
        // `verify_slice` compares in constant time.
        mac(secret, timestamp, body).verify_slice(&expected).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_test-secret";
    const BODY: &[u8] = br#"{"id":1}"#;
    const AT: i64 = 1_700_000_000;
    const FIVE_MINUTES: Duration = Duration::from_secs(300);

    #[test]
    fn signs_a_known_vector() {
        // HMAC-SHA256("whsec_test-secret", "1700000000.{\"id\":1}"), computed independently.
        assert_eq!(
            sign(SECRET, AT, BODY),
            "t=1700000000,v1=7487361a495ea0b652674fac0b3a5f4ce25e59adf71166eb4d9394a8867f11e0"
        );
    }

    #[test]
    fn verifies_its_own_signature_within_the_tolerance() {
        let header = sign(SECRET, AT, BODY);
        assert!(verify(SECRET, &header, BODY, AT, FIVE_MINUTES));
        assert!(verify(SECRET, &header, BODY, AT + 300, FIVE_MINUTES));
        assert!(verify(SECRET, &header, BODY, AT - 300, FIVE_MINUTES));
        let rotated = format!("{header},v1={}", "00".repeat(32));
        assert!(verify(SECRET, &rotated, BODY, AT, FIVE_MINUTES));
    }

    #[test]
    fn refuses_the_wrong_secret() {
        assert!(!verify("whsec_other", &sign(SECRET, AT, BODY), BODY, AT, FIVE_MINUTES));
    }

    #[test]
    fn refuses_a_tampered_body() {
        assert!(!verify(SECRET, &sign(SECRET, AT, BODY), br#"{"id":2}"#, AT, FIVE_MINUTES));
        assert!(!verify(SECRET, &sign(SECRET, AT, BODY), br#"{"id":1} "#, AT, FIVE_MINUTES));
    }

    #[test]
    fn refuses_an_old_or_altered_timestamp() {
        let header = sign(SECRET, AT, BODY);
        assert!(!verify(SECRET, &header, BODY, AT + 301, FIVE_MINUTES));
        assert!(!verify(SECRET, &header, BODY, AT - 301, FIVE_MINUTES));
        let moved = header.replace("t=1700000000", "t=1700000100");
        assert!(!verify(SECRET, &moved, BODY, AT + 100, FIVE_MINUTES));
    }

    #[test]
    fn refuses_malformed_headers() {
        let v1 = sign(SECRET, AT, BODY).split_once(',').unwrap().1.to_owned();
        for header in ["", "t=1700000000", &v1, &format!("t=soon,{v1}"), &format!("t=1,t=1700000000,{v1}"), "v1=zz,t=1"]
        {
            assert!(!verify(SECRET, header, BODY, AT, FIVE_MINUTES), "{header}");
        }
    }
}
