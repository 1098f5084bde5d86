//! Handlers: running the handler an event is sent to, checking and staging
//! its writes and sends.

use super::*;
use std::collections::HashSet;

/// Keyed element documents one handler run is given at most.
const MAX_HANDLER_ELEMENTS: usize = 10_000;

impl SpaceRuntime {
    // ----- handlers ------------------------------------------------------------

    /// A document as a handler gets it: resolved, but for the links to keyed
    /// elements (`elementById`), whose documents go into `docs` beside it.
    fn handler_doc(
        &mut self,
        doc: &str,
        docs: &mut serde_json::Map<String, Value>,
    ) -> RuntimeResult<Value> {
        // Linked values say where they came from (`SpaceRuntime::sources`).
        let outer_sources = std::mem::replace(&mut self.sources, true);
        let v = self.handler_doc_walk(doc, docs);
        self.sources = outer_sources;
        v
    }

    fn handler_doc_walk(
        &mut self,
        doc: &str,
        docs: &mut serde_json::Map<String, Value>,
    ) -> RuntimeResult<Value> {
        let outer = self.element_links.replace(Vec::new());
        let v = self.value_at(doc, &[], 0);
        let mut pending = std::mem::replace(&mut self.element_links, outer).unwrap_or_default();
        let v = v?;
        // Elements of elements too, each once (a bound on the walk, too).
        while let Some(e) = pending.pop() {
            if docs.contains_key(&e) || docs.len() > MAX_HANDLER_ELEMENTS {
                continue;
            }
            let outer = self.element_links.replace(Vec::new());
            let ev = self.value_at(&e, &[], 0);
            pending.extend(std::mem::replace(&mut self.element_links, outer).unwrap_or_default());
            docs.insert(e, ev?);
        }
        Ok(v)
    }

    /// An event's payload as its handler gets it: each reference in it
    /// (a piece or a cell a client or another handler sent) becomes
    /// `{$from: the link, $at: where it leads, value}`, whose document is
    /// given beside the others (the handler's event type then decides
    /// between a cell and the value). The run may read it and send to the
    /// streams in it, and write through it only where it leads into the
    /// handler's own piece or under a cell it was given: whoever sends an
    /// event cannot hand a piece a write it was not given. An object in the
    /// payload shaped like the host's answer loses its `$at`: only the host
    /// says where a link leads.
    fn event_payload(
        &mut self,
        v: &Value,
        piece: &str,
        docs: &mut serde_json::Map<String, Value>,
        reach: &mut Reach,
        depth: usize,
    ) -> RuntimeResult<Value> {
        if depth > MAX_LINK_DEPTH * 4 {
            return Ok(Value::Null);
        }
        if let Some(l) = as_link(v) {
            let (doc, path) = self.cell_target(&l)?;
            // The sender held the link (a handler's sends are checked against
            // its own reach; a session's sender may write the space), so the
            // handler may read what it leads to, as the reference resolves an
            // event's links with the sender's rights; it may write through it
            // only where its own reach or its piece allows.
            let writable =
                capability::owned_by(&doc, piece) || reach.check_write(&doc, &path).is_ok();
            if !docs.contains_key(&doc) {
                let whole = self.handler_doc(&doc, docs)?;
                docs.insert(doc.clone(), whole);
            }
            let outer = std::mem::replace(&mut self.sources, true);
            let value = self.value_at(&doc, &path, 0);
            self.sources = outer;
            let value = value?;
            reach.add_refs_in(&value);
            reach.add_refs_in(v);
            if writable {
                reach.add_cell(&doc, &path);
            }
            return Ok(json!({
                "$from": {"doc": l.doc, "path": l.path},
                "$at": {"doc": doc, "path": path},
                "value": value,
            }));
        }
        Ok(match v {
            Value::Array(a) => Value::Array(
                a.iter()
                    .map(|x| self.event_payload(x, piece, docs, reach, depth + 1))
                    .collect::<RuntimeResult<_>>()?,
            ),
            Value::Object(m) => {
                if let Some(s) = as_stream(v) {
                    if capability::owned_by(s, piece) {
                        reach.add_stream(s);
                    }
                    return Ok(v.clone());
                }
                let forged = m.contains_key("$from");
                let mut out = serde_json::Map::new();
                for (k, x) in m {
                    if forged && k == "$at" {
                        continue;
                    }
                    out.insert(
                        k.clone(),
                        self.event_payload(x, piece, docs, reach, depth + 1)?,
                    );
                }
                Value::Object(out)
            }
            other => other.clone(),
        })
    }

