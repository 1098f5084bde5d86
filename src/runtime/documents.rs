//! Documents and links: the write-through document cache, writes into the
//! pending wave, invalidation of readers, and reads that follow links.

use super::*;

impl SpaceRuntime {
    // ----- documents ---------------------------------------------------------

    pub(super) fn doc(&mut self, id: &str) -> RuntimeResult<Option<Value>> {
        let v = match self.docs.get(id) {
            Some(v) => v.clone(),
            None => {
                let read = self.space.read(id)?;
                if let Some(d) = &read {
                    self.doc_seq.insert(id.to_string(), d.seq);
                }
                // The home document reads as its empty self until written.
                let v = read
                    .map(|d| d.value)
                    .or_else(|| (id == home::HOME_DOC).then(home::initial));
                if let Some(v) = &v {
                    self.cache_estimate += graph::json_size(v);
                }
                self.docs.insert(id.to_string(), v.clone());
                v
            }
        };
        if let Some(seen) = self.read_seq.as_mut() {
            *seen = (*seen).max(self.doc_seq.get(id).copied().unwrap_or(0));
            self.session_reads.insert(id.to_string());
        }
        Ok(v)
    }

    /// Like [`SpaceRuntime::read`], also returning the newest seq among the
    /// documents the value was assembled from: the seq a client update
    /// carries, and what a resuming client compares with.
    pub fn read_tracked(&mut self, piece: &str, path: &[PathSeg]) -> RuntimeResult<(Value, u64)> {
        self.read_seq = Some(0);
        let r = self.read(piece, path);
        let seq = self.read_seq.take().unwrap_or(0);
        Ok((r?, seq))
    }

    /// The documents sessions have read since the last call.
    pub fn take_session_reads(&mut self) -> HashSet<String> {
        std::mem::take(&mut self.session_reads)
    }

    /// Writes into the pending wave and makes every reader stale.
    /// In place: a write costs its path and its value, not the document
    /// (a handler spawning n children writes n entries of the piece list).
    pub(super) fn write(&mut self, doc: &str, path: &[PathSeg], value: Value) -> RuntimeResult<()> {
        if !self.docs.contains_key(doc) {
            self.doc(doc)?;
        }
        let slot = self.docs.get_mut(doc).expect("loaded above");
        let unchanged = slot
            .as_ref()
            .and_then(|c| crate::store::path::get_at(c, path))
            .is_some_and(|c| *c == value);
        if unchanged {
            return Ok(());
        }
        match slot {
            Some(c) if !path.is_empty() => crate::store::path::set_at_mut(c, path, value)
                .map_err(|e| RuntimeError::Invalid(format!("write to {doc}: {e}")))?,
            _ => {
                let next = set_at(None, path, value)
                    .map_err(|e| RuntimeError::Invalid(format!("write to {doc}: {e}")))?;
                *slot = Some(next);
            }
        }
        if self.touched_set.insert(doc.to_string()) {
            self.touched.push(doc.to_string());
        }
        self.wave_writes.insert(doc.to_string());
        self.invalidate(doc);
        Ok(())
    }

    /// Keeps the document cache within `RuntimeConfig::doc_cache_bytes`
    /// between waves: once the estimate passes it, measures what is cached
    /// and drops documents (largest first) until half the budget is left.
    /// Called when no wave is pending (nothing dropped is unsaved: the
    /// store has every cached document as it is).
    pub(super) fn trim_doc_cache(&mut self) {
        let budget = self.cfg.doc_cache_bytes;
        if self.cache_estimate <= budget || !self.touched.is_empty() {
            return;
        }
        let mut sized: Vec<(usize, String)> = self
            .docs
            .iter()
            .map(|(id, v)| (v.as_ref().map_or(0, graph::json_size), id.clone()))
            .collect();
        let mut held: usize = sized.iter().map(|(n, _)| n).sum();
        sized.sort_unstable_by_key(|s| std::cmp::Reverse(s.0));
        for (n, id) in sized {
            if held <= budget / 2 {
                break;
            }
            // Programs and the piece list are read at every activation and
            // by every spawn: they stay.
            if id == PIECES_DOC || id.starts_with("program/") {
                continue;
            }
            self.docs.remove(&id);
            held -= n;
            self.counters.inc(Counter::DocsEvicted);
        }
        self.cache_estimate = held;
    }

