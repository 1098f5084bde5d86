//! Pulling derivations: bringing a node up to date, upstream first, and
//! checking what it returns against what it was given.

use super::*;

impl SpaceRuntime {
    // ----- derivations -----------------------------------------------------

    pub(super) fn options_reactive(&self) -> CallOptions {
        let o = CallOptions::reactive();
        match self.cfg.action_budget {
            Some(b) => o.with_budget(b),
            None => o,
        }
    }

    /// Brings one node up to date, upstream first. The stale upstream nodes
    /// are ordered by an explicit depth-first walk rather than recursion, so
    /// a long lift chain neither overflows the native stack nor trips the
    /// engine's stack check (QuickJS measures the native stack).
    pub(super) fn pull(&mut self, id: &str) -> RuntimeResult<()> {
        if self.fresh.contains(id) {
            return Ok(());
        }
        // A derivation's inputs are values through and through, also when a
        // handler's read (which keeps keyed elements by link) reached it.
        let kept = self.element_links.take();
        let pulled = self.pull_stale(id);
        self.element_links = kept;
        pulled
    }

    fn pull_stale(&mut self, id: &str) -> RuntimeResult<()> {
        let mut order = Vec::new();
        let mut visited = HashSet::new();
        let mut stack = vec![(id.to_string(), false)];
        while let Some((n, expanded)) = stack.pop() {
            if expanded {
                order.push(n);
                continue;
            }
            if self.fresh.contains(&n) || !visited.insert(n.clone()) {
                continue;
            }
            stack.push((n.clone(), true));
            let mut reads = Vec::new();
            linked_docs(&self.nodes[&n].def.args, &mut reads);
            for d in reads {
                if self.nodes.contains_key(&d) && !self.fresh.contains(&d) && !visited.contains(&d)
                {
                    stack.push((d, false));
                }
            }
        }
        for n in order {
            self.refresh_node(&n)?;
        }
        Ok(())
    }

    /// Runs one node whose upstream is already fresh, unless its inputs hash
    /// matches its last run.
    pub(super) fn refresh_node(&mut self, id: &str) -> RuntimeResult<()> {
        if self.fresh.contains(id) {
            return Ok(());
        }
        if self.waits_on_a_first_run(id)? {
            // Left stale: it runs when next pulled, with that input there.
            self.counters.inc(Counter::DerivationsDeferred);
            return Ok(());
        }
        // Mark first: a cycle through this node then reads its old value
        // instead of recursing forever.
        self.fresh.insert(id.to_string());
        match self.nodes[id].def.kind.as_str() {
            "clock" => return self.refresh_clock(id),
            "effect" => return self.refresh_effect(id),
            _ => {}
        }
        self.refreshing.push(id.to_string());
        let refreshed = self.refresh_marked(id);
        self.refreshing.pop();
        refreshed
    }