    /// Runs the handler bound to `event.stream`; its writes join the wave
    /// only if it returns normally.
    pub(super) fn handle_event(&mut self, ev: &EventRecord) -> RuntimeResult<()> {
        if ev.stream == home::ADD_PIECE_STREAM {
            return self.add_piece_event(&ev.payload);
        }
        if !self.streams.contains_key(&ev.stream) {
            // A handler bound inside a frame exists once its node ran.
            self.build_frames_for(&ev.stream)?;
        }
        let Some(binding) = self.streams.get(&ev.stream) else {
            self.counters.inc(Counter::EventsUnknownStream);
            return Ok(());
        };
        let def = binding.def.clone();
        let binding_piece = binding.piece.clone();
        let schema = def.schema.clone();
        let mut docs = serde_json::Map::new();
        // What this run is given: the only targets its writes and sends may
        // have, and the only references its values may hold.
        let mut reach = Reach::new(&binding_piece);
        let context = graph::whole_context_fields(&def.context, schema.as_ref())
            .unwrap_or_else(|| def.context.clone());
        let (ctx, shape) = match &context {
            Value::Object(fields) if as_link(&context).is_none() => {
                let mut ctx = serde_json::Map::new();
                for (k, tmpl) in fields {
                    let as_cell = field_flag(schema.as_ref(), k, "asCell");
                    reach.add_refs_in(tmpl);
                    let entry = if let Some(s) = as_stream(tmpl) {
                        json!({"stream": s})
                    } else if let (Some(l), true) = (as_link(tmpl), as_cell) {
                        let (doc, path) = self.cell_target(&l)?;
                        reach.add_cell(&doc, &path);
                        if !docs.contains_key(&doc) {
                            let before: HashSet<String> = docs.keys().cloned().collect();
                            let v = self.handler_doc(&doc, &mut docs)?;
                            // What is reachable through the cell is given too,
                            // in the list elements it holds as well.
                            if let Some(under) = get_at(&v, &path) {
                                reach.add_refs_in(under);
                            }
                            for (e, ev) in docs.iter().filter(|(e, _)| !before.contains(*e)) {
                                if reach.check_write(e, &[]).is_ok() {
                                    reach.add_refs_in(ev);
                                }
                            }
                            docs.insert(doc.clone(), v);
                        }
                        json!({"cell": {"doc": doc, "path": path}})
                    } else {
                        // A value bound from a reference remembers where it
                        // lives, so `equals` and a link written back find it
                        // (the reference's query results do).
                        let outer = std::mem::replace(&mut self.sources, true);
                        let v = self.resolve_deep(tmpl.clone(), 0);
                        self.sources = outer;
                        let v = v?;
                        reach.add_refs_in(&v);
                        match as_stream(&v) {
                            Some(s) if field_flag(schema.as_ref(), k, "asStream") => {
                                json!({"stream": s})
                            }
                            _ => json!({"value": v}),
                        }
                    };
                    ctx.insert(k.clone(), entry);
                }
                (Value::Object(ctx), "fields")
            }
            other => {
                reach.add_refs_in(other);
                let v = self.resolve_deep(other.clone(), 0)?;
                reach.add_refs_in(&v);
                (json!({"value": v}), "value")
            }
        };
        let seed = handler_seed(
            &self.cfg.entropy_key,
            self.space.id(),
            &binding_piece,
            &ev.event_id,
        );
        let mut opts = CallOptions::handler(ev.fired_at_ms, seed);
        if let Some(b) = self.cfg.action_budget {
            opts = opts.with_budget(b);
        }
        // Pieces and cells the run creates are named after the event, so a
        // replay creates the same ones.
        let frame_id = format!(
            "pc-{}",
            &blake3::hash(format!("{}/{}/{}", self.space.id(), ev.stream, ev.event_id).as_bytes())
                .to_hex()[..16]
        );
        let payload = self.event_payload(&ev.payload, &binding_piece, &mut docs, &mut reach, 0)?;
        let args = [
            json!(def.fn_index),
            payload,
            ctx,
            Value::Object(docs),
            json!(shape),
            json!(frame_id),
        ];
        self.counters.inc(Counter::HandlerRuns);
        self.report.handler_runs += 1;
        self.meter_begin();
        let started = crate::clock::Stopwatch::start();
        let ran = self.sandbox.call(self.entry.run_handler, &args, &opts);
        self.meter_action(
            &ev.stream,
            def.label.as_deref(),
            &binding_piece,
            "handler",
            started.elapsed(),
        );
        self.drain_console(&binding_piece, &ev.stream);
        let action = format!("{}:{}", binding_piece, ev.stream);
        let out = match ran {
            Ok(out) => out.value,
            // The CPU-time safety net says polls were too sparse to budget
            // (one native call ran long) or the host stalled past its
            // real-time backstop, not that the event is bad: the wave fails its
            // tenure, so the event is retried alone and dead-lettered only
            // after its attempts, rather than consumed with nothing done.
            Err(
                e @ SandboxError::Preempted {
                    cause: PreemptCause::CpuDeadline,
                    ..
                },
            ) => {
                self.record_failure(&action, "handler", &e);
                return Err(RuntimeError::Sandbox(e));
            }
            Err(e) => {
                self.record_failure(&action, "handler", &e);
                return Ok(());
            }
        };
        // Everything is checked before anything applies: one write or send
        // the run was not given refuses the run as a whole.
        let mut out = out;
        // Present only when the run made pieces or cells.
        let spawns: Vec<Value> = match out.get_mut("spawns").map(Value::take) {
            Some(Value::Array(a)) => a,
            _ => Vec::new(),
        };
        let cells: Vec<graph::CellDef> = match out.get_mut("cells").map(Value::take) {
            Some(c) => serde_json::from_value(c).unwrap_or_default(),
            None => Vec::new(),
        };
        let limits = &self.cfg.limits;
        if spawns.len() > limits.action_pieces {
            let why = format!(
                "the run creates {} pieces (the limit of one run is {})",
                crate::human::thousands(spawns.len() as u64),
                crate::human::thousands(limits.action_pieces as u64)
            );
            self.refuse(&action, "handler", &why);
            return Ok(());
        }
        let new_pieces = spawns
            .iter()
            .filter(|s| !self.pieces.contains_key(s["id"].as_str().unwrap_or("")))
            .count();
        if self.pieces.len() + new_pieces > limits.space_pieces {
            let why = format!(
                "the space would hold {} pieces (the limit of one space is {})",
                crate::human::thousands((self.pieces.len() + new_pieces) as u64),
                crate::human::thousands(limits.space_pieces as u64)
            );
            self.refuse(&action, "handler", &why);
            return Ok(());
        }
        let created = spawns
            .iter()
            .try_for_each(|s| capability::check_spawned(s["id"].as_str().unwrap_or(""), &frame_id))
            .and_then(|()| {
                cells
                    .iter()
                    .try_for_each(|c| capability::check_created(&c.id, &frame_id))
            });
        if let Err(reason) = created {
            self.refuse(&action, "handler", &format!("invalid creation: {reason}"));
            return Ok(());
        }
        // What the run created is its own to link to, from its writes and
        // from the arguments of the pieces it creates (a notebook of the
        // notes made beside it).
        for id in spawns
            .iter()
            .filter_map(|s| s["id"].as_str())
            .chain(cells.iter().map(|c| c.id.as_str()))
        {
            reach.add_refs_in(&json!({"$link": {"doc": id, "path": []}}));
        }
        for s in &spawns {
            // A child gets only what the handler was given or made.
            if let Err(reason) = reach.check_value(&s["argument"]) {
                self.refuse(
                    &action,
                    "handler",
                    &format!("invalid piece argument: {reason}"),
                );
                return Ok(());
            }
        }
        for c in &cells {
            // A cell the run made is its own to write.
            reach.add_cell(&c.id, &[]);
        }
        let bytes_before = self.wave_bytes;
        let writes = match self.stage_writes(
            out.get_mut("writes").map(Value::take).unwrap_or_default(),
            &reach,
        ) {
            Ok(w) => w,
            Err(reason) => {
                self.wave_bytes = bytes_before;
                self.refuse(&action, "handler", &format!("invalid write: {reason}"));
                return Ok(());
            }
        };
        let mut sends = Vec::new();
        for (i, s) in out["sends"].as_array().into_iter().flatten().enumerate() {
            let target = match self.send_target(s, &reach) {
                Ok(t) => t,
                Err(reason) => {
                    self.wave_bytes = bytes_before;
                    self.refuse(&action, "handler", &format!("invalid send: {reason}"));
                    return Ok(());
                }
            };
            if let Some(stream) = target {
                if let Err(reason) = reach.check_value(&s["payload"]) {
                    self.wave_bytes = bytes_before;
                    self.refuse(&action, "handler", &format!("invalid send: {reason}"));
                    return Ok(());
                }
                sends.push(NewEvent {
                    event_id: derived_event_id(&ev.event_id, "send", i),
                    stream,
                    payload: s["payload"].clone(),
                    fired_by: ev.fired_by.clone(),
                });
            }
        }
        for s in &spawns {
            if let Err(e) = self.spawn_piece(s, &binding_piece) {
                self.wave_bytes = bytes_before;
                self.refuse(&action, "handler", &format!("cannot create a piece: {e}"));
                return Ok(());
            }
        }
        for c in cells {
            if self.doc(&c.id)?.is_none() {
                self.write(&c.id, &[], c.initial)?;
            }
        }
        for (doc, value) in writes {
            self.put(&doc, value);
        }
        self.sends.extend(sends);
        Ok(())
    }

