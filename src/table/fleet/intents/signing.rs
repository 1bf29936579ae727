//! The fleet key (`commit.intents_key`): with it, every intent a node publishes carries an
//! HMAC-SHA256 tag of its body, and a carrier takes only intents whose tag verifies, so that
//! being able to write under `_thadam-intents/` is not enough to register files in the table or
//! to move a watermark (see the trust model in docs/fleets.md).
//!
//! The tag is the body's last member, `"sig"`: the signer serialises the record without it,
//! computes the tag over those exact bytes and writes them back with `,"sig":"<tag>"` before the
//! closing brace; the verifier cuts that member off the bytes it read and recomputes the tag over
//! what is left, so nothing depends on JSON being re-serialised the same way. Tags are compared
//! in constant time (`Mac::verify_slice`).

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::secret::Secret;

type Tagger = Hmac<Sha256>;

/// What precedes the tag in a signed body.
const MEMBER: &[u8] = b",\"sig\":\"";

/// The fleet's shared key, ready to tag and verify. `Debug` never shows it.
#[derive(Clone)]
pub(crate) struct IntentKey(Tagger);

impl fmt::Debug for IntentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IntentKey(***)")
    }
}

impl IntentKey {
    pub(crate) fn new(secret: &Secret) -> IntentKey {
        // HMAC takes a key of any length (longer ones are hashed first): this never fails.
        let tagger = Tagger::new_from_slice(secret.expose().as_bytes())
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        IntentKey(tagger)
    }

    /// `body` (a JSON object) with its tag as a last member.
    pub(crate) fn sign(&self, body: &[u8]) -> Vec<u8> {
        let mut tagger = self.0.clone();
        tagger.update(body);
        let tag = URL_SAFE_NO_PAD.encode(tagger.finalize().into_bytes());
        let open = body.strip_suffix(b"}").unwrap_or(body);
        let mut out = Vec::with_capacity(body.len() + MEMBER.len() + tag.len() + 2);
        out.extend_from_slice(open);
        out.extend_from_slice(MEMBER);
        out.extend_from_slice(tag.as_bytes());
        out.extend_from_slice(b"\"}");
        out
    }

    /// Whether `bytes` end with a tag of this key over the rest of them (see the module docs).
    pub(crate) fn verifies(&self, bytes: &[u8]) -> bool {
        let Some(at) = bytes
            .windows(MEMBER.len())
            .rposition(|window| window == MEMBER)
        else {
            return false;
        };
        let Some(tag) = bytes[at + MEMBER.len()..].strip_suffix(b"\"}") else {
            return false;
        };
        let Ok(tag) = URL_SAFE_NO_PAD.decode(tag) else {
            return false;
        };
        let mut tagger = self.0.clone();
        tagger.update(&bytes[..at]);
        tagger.update(b"}");
        tagger.verify_slice(&tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> IntentKey {
        IntentKey::new(&Secret::new(s))
    }

    #[test]
    fn a_signed_body_verifies_with_its_key_only() {
        let body = br#"{"format":"thadam-intent/2","max_seq":7}"#;
        let signed = key("fleet secret").sign(body);
        let text = String::from_utf8(signed.clone()).expect("utf-8");
        assert!(text.starts_with(r#"{"format":"thadam-intent/2","max_seq":7,"sig":""#));
        let value: serde_json::Value = serde_json::from_slice(&signed).expect("still JSON");
        assert_eq!(value["max_seq"], 7);
        assert!(key("fleet secret").verifies(&signed));
        assert!(!key("another secret").verifies(&signed));
        // Unsigned, a changed body, a cut or altered tag: none verifies.
        assert!(!key("fleet secret").verifies(body));
        let changed = text.replace("\"max_seq\":7", "\"max_seq\":8");
        assert!(!key("fleet secret").verifies(changed.as_bytes()));
        assert!(!key("fleet secret").verifies(&signed[..signed.len() - 3]));
        let mut flipped = signed.clone();
        let i = flipped.len() - 5;
        flipped[i] = if flipped[i] == b'A' { b'B' } else { b'A' };
        assert!(!key("fleet secret").verifies(&flipped));
    }

    #[test]
    fn the_key_never_shows() {
        let k = key("fleet secret");
        assert_eq!(format!("{k:?}"), "IntentKey(***)");
    }
}