    pub(super) fn invalidate(&mut self, doc: &str) {
        let Some(readers) = self.readers.get(doc).cloned() else {
            return;
        };
        for node in readers {
            if self.fresh.remove(&node) {
                self.invalidate(&node);
            }
        }
    }

    /// The value at `path` of document `doc`, following links and pulling
    /// the derivations on the way; nested links are resolved too.
    pub(super) fn value_at(
        &mut self,
        doc: &str,
        path: &[PathSeg],
        depth: usize,
    ) -> RuntimeResult<Value> {
        if depth > MAX_LINK_DEPTH {
            return Err(RuntimeError::Invalid(format!(
                "links from {doc:?} form a cycle"
            )));
        }
        if depth >= 2 {
            // Reached through a link, not named by a template: the node
            // being refreshed (if any) depends on it too.
            if let Some(log) = self.read_log.as_mut() {
                if !log.contains(doc) {
                    log.insert(doc.to_string());
                }
            }
        }
        if self.nodes.contains_key(doc) {
            // A derivation resolves its own inputs afresh: the links this
            // read is following are not a cycle of its.
            let outer = std::mem::take(&mut self.following);
            let pulled = self.pull(doc);
            self.following = outer;
            pulled?;
        }
        let Some(mut cur) = self.doc(doc)? else {
            self.last_absent = true;
            return Ok(Value::Null);
        };
        for (i, seg) in path.iter().enumerate() {
            if let Some(l) = as_link(&cur) {
                let mut rest = l.path.clone();
                rest.extend_from_slice(&path[i..]);
                return self.value_at(&l.doc, &rest, depth + 1);
            }
            cur = match get_at(&cur, std::slice::from_ref(seg)) {
                Some(v) => v.clone(),
                None => match graph::length_of(&cur, seg) {
                    Some(n) => n,
                    None => {
                        self.last_absent = true;
                        return Ok(Value::Null);
                    }
                },
            };
        }
        let v = self.resolve_deep(cur, depth + 1);
        self.last_absent = false;
        v
    }

