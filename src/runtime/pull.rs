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
        // Mark first: a cycle through this node then reads its old value
        // instead of recursing forever.
        self.fresh.insert(id.to_string());
        let (args, fn_index) = {
            let n = &self.nodes[id];
            (n.def.args.clone(), n.def.fn_index)
        };
        let resolved = self.resolve_deep(args, 0)?;
        let hash = blake3::hash(resolved.to_string().as_bytes())
            .to_hex()
            .to_string();
        let has_output = self.doc(id)?.is_some();
        if has_output && self.action_hash.get(id) == Some(&hash) {
            self.counters.inc(Counter::DerivationsSkippedFresh);
            return Ok(());
        }
        let args = match resolved {
            Value::Array(a) => a,
            other => vec![other],
        };
        let call_args = [json!(fn_index), Value::Array(args)];
        self.meter_begin();
        let started = std::time::Instant::now();
        let ran = self
            .sandbox
            .call(self.entry.run_node, &call_args, &self.options_reactive());
        let piece = self
            .nodes
            .get(id)
            .map(|n| n.piece.clone())
            .unwrap_or_default();
        self.meter_action(id, &piece, "derivation", started.elapsed());
        // Its output may refer only to what its arguments referred to, or
        // to its own piece (checked only when it refers to anything).
        let ran = match ran {
            Ok(out) if graph::has_refs(&out.value) => {
                let reach = self.node_reach(id, &piece)?;
                Ok((reach.check_value(&out.value), out))
            }
            other => other.map(|out| (Ok(()), out)),
        };
        match ran {
            Ok((Err(reason), _)) => {
                self.refuse(id, "derivation", &format!("invalid output: {reason}"));
            }
            Ok((Ok(()), out)) => {
                if let Err(reason) = self.check_size(id, &out.value) {
                    self.refuse(id, "derivation", &format!("invalid output: {reason}"));
                    return Ok(());
                }
                if let Some(n) = self.nodes.get_mut(id) {
                    n.runs += 1;
                }
                self.counters.inc(Counter::DerivationRuns);
                self.report.derivation_runs += 1;
                self.write(id, &[], out.value)?;
                // Writing made readers stale, including possibly ourselves.
                self.fresh.insert(id.to_string());
                self.action_hash.insert(id.to_string(), hash.clone());
                self.hashes_to_store.insert(id.to_string(), hash);
            }
            Err(e) => self.record_failure(id, "derivation", &e),
        }
        Ok(())
    }

    /// What a derivation was given: the references and streams of its
    /// argument templates and of their current values.
    pub(super) fn node_reach(&mut self, id: &str, piece: &str) -> RuntimeResult<Reach> {
        let template = self.nodes[id].def.args.clone();
        let mut reach = Reach::new(piece);
        reach.add_refs_in(&template);
        let resolved = self.resolve_deep(template, 0)?;
        reach.add_refs_in(&resolved);
        Ok(reach)
    }
}
