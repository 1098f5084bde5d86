//! Session-opening challenge: the server's nonce, what the client signs, and
//! how the server checks it.
//!
//! On connect the server sends a fresh random 32-byte nonce (unpadded
//! base64url, 43 characters). To open a session on space `S` the client signs
//!
//! ```text
//! b"spacewake-session-v1:" ++ nonce (the base64url string's bytes) ++ b":" ++ S (UTF-8)
//! ```
//!
//! with the ed25519 key named by its `did:key`, and sends the signature as
//! unpadded base64url.
//!
//! Invariants and why:
//! - The nonce is per connection and never reused, so a captured signature
//!   cannot open a second session (no replay across connections).
//! - The space id is inside the signed bytes, so a signature obtained for one
//!   space cannot be presented to open another (no replay across spaces).
//! - The domain prefix `spacewake-session-v1:` keeps these signatures from
//!   being valid for any other purpose the same key signs for, and versions
//!   the format.
//! - The encoding is unambiguous: the prefix is fixed and a base64url nonce
//!   never contains `:`, so the first `:` after the nonce ends it, and
//!   everything after is the space id.
//! - Verification uses `verify_strict`, rejecting weak keys and
//!   non-canonical signatures (no signature malleability).

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, URL_SAFE_NO_PAD};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use ed25519_dalek::Signature;

use super::did::{decode_did_key, DidError, Identity};

/// Domain-separation prefix of the signed bytes.
pub const SESSION_CONTEXT: &[u8] = b"spacewake-session-v1:";
/// Random bytes in a challenge nonce: 256 bits, never guessed or repeated.
pub const NONCE_BYTES: usize = 32;

/// Signatures are sent unpadded, but a client that pads should not be turned
/// away for it: padding carries no information.
const LENIENT_BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Why a session-open signature was refused. The three cases are distinct so
/// a client author can tell a broken did from a broken encoding from a wrong
/// key or wrong signed bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("malformed did: {0}")]
    MalformedDid(#[from] DidError),
    #[error("malformed signature: {0}")]
    MalformedSignature(String),
    /// The signature is well formed but not this did's over the bytes
    /// that were to be signed (named, for the message).
    #[error("signature does not verify: it is not this did's signature over {0}")]
    SignatureMismatch(&'static str),
}

/// What an operator request's signature covers.
pub const SIGNED_FOR_OPERATOR: &str =
    "the request's time, method, path and query, and its exact body";

/// Domain-separation prefix of an operator API request's signature.
pub const OPERATOR_CONTEXT: &[u8] = b"spacewake-operator-v1:";

/// The exact bytes signed for an operator request: its time (ms since the
/// epoch, as sent in `x-spacewake-time`), method, path with query, and
/// body. The time bounds a replay to the server's window; the method and
/// path keep a signature for a read from being used for an action.
pub fn operator_message(time_ms: u64, method: &str, path_and_query: &str, body: &[u8]) -> Vec<u8> {
    let time = time_ms.to_string();
    let mut bytes = Vec::with_capacity(
        OPERATOR_CONTEXT.len() + time.len() + method.len() + path_and_query.len() + body.len() + 3,
    );
    bytes.extend_from_slice(OPERATOR_CONTEXT);
    bytes.extend_from_slice(time.as_bytes());
    bytes.push(b':');
    bytes.extend_from_slice(method.as_bytes());
    bytes.push(b':');
    bytes.extend_from_slice(path_and_query.as_bytes());
    bytes.push(b':');
    bytes.extend_from_slice(body);
    bytes
}

/// The client side of an operator request: the `x-spacewake-signature`.
pub fn sign_operator(
    identity: &Identity,
    time_ms: u64,
    method: &str,
    path_and_query: &str,
    body: &[u8],
) -> String {
    URL_SAFE_NO_PAD.encode(
        identity
            .sign(&operator_message(time_ms, method, path_and_query, body))
            .to_bytes(),
    )
}

/// The server side: `did`'s signature over [`operator_message`]. Returns
/// the decoded signature: the text has more than one spelling (padding,
/// surrounding whitespace), so whoever remembers a signature to refuse
/// its replay must key on these 64 bytes, never on the text.
pub fn verify_operator(
    did: &str,
    signature_b64url: &str,
    time_ms: u64,
    method: &str,
    path_and_query: &str,
    body: &[u8],
) -> Result<[u8; 64], AuthError> {
    verify(
        did,
        signature_b64url,
        &operator_message(time_ms, method, path_and_query, body),
        SIGNED_FOR_OPERATOR,
    )
}

/// What an open signature covers, for the mismatch message.
pub const SIGNED_FOR_OPEN: &str = "this connection's challenge nonce and the space id";
/// What an ingest or warm signature covers.
pub const SIGNED_FOR_INGEST: &str = "the space id and the exact request body";

/// A fresh challenge nonce as unpadded base64url.
pub fn new_nonce() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; NONCE_BYTES]>())
}

