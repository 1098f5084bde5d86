//! What one action of a piece was given, and the host-side check of what it
//! returns against that. Pure: no I/O and no JavaScript.
//!
//! Pattern code returns writes, sends and values as JSON, so JSON is all a
//! forger controls. Every write target, every send target and every
//! reference (`$link`) or stream (`$stream`) inside a returned value is
//! checked here against the action's [`Reach`] before anything applies; one
//! refusal fails the whole action.
//!
//! The model (as the reference runtime's): an action may write through the
//! cells it was given and the paths under them, send to the streams it was
//! given, and link to what it was given or to its own piece's documents.
//! Some documents no pattern code may write at all ([`is_protected`]):
//! program sources, the space's piece list, and piece results (those are
//! written only from the validated pattern body at instantiation).

use super::graph::{as_link, as_stream, Link};
use super::PIECES_DOC;
use crate::store::PathSeg;
use serde_json::Value;
use std::collections::HashSet;

/// What one action (instantiation, derivation or handler) of a piece was
/// given.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    piece: String,
    /// Cells it may write through (already resolved to the document that
    /// holds the value), and write under.
    cells: Vec<Link>,
    /// References it was given (to link to, not to write).
    links: Vec<Link>,
    streams: HashSet<String>,
}

impl Reach {
    pub fn new(piece: &str) -> Self {
        Reach {
            piece: piece.to_string(),
            ..Reach::default()
        }
    }

    /// A cell the action may write through.
    pub fn add_cell(&mut self, doc: &str, path: &[PathSeg]) {
        let l = Link {
            doc: doc.to_string(),
            path: path.to_vec(),
        };
        self.links.push(l.clone());
        self.cells.push(l);
    }

    pub fn add_stream(&mut self, id: &str) {
        self.streams.insert(id.to_string());
    }

    /// Every reference and stream inside `v` (a template or a value the
    /// action was handed).
    pub fn add_refs_in(&mut self, v: &Value) {
        if let Some(l) = as_link(v) {
            self.links.push(l);
            return;
        }
        // A cell handed to a derivation (`{$cell, value}`): its target is
        // given, and may be written by the derivation.
        if let Some(l) = v
            .get("$cell")
            .and_then(|c| as_link(&serde_json::json!({"$link": c})))
        {
            self.add_cell(&l.doc, &l.path);
            self.links.push(l);
            if let Some(inner) = v.get("value") {
                self.add_refs_in(inner);
            }
            return;
        }
        if let Some(s) = as_stream(v) {
            self.streams.insert(s.to_string());
            return;
        }
        // A linked value in a handler's documents (`{$from, $at, value}`):
        // the link is given too, to write back.
        if let Some(l) = v
            .get("$from")
            .and_then(|c| as_link(&serde_json::json!({"$link": c})))
        {
            self.links.push(l);
            if let Some(inner) = v.get("value") {
                self.add_refs_in(inner);
            }
            return;
        }
        match v {
            Value::Array(a) => a.iter().for_each(|x| self.add_refs_in(x)),
            Value::Object(m) => m.values().for_each(|x| self.add_refs_in(x)),
            _ => {}
        }
    }

    fn owns(&self, doc: &str) -> bool {
        owned_by(doc, &self.piece)
    }

    /// Whether `doc` at `path` is at or under a cell it was given, or is a
    /// keyed element (anywhere in it) of an array at or under one.
    fn under_a_cell(&self, doc: &str, path: &[PathSeg]) -> bool {
        self.cells
            .iter()
            .any(|c| c.doc == doc && path.starts_with(&c.path))
            || self.an_element_given(doc, |c| &c.cells)
    }

    /// Whether `doc` is a keyed element of an array at or under one of the
    /// links `of` picks.
    fn an_element_given(&self, doc: &str, of: impl Fn(&Self) -> &Vec<Link>) -> bool {
        let Some((parent, path)) = element_parent(doc) else {
            return false;
        };
        let given = of(self).iter().any(|c| {
            c.doc == parent
                && c.path.len() <= path.len()
                && c.path.iter().zip(&path).all(|(a, b)| seg_text(a) == *b)
        });
        given || self.an_element_given(&parent, of)
    }

    /// A write of `doc` at `path`: under a cell it was given, and never a
    /// protected document.
    pub fn check_write(&self, doc: &str, path: &[PathSeg]) -> Result<(), String> {
        if is_protected(doc) {
            return Err(format!("{doc:?} cannot be written by pattern code"));
        }
        if self.under_a_cell(doc, path) {
            return Ok(());
        }
        Err(format!(
            "a write to {doc:?} at {} was not given to this action",
            crate::store::path::display_path(path)
        ))
    }

    /// A send through a cell: the cell must be one it was given.
    pub fn check_send_cell(&self, doc: &str, path: &[PathSeg]) -> Result<(), String> {
        if self.under_a_cell(doc, path) {
            return Ok(());
        }
        Err(format!(
            "a send through {doc:?} at {} was not given to this action",
            crate::store::path::display_path(path)
        ))
    }