    /// Creates the piece a handler instantiated (`{id, program, export,
    /// argument}`), unless a replay of the same event already did.
    fn spawn_piece(&mut self, s: &Value, parent: &str) -> RuntimeResult<()> {
        let id = s["id"].as_str().unwrap_or_default().to_string();
        if self.pieces.contains_key(&id) {
            return Ok(());
        }
        let hash = s["program"].as_str().unwrap_or_default().to_string();
        let export = s["export"].as_str().unwrap_or("default").to_string();
        let program = self.load_stored_program(&hash)?;
        // Made by its parent's code: it runs in its parent's instance.
        let owner = self
            .piece_owner
            .get(parent)
            .cloned()
            .unwrap_or_else(|| parent.to_string());
        self.record_piece(
            &id,
            &owner,
            &program,
            &export,
            Some((&s["argument"], ArgumentCheck::Lenient)),
        )?;
        let created_ms = self.clock.now_ms();
        self.write(
            PIECES_DOC,
            &[PathSeg::Key(id)],
            json!({"program": hash, "export": export, "createdMs": created_ms, "parent": parent}),
        )?;
        self.counters.inc(Counter::PiecesCreated);
        Ok(())
    }

    /// Where one send of a handler goes: a stream it was given, or the
    /// stream at a cell it was given (`None` when that cell holds none).
    pub(super) fn send_target(
        &mut self,
        s: &Value,
        reach: &Reach,
    ) -> Result<Option<String>, String> {
        if let Some(id) = as_stream_target(s) {
            reach.check_send_stream(&id)?;
            return Ok(Some(id));
        }
        let Some(l) = s.get("cell").and_then(|c| as_link(&json!({"$link": c}))) else {
            return Err("a send names neither a stream nor a cell".to_string());
        };
        reach.check_send_cell(&l.doc, &l.path)?;
        let v = self
            .value_at(&l.doc, &l.path, 0)
            .map_err(|e| e.to_string())?;
        Ok(as_stream(&v).map(str::to_string))
    }

