//! Programs and pieces: storing a program, recording a piece's graph by
//! running its pattern body, deleting a piece; the space's demand.

use super::*;

/// Module instances of one program per tenure: six hex digits in a name.
const MAX_INSTANCE: u32 = 0xff_ffff;

impl SpaceRuntime {
    // ----- programs and pieces -------------------------------------------

    /// Stores a compiled program's sources in the space (once per hash) and
    /// creates a piece from its `export` with `argument`. Returns the piece id.
    pub fn create_piece(
        &mut self,
        program: &CompiledProgram,
        export: Option<&str>,
        argument: &Value,
    ) -> RuntimeResult<String> {
        self.create_piece_with(program, export, argument, ArgumentCheck::Lenient)
    }

    /// [`SpaceRuntime::create_piece`] for a deploy: the argument must fit
    /// the pattern's argument type ([`argument::check`]), or nothing is
    /// created. The scenario harness, like the reference's, does not check.
    pub fn deploy_piece(
        &mut self,
        program: &CompiledProgram,
        export: Option<&str>,
        argument: &Value,
    ) -> RuntimeResult<String> {
        let piece = self.create_piece_with(program, export, argument, ArgumentCheck::Strict)?;
        // Its `[NAME]`, computed now and stored with the deploy, so
        // operators see it before any client has read the piece. A name
        // that fails to compute is the piece's failure, not the deploy's.
        let _ = self.read(&piece, &[PathSeg::Key("$NAME".into())]);
        Ok(piece)
    }

    pub(super) fn create_piece_with(
        &mut self,
        program: &CompiledProgram,
        export: Option<&str>,
        argument: &Value,
        check: ArgumentCheck,
    ) -> RuntimeResult<String> {
        let hash = program.hash_hex();
        let export = export.unwrap_or("default").to_string();
        let seq = self.space.head_seq()?;
        let n = self.pieces.len();
        let digest = blake3::hash(format!("{hash}/{export}/{seq}/{n}/{argument}").as_bytes());
        let piece = format!("pc-{}", &digest.to_hex()[..16]);
        // First, so a pattern that fails to start (or refuses its
        // argument) leaves nothing behind, not even its sources.
        self.record_piece(&piece, &piece, program, &export, Some((argument, check)))?;
        let program_doc = format!("program/{hash}");
        if self.doc(&program_doc)?.is_none() {
            let modules: Vec<Value> = program
                .modules
                .iter()
                .map(|m| json!({"name": m.name, "source": m.source}))
                .collect();
            let mut doc = json!({"entry": program.entry().name, "modules": modules});
            if !program.data_files.is_empty() {
                doc["data"] = program
                    .data_files
                    .iter()
                    .map(|d| json!({"name": d.name, "text": d.text}))
                    .collect();
            }
            self.write(&program_doc, &[], doc)?;
        }
        // When it was created, and its handlers' source names by stream,
        // for operators (the listing's only use).
        let created_ms = self.clock.now_ms();
        let mut listed = json!({"program": hash, "export": export, "createdMs": created_ms});
        let handlers: serde_json::Map<String, Value> = self
            .streams
            .iter()
            .filter(|(_, b)| b.piece == piece)
            .filter_map(|(id, b)| Some((id.clone(), json!(b.def.label.clone()?))))
            .collect();
        if !handlers.is_empty() {
            listed["handlers"] = Value::Object(handlers);
        }
        self.write(PIECES_DOC, &[PathSeg::Key(piece.clone())], listed)?;
        self.counters.inc(Counter::PiecesCreated);
        Ok(piece)
    }

    pub(super) fn load_stored_program(
        &mut self,
        hash: &str,
    ) -> RuntimeResult<Arc<CompiledProgram>> {
        let doc = self
            .doc(&format!("program/{hash}"))?
            .ok_or_else(|| RuntimeError::Invalid(format!("program {hash} is not stored")))?;
        let entry = doc["entry"].as_str().unwrap_or_default().to_string();
        let mut src = MemorySource::new();
        for m in doc["modules"].as_array().into_iter().flatten() {
            src.insert(
                m["name"].as_str().unwrap_or_default(),
                m["source"].as_str().unwrap_or_default(),
            );
        }
        for d in doc["data"].as_array().into_iter().flatten() {
            src.insert(
                d["name"].as_str().unwrap_or_default(),
                d["text"].as_str().unwrap_or_default(),
            );
        }
        compile_cache()
            .compile(&entry, &src)
            .map_err(|d| RuntimeError::Compile(crate::compiler::render(&d)))
    }

