//! API keys, digests and the sealing of stored responses that carry a secret.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub const API_KEY_PREFIX: &str = "hk_";
/// How much of a key is kept in clear to let its owner tell keys apart.
pub const SHOWN_PREFIX_CHARS: usize = API_KEY_PREFIX.len() + 8;

/// A freshly issued API key. The plaintext is shown once and never stored.
pub struct IssuedKey {
    pub plaintext: String,
    pub digest: [u8; 32],
    pub prefix: String,
}

impl std::fmt::Debug for IssuedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedKey").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

/// Issues a key with 256 bits from the operating system's random source.
pub fn issue_api_key() -> IssuedKey {
    let plaintext = format!("{API_KEY_PREFIX}{}", URL_SAFE_NO_PAD.encode(random_bytes::<32>()));
    IssuedKey { digest: sha256(plaintext.as_bytes()), prefix: plaintext[..SHOWN_PREFIX_CHARS].to_owned(), plaintext }
}

/// The prefix of an approver's token (SPEC §10): never an API key's, so that every route but
/// the approvals' refuses it before looking it up.
pub const APPROVER_TOKEN_PREFIX: &str = "hap_";

/// Issues an approver's token, as [`issue_api_key`] issues keys.
pub fn issue_approver_token() -> IssuedKey {
    let plaintext = format!("{APPROVER_TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(random_bytes::<32>()));
    let shown = APPROVER_TOKEN_PREFIX.len() + 8;
    IssuedKey { digest: sha256(plaintext.as_bytes()), prefix: plaintext[..shown].to_owned(), plaintext }
}

pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).expect("the operating system's random source is unavailable");
    bytes
}

pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// SHA-256 over several parts, each length-prefixed so that no two sequences collide.
pub fn sha256_parts(parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// Compares two secrets without revealing, by timing, how much of them matched.
pub fn secrets_equal(given: &str, expected: &str) -> bool {
    sha256(given.as_bytes()).ct_eq(&sha256(expected.as_bytes())).into()
}

/// Encrypts `plaintext` under a 32-byte key; the output carries its nonce.
pub fn seal(key: &[u8; 32], plaintext: &[u8]) -> Vec<u8> {
    let cipher = ChaCha20Poly1305::new(Key::from_slice(key));
    let nonce = random_bytes::<12>();
    let mut sealed = nonce.to_vec();
    sealed
        .extend(cipher.encrypt(Nonce::from_slice(&nonce), plaintext).expect("sealing cannot fail for in-memory data"));
    sealed
}

/// Decrypts what [`seal`] produced; `None` if the key is wrong or the data was altered.
pub fn open(key: &[u8; 32], sealed: &[u8]) -> Option<Vec<u8>> {
    if sealed.len() < 12 {
        return None;
    }
    let (nonce, ciphertext) = sealed.split_at(12);
    ChaCha20Poly1305::new(Key::from_slice(key)).decrypt(Nonce::from_slice(nonce), ciphertext).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_long_random_and_digested() {
        let a = issue_api_key();
        let b = issue_api_key();
        assert!(a.plaintext.starts_with("hk_"));
        assert_eq!(a.plaintext.len(), 3 + 43);
        assert_ne!(a.plaintext, b.plaintext);
        assert_eq!(a.digest, sha256(a.plaintext.as_bytes()));
        assert!(a.plaintext.starts_with(&a.prefix));
        assert!(!format!("{a:?}").contains(&a.plaintext));
    }

    #[test]
    fn sealing_round_trips_and_detects_the_wrong_key() {
        let key = sha256(b"idempotency key");
        let sealed = seal(&key, b"{\"api_key\":\"hk_x\"}");
        assert!(!sealed.windows(4).any(|w| w == b"hk_x"));
        assert_eq!(open(&key, &sealed).unwrap(), b"{\"api_key\":\"hk_x\"}");
        assert!(open(&sha256(b"other"), &sealed).is_none());
        assert!(open(&key, &sealed[..5]).is_none());
    }

    #[test]
    fn parts_are_unambiguous() {
        assert_ne!(sha256_parts(&[b"ab", b"c"]), sha256_parts(&[b"a", b"bc"]));
        assert!(secrets_equal("token", "token"));
        assert!(!secrets_equal("token", "tokex"));
    }
}