    pub fn check_send_stream(&self, id: &str) -> Result<(), String> {
        if self.streams.contains(id) {
            return Ok(());
        }
        Err(format!(
            "a send to stream {id:?} was not given to this action"
        ))
    }

    /// Every reference and stream inside a value the action returns or
    /// writes: to something it was given, or to its own piece.
    pub fn check_value(&self, v: &Value) -> Result<(), String> {
        if let Some(l) = as_link(v) {
            let given = self
                .links
                .iter()
                .any(|g| g.doc == l.doc && l.path.starts_with(&g.path))
                || self.an_element_given(&l.doc, |r| &r.links);
            if given || self.owns(&l.doc) {
                return Ok(());
            }
            return Err(format!(
                "a reference to {:?} was not given to this action",
                l.doc
            ));
        }
        if let Some(s) = as_stream(v) {
            if self.streams.contains(s) || self.owns(s) {
                return Ok(());
            }
            return Err(format!("stream {s:?} was not given to this action"));
        }
        match v {
            Value::Array(a) => a.iter().try_for_each(|x| self.check_value(x)),
            Value::Object(m) => m.values().try_for_each(|x| self.check_value(x)),
            _ => Ok(()),
        }
    }
}

/// Between an array's document and its keyed elements' documents
/// (`Cell.elementById` in the authoring API, which makes the same ids).
pub const ELEMENT_MARK: &str = "/#el/";

/// The array a keyed element's document belongs to, named in its id:
/// `DOC/#el/SEG/…/~KEY` (segments and key percent-encoded), so that an
/// action given a cell of the array may write and link its elements.
pub fn element_parent(doc: &str) -> Option<(String, Vec<String>)> {
    let at = doc.rfind(ELEMENT_MARK)?;
    let (parent, rest) = (&doc[..at], &doc[at + ELEMENT_MARK.len()..]);
    let (segs, key) = match rest.rsplit_once('/') {
        Some((segs, key)) => (segs.split('/').collect::<Vec<_>>(), key),
        None => (Vec::new(), rest),
    };
    let key = key.strip_prefix('~')?;
    if parent.is_empty()
        || key.contains('~')
        || segs.iter().any(|s| s.is_empty() || s.contains('~'))
    {
        return None;
    }
    let path = segs
        .iter()
        .map(|s| percent_decode(s))
        .collect::<Option<Vec<_>>>()?;
    Some((parent.to_string(), path))
}

fn percent_decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A path's segments as text (an index and its digits compare equal).
fn seg_text(s: &PathSeg) -> String {
    match s {
        PathSeg::Index(i) => i.to_string(),
        PathSeg::Key(k) => k.clone(),
    }
}