    /// Loads a fresh instance of `program`'s modules, evaluated apart from
    /// every other instance (its own module-level state), and returns the
    /// key the authoring API knows it by. Each deployed piece gets one
    /// ([`SpaceRuntime::instance_for`]), so two deployments of the same
    /// program share no mutable JavaScript state.
    ///
    /// The first instance of a program in a tenure is registered under the
    /// template root `p<hash>/i000000/`; the k-th is the same modules under
    /// `p<hash>/i<k>/`, compiled once (the sandbox renames the bytecode).
    /// The boot module is the same for every instance, so the authoring API
    /// numbers a program's registrations as this counts them.
    pub(super) fn load_instance(&mut self, program: &CompiledProgram) -> RuntimeResult<String> {
        let hash = program.hash_hex();
        let k = self.instances.get(&hash).copied().unwrap_or(0);
        if k > MAX_INSTANCE {
            return Err(RuntimeError::Invalid(format!(
                "program {hash} is instantiated more than {MAX_INSTANCE} times in one tenure"
            )));
        }
        let root = |k: u32| format!("p{}/i{k:06x}/", &hash[..16]);
        // Module names are relative to the entry's directory and may climb
        // above it (`../lib.ts`): the entry sits that many directories deep
        // under the program's root, so every name is a plain path there and
        // relative imports resolve by path.
        let climbs = program
            .modules
            .iter()
            .map(|m| m.name.matches("../").count())
            .max()
            .unwrap_or(0);
        let prefix = format!("{}r/{}", root(k), "d/".repeat(climbs));
        if k == 0 {
            let template = format!("{}r/{}", root(0), "d/".repeat(climbs));
            let names: Vec<(String, String)> = program
                .modules
                .iter()
                .map(|m| {
                    (
                        normalize_module_path(&format!(
                            "{template}{}",
                            m.name.trim_start_matches("./")
                        )),
                        m.js.clone(),
                    )
                })
                .collect();
            let entry_name = program.entry().name.trim_start_matches("./").to_string();
            // A boot module hands its entry namespace to commonfabric's
            // registry (namespaces cannot cross into Rust).
            let boot = format!(
                "import * as m from \"./{entry_name}\";\n\
                 import {{ __registerProgram }} from \"{internal}\";\n\
                 __registerProgram(\"{hash}\", m);\n",
                internal = crate::sandbox::INTERNAL_MODULE,
            );
            let mods: Vec<(&str, &str)> = names
                .iter()
                .map(|(n, s)| (n.as_str(), s.as_str()))
                .collect();
            self.sandbox.add_modules(&mods)?;
            // The boot module is the host's: no pattern module can import it.
            let boot_name = format!("{template}__boot.js");
            self.sandbox.add_host_modules(&[(&boot_name, &boot)])?;
        } else {
            self.sandbox.add_instance(&root(0), &root(k))?;
        }
        // The patterns and handlers this evaluation creates are the
        // program's (their ordinals name the ones a handler spawns); any
        // other time, creating one outside a run throws.
        self.sandbox.call(
            self.entry.begin_program,
            &[
                Value::String(self.cfg.public_origin.to_string()),
                Value::String(self.space.id().to_string()),
            ],
            &self.options_reactive(),
        )?;
        let ns = self
            .sandbox
            .import(&format!("{prefix}__boot.js"), &self.options_reactive())?
            .value;
        self.sandbox.release(ns);
        self.instances.insert(hash.clone(), k + 1);
        Ok(format!("{hash}/{k}"))
    }

    /// The module instance the pieces of `owner` run in: a deployed piece
    /// and the pieces its handlers make (its descendants, created by its
    /// own code) share one; every deployed piece has its own.
    fn instance_for(&mut self, program: &CompiledProgram, owner: &str) -> RuntimeResult<String> {
        let key = (owner.to_string(), program.hash_hex());
        if let Some(k) = self.owner_instances.get(&key) {
            return Ok(k.clone());
        }
        let k = self.load_instance(program)?;
        self.owner_instances.insert(key, k.clone());
        Ok(k)
    }