    /// A run refused host-side: counted, reported like a failure, nothing
    /// of it applied.
    pub(super) fn refuse(&mut self, action: &str, kind: &'static str, reason: &str) {
        self.counters.inc(Counter::ActionsRefused);
        tracing::warn!(action, kind, reason, "action refused");
        self.push_failure(ActionFailure {
            action: action.to_string(),
            kind,
            error: reason.to_string(),
        });
    }

    /// Checks a handler's writes against what the run was given and the
    /// limits, and applies them in order to a copy of each document they
    /// touch: the documents' final values, or why none of them can apply.
    /// Linear in the size of the documents and of what is written: each
    /// document is copied once, each write is applied in place.
    pub(super) fn stage_writes(
        &mut self,
        writes: Value,
        reach: &Reach,
    ) -> Result<Vec<(String, Value)>, String> {
        let Value::Array(writes) = writes else {
            return Ok(Vec::new());
        };
        let limits = &self.cfg.limits;
        if writes.len() > limits.action_writes {
            return Err(format!(
                "{} writes in one run (the limit is {})",
                crate::human::thousands(writes.len() as u64),
                crate::human::thousands(limits.action_writes as u64)
            ));
        }
        let mut staged: Vec<(String, Value)> = Vec::new();
        let mut slot_of: HashMap<String, usize> = HashMap::new();
        for mut w in writes {
            let doc = w["doc"]
                .as_str()
                .ok_or("a write names no document")?
                .to_string();
            let path = crate::store::path::parse_path(&w["path"])?;
            let value = w.get_mut("value").map(Value::take).unwrap_or_default();
            reach.check_write(&doc, &path)?;
            reach.check_value(&value)?;
            // A write under a cell it was given goes where the links on the
            // way lead (`registry.key(0).key("content")` writes the note's
            // content), never into a protected document.
            let (doc, path) = if path.is_empty() {
                (doc, path)
            } else {
                self.cell_target(&Link { doc, path })
                    .map_err(|e| e.to_string())?
            };
            if capability::is_protected(&doc) {
                return Err(format!("{doc:?} cannot be written by pattern code"));
            }
            let slot = match slot_of.get(&doc) {
                Some(i) => *i,
                None => {
                    let current = self.doc(&doc).map_err(|e| e.to_string())?;
                    staged.push((doc.clone(), current.unwrap_or(Value::Null)));
                    slot_of.insert(doc.clone(), staged.len() - 1);
                    staged.len() - 1
                }
            };
            let current = std::mem::take(&mut staged[slot].1);
            staged[slot].1 = crate::store::path::set_at_owned(current, &path, value)
                .map_err(|e| format!("{doc} {}: {e}", crate::store::path::display_path(&path)))?;
        }
        for (doc, v) in &staged {
            self.check_size(doc, v)?;
        }
        Ok(staged)
    }