    pub(super) fn resolve_deep(&mut self, v: Value, depth: usize) -> RuntimeResult<Value> {
        if let Some(l) = as_link(&v) {
            // A handler's documents keep their keyed elements by link (and
            // get those documents beside them): what it writes back keeps
            // the links.
            if let Some(kept) = self.element_links.as_mut() {
                if capability::element_parent(&l.doc).is_some() {
                    kept.push(l.doc);
                    return Ok(v);
                }
            }
            // Pieces that link to each other (a mention and its backlink)
            // form a cycle through data: the second time round, the link
            // stays a link.
            let key = (l.doc.clone(), l.path.clone());
            if self.following.contains(&key) {
                return Ok(v);
            }
            self.following.push(key);
            let value = self.value_at(&l.doc, &l.path, depth + 1);
            self.following.pop();
            let value = value?;
            if graph::link_wants_cell_items(&v) {
                // `Cell<T>[]`: each element a cell over where it lives.
                let Value::Array(items) = value else {
                    return Ok(value);
                };
                let (doc, path) = self.cell_target(&l)?;
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.into_iter().enumerate() {
                    let mut at = path.clone();
                    at.push(PathSeg::Index(i));
                    let (d, p) = self.cell_target(&Link {
                        doc: doc.clone(),
                        path: at,
                    })?;
                    out.push(json!({"$cell": {"doc": d, "path": p}, "value": item}));
                }
                return Ok(Value::Array(out));
            }
            if let Some(fields) = graph::link_cell_fields(&v) {
                // Fields typed `Cell<T>`: each a cell over where it lives.
                let Value::Object(mut m) = value else {
                    return Ok(value);
                };
                for f in fields {
                    let Some(item) = m.remove(&f) else {
                        continue;
                    };
                    let mut at = l.path.clone();
                    at.push(PathSeg::Key(f.clone()));
                    let (d, p) = self.cell_target(&Link {
                        doc: l.doc.clone(),
                        path: at,
                    })?;
                    m.insert(f, json!({"$cell": {"doc": d, "path": p}, "value": item}));
                }
                return Ok(Value::Object(m));
            }
            if graph::link_wants_cell(&v) {
                // A `Cell`-typed input: the run builds a cell over the value.
                let (doc, path) = self.cell_target(&l)?;
                return Ok(json!({"$cell": {"doc": doc, "path": path}, "value": value}));
            }
            if self.sources && (value.is_object() || value.is_array()) {
                // A handler's documents say where a linked value came from
                // (`{$from: the link as stored, $at: where it leads, value}`):
                // written back unchanged it is that link again, and `equals`
                // compares where it leads, as in the reference.
                let (doc, path) = self.cell_target(&l)?;
                self.sources_made += 1;
                return Ok(json!({
                    "$from": {"doc": l.doc, "path": l.path},
                    "$at": {"doc": doc, "path": path},
                    "value": value,
                }));
            }
            return Ok(value);
        }
        Ok(match v {
            Value::Array(a) => Value::Array(
                a.into_iter()
                    .map(|x| self.resolve_deep(x, depth))
                    .collect::<RuntimeResult<_>>()?,
            ),
            Value::Object(m) => {
                if m.contains_key("$stream") {
                    return Ok(Value::Object(m));
                }
                let mut out = serde_json::Map::new();
                for (k, x) in m {
                    // A link read as a value (a cell over nothing is still a cell).
                    let linked = as_link(&x).is_some()
                        && !graph::link_wants_cell(&x)
                        && !graph::link_wants_cell_items(&x)
                        && graph::link_cell_fields(&x).is_none();
                    self.last_absent = false;
                    let v = self.resolve_deep(x, depth)?;
                    // A link to nothing: the field is left out (undefined).
                    if !(linked && self.last_absent) {
                        out.insert(k, v);
                    }
                    self.last_absent = false;
                }
                Value::Object(out)
            }
            other => other,
        })
    }

    /// Resolves a path into a piece's result: what a client or a scenario
    /// reads. Pulls exactly the derivations the path needs.
    pub fn read(&mut self, piece: &str, path: &[PathSeg]) -> RuntimeResult<Value> {
        if !self.pieces.contains_key(piece) {
            return Err(RuntimeError::UnknownPiece(piece.to_string()));
        }
        self.advance_clocks();
        self.value_at(piece, path, 0)
    }

    /// The stream at a result path (following links), if it is one.
    pub fn stream_at(&mut self, piece: &str, path: &[PathSeg]) -> RuntimeResult<Option<String>> {
        let mut doc = piece.to_string();
        let mut cur = self.doc(&doc)?.unwrap_or(Value::Null);
        let mut rest: Vec<PathSeg> = path.to_vec();
        for _ in 0..MAX_LINK_DEPTH {
            let mut followed = false;
            for i in 0..=rest.len() {
                let here = get_at(&cur, &rest[..i]).cloned().unwrap_or(Value::Null);
                if let Some(l) = as_link(&here) {
                    let mut next = l.path.clone();
                    next.extend_from_slice(&rest[i..]);
                    doc = l.doc;
                    // A derived document (a map's output) is brought up to
                    // date first: the streams it lists exist once it ran.
                    self.build_frames_for(&doc)?;
                    if self.nodes.contains_key(&doc) {
                        self.pull(&doc)?;
                    }
                    cur = self.doc(&doc)?.unwrap_or(Value::Null);
                    rest = next;
                    followed = true;
                    break;
                }
                if i == rest.len() {
                    return Ok(as_stream(&here).map(str::to_string));
                }
            }
            if !followed {
                break;
            }
        }
        Ok(None)
    }
}