    /// Whether `id` reads a node whose refresh is under way (this pull was
    /// reached while resolving that node's inputs: a cycle through data, a
    /// list holding a piece that reads the list) and which has no output
    /// yet: run now, it would see nothing where that output will be.
    fn waits_on_a_first_run(&mut self, id: &str) -> RuntimeResult<bool> {
        if self.refreshing.is_empty() {
            return Ok(false);
        }
        let mut reads = Vec::new();
        linked_docs(&self.nodes[id].def.args, &mut reads);
        for d in reads {
            if self.refreshing.contains(&d) && self.doc(&d)?.is_none() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn refresh_marked(&mut self, id: &str) -> RuntimeResult<()> {
        let (template, fn_index, is_map) = {
            let n = &self.nodes[id];
            (n.def.args.clone(), n.def.fn_index, n.def.kind == "map")
        };
        // Every document the inputs are read from, through links too (a
        // child's result, a cell holding a link), makes this node stale
        // when written.
        let has_cells = graph::has_cell_link(&template);
        // A reactive map runs one sub-pattern per element, each reading its
        // own element: the map itself depends only on the source and length.
        let map_source = is_map.then(|| template.get(0).and_then(as_link)).flatten();
        // A map reads its source's length here: its elements are references.
        let (resolved, sourced) = self.resolve_inputs(id, template, !is_map)?;
        let has_cells = has_cells || sourced;
        let map_len = resolved
            .get(0)
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let plain_hash = match (&map_source, is_map) {
            (Some(l), _) => blake3::hash(format!("map {l:?} {map_len}").as_bytes()),
            _ => blake3::hash(resolved.to_string().as_bytes()),
        }
        .to_hex()
        .to_string();
        let has_output = self.doc(id)?.is_some();
        // A node whose last run built a frame runs once per tenure anyway:
        // its frame's graph lives in this sandbox only.
        let stored = self.action_hash.get(id).map(String::as_str);
        let fresh_by_hash = stored == Some(plain_hash.as_str())
            || (self.framed.contains(id)
                && stored.is_some_and(|s| s.strip_suffix(FRAMED) == Some(plain_hash.as_str())));
        if has_output && fresh_by_hash {
            self.counters.inc(Counter::DerivationsSkippedFresh);
            return Ok(());
        }
        let call_args = if is_map {
            let values = resolved.get(0).cloned().unwrap_or(Value::Null);
            let link = map_source
                .as_ref()
                .map_or(Value::Null, |l| json!({"doc": l.doc, "path": l.path}));
            vec![json!(fn_index), json!(id), link, json!(map_len), values]
        } else {
            let args = match resolved {
                Value::Array(a) => a,
                other => vec![other],
            };
            vec![
                json!(fn_index),
                Value::Array(args),
                json!(id),
                json!(has_cells),
            ]
        };
        let entry = if is_map {
            self.entry.run_map
        } else {
            self.entry.run_node
        };
        self.meter_begin();
        let started = crate::clock::Stopwatch::start();
        let ran = self
            .sandbox
            .call_run(entry, &call_args, &self.options_reactive());
        let (piece, label) = self
            .nodes
            .get(id)
            .map(|n| (n.piece.clone(), n.def.label.clone()))
            .unwrap_or_default();
        // `total (n2)`, or `computed (n3)` for a derivation with no name.
        self.meter_action(id, Some(&label), &piece, "derivation", started.elapsed());
        self.drain_console(&piece, id);
        let ran = ran.and_then(|out| {
            Frame::from_run(out.value).map_err(|e| SandboxError::Threw {
                name: "TypeError".to_string(),
                message: format!("derivation output: {e}"),
                stack: None,
            })
        });
        // Its output (and what it built) may refer only to what its
        // arguments referred to, or to its own piece.
        let ran = match ran {
            Ok(frame) if graph::has_refs(&frame.value) || !frame.is_empty() => {
                let reach = self.node_reach(id, &piece)?;
                let checked = frame
                    .nodes
                    .iter()
                    .map(|n| &n.id)
                    .chain(frame.streams.iter().map(|s| &s.id))
                    .chain(frame.cells.iter().map(|c| &c.id))
                    .try_for_each(|built| capability::check_created(built, id))
                    .and_then(|()| {
                        std::iter::once(&frame.value)
                            .chain(frame.nodes.iter().map(|n| &n.args))
                            .chain(frame.streams.iter().map(|s| &s.context))
                            .chain(frame.cells.iter().map(|c| &c.initial))
                            .try_for_each(|v| reach.check_value(v))
                    });
                Ok((checked, frame))
            }
            other => other.map(|frame| (Ok(()), frame)),
        };
        match ran {
            Ok((Err(reason), _)) => {
                self.refuse(id, "derivation", &format!("invalid output: {reason}"));
            }
            Ok((Ok(()), frame)) => {
                if let Err(reason) = self.check_size(id, &frame.value) {
                    self.refuse(id, "derivation", &format!("invalid output: {reason}"));
                    return Ok(());
                }
                if let Some(n) = self.nodes.get_mut(id) {
                    n.runs += 1;
                }
                self.counters.inc(Counter::DerivationRuns);
                self.report.derivation_runs += 1;
                let had_frame = self.framed.contains(id);
                let hash = if frame.is_empty() && !had_frame {
                    plain_hash
                } else {
                    format!("{plain_hash}{FRAMED}")
                };
                let Frame {
                    value,
                    nodes,
                    streams,
                    cells,
                    writes,
                } = frame;
                // A derivation may write the cells it was given, as in the
                // reference (an effect; it should be idempotent).
                if !writes.is_null() {
                    let reach = self.node_reach(id, &piece)?;
                    match self.stage_writes(writes, &reach) {
                        Ok(staged) => {
                            for (doc, v) in staged {
                                self.put(&doc, v);
                            }
                        }
                        Err(reason) => {
                            self.refuse(id, "derivation", &format!("invalid write: {reason}"));
                            return Ok(());
                        }
                    }
                }
                if had_frame || !nodes.is_empty() || !streams.is_empty() || !cells.is_empty() {
                    self.replace_frame(id, &piece, nodes, streams, cells)?;
                }
                self.write(id, &[], value)?;
                // Writing made readers stale, including possibly ourselves.
                self.fresh.insert(id.to_string());
                self.action_hash.insert(id.to_string(), hash.clone());
                self.hashes_to_store.insert(id.to_string(), hash);
            }
            Err(e) => self.record_failure(id, "derivation", &e),
        }
        Ok(())
    }

    /// Ids of the nodes and streams a node's last run built.
    fn frame_of(&self, id: &str) -> Vec<String> {
        let prefix = format!("{id}/");
        self.nodes
            .keys()
            .chain(self.streams.keys())
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect()
    }

    /// Installs what a node's run built in place of what its previous run
    /// built: nodes whose definition did not change keep their freshness.
    fn replace_frame(
        &mut self,
        id: &str,
        piece: &str,
        nodes: Vec<NodeDef>,
        streams: Vec<StreamDef>,
        cells: Vec<graph::CellDef>,
    ) -> RuntimeResult<()> {
        let keep: HashSet<&str> = nodes
            .iter()
            .map(|n| n.id.as_str())
            .chain(streams.iter().map(|s| s.id.as_str()))
            .collect();
        // Anything under the prefix the new run did not build is gone
        // (with its own frames: their ids share the prefix).
        let gone: Vec<String> = self
            .frame_of(id)
            .into_iter()
            .filter(|k| {
                !keep
                    .iter()
                    .any(|kept| k == kept || k.starts_with(&format!("{kept}/")))
            })
            .collect();
        for g in gone {
            self.nodes.remove(&g);
            self.streams.remove(&g);
            self.fresh.remove(&g);
            self.framed.remove(&g);
        }
        self.add_graph(piece, nodes, streams, cells)?;
        self.framed.insert(id.to_string());
        Ok(())
    }

    /// Registers nodes, bindings and cells recorded for `piece` (by its
    /// pattern body or by a node's frame). A node whose definition is the
    /// same as before (but for its function's index) keeps its freshness.
    pub(super) fn add_graph(
        &mut self,
        piece: &str,
        nodes: Vec<NodeDef>,
        streams: Vec<StreamDef>,
        cells: Vec<graph::CellDef>,
    ) -> RuntimeResult<()> {
        self.effects = None;
        for c in cells {
            let current = self.doc(&c.id)?;
            if current.is_none() || (c.result && current.as_ref() != Some(&c.initial)) {
                self.write(&c.id, &[], c.initial)?;
            }
        }
        for n in nodes {
            if let Some(old) = self.nodes.get_mut(&n.id) {
                if old.def.kind == n.kind && old.def.args == n.args && old.def.label == n.label {
                    old.def.fn_index = n.fn_index;
                    continue;
                }
            }
            let mut reads = Vec::new();
            linked_docs(&n.args, &mut reads);
            for d in reads {
                self.readers.entry(d).or_default().insert(n.id.clone());
            }
            self.fresh.remove(&n.id);
            self.nodes.insert(
                n.id.clone(),
                Node {
                    def: n,
                    piece: piece.to_string(),
                    runs: 0,
                },
            );
        }
        for s in streams {
            self.streams.insert(
                s.id.clone(),
                Binding {
                    def: s,
                    piece: piece.to_string(),
                },
            );
        }
        Ok(())
    }

    /// Builds the frames a document or stream id lies in: the nodes whose
    /// ids prefix it are pulled, outermost first (a sub-pattern of a
    /// reactive map exists only once its map ran in this tenure).
    pub(super) fn build_frames_for(&mut self, id: &str) -> RuntimeResult<()> {
        let cuts: Vec<usize> = id.match_indices('/').map(|(i, _)| i).skip(1).collect();
        for cut in cuts {
            let owner = &id[..cut];
            if self.nodes.contains_key(owner) && !self.framed.contains(owner) {
                self.pull(owner)?;
            }
        }
        Ok(())
    }

    /// What a derivation was given: the references and streams of its
    /// argument templates and of their current values.
    pub(super) fn node_reach(&mut self, id: &str, piece: &str) -> RuntimeResult<Reach> {
        let template = self.nodes[id].def.args.clone();
        let mut reach = Reach::new(piece);
        reach.add_refs_in(&template);
        let (resolved, _) = self.resolve_sourced(template, true)?;
        reach.add_refs_in(&resolved);
        Ok(reach)
    }

    /// A derivation's arguments resolved, the linked values in them saying
    /// where they came from when `sources` (`SpaceRuntime::sources`); the
    /// flag says whether any did.
    /// A node's inputs resolved, every document they were read from
    /// recorded as making the node stale when written.
    pub(super) fn resolve_inputs(
        &mut self,
        id: &str,
        template: Value,
        sources: bool,
    ) -> RuntimeResult<(Value, bool)> {
        let outer_log = self.read_log.replace(HashSet::new());
        let resolved = self.resolve_sourced(template, sources);
        let read = std::mem::replace(&mut self.read_log, outer_log).unwrap_or_default();
        for d in read {
            if d != id {
                let r = self.readers.entry(d).or_default();
                if !r.contains(id) {
                    r.insert(id.to_string());
                }
            }
        }
        resolved
    }

    fn resolve_sourced(&mut self, template: Value, sources: bool) -> RuntimeResult<(Value, bool)> {
        let (outer, made) = (
            std::mem::replace(&mut self.sources, sources),
            self.sources_made,
        );
        let resolved = self.resolve_deep(template, 0);
        self.sources = outer;
        Ok((resolved?, self.sources_made > made))
    }
}

impl SpaceRuntime {
    // ----- the idempotency check -------------------------------------------

    /// The derivations that would change something if run again now, on the
    /// inputs they last ran on (the reference's idempotency check, which its
    /// test runner offers as `expectNonIdempotent`): a settled space has
    /// none. Each is run once more without applying anything; one whose
    /// output or writes differ from what the documents hold is named.
    /// Derivations that build (frames, maps) and host clocks are left out.
    pub fn idempotency_violations(&mut self) -> RuntimeResult<Vec<String>> {
        let mut ids: Vec<String> = self
            .nodes
            .iter()
            .filter(|(id, n)| {
                !matches!(n.def.kind.as_str(), "map" | "clock" | "effect")
                    && !self.framed.contains(*id)
            })
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        let mut out = Vec::new();
        for id in ids {
            if self.changes_if_rerun(&id)? {
                out.push(id);
            }
        }
        Ok(out)
    }

    fn changes_if_rerun(&mut self, id: &str) -> RuntimeResult<bool> {
        let (template, fn_index) = {
            let n = &self.nodes[id];
            (n.def.args.clone(), n.def.fn_index)
        };
        let has_cells = graph::has_cell_link(&template);
        let (resolved, sourced) = self.resolve_sourced(template, true)?;
        let has_cells = has_cells || sourced;
        let args = match resolved {
            Value::Array(a) => a,
            other => vec![other],
        };
        let call = [
            json!(fn_index),
            Value::Array(args),
            json!(id),
            json!(has_cells),
        ];
        let ran = self
            .sandbox
            .call_run(self.entry.run_node, &call, &self.options_reactive());
        // A run that fails now is reported by the waves, not here.
        let Ok(frame) = ran.map(|out| Frame::from_run(out.value)) else {
            return Ok(false);
        };
        let Ok(frame) = frame else {
            return Ok(false);
        };
        if !frame.nodes.is_empty() || !frame.streams.is_empty() || !frame.cells.is_empty() {
            return Ok(false);
        }
        if self.doc(id)?.unwrap_or(Value::Null) != frame.value {
            return Ok(true);
        }
        let Value::Array(writes) = frame.writes else {
            return Ok(false);
        };
        for w in writes {
            let (Some(doc), Ok(path)) = (
                w["doc"].as_str(),
                crate::store::path::parse_path(&w["path"]),
            ) else {
                continue;
            };
            let (doc, path) = self.cell_target(&Link {
                doc: doc.to_string(),
                path,
            })?;
            let now = self.doc(&doc)?.unwrap_or(Value::Null);
            let held = get_at(&now, &path).cloned().unwrap_or(Value::Null);
            if held != w["value"] {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