/// The exact bytes a client signs to open `space` under challenge `nonce`.
pub fn open_message(nonce: &str, space: &str) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(SESSION_CONTEXT.len() + nonce.len() + 1 + space.len());
    bytes.extend_from_slice(SESSION_CONTEXT);
    bytes.extend_from_slice(nonce.as_bytes());
    bytes.push(b':');
    bytes.extend_from_slice(space.as_bytes());
    bytes
}

/// The client side: the base64url signature to put in `open.signature`.
pub fn sign_open(identity: &Identity, nonce: &str, space: &str) -> String {
    URL_SAFE_NO_PAD.encode(identity.sign(&open_message(nonce, space)).to_bytes())
}

/// The server side: checks that `signature_b64url` is `did`'s signature over
/// [`open_message`]`(nonce, space)`. `nonce` must be the one this server issued
/// on this connection, never one taken from the client.
pub fn verify_open(
    nonce: &str,
    space: &str,
    did: &str,
    signature_b64url: &str,
) -> Result<(), AuthError> {
    verify(
        did,
        signature_b64url,
        &open_message(nonce, space),
        SIGNED_FOR_OPEN,
    )
    .map(drop)
}

/// Checks that `signature_b64url` is `did`'s ed25519 signature over
/// `message` (strictly: no weak keys, no malleable signatures); `signed`
/// says what the message is, for the mismatch error. Returns the decoded
/// signature, the one spelling-independent identity of what was sent.
pub fn verify(
    did: &str,
    signature_b64url: &str,
    message: &[u8],
    signed: &'static str,
) -> Result<[u8; 64], AuthError> {
    let key = decode_did_key(did)?;
    // 64 signature bytes are 86 base64url characters; refuse anything much
    // longer before decoding it.
    if signature_b64url.len() > 100 {
        return Err(AuthError::MalformedSignature(format!(
            "{} characters; an ed25519 signature is 86 characters of base64url",
            signature_b64url.len()
        )));
    }
    let bytes = LENIENT_BASE64URL
        .decode(signature_b64url.trim())
        .map_err(|e| AuthError::MalformedSignature(format!("not base64url ({e})")))?;
    let signature = Signature::from_slice(&bytes).map_err(|_| {
        AuthError::MalformedSignature(format!(
            "{} bytes; an ed25519 signature is 64 bytes",
            bytes.len()
        ))
    })?;
    key.verify_strict(message, &signature)
        .map_err(|_| AuthError::SignatureMismatch(signed))?;
    Ok(signature.to_bytes())
}

/// Domain-separation prefix of a webhook-style ingest request's signature.
pub const INGEST_CONTEXT: &[u8] = b"spacewake-ingest-v1:";

/// The exact bytes signed for an HTTP ingest of `body` into `space`. The
/// event id inside the body makes a replayed request a harmless duplicate.
pub fn ingest_message(space: &str, body: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(INGEST_CONTEXT.len() + space.len() + 1 + body.len());
    bytes.extend_from_slice(INGEST_CONTEXT);
    bytes.extend_from_slice(space.as_bytes());
    bytes.push(b':');
    bytes.extend_from_slice(body);
    bytes
}

/// The client side of an ingest: the `x-spacewake-signature` header value.
pub fn sign_ingest(identity: &Identity, space: &str, body: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(identity.sign(&ingest_message(space, body)).to_bytes())
}

/// The server side of an ingest: `did`'s signature over [`ingest_message`].
/// Nothing remembers an ingest's signature (a replay is a duplicate by its
/// event id, a warm request's is harmless), so its spelling does not matter.
pub fn verify_ingest(
    space: &str,
    body: &[u8],
    did: &str,
    signature_b64url: &str,
) -> Result<(), AuthError> {
    verify(
        did,
        signature_b64url,
        &ingest_message(space, body),
        SIGNED_FOR_INGEST,
    )
    .map(drop)
}