    /// Runs the pattern body and records the piece's graph. On first
    /// creation (`argument` given) it also writes the argument document, the
    /// local cells and the result document.
    pub(super) fn record_piece(
        &mut self,
        piece: &str,
        owner: &str,
        program: &CompiledProgram,
        export: &str,
        argument: Option<(&Value, ArgumentCheck)>,
    ) -> RuntimeResult<()> {
        let instance = self.instance_for(program, owner)?;
        let out = self.sandbox.call(
            self.entry.instantiate,
            &[json!(instance), json!(export), json!(piece)],
            &self.options_reactive(),
        );
        // What the program's modules and the pattern body logged.
        self.drain_console(piece, "body");
        let out = out?;
        let mut rec: Recorded = serde_json::from_value(out.value)
            .map_err(|e| RuntimeError::Invalid(format!("pattern graph: {e}")))?;
        if !declaration_was_validated(program, &rec.result) {
            // A `$SCHEDULE` the compiler never saw (a key built at run
            // time): not stored, so never indexed.
            if let Some(m) = rec.result.as_object_mut() {
                m.remove(crate::schedule::SCHEDULE_KEY);
            }
            self.counters.inc(Counter::ScheduleUnvalidated);
            tracing::warn!(
                piece,
                "a [SCHEDULE] the compiler did not validate was dropped"
            );
        }
        // A handler the source gave no name (`increment: handler(...)({…})`)
        // goes by where its stream shows in the result.
        let paths = graph::stream_paths(&rec.result);
        for s in rec.streams.iter_mut().filter(|s| s.label.is_none()) {
            s.label = paths.get(&s.id).cloned();
        }
        if argument.is_none() {
            // A piece made before such entries were refused: it loads, and
            // the entry is counted (operators see it listed as invalid).
            let problems = crate::schedule::index::declaration_problems(piece, &rec.result);
            for (entry, why) in &problems {
                self.counters.inc(Counter::ScheduleInvalidEntries);
                tracing::warn!(piece, entry, why, "a [SCHEDULE] entry can never fire");
            }
        } else {
            // A new piece whose `[SCHEDULE]` has an entry that could never
            // fire (its callback no stream: a handler not bound to its
            // state; its `at` no field of its own state) is refused before
            // anything is stored.
            let problems = crate::schedule::index::declaration_problems(piece, &rec.result);
            if let Some((i, why)) = problems.into_iter().next() {
                self.counters.inc(Counter::ScheduleRefusedEntries);
                return Err(RuntimeError::Invalid(format!(
                    "[SCHEDULE] entry {i} could never fire: {why}; nothing was deployed"
                )));
            }
        }
        if let (Some((arg, ArgumentCheck::Strict)), Some(schema)) =
            (argument, rec.argument_schema.as_ref())
        {
            // Before anything is written for the piece.
            argument::check(schema, arg)?;
        }
        // The graph may refer only to the piece's own documents and to what
        // its argument refers to (what its deployer gave it).
        let mut reach = Reach::new(piece);
        // Every piece of the space shares its home document.
        reach.add_cell(home::HOME_DOC, &[]);
        match argument {
            Some((arg, _)) => reach.add_refs_in(arg),
            None => {
                if let Some(arg) = self.doc(&format!("{piece}/argument"))? {
                    reach.add_refs_in(&arg);
                }
            }
        }
        let graph_refs = std::iter::once(&rec.result)
            .chain(rec.nodes.iter().map(|n| &n.args))
            .chain(rec.streams.iter().map(|s| &s.context))
            .chain(rec.cells.iter().map(|c| &c.initial));
        let built = rec
            .nodes
            .iter()
            .map(|n| &n.id)
            .chain(rec.streams.iter().map(|s| &s.id))
            .chain(rec.cells.iter().map(|c| &c.id))
            .try_for_each(|id| capability::check_created(id, piece));
        if let Err(reason) = built {
            self.counters.inc(Counter::ActionsRefused);
            return Err(RuntimeError::Invalid(format!(
                "piece {piece} built outside its own documents: {reason}"
            )));
        }
        for v in graph_refs {
            if let Err(reason) = reach.check_value(v) {
                self.counters.inc(Counter::ActionsRefused);
                return Err(RuntimeError::Invalid(format!(
                    "piece {piece} refers outside what it was given: {reason}"
                )));
            }
        }
        let graph_values = std::iter::once(&rec.result)
            .chain(rec.nodes.iter().map(|n| &n.args))
            .chain(rec.streams.iter().map(|s| &s.context));
        if home::referred_to(graph_values) {
            self.ensure_home()?;
        }
        if let Some((arg, _)) = argument {
            let arg = graph::apply_defaults(rec.argument_schema.as_ref(), arg);
            self.write(&format!("{piece}/argument"), &[], arg)?;
        }
        if self.doc(piece)?.as_ref() != Some(&rec.result) {
            self.write(piece, &[], rec.result.clone())?;
        }
        self.add_graph(piece, rec.nodes, rec.streams, rec.cells)?;
        self.pieces
            .insert(piece.to_string(), (program.hash_hex(), export.to_string()));
        self.program_entries.insert(
            program.hash_hex(),
            program.entry().name.trim_start_matches("./").to_string(),
        );
        self.piece_owner
            .insert(piece.to_string(), owner.to_string());
        Ok(())
    }

