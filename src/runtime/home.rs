//! The space's home document: what the reference keeps under a space's
//! default pattern (its piece registry, recent pieces, the mentionable
//! index), here one document of the space, [`HOME_DOC`].
//!
//! `wish("#pieceRegistry")`, `#default`, `#mentionable`, `#recent` (and the
//! reference's other space targets) answer cells into it, so every piece of
//! the space shares them, as in the reference. It reads as empty lists until
//! something writes it, and is stored the first time a piece's graph refers
//! to it. Its `addPiece` stream is the
//! host's own: an event `{piece}` adds the piece to the registry unless a
//! link to the same piece is there already.

use super::*;

/// The home document's id.
pub const HOME_DOC: &str = "space/home";

/// The stream of the home document's `addPiece`.
pub const ADD_PIECE_STREAM: &str = "space/home/addPiece";

/// What the home document holds before anything registers.
pub fn initial() -> Value {
    json!({
        "pieceRegistry": [],
        "recentPieces": [],
        "backlinksIndex": {"mentionable": []},
        "addPiece": {"$stream": ADD_PIECE_STREAM},
    })
}

/// Whether a built graph's values refer to the home document.
pub(super) fn referred_to<'a>(values: impl IntoIterator<Item = &'a Value>) -> bool {
    let mut docs = Vec::new();
    for v in values {
        graph::linked_docs(v, &mut docs);
    }
    docs.iter().any(|d| d == HOME_DOC)
}

impl SpaceRuntime {
    /// Stores the home document if the space has none yet.
    pub(super) fn ensure_home(&mut self) -> RuntimeResult<()> {
        if self.space.read(HOME_DOC)?.is_none() {
            let home = self.doc(HOME_DOC)?.unwrap_or_else(initial);
            // As unwritten, so the write below is not taken for a no-op.
            self.docs.insert(HOME_DOC.to_string(), None);
            self.write(HOME_DOC, &[], home)?;
        }
        Ok(())
    }

    /// What the reference's test runner seeds: the home document with a
    /// count of `addPiece` registrations (`testPieceRegistrationCount`).
    pub fn seed_test_home(&mut self) -> RuntimeResult<()> {
        let mut home = initial();
        home["testPieceRegistrationCount"] = json!(0);
        self.write(HOME_DOC, &[], home)
    }

    /// An `addPiece` event: the piece joins the registry once, and the
    /// test runner's registration count (when the space has one) moves.
    pub(super) fn add_piece_event(&mut self, payload: &Value) -> RuntimeResult<()> {
        let Some(piece) = payload.get("piece").and_then(as_link) else {
            self.counters.inc(Counter::EventsUnknownStream);
            return Ok(());
        };
        let home = self.doc(HOME_DOC)?.unwrap_or_else(initial);
        let target = self.cell_target(&piece)?;
        let mut known = false;
        for entry in home["pieceRegistry"].as_array().into_iter().flatten() {
            if let Some(l) = as_link(entry) {
                known |= self.cell_target(&l)? == target;
            }
        }
        if !known {
            let mut registry = home["pieceRegistry"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            registry.push(payload["piece"].clone());
            self.write(
                HOME_DOC,
                &[PathSeg::Key("pieceRegistry".into())],
                json!(registry),
            )?;
        }
        if let Some(n) = home
            .get("testPieceRegistrationCount")
            .and_then(Value::as_u64)
        {
            let at = [PathSeg::Key("testPieceRegistrationCount".into())];
            self.write(HOME_DOC, &at, json!(n + 1))?;
        }
        Ok(())
    }
}