/// Domain-separation prefix of a host-to-host relay request's signature.
pub const RELAY_CONTEXT: &[u8] = b"spacewake-relay-v1:";
/// What a relay signature covers, for the mismatch message.
pub const SIGNED_FOR_RELAY: &str =
    "the time, both hosts' names, the method, path and query, the relay's extra and the body";

/// One host's request to another on a client's behalf (`spec/fleet.md`,
/// *The relay*): who sends it to whom, when, and exactly what.
#[derive(Debug, Clone, Copy)]
pub struct RelayRequest<'a> {
    pub time_ms: u64,
    /// The sending host's lease-holder name, as registered.
    pub from: &'a str,
    /// The receiving host's: a signature for one host is refused by every
    /// other.
    pub to: &'a str,
    pub method: &'a str,
    pub path_and_query: &'a str,
    /// What the sender vouches for beyond the request: a session's
    /// challenge nonce, or the operator whose signature it checked.
    pub extra: &'a str,
    pub body: &'a [u8],
}

impl RelayRequest<'_> {
    /// The exact signed bytes: every variable field is length-prefixed, so
    /// no two requests share a spelling whatever their fields contain.
    pub fn message(&self) -> Vec<u8> {
        let time = self.time_ms.to_string();
        let fields: [&[u8]; 7] = [
            time.as_bytes(),
            self.from.as_bytes(),
            self.to.as_bytes(),
            self.method.as_bytes(),
            self.path_and_query.as_bytes(),
            self.extra.as_bytes(),
            self.body,
        ];
        let mut bytes = RELAY_CONTEXT.to_vec();
        for f in fields {
            bytes.extend_from_slice(f.len().to_string().as_bytes());
            bytes.push(b':');
            bytes.extend_from_slice(f);
        }
        bytes
    }

    /// The sending host's signature, as unpadded base64url.
    pub fn sign(&self, host: &Identity) -> String {
        URL_SAFE_NO_PAD.encode(host.sign(&self.message()).to_bytes())
    }

    /// The receiving side: `did` (the sender's registered key) signed it.
    pub fn verify(&self, did: &str, signature_b64url: &str) -> Result<(), AuthError> {
        verify(did, signature_b64url, &self.message(), SIGNED_FOR_RELAY).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonces_are_fresh_and_url_safe() {
        let a = new_nonce();
        let b = new_nonce();
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
    }

    #[test]
    fn relay_signatures_bind_every_field() {
        let host = Identity::generate();
        let r = RelayRequest {
            time_ms: 7,
            from: "host-a/1",
            to: "host-b/2",
            method: "GET",
            path_and_query: "/ws",
            extra: "nonce",
            body: b"",
        };
        assert_eq!(
            r.message(),
            b"spacewake-relay-v1:1:78:host-a/18:host-b/23:GET3:/ws5:nonce0:".to_vec()
        );
        let sig = r.sign(&host);
        assert!(r.verify(&host.did(), &sig).is_ok());
        let other = RelayRequest {
            to: "host-c/3",
            ..r
        };
        assert!(other.verify(&host.did(), &sig).is_err(), "another host");
        let moved = RelayRequest {
            from: "host-a/1n",
            extra: "once",
            ..r
        };
        assert!(
            moved.verify(&host.did(), &sig).is_err(),
            "fields are framed"
        );
        assert!(r.verify(&Identity::generate().did(), &sig).is_err());
    }

    #[test]
    fn signed_bytes_are_exactly_as_specified() {
        assert_eq!(
            open_message("abc", "space-1"),
            b"spacewake-session-v1:abc:space-1".to_vec()
        );
    }

    #[test]
    fn good_signature_verifies() {
        let id = Identity::generate();
        let nonce = new_nonce();
        let sig = sign_open(&id, &nonce, "home");
        assert_eq!(verify_open(&nonce, "home", &id.did(), &sig), Ok(()));
        // Padding is tolerated.
        let padded = format!("{sig}==");
        assert_eq!(verify_open(&nonce, "home", &id.did(), &padded), Ok(()));
    }

    #[test]
    fn every_accepted_spelling_of_an_operator_signature_decodes_alike() {
        let id = Identity::generate();
        let sig = sign_operator(&id, 1_000, "POST", "/api/operator/spaces", b"{}");
        let verify = |text: &str| {
            verify_operator(
                &id.did(),
                text,
                1_000,
                "POST",
                "/api/operator/spaces",
                b"{}",
            )
        };
        let bytes = verify(&sig).unwrap();
        for other in [format!("{sig}="), format!("{sig}=="), format!(" {sig}\t")] {
            assert_eq!(verify(&other), Ok(bytes), "{other:?}");
        }
        // The standard alphabet and non-zero trailing bits are not base64url.
        let standard = base64::engine::general_purpose::STANDARD_NO_PAD.encode(bytes);
        if standard != sig {
            assert!(verify(&standard).is_err());
        }
        let last = sig.chars().last().unwrap();
        let bumped: String = sig[..sig.len() - 1].to_string()
            + &char::from_u32(last as u32 + 1).unwrap().to_string();
        assert!(
            verify(&bumped).is_err(),
            "a changed trailing bit is refused"
        );
    }

    #[test]
    fn signature_over_another_nonce_fails() {
        let id = Identity::generate();
        let sig = sign_open(&id, &new_nonce(), "home");
        assert_eq!(
            verify_open(&new_nonce(), "home", &id.did(), &sig),
            Err(AuthError::SignatureMismatch(SIGNED_FOR_OPEN))
        );
    }

    #[test]
    fn signature_over_another_space_fails() {
        let id = Identity::generate();
        let nonce = new_nonce();
        let sig = sign_open(&id, &nonce, "home");
        assert_eq!(
            verify_open(&nonce, "work", &id.did(), &sig),
            Err(AuthError::SignatureMismatch(SIGNED_FOR_OPEN))
        );
    }

    #[test]
    fn truncated_signature_is_malformed() {
        let id = Identity::generate();
        let nonce = new_nonce();
        let raw = id.sign(&open_message(&nonce, "home")).to_bytes();
        let truncated = URL_SAFE_NO_PAD.encode(&raw[..60]);
        let err = verify_open(&nonce, "home", &id.did(), &truncated).unwrap_err();
        assert!(matches!(err, AuthError::MalformedSignature(_)), "{err:?}");
        assert!(err.to_string().contains("64 bytes"), "{err}");
        // Cutting the text mid-symbol is malformed too (as bad base64url).
        let sig = sign_open(&id, &nonce, "home");
        let err = verify_open(&nonce, "home", &id.did(), &sig[..sig.len() - 4]).unwrap_err();
        assert!(matches!(err, AuthError::MalformedSignature(_)), "{err:?}");
        let err = verify_open(&nonce, "home", &id.did(), "not base64!").unwrap_err();
        assert!(matches!(err, AuthError::MalformedSignature(_)), "{err:?}");
        let err = verify_open(&nonce, "home", &id.did(), &"A".repeat(5000)).unwrap_err();
        assert!(matches!(err, AuthError::MalformedSignature(_)), "{err:?}");
    }

    #[test]
    fn did_for_another_key_fails() {
        let signer = Identity::generate();
        let other = Identity::generate();
        let nonce = new_nonce();
        let sig = sign_open(&signer, &nonce, "home");
        assert_eq!(
            verify_open(&nonce, "home", &other.did(), &sig),
            Err(AuthError::SignatureMismatch(SIGNED_FOR_OPEN))
        );
    }

    #[test]
    fn malformed_did_is_reported_as_such() {
        let id = Identity::generate();
        let nonce = new_nonce();
        let sig = sign_open(&id, &nonce, "home");
        let err = verify_open(&nonce, "home", "did:web:example.com", &sig).unwrap_err();
        assert!(matches!(err, AuthError::MalformedDid(_)), "{err:?}");
    }

    #[test]
    fn flipped_bit_fails() {
        let id = Identity::generate();
        let nonce = new_nonce();
        let mut raw = id.sign(&open_message(&nonce, "home")).to_bytes();
        raw[10] ^= 1;
        let sig = URL_SAFE_NO_PAD.encode(raw);
        assert_eq!(
            verify_open(&nonce, "home", &id.did(), &sig),
            Err(AuthError::SignatureMismatch(SIGNED_FOR_OPEN))
        );
    }
}