    /// Deletes a piece, a set-aside one included: its result document
    /// (which drops its schedule entries through the index hook, in the
    /// commit that deletes it), its argument and its listing; its graph is
    /// forgotten. Its cells stay, unreferenced (another piece may link to
    /// them). Returns how many of its wakes were pending (fired and not
    /// yet delivered, or waiting for a retry or a trigger): they end with
    /// it, counted.
    pub fn delete_piece(&mut self, piece: &str) -> RuntimeResult<u64> {
        let listed = self
            .doc(PIECES_DOC)?
            .is_some_and(|l| l.get(piece).is_some());
        let known = self.pieces.remove(piece).is_some();
        if !known && !listed {
            return Err(RuntimeError::UnknownPiece(piece.to_string()));
        }
        let ended: u64 = self
            .space
            .schedule(Some(piece))?
            .iter()
            .map(|r| r.pending.len() as u64)
            .sum();
        for doc in [piece.to_string(), format!("{piece}/argument")] {
            if self.doc(&doc)?.is_none() {
                continue;
            }
            self.docs.insert(doc.clone(), None);
            if self.touched_set.insert(doc.clone()) {
                self.touched.push(doc.clone());
            }
            self.invalidate(&doc);
        }
        if self.set_aside.remove(piece).is_some() {
            let now = json!(self.set_aside);
            self.write(SET_ASIDE_DOC, &[], now)?;
        }
        self.piece_owner.remove(piece);
        self.counters.inc(Counter::PiecesDeleted);
        self.counters
            .add(Counter::ScheduleEndedByDeletion, ended as i64);
        let mut listed = self.doc(PIECES_DOC)?.unwrap_or(json!({}));
        if let Some(m) = listed.as_object_mut() {
            m.remove(piece);
        }
        self.write(PIECES_DOC, &[], listed)?;
        self.nodes.retain(|_, n| n.piece != piece);
        self.effects = None;
        self.streams.retain(|_, b| b.piece != piece);
        self.demand.retain(|(p, _)| p != piece);
        Ok(ended)
    }

    pub fn pieces(&self) -> Vec<String> {
        self.pieces.keys().cloned().collect()
    }

    /// Every derivation node of `piece` with its run count in this tenure.
    pub fn nodes(&self, piece: &str) -> Vec<NodeInfo> {
        let mut v: Vec<NodeInfo> = self
            .nodes
            .values()
            .filter(|n| n.piece == piece)
            .map(|n| NodeInfo {
                id: n.def.id.clone(),
                piece: n.piece.clone(),
                kind: n.def.kind.clone(),
                label: n.def.label.clone(),
                runs: n.runs,
            })
            .collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// Actions that failed in this tenure (most recent last).
    pub fn failures(&self) -> &[ActionFailure] {
        &self.failures
    }

    // ----- demand ----------------------------------------------------------

    /// Adds a result path of a piece to the space's demand.
    pub fn demand(&mut self, piece: &str, path: &[PathSeg]) {
        self.demand.insert((piece.to_string(), path.to_vec()));
    }

    pub fn clear_demand(&mut self) {
        self.demand.clear();
    }
}

/// Whether a recorded result's `$SCHEDULE` (if any) is one the compiler
/// validated in the program: the same shapes (intervals, or cron
/// expressions and zones), in the same order, as one of its `[SCHEDULE]`
/// declarations. The index re-checks the bounds itself.
pub(super) fn declaration_was_validated(program: &CompiledProgram, result: &Value) -> bool {
    let Some(declared) = result.get(crate::schedule::SCHEDULE_KEY) else {
        return true;
    };
    let Some(list) = declared.as_array() else {
        return false;
    };
    let text = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).map(String::from);
    // (interval, cron, zone, whether it has `at`)
    type Shape = (Option<u64>, Option<String>, Option<String>, bool);
    let shapes: Vec<Shape> = list
        .iter()
        .map(|e| {
            (
                e.get("intervalMinutes").and_then(Value::as_u64),
                text(e, "cron"),
                text(e, "timeZone"),
                e.get("at").is_some(),
            )
        })
        .collect();
    program
        .modules
        .iter()
        .flat_map(|m| &m.patterns)
        .flat_map(|p| &p.schedules)
        .any(|d| {
            d.entries.len() == shapes.len()
                && d.entries.iter().zip(&shapes).all(|(e, got)| {
                    if e.at.is_some() {
                        return got.3 && got.0.is_none() && got.1.is_none() && got.2.is_none();
                    }
                    match &e.cron {
                        None => {
                            got.0 == Some(u64::from(e.interval_minutes))
                                && got.1.is_none()
                                && !got.3
                        }
                        Some(expr) => {
                            got.0.is_none()
                                && got.1.as_ref() == Some(expr)
                                && got.2 == e.time_zone
                                && !got.3
                        }
                    }
                })
        })
}

/// `a/b/../c` → `a/c` (module names never climb above the program root).
fn normalize_module_path(p: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            ".." => {
                out.pop();
            }
            "." | "" => {}
            s => out.push(s),
        }
    }
    out.join("/")
}
