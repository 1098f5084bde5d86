//! Effect nodes: `fetchJson`, `fetchText`, … as nodes of a piece's graph
//! whose output the runtime computes with the host's broker
//! (`crate::effects`).
//!
//! Pulled, an effect node resolves its inputs (reading them makes it stale
//! when they change, as any derivation) and names its request by a hash of
//! the builtin and those inputs. That hash is kept as the node's inputs hash
//! (`action_hash`, stored with the wave):
//! - the same request, answered: the committed `{pending: false, …}` is
//!   the answer (`effects.reused`), at any later activation or after a
//!   restart, with nothing sent;
//! - the same request, pending, but not in flight in this tenure: it was
//!   lost when the space parked or the host stopped; sent again
//!   (`effects.reissued`);
//! - a new request: `{pending: true}` is written and the request submitted
//!   (`effects.requested`).
//!
//! The outcome comes back through the space's [`EffectSink`] (the space
//! server's queue) and [`SpaceRuntime::apply_effect`] writes the settled
//! state in the next wave, which commits it whole. An outcome for inputs
//! that have changed since is dropped (`effects.discarded`). Nobody pulls
//! an effect node no one demands, so no request is sent for it: effects are
//! as lazy as derivations.

use super::*;
use crate::effects::{model, state, EffectKind, Outcome, Request};

/// Where the broker hands an outcome back: a function of the space's host
/// side (its server's command queue, a runner's channel). Called on a
/// broker thread.
pub type EffectSink = Arc<dyn Fn(EffectDone) + Send + Sync>;

/// An outcome on its way back to the node that asked.
#[derive(Debug, Clone)]
pub struct EffectDone {
    pub node: String,
    /// The request's hash: the outcome applies only while the node still
    /// asks the same.
    pub key: String,
    pub outcome: Outcome,
    /// Real time from the request's sending to its outcome.
    pub took: std::time::Duration,
}

/// A request of this tenure on its way.
#[derive(Debug, Clone)]
pub(super) struct InFlight {
    key: String,
    kind: EffectKind,
    inputs: Value,
}

impl SpaceRuntime {
    /// Where outcomes of this runtime's effects go; without one, an effect
    /// answers its error state.
    pub fn set_effect_sink(&mut self, sink: EffectSink) {
        self.effect_sink = Some(sink);
    }

    /// Whether any piece of the space has an effect node (only those can be
    /// stopped by a spent scheduled budget).
    pub fn has_effect_nodes(&self) -> bool {
        self.nodes.values().any(|n| n.def.kind == "effect")
    }

    /// Effect requests of this tenure still on their way: the space stays
    /// active for them.
    pub fn effects_in_flight(&self) -> usize {
        self.effects_in_flight.len()
    }

    /// Brings an effect node up to date (already marked fresh): see the
    /// module's doc.
    pub(super) fn refresh_effect(&mut self, id: &str) -> RuntimeResult<()> {
        let template = self.nodes[id].def.args.clone();
        let name = template
            .get(0)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let Some(kind) = EffectKind::from_name(&name) else {
            return self.write(
                id,
                &[],
                state::error("unsupported", &format!("{name} is not an effect")),
            );
        };
        let rest = Value::Array(
            template
                .as_array()
                .map(|a| a[1..].to_vec())
                .unwrap_or_default(),
        );
        let (resolved, _) = self.resolve_inputs(id, rest, false)?;
        let mut inputs = resolved.get(0).cloned().unwrap_or(Value::Null);
        // The compiler's `T` (`fetchJson<T>`, `generateObject<T>`), unless
        // the inputs name a schema themselves.
        if let (Some(schema), Some(o)) = (
            resolved.get(1).filter(|s| s.is_object()),
            inputs.as_object_mut(),
        ) {
            o.entry("schema").or_insert_with(|| schema.clone());
        }
        let spec = Request::from_inputs(kind, &inputs);
        if spec.is_some()
            && kind.is_model()
            && !self.cfg.effects.as_ref().is_some_and(|b| b.has_model())
        {
            // Answered at once, and not remembered: a host given an
            // endpoint later asks it.
            return self.write(
                id,
                &[],
                state::error("noModel", crate::effects::broker::NO_MODEL),
            );
        }
        let key = match &spec {
            None => "effect idle".to_string(),
            Some(_) => format!(
                "effect {}",
                blake3::hash(format!("{name} {inputs}").as_bytes()).to_hex()
            ),
        };
        let answered = self.action_hash.get(id) == Some(&key);
        let asks = spec.is_some()
            && !(answered
                && self.doc(id)?.is_some_and(|d| {
                    d.get("pending") != Some(&Value::Bool(true))
                        || self.effects_in_flight.get(id).is_some_and(|f| f.key == key)
                }));
        if asks && self.bucket == crate::store::Bucket::Scheduled && self.scheduled_budget_spent {
            // Not sent, and not remembered as asked: a later wave (a
            // session's, or the next window's) sends it.
            self.counters.inc(Counter::EffectsSkippedBudget);
            if self.doc(id)?.is_none() {
                self.write(id, &[], state::idle())?;
            }
            return Ok(());
        }
        if answered {
            if let Some(current) = self.doc(id)? {
                if current.get("pending") != Some(&Value::Bool(true)) {
                    self.counters.inc(Counter::EffectsReused);
                    return Ok(());
                }
                if self.effects_in_flight.get(id).is_some_and(|f| f.key == key) {
                    return Ok(());
                }
                if let Some(spec) = spec {
                    self.counters.inc(Counter::EffectsReissued);
                    return self.submit_effect(id, key, kind, inputs, spec);
                }
            }
        }
        // New inputs: whatever was asked before no longer answers them.
        self.effects_in_flight.remove(id);
        self.action_hash.insert(id.to_string(), key.clone());
        self.hashes_to_store.insert(id.to_string(), key.clone());
        let Some(spec) = spec else {
            return self.write(id, &[], state::idle());
        };
        self.counters.inc(Counter::EffectsRequested);
        self.submit_effect(id, key, kind, inputs, spec)
    }

