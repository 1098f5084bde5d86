//! Jitter: the offset added to each nominal grid point of a schedule entry.
//!
//! Jitter does two jobs: it spreads load (10,000 pieces declared in one
//! commit do not all wake in the same millisecond) and it makes wake times
//! unpredictable to anyone without the host's secret.
//!
//! # Modes
//! - [`JitterMode::Keyed`] (default): the offset is a blake3 keyed hash
//!   (key = the per-host secret) of `(space, piece, entry, nominal period)`,
//!   mapped uniformly into `[-window_ms, +window_ms]`. It is a pure function:
//!   reproducible under a fixed key, stable across restarts, and different
//!   for every period, so an entry does not fire at the same phase forever.
//! - [`JitterMode::Random`]: a fresh draw per period from an entropy source
//!   the caller supplies (the host passes OS-seeded randomness, tests pass a
//!   deterministic counter). Not reproducible by design.
//!
//! # Encoding (keyed mode)
//! The hash input is unambiguous: a domain tag, then each string prefixed
//! with its byte length (u64 little-endian), then `entry` (u32 LE) and
//! `period` (u64 LE). No two distinct tuples share an encoding, so no two
//! pieces can be made to collide by choosing names like `("ab", "c")` and
//! `("a", "bc")`.
//!
//! # Uniformity and its bias bound
//! The first 16 bytes of the hash are read as a `u128` `x` and the offset is
//! `x mod (2w + 1) − w`. Reducing a uniform 128-bit value modulo `n` gives
//! each residue probability `⌊2¹²⁸/n⌋/2¹²⁸` or `⌈2¹²⁸/n⌉/2¹²⁸`, so the total
//! variation distance from the exact uniform distribution is below
//! `n / 2¹²⁸`. With the default 20-minute window, `n = 2,400,001 < 2²²`, so
//! the bias is below `2⁻¹⁰⁶` — unobservable. Random mode builds its `u128`
//! from two 64-bit draws and has the same bound.
//!
//! # Invariants
//! - `|offset_ms| <= window_ms` always (a window of 0 means no jitter).
//! - Nothing here reads a clock or the OS: entropy comes in as an argument.

/// The default jitter window: offsets fall in ±20 minutes (the brief's
/// figure: wide enough to spread a herd across 40 minutes of wall time,
/// small enough against the 60-minute minimum interval that consecutive
/// fires stay at least 20 minutes apart).
pub const DEFAULT_WINDOW_MS: u64 = 20 * 60_000;

/// The largest window honoured. Keeps `2w + 1` and the signed offset
/// representable; far beyond any useful value (about 73 million years).
pub const MAX_WINDOW_MS: u64 = (i64::MAX as u64) / 2;

/// Domain separation for the keyed hash: a different use of the same host
/// secret can never produce the same hash input.
const DOMAIN_TAG: &[u8] = b"spacewake/schedule-jitter/v1\0";

/// The keyed offset of one nominal period of one entry, in
/// `[-window_ms, +window_ms]` (see the module docs for the encoding and the
/// bias bound).
pub fn keyed_offset_ms(
    secret: &[u8; 32],
    space: &str,
    piece: &str,
    entry: u32,
    period: u64,
    window_ms: u64,
) -> i64 {
    let mut h = blake3::Hasher::new_keyed(secret);
    h.update(DOMAIN_TAG);
    h.update(&(space.len() as u64).to_le_bytes());
    h.update(space.as_bytes());
    h.update(&(piece.len() as u64).to_le_bytes());
    h.update(piece.as_bytes());
    h.update(&entry.to_le_bytes());
    h.update(&period.to_le_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest.as_bytes()[..16]);
    uniform_offset_ms(u128::from_le_bytes(first), window_ms)
}

/// Maps a uniform 128-bit value into `[-window_ms, +window_ms]`.
fn uniform_offset_ms(x: u128, window_ms: u64) -> i64 {
    let w = window_ms.min(MAX_WINDOW_MS);
    let span = 2 * u128::from(w) + 1;
    // `x % span <= 2w <= i64::MAX - 1`, so both casts are exact.
    (x % span) as i64 - w as i64
}

/// How offsets are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JitterMode {
    /// Keyed hash of (space, piece, entry, period): reproducible.
    #[default]
    Keyed,
    /// A fresh draw from the supplied entropy each period.
    Random,
}

impl JitterMode {
    pub fn as_str(self) -> &'static str {
        match self {
            JitterMode::Keyed => "keyed",
            JitterMode::Random => "random",
        }
    }

    /// Parses `keyed` / `random` (the spelling of the host option).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "keyed" => Some(JitterMode::Keyed),
            "random" => Some(JitterMode::Random),
            _ => None,
        }
    }
}

/// A host's jitter policy: mode, window and secret.
///
/// `Debug` never prints the secret: wake times are only unpredictable while
/// it stays private.
#[derive(Clone)]
pub struct Jitter {
    pub mode: JitterMode,
    /// Offsets fall in `[-window_ms, +window_ms]`.
    pub window_ms: u64,
    secret: [u8; 32],
}