/// Whether document (or stream) `id` belongs to `piece`: the piece's own
/// ids all start with its id.
pub fn owned_by(id: &str, piece: &str) -> bool {
    id.strip_prefix(piece)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// An id a run built (a node, stream or cell of a pattern body or a
/// derivation's frame, a cell a handler made) lies under the run's own
/// prefix (`piece/…` for a pattern body, `node/…` for a frame, the handler
/// frame's id) and is never a protected document: the ids are made by the
/// authoring API, and this check keeps that true whatever JSON comes back.
pub fn check_created(id: &str, prefix: &str) -> Result<(), String> {
    if id.len() > prefix.len() && owned_by(id, prefix) && !is_protected(id) {
        return Ok(());
    }
    Err(format!(
        "{id:?} is not an id this run may create (under {prefix:?})"
    ))
}

/// A piece a handler run spawned is named `FRAME-N` after the run's frame.
pub fn check_spawned(id: &str, frame: &str) -> Result<(), String> {
    let ok = id
        .strip_prefix(frame)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    match ok {
        true => Ok(()),
        false => Err(format!("{id:?} is not a piece this run may create")),
    }
}

/// Documents no pattern code may write: program sources, the piece list,
/// the record of pieces set aside, and piece results (top-level ids).
pub fn is_protected(doc: &str) -> bool {
    doc == PIECES_DOC
        || doc == super::SET_ASIDE_DOC
        || doc.starts_with("program/")
        || !doc.contains('/')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(k: &str) -> PathSeg {
        PathSeg::Key(k.to_string())
    }

    #[test]
    fn writes_go_only_under_given_cells() {
        let mut r = Reach::new("pc-a");
        r.add_cell("pc-a/c0", &[key("items")]);
        assert!(r.check_write("pc-a/c0", &[key("items")]).is_ok());
        assert!(r
            .check_write("pc-a/c0", &[key("items"), PathSeg::Index(3)])
            .is_ok());
        // Its own piece, but not given.
        assert!(r.check_write("pc-a/c0", &[key("other")]).is_err());
        assert!(r.check_write("pc-a/c1", &[]).is_err());
        assert!(r.check_write("pc-b/argument", &[]).is_err());
    }

    #[test]
    fn a_run_creates_only_under_its_own_prefix() {
        assert!(check_created("p1/n0", "p1").is_ok());
        assert!(check_created("p1/n0/c1", "p1/n0").is_ok());
        for (id, prefix) in [
            ("p1", "p1"),
            ("p2/c0", "p1"),
            ("p10/c0", "p1"),
            ("program/abc", "program"),
            ("space/pieces", "space"),
            ("p1", "p1/n0"),
        ] {
            assert!(check_created(id, prefix).is_err(), "{id} under {prefix}");
        }
        assert!(check_spawned("pc-ab-0", "pc-ab").is_ok());
        assert!(check_spawned("pc-ab-12", "pc-ab").is_ok());
        for id in [
            "pc-ab",
            "pc-ab-",
            "pc-ab-x",
            "program/x",
            "pc-ab-1/c",
            "owner",
        ] {
            assert!(check_spawned(id, "pc-ab").is_err(), "{id}");
        }
    }

    #[test]
    fn protected_documents_are_never_writable() {
        let mut r = Reach::new("pc-a");
        // Even a cell that resolves to one (a deployer's link) does not help.
        r.add_cell(PIECES_DOC, &[]);
        r.add_cell("program/abc", &[]);
        r.add_cell("pc-a", &[]);
        for doc in [PIECES_DOC, "program/abc", "pc-a"] {
            let e = r.check_write(doc, &[]).unwrap_err();
            assert!(e.contains("cannot be written"), "{e}");
        }
    }

    #[test]
    fn sends_go_only_to_given_streams_and_cells() {
        let mut r = Reach::new("pc-a");
        r.add_stream("pc-a/s1");
        r.add_cell("pc-a/c0", &[]);
        assert!(r.check_send_stream("pc-a/s1").is_ok());
        assert!(r.check_send_stream("pc-a/s2").is_err());
        assert!(r.check_send_stream("pc-b/s0").is_err());
        assert!(r.check_send_cell("pc-a/c0", &[key("x")]).is_ok());
        assert!(r.check_send_cell("pc-b/c0", &[]).is_err());
    }

    #[test]
    fn values_may_refer_to_what_was_given_or_owned() {
        let mut r = Reach::new("pc-a");
        r.add_refs_in(
            &json!({"x": {"$link": {"doc": "pc-b/c0", "path": ["list"]}},
                              "s": {"$stream": "pc-b/s0"}}),
        );
        let ok = json!([
            {"$link": {"doc": "pc-b/c0", "path": ["list", 2]}},
            {"$link": {"doc": "pc-a/c4", "path": []}},
            {"$stream": "pc-b/s0"},
            {"$stream": "pc-a/s9"},
            {"plain": "data"}
        ]);
        assert!(r.check_value(&ok).is_ok());
        for bad in [
            json!({"$link": {"doc": "pc-b/c0", "path": []}}),
            json!({"deep": [{"$link": {"doc": "pc-b/argument", "path": []}}]}),
            json!({"$link": {"doc": PIECES_DOC, "path": []}}),
            json!({"$link": {"doc": "pc-b", "path": []}}),
            json!({"$stream": "pc-b/s1"}),
        ] {
            assert!(r.check_value(&bad).is_err(), "{bad}");
        }
        // A piece id that merely starts with ours is not ours.
        assert!(!owned_by("pc-ab/c0", "pc-a"));
        assert!(owned_by("pc-a/p3/c0", "pc-a"));
    }

    #[test]
    fn a_keyed_element_belongs_to_the_array_its_id_names() {
        assert_eq!(
            element_parent("pc-a/c0/#el/items/~k%2F1"),
            Some(("pc-a/c0".to_string(), vec!["items".to_string()]))
        );
        assert_eq!(
            element_parent("pc-a/c0/#el/~x"),
            Some(("pc-a/c0".to_string(), vec![]))
        );
        // Nested: the last mark names the nearest array.
        assert_eq!(
            element_parent("d/x/#el/~a/#el/l/~b").map(|p| p.0),
            Some("d/x/#el/~a".to_string())
        );
        for bad in [
            "pc-a/c0",
            "/#el/~x",
            "d/x/#el/items",
            "d/x/#el/a//~k",
            "d/x/#el/~a~b",
        ] {
            assert_eq!(element_parent(bad), None, "{bad}");
        }

        let mut r = Reach::new("pc-b");
        r.add_cell("pc-a/c0", &[key("items")]);
        assert!(r.check_write("pc-a/c0/#el/items/~k", &[]).is_ok());
        assert!(r
            .check_write("pc-a/c0/#el/items/3/~k", &[key("title")])
            .is_ok());
        assert!(
            r.check_write("pc-a/c0/#el/items/~k/#el/~j", &[]).is_ok(),
            "an element's element"
        );
        assert!(
            r.check_write("pc-a/c0/#el/other/~k", &[]).is_err(),
            "another field's"
        );
        assert!(
            r.check_write("pc-a/c1/#el/items/~k", &[]).is_err(),
            "another document's"
        );
        let link = json!({"$link": {"doc": "pc-a/c0/#el/items/~k", "path": []}});
        assert!(r.check_value(&json!([link])).is_ok());
        let other = json!({"$link": {"doc": "pc-z/c0/#el/items/~k", "path": []}});
        assert!(r.check_value(&other).is_err());
    }
}
