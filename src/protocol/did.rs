//! `did:key` identities for ed25519 keys, and the [`Identity`] a client signs with.
//!
//! A session proves who it is with an ed25519 key named as a `did:key`
//! (W3C did:key method): `did:key:z` followed by the base58btc encoding of the
//! multicodec varint for `ed25519-pub` (`0xed 0x01`) and the 32 key bytes.
//!
//! Invariants:
//! - [`encode_did_key`] and [`decode_did_key`] are inverse: every key encodes to
//!   exactly one did string and that string decodes back to the same key.
//! - Decoding never panics and names what is wrong (prefix, multibase,
//!   base58, multicodec, length, or a byte string that is not a curve point).
//! - An [`Identity`] never prints its secret through `Debug`; the secret leaves
//!   it only through the explicit `secret_*` accessors and [`Identity::save`].

use std::fmt;
use std::path::Path;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};

/// Everything before the multibase payload. The trailing `z` is the multibase
/// prefix for base58btc, the only base did:key uses for ed25519 keys.
pub const DID_KEY_PREFIX: &str = "did:key:";
/// The multibase code for base58btc.
const MULTIBASE_BASE58BTC: char = 'z';
/// Unsigned varint of multicodec `ed25519-pub` (0xed): 0xed needs two varint
/// bytes because it is above 0x7f.
pub const ED25519_MULTICODEC: [u8; 2] = [0xed, 0x01];
/// Longest did we try to decode. A real ed25519 did is 56 characters; the cap
/// keeps base58 decoding (quadratic in length) cheap on hostile input.
const MAX_DID_LEN: usize = 128;

/// Why a string is not an ed25519 `did:key`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DidError {
    #[error("`{0}` is not a did:key (it must start with `did:key:z`)")]
    WrongPrefix(String),
    #[error("did:key uses multibase `{0}`; only base58btc (`z`) is supported")]
    UnsupportedMultibase(char),
    #[error("did is {0} characters long; an ed25519 did:key is 56")]
    TooLong(usize),
    #[error("did:key payload is not valid base58btc: {0}")]
    BadBase58(String),
    #[error("did:key multicodec is {found}, not ed25519-pub (0xed 0x01)")]
    WrongMulticodec { found: String },
    #[error("did:key carries {0} key bytes; an ed25519 public key has 32")]
    WrongLength(usize),
    #[error("did:key bytes are not a valid ed25519 public key")]
    InvalidKey,
}

/// Names an ed25519 public key as `did:key:z…`.
pub fn encode_did_key(key: &VerifyingKey) -> String {
    let mut bytes = Vec::with_capacity(34);
    bytes.extend_from_slice(&ED25519_MULTICODEC);
    bytes.extend_from_slice(key.as_bytes());
    format!(
        "{DID_KEY_PREFIX}{MULTIBASE_BASE58BTC}{}",
        bs58::encode(bytes).into_string()
    )
}

/// Parses an ed25519 `did:key` back into its public key.
pub fn decode_did_key(did: &str) -> Result<VerifyingKey, DidError> {
    if did.len() > MAX_DID_LEN {
        return Err(DidError::TooLong(did.chars().count()));
    }
    let rest = did
        .strip_prefix(DID_KEY_PREFIX)
        .ok_or_else(|| DidError::WrongPrefix(shorten(did)))?;
    let mut chars = rest.chars();
    let payload = match chars.next() {
        Some(MULTIBASE_BASE58BTC) => chars.as_str(),
        Some(other) => return Err(DidError::UnsupportedMultibase(other)),
        None => return Err(DidError::WrongPrefix(shorten(did))),
    };
    let bytes = bs58::decode(payload)
        .into_vec()
        .map_err(|e| DidError::BadBase58(e.to_string()))?;
    if bytes.len() < 2 || bytes[..2] != ED25519_MULTICODEC {
        let found = bytes
            .iter()
            .take(2)
            .map(|b| format!("0x{b:02x}"))
            .collect::<Vec<_>>()
            .join(" ");
        return Err(DidError::WrongMulticodec {
            found: if found.is_empty() {
                "missing".into()
            } else {
                found
            },
        });
    }
    let key: [u8; 32] = bytes[2..]
        .try_into()
        .map_err(|_| DidError::WrongLength(bytes.len() - 2))?;
    VerifyingKey::from_bytes(&key).map_err(|_| DidError::InvalidKey)
}

/// Error messages quote the offending input; quoting a megabyte would turn a
/// bad frame into a huge error frame.
fn shorten(s: &str) -> String {
    const MAX: usize = 64;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(MAX).collect::<String>())
    }
}

/// Why a secret could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("secret is neither 64 hex digits nor 32 bytes of base64/base64url")]
    BadSecret,
    #[error("cannot read or write identity file {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// An ed25519 signing key, named by its `did:key`.
#[derive(Clone)]
pub struct Identity {
    key: SigningKey,
}

impl fmt::Debug for Identity {
    // Only the public half: identities end up in logs and test failure output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("did", &self.did())
            .finish()
    }
}

impl Identity {
    /// A fresh identity from 32 bytes of OS-seeded randomness. (ed25519-dalek's
    /// own `generate` wants a rand_core 0.6 RNG; rand 0.9 bytes plus
    /// `from_bytes` is the same construction.)
    pub fn generate() -> Self {
        Self::from_secret_bytes(rand::random::<[u8; 32]>())
    }

    /// The identity whose ed25519 secret key is these 32 bytes.
    pub fn from_secret_bytes(secret: [u8; 32]) -> Self {
        Self {
            key: SigningKey::from_bytes(&secret),
        }
    }