    fn submit_effect(
        &mut self,
        id: &str,
        key: String,
        kind: EffectKind,
        inputs: Value,
        spec: Request,
    ) -> RuntimeResult<()> {
        let (Some(broker), Some(sink)) = (self.cfg.effects.clone(), self.effect_sink.clone())
        else {
            return self.write(
                id,
                &[],
                state::error("unavailable", "this runtime has no effect broker"),
            );
        };
        self.write(id, &[], state::pending())?;
        self.effect_tally.effects_requested += 1;
        self.effects_in_flight.insert(
            id.to_string(),
            InFlight {
                key: key.clone(),
                kind,
                inputs,
            },
        );
        let node = id.to_string();
        broker.submit(
            self.space.id(),
            spec,
            Box::new(move |outcome, took| {
                sink(EffectDone {
                    node,
                    key,
                    outcome,
                    took,
                })
            }),
        );
        Ok(())
    }

    /// Writes an outcome into its node, for the next wave to commit;
    /// dropped when the node no longer asks that request.
    pub fn apply_effect(&mut self, done: EffectDone) -> RuntimeResult<()> {
        self.counters.observe(
            crate::metrics::Hist::EffectDuration,
            done.took.as_micros() as u64,
        );
        let asked = self
            .effects_in_flight
            .get(&done.node)
            .is_some_and(|f| f.key == done.key)
            && self.nodes.contains_key(&done.node);
        let Some(f) = asked
            .then(|| self.effects_in_flight.remove(&done.node))
            .flatten()
        else {
            self.counters.inc(Counter::EffectsDiscarded);
            return Ok(());
        };
        self.counters.inc(match &done.outcome {
            Outcome::Response { .. } => Counter::EffectsCompleted,
            Outcome::Refused(_) => Counter::EffectsRefused,
            Outcome::Failed { .. } => Counter::EffectsFailed,
        });
        let t = &mut self.effect_tally;
        match &done.outcome {
            Outcome::Refused(_) => t.effects_refused += 1,
            Outcome::Response { body, .. } => {
                t.effects_completed += 1;
                t.effect_bytes += body.len() as u64;
                if f.kind.is_model() {
                    if let Ok(c) = model::parse_completion(body) {
                        t.prompt_tokens += c.prompt_tokens;
                        t.completion_tokens += c.completion_tokens;
                    }
                }
            }
            Outcome::Failed { .. } => t.effects_completed += 1,
        }
        if f.kind.is_model() {
            t.model_wall_us += done.took.as_micros() as u64;
        }
        let mut settled = state::settled(f.kind, &f.inputs, &done.outcome);
        if f.kind == EffectKind::GenerateText {
            // The reference's state names the request it answers.
            let hash = f.key.trim_start_matches("effect ").to_string();
            if let Some(o) = settled.as_object_mut() {
                o.insert("requestHash".into(), Value::String(hash));
            }
        }
        self.write(&done.node, &[], settled)
    }
}