    /// A document value within the size limit, and the wave within its
    /// budget of bytes written (counted as each action's values apply).
    pub(super) fn check_size(&mut self, doc: &str, v: &Value) -> Result<(), String> {
        let depth = crate::store::value_depth(v);
        if depth > crate::store::MAX_VALUE_DEPTH {
            return Err(format!(
                "{doc} would nest {depth} levels of arrays and objects (the limit is {})",
                crate::store::MAX_VALUE_DEPTH
            ));
        }
        let bytes = graph::json_size(v);
        let limits = &self.cfg.limits;
        if bytes > limits.doc_bytes {
            return Err(format!(
                "{doc} would be {} (the limit of one document is {})",
                crate::human::bytes(bytes as u64),
                crate::human::bytes(limits.doc_bytes as u64)
            ));
        }
        if self.wave_bytes + bytes > limits.wave_write_bytes {
            return Err(format!(
                "the wave would write {} (the limit of one wave is {})",
                crate::human::bytes((self.wave_bytes + bytes) as u64),
                crate::human::bytes(limits.wave_write_bytes as u64)
            ));
        }
        if let Some(left) = self.storage_left {
            if (self.wave_bytes + bytes) as u64 > left {
                self.counters
                    .inc(crate::metrics::Counter::WritesRefusedByQuota);
                return Err(format!(
                    "the space's storage quota has {} left (--space-quota-mib) and this run \
                     would write {}",
                    crate::human::bytes(left),
                    crate::human::bytes((self.wave_bytes + bytes) as u64)
                ));
            }
        }
        self.wave_bytes += bytes;
        self.cache_estimate += bytes;
        Ok(())
    }

    /// Puts a document's new value into the pending wave (like
    /// [`SpaceRuntime::write`] at the root, without another copy).
    pub(super) fn put(&mut self, doc: &str, next: Value) {
        if matches!(self.docs.get(doc), Some(Some(cur)) if *cur == next) {
            return;
        }
        self.docs.insert(doc.to_string(), Some(next));
        if self.touched_set.insert(doc.to_string()) {
            self.touched.push(doc.to_string());
        }
        self.wave_writes.insert(doc.to_string());
        self.invalidate(doc);
    }

    /// Where a cell reference really points: follows links stored in
    /// documents so a handler writes the document that holds the value.
    pub(super) fn cell_target(&mut self, l: &Link) -> RuntimeResult<(String, Vec<PathSeg>)> {
        let mut doc = l.doc.clone();
        let mut path = l.path.clone();
        for _ in 0..MAX_LINK_DEPTH {
            let cur = self.doc(&doc)?.unwrap_or(Value::Null);
            let mut hop = None;
            for i in 0..=path.len() {
                if let Some(inner) = get_at(&cur, &path[..i]).and_then(as_link) {
                    let mut next = inner.path.clone();
                    next.extend_from_slice(&path[i..]);
                    hop = Some((inner.doc, next));
                    break;
                }
            }
            match hop {
                Some((d, p)) => {
                    doc = d;
                    path = p;
                }
                None => break,
            }
        }
        Ok((doc, path))
    }
}

pub(super) fn as_stream_target(s: &Value) -> Option<String> {
    s.get("stream").and_then(|v| v.as_str()).map(str::to_string)
}