    /// Parses a secret written as 64 hex digits, or as base64url / base64
    /// (padded or not). Surrounding whitespace is ignored so files ending in a
    /// newline load.
    pub fn from_secret_text(text: &str) -> Result<Self, IdentityError> {
        let text = text.trim();
        let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            hex_decode(text).ok_or(IdentityError::BadSecret)?
        } else {
            let unpadded = text.trim_end_matches('=');
            URL_SAFE_NO_PAD
                .decode(unpadded)
                .or_else(|_| STANDARD.decode(text))
                .map_err(|_| IdentityError::BadSecret)?
        };
        let secret: [u8; 32] = bytes.try_into().map_err(|_| IdentityError::BadSecret)?;
        Ok(Self::from_secret_bytes(secret))
    }

    /// The secret as 64 lowercase hex digits (the format [`Identity::save`] writes).
    pub fn secret_hex(&self) -> String {
        self.key
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The secret as unpadded base64url.
    pub fn secret_base64url(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.key.as_bytes())
    }

    /// The identity in `path`, or a new one saved there (mode 0600) when
    /// the file does not exist; `true` when it was created.
    pub fn load_or_create(path: &Path) -> Result<(Self, bool), IdentityError> {
        if path.exists() {
            return Ok((Self::load(path)?, false));
        }
        let id = Self::generate();
        id.save(path)?;
        Ok((id, true))
    }

    /// Reads a secret file written by [`Identity::save`] (or any accepted format).
    pub fn load(path: &Path) -> Result<Self, IdentityError> {
        let text = std::fs::read_to_string(path).map_err(|source| IdentityError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_secret_text(&text)
    }

    /// Writes the secret as hex plus a newline. On Unix the file is created
    /// with mode 0600: it is a private key.
    pub fn save(&self, path: &Path) -> Result<(), IdentityError> {
        use std::io::Write as _;
        let io = |source| IdentityError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let mut file = options.open(path).map_err(io)?;
        writeln!(file, "{}", self.secret_hex()).map_err(io)?;
        file.sync_all().map_err(io)
    }

    /// This identity's `did:key`.
    pub fn did(&self) -> String {
        encode_did_key(&self.key.verifying_key())
    }

    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// Signs arbitrary bytes. Session auth signs the bytes built by
    /// [`super::auth::open_message`]; see [`super::auth::sign_open`].
    pub fn sign(&self, challenge: &[u8]) -> Signature {
        self.key.sign(challenge)
    }
}

fn hex_decode(text: &str) -> Option<Vec<u8>> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test vector from the did:key spec (ed25519 example).
    const SPEC_DID: &str = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";

    #[test]
    fn spec_vector_round_trips() {
        let key = decode_did_key(SPEC_DID).expect("spec did decodes");
        assert_eq!(encode_did_key(&key), SPEC_DID);
    }

    #[test]
    fn generated_identity_did_round_trips() {
        let id = Identity::generate();
        let did = id.did();
        assert!(did.starts_with("did:key:z6Mk"), "{did}");
        assert_eq!(decode_did_key(&did).unwrap(), id.verifying_key());
    }

    #[test]
    fn decode_errors_are_specific() {
        assert!(matches!(
            decode_did_key("did:web:example.com"),
            Err(DidError::WrongPrefix(_))
        ));
        assert!(matches!(
            decode_did_key("did:key:"),
            Err(DidError::WrongPrefix(_))
        ));
        assert_eq!(
            decode_did_key("did:key:f00"),
            Err(DidError::UnsupportedMultibase('f'))
        );
        // 0, O, I and l are not in the base58btc alphabet.
        assert!(matches!(
            decode_did_key("did:key:z0OIl"),
            Err(DidError::BadBase58(_))
        ));
        // secp256k1-pub is 0xe7 0x01.
        let mut wrong_codec = vec![0xe7, 0x01];
        wrong_codec.extend_from_slice(&[7; 33]);
        let did = format!("did:key:z{}", bs58::encode(wrong_codec).into_string());
        assert!(matches!(
            decode_did_key(&did),
            Err(DidError::WrongMulticodec { .. })
        ));
        let mut short = ED25519_MULTICODEC.to_vec();
        short.extend_from_slice(&[7; 31]);
        let did = format!("did:key:z{}", bs58::encode(short).into_string());
        assert_eq!(decode_did_key(&did), Err(DidError::WrongLength(31)));
        let long = format!("did:key:z{}", "1".repeat(500));
        assert!(matches!(decode_did_key(&long), Err(DidError::TooLong(_))));
        // Every message is a sentence a person can act on.
        assert!(DidError::WrongLength(31).to_string().contains("32"));
    }

    #[test]
    fn secret_formats_load_the_same_key() {
        let id = Identity::generate();
        let from_hex = Identity::from_secret_text(&format!("  {}\n", id.secret_hex())).unwrap();
        let from_b64u = Identity::from_secret_text(&id.secret_base64url()).unwrap();
        let from_b64 = Identity::from_secret_text(&STANDARD.encode(id.secret_hex_bytes())).unwrap();
        assert_eq!(from_hex.did(), id.did());
        assert_eq!(from_b64u.did(), id.did());
        assert_eq!(from_b64.did(), id.did());
        assert!(Identity::from_secret_text("abc").is_err());
        assert!(Identity::from_secret_text(&"zz".repeat(32)).is_err());
        assert!(!format!("{id:?}").contains(&id.secret_hex()));
    }

    #[test]
    fn save_and_load() {
        let dir = std::env::temp_dir().join(format!("sw-protocol-did-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("identity.key");
        let id = Identity::generate();
        id.save(&path).unwrap();
        assert_eq!(Identity::load(&path).unwrap().did(), id.did());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    impl Identity {
        fn secret_hex_bytes(&self) -> [u8; 32] {
            self.key.to_bytes()
        }
    }
}