impl std::fmt::Debug for Jitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jitter")
            .field("mode", &self.mode)
            .field("window_ms", &self.window_ms)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl Jitter {
    pub fn new(mode: JitterMode, window_ms: u64, secret: [u8; 32]) -> Self {
        Jitter {
            mode,
            window_ms: window_ms.min(MAX_WINDOW_MS),
            secret,
        }
    }

    /// Keyed mode with the default ±20-minute window.
    pub fn keyed(secret: [u8; 32]) -> Self {
        Self::new(JitterMode::Keyed, DEFAULT_WINDOW_MS, secret)
    }

    /// Random mode with the default window (the secret is unused).
    pub fn random() -> Self {
        Self::new(JitterMode::Random, DEFAULT_WINDOW_MS, [0; 32])
    }

    /// No jitter at all: every due time is its nominal time.
    pub fn none() -> Self {
        Self::new(JitterMode::Keyed, 0, [0; 32])
    }

    /// The effective window (at most [`MAX_WINDOW_MS`]).
    pub fn window_ms(&self) -> u64 {
        self.window_ms.min(MAX_WINDOW_MS)
    }

    /// The offset of `period` of `(space, piece, entry)`, in
    /// `[-window_ms, +window_ms]`. `entropy` is consulted only in random
    /// mode (twice per call).
    pub fn offset_ms(
        &self,
        space: &str,
        piece: &str,
        entry: u32,
        period: u64,
        entropy: &mut impl FnMut() -> u64,
    ) -> i64 {
        match self.mode {
            JitterMode::Keyed => {
                keyed_offset_ms(&self.secret, space, piece, entry, period, self.window_ms())
            }
            JitterMode::Random => {
                let x = (u128::from(entropy()) << 64) | u128::from(entropy());
                uniform_offset_ms(x, self.window_ms())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];

    fn no_entropy() -> u64 {
        panic!("keyed mode must not draw entropy")
    }

    #[test]
    fn keyed_offsets_stay_inside_the_window() {
        for w in [0, 1, 2, 1_000, DEFAULT_WINDOW_MS] {
            for period in 0..2_000 {
                let o = keyed_offset_ms(&KEY, "s", "pc-1", 0, period, w);
                assert!(o.unsigned_abs() <= w, "offset {o} outside ±{w}");
            }
        }
    }

    #[test]
    fn a_zero_window_means_no_jitter() {
        assert_eq!(keyed_offset_ms(&KEY, "s", "p", 3, 9, 0), 0);
        let j = Jitter::new(JitterMode::Random, 0, KEY);
        assert_eq!(j.offset_ms("s", "p", 0, 1, &mut || u64::MAX), 0);
    }

    #[test]
    fn keyed_offsets_are_reproducible_and_depend_on_every_input() {
        let base = keyed_offset_ms(&KEY, "space", "piece", 1, 5, DEFAULT_WINDOW_MS);
        assert_eq!(
            base,
            keyed_offset_ms(&KEY, "space", "piece", 1, 5, DEFAULT_WINDOW_MS)
        );
        let variants = [
            keyed_offset_ms(&[8; 32], "space", "piece", 1, 5, DEFAULT_WINDOW_MS),
            keyed_offset_ms(&KEY, "spacf", "piece", 1, 5, DEFAULT_WINDOW_MS),
            keyed_offset_ms(&KEY, "space", "piecf", 1, 5, DEFAULT_WINDOW_MS),
            keyed_offset_ms(&KEY, "space", "piece", 2, 5, DEFAULT_WINDOW_MS),
            keyed_offset_ms(&KEY, "space", "piece", 1, 6, DEFAULT_WINDOW_MS),
        ];
        // A 1-in-2.4-million coincidence per variant; none is expected.
        for v in variants {
            assert_ne!(v, base);
        }
    }

    #[test]
    fn the_encoding_is_unambiguous_across_the_space_piece_boundary() {
        let a = keyed_offset_ms(&KEY, "ab", "c", 0, 1, DEFAULT_WINDOW_MS);
        let b = keyed_offset_ms(&KEY, "a", "bc", 0, 1, DEFAULT_WINDOW_MS);
        assert_ne!(a, b);
    }

    #[test]
    fn keyed_mode_never_draws_entropy() {
        let j = Jitter::keyed(KEY);
        let o = j.offset_ms("s", "p", 0, 1, &mut no_entropy);
        assert_eq!(o, keyed_offset_ms(&KEY, "s", "p", 0, 1, DEFAULT_WINDOW_MS));
    }

    #[test]
    fn random_mode_maps_its_entropy_into_the_window() {
        let j = Jitter::random();
        let w = DEFAULT_WINDOW_MS as i64;
        assert_eq!(j.offset_ms("s", "p", 0, 1, &mut || 0), -w);
        // The same entropy gives the same offset whatever the identity.
        let mut n = 0u64;
        let mut counter = || {
            n += 1;
            n.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        };
        let a = j.offset_ms("s", "p", 0, 1, &mut counter);
        let b = j.offset_ms("s", "p", 0, 1, &mut counter);
        assert!(a.abs() <= w && b.abs() <= w);
        assert_ne!(a, b, "random mode draws fresh entropy every call");
    }

    #[test]
    fn the_reduction_covers_both_ends_of_the_window() {
        assert_eq!(uniform_offset_ms(0, 5), -5);
        assert_eq!(uniform_offset_ms(10, 5), 5);
        assert_eq!(uniform_offset_ms(11, 5), -5);
        assert!(uniform_offset_ms(u128::MAX, u64::MAX).unsigned_abs() <= MAX_WINDOW_MS);
    }

    #[test]
    fn debug_output_redacts_the_secret() {
        let s = format!("{:?}", Jitter::keyed(KEY));
        assert!(s.contains("redacted") && !s.contains('7'), "{s}");
    }

    #[test]
    fn modes_parse_from_their_host_option_spelling() {
        for m in [JitterMode::Keyed, JitterMode::Random] {
            assert_eq!(JitterMode::parse(m.as_str()), Some(m));
        }
        assert_eq!(JitterMode::parse("fixed"), None);
    }
}
