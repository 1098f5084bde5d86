//! Waves: consuming events, running handlers and demanded derivations, and
//! committing the result once; failed waves and dead letters.

use super::*;

impl SpaceRuntime {
    // ----- waves ---------------------------------------------------------------

    /// One wave: consume undelivered events (up to the limit), run their
    /// handlers, pull the demanded derivations, commit once.
    pub fn run_wave(&mut self) -> RuntimeResult<WaveReport> {
        self.run_wave_skipping(&HashSet::new())
    }

    /// A wave in which the events named in `skip` are consumed without
    /// running their handlers (a wake whose earlier delivery died with the
    /// process is retried later rather than re-run at once).
    pub fn run_wave_skipping(&mut self, skip: &HashSet<String>) -> RuntimeResult<WaveReport> {
        self.run_wave_with(skip, &mut |_, _| Ok(()))
    }

    /// [`SpaceRuntime::run_wave_skipping`] with `settle` run inside the
    /// wave's own transaction, given the wave's report (what was delivered,
    /// failed, skipped, written): bookkeeping that must commit with the wave
    /// or not at all (the delivery state of wake events).
    pub fn run_wave_with(
        &mut self,
        skip: &HashSet<String>,
        settle: WaveSettle<'_>,
    ) -> RuntimeResult<WaveReport> {
        let events = self.space.undelivered_events(self.cfg.wave_event_limit)?;
        self.run_wave_on(events, skip, settle)
    }

    /// [`SpaceRuntime::run_wave_with`] over `events`, the space's
    /// undelivered events as the caller just read them (up to the wave's
    /// limit), so a caller that looked at them first does not read them
    /// twice.
    pub fn run_wave_on(
        &mut self,
        mut events: Vec<EventRecord>,
        skip: &HashSet<String>,
        settle: WaveSettle<'_>,
    ) -> RuntimeResult<WaveReport> {
        self.meter_begin();
        events.truncate(self.cfg.wave_event_limit);
        // An event that was in a wave that failed its tenure runs alone, so a
        // poison event fails nobody else; after its retries it is
        // dead-lettered instead of run.
        let mut dead = None;
        if let Some(first) = events.first() {
            if let Some((attempts, error)) = self.event_failures.get(&first.event_id) {
                events.truncate(1);
                if *attempts >= MAX_EVENT_ATTEMPTS {
                    dead = Some((*attempts, error.clone()));
                }
            }
        }
        self.wave_events = events
            .iter()
            .map(|e| (e.event_id.clone(), e.stream.clone(), e.seq))
            .collect();
        let ran = self.wave_body(&events, dead, skip, settle);
        if let Err(e) = &ran {
            self.note_failed_wave(e);
        }
        ran
    }

    pub(super) fn wave_body(
        &mut self,
        events: &[EventRecord],
        dead: Option<(u32, String)>,
        skip: &HashSet<String>,
        settle: WaveSettle<'_>,
    ) -> RuntimeResult<WaveReport> {
        for ev in events {
            let set_aside = match &dead {
                None => self.set_aside_reason(&ev.stream),
                Some(_) => None,
            };
            if let Some((attempts, error)) = &dead {
                self.report.dead_lettered.push(ev.event_id.clone());
                self.report
                    .dead_letter_errors
                    .push((ev.event_id.clone(), error.clone()));
                self.dead_lettering
                    .push((ev.clone(), *attempts, error.clone()));
            } else if let Some(reason) = set_aside {
                // Nothing can run it this tenure: kept as a dead letter,
                // not consumed as if delivered.
                self.report.dead_lettered.push(ev.event_id.clone());
                self.report
                    .dead_letter_errors
                    .push((ev.event_id.clone(), reason.clone()));
                self.dead_lettering.push((ev.clone(), 0, reason));
            } else if skip.contains(&ev.event_id) {
                self.report.skipped_events.push(ev.event_id.clone());
            } else {
                let failures_before = self.report.failures.len();
                let wake = crate::schedule::WakeId::is_wake(&ev.event_id);
                let run = wake.then(|| {
                    self.wake_logs = Some(Vec::new());
                    (
                        crate::clock::Stopwatch::start(),
                        crate::accounting::thread_cpu_us(),
                    )
                });
                let handled = self.handle_event(ev);
                let logs = self.wake_logs.take().unwrap_or_default();
                handled?;
                let error = self.report.failures[failures_before..]
                    .first()
                    .map(|f| crate::human::truncate_message(&f.error, 1024));
                if let Some((wall, cpu)) = run {
                    self.report.wake_runs.push(WakeRun {
                        event_id: ev.event_id.clone(),
                        duration_us: wall.elapsed().as_micros() as u64,
                        cpu_us: crate::accounting::thread_cpu_us().saturating_sub(cpu),
                        error: error.clone(),
                        logs,
                    });
                }
                if error.is_some() {
                    self.report.failed_events.push(ev.event_id.clone());
                } else {
                    self.report.delivered.push(ev.event_id.clone());
                }
            }
            let wm = self.watermarks.entry(ev.stream.clone()).or_insert(0);
            *wm = (*wm).max(ev.seq);
            self.counters.inc(Counter::EventsProcessed);
        }
        self.report.events += events.len();
        self.advance_clocks();
        let demanded: Vec<_> = self.demand.iter().cloned().collect();
        for (piece, path) in demanded {
            if self.pieces.contains_key(&piece) {
                self.value_at(&piece, &path, 0)?;
            }
        }
        // A derivation nothing can read (`computed(() => log.set(...))`)
        // matters only for what it writes: it is pulled like a demand.
        for id in self.effect_nodes()? {
            if self.nodes.contains_key(&id) {
                self.pull(&id)?;
            }
        }
        self.flush_with(settle)
    }

    /// The nodes nothing links to (`graph::unreferenced`), found again
    /// after the graph changed. Clocks are left out (they write nothing),
    /// and so are the nodes of frames.
    fn effect_nodes(&mut self) -> RuntimeResult<Vec<String>> {
        if self.effects.is_none() {
            // The piece results are what links to most nodes: held before
            // the scan (the document cache may have let one go).
            let pieces: Vec<String> = self.pieces.keys().cloned().collect();
            for p in pieces {
                self.doc(&p)?;
            }
            // Nodes a derivation's run built (a map's per-element
            // sub-patterns) belong to that run: when it drops them they go.
            let in_a_frame = |id: &str| {
                id.match_indices('/')
                    .any(|(i, _)| self.nodes.contains_key(&id[..i]))
            };
            let nodes = self
                .nodes
                .iter()
                // Host nodes answer readers only: an effect nobody reads
                // sends nothing.
                .filter(|(id, n)| {
                    !matches!(n.def.kind.as_str(), "clock" | "effect") && !in_a_frame(id)
                })
                .map(|(id, _)| id);
            let values = self
                .nodes
                .values()
                .map(|n| &n.def.args)
                .chain(self.streams.values().map(|b| &b.def.context))
                .chain(self.docs.values().flatten());
            self.effects = Some(graph::unreferenced(nodes, values));
        }
        Ok(self.effects.clone().unwrap_or_default())
    }

    /// A wave that consumed events failed its tenure: each of its events
    /// gets one more attempt on record (best effort: a plane write needs no
    /// lease, but the file may be what failed).
    pub(super) fn note_failed_wave(&mut self, error: &RuntimeError) {
        let events = std::mem::take(&mut self.wave_events);
        self.dead_lettering.clear();
        if events.is_empty() {
            return;
        }
        let now = self.clock.now_ms();
        let message = crate::human::truncate_message(&error.to_string(), 1024);
        let noted = self.space.plane(|p| {
            events
                .iter()
                .map(|(id, stream, seq)| {
                    p.note_event_failure(id, stream, *seq, &message, now)
                        .map(|n| (id.clone(), n))
                })
                .collect::<crate::store::StoreResult<Vec<_>>>()
        });
        match noted {
            Ok(rows) => {
                for (id, attempts) in rows {
                    self.failed_wave_attempts = self.failed_wave_attempts.max(attempts);
                    self.event_failures.insert(id, (attempts, message.clone()));
                }
                self.counters
                    .add(Counter::EventsInFailedWaves, events.len() as i64);
            }
            Err(e) => tracing::warn!(error = %e, "cannot record a failed wave's events"),
        }
    }

    /// The most attempts any event of this tenure's failed waves has had
    /// (0 when none failed): how long the host waits before retrying.
    pub fn failed_wave_attempts(&self) -> u32 {
        self.failed_wave_attempts
    }

    /// Runs waves until no undelivered events remain (at most `max` waves).
    pub fn settle(&mut self, max: usize) -> RuntimeResult<Vec<WaveReport>> {
        let mut out = Vec::new();
        for _ in 0..max {
            let r = self.run_wave()?;
            let idle = r.events == 0;
            out.push(r);
            if idle && !self.space.has_undelivered()? {
                break;
            }
        }
        Ok(out)
    }

    /// Commits what the pending wave wrote, once, with this tenure's lease.
    pub fn flush(&mut self) -> RuntimeResult<WaveReport> {
        self.flush_with(&mut |_, _| Ok(()))
    }

    pub(super) fn flush_with(&mut self, settle: WaveSettle<'_>) -> RuntimeResult<WaveReport> {
        let mut report = std::mem::take(&mut self.report);
        report.written_bytes = std::mem::take(&mut self.wave_bytes) as u64;
        report.written = std::mem::take(&mut self.wave_writes).into_iter().collect();
        if self.touched.is_empty()
            && self.sends.is_empty()
            && self.watermarks.is_empty()
            && self.hashes_to_store.is_empty()
        {
            // Nothing to commit: the compute (if any) is booked plane-only.
            let window =
                crate::accounting::window_start_ms(self.clock.now_ms(), self.cfg.ledger_window_ms);
            let bucket = self.bucket;
            let metered = self.meter_close(false).map(|(delta, costs)| {
                self.buffer_costs(window, costs);
                delta
            });
            report.metered = metered;
            let costs = self.take_costs(false);
            // A wave that consumed events always commits (their watermarks),
            // so `settle` has no delivery to record on this path.
            if metered.is_some() || !costs.is_empty() {
                self.space.plane(|p| {
                    if let Some(delta) = &metered {
                        p.add_ledger(bucket, window, delta)?;
                    }
                    write_costs(p, &costs)?;
                    settle(&report, p)
                })?;
            }
            self.trim_doc_cache();
            return Ok(report);
        }
        self.ensure_lease()?;
        let mut req = CommitRequest::new(CommitClass::Derived, Author::server());
        self.touched_set.clear();
        let touched = std::mem::take(&mut self.touched);
        req.ops = touched
            .iter()
            .cloned()
            .map(|id| match self.docs.get(&id).cloned().flatten() {
                Some(value) => DocOp::Set { id, value },
                None => DocOp::Delete { id },
            })
            .collect();
        req.events = std::mem::take(&mut self.sends);
        req.watermarks = std::mem::take(&mut self.watermarks).into_iter().collect();
        req.lease = Some(self.lease.clone());
        req.release_lease_if_idle = self.release_with_last_wave;
        let hashes = std::mem::take(&mut self.hashes_to_store);
        let window =
            crate::accounting::window_start_ms(self.clock.now_ms(), self.cfg.ledger_window_ms);
        let bucket = self.bucket;
        let metered = self.meter_close(true).map(|(d, costs)| {
            self.buffer_costs(window, costs);
            d
        });
        report.metered = metered;
        let costs = self.take_costs(false);
        let now = self.clock.now_ms();
        let dead_letters = std::mem::take(&mut self.dead_lettering);
        // Events consumed now that had failed waves on record.
        let recovered: Vec<String> = self
            .wave_events
            .iter()
            .map(|(id, _, _)| id)
            .filter(|id| self.event_failures.contains_key(*id))
            .cloned()
            .collect();
        let result = self.space.commit_with(req, |view, plane| {
            for (ev, attempts, error) in &dead_letters {
                plane
                    .dead_letter(ev, *attempts, error, now)
                    .map_err(|e| e.to_string())?;
            }
            for id in &recovered {
                plane.clear_event_failure(id).map_err(|e| e.to_string())?;
            }
            for (node, hash) in &hashes {
                plane
                    .set_action_state(node, hash, view.seq)
                    .map_err(|e| e.to_string())?;
            }
            // The ledger rides in the wave's own transaction.
            if let Some(delta) = &metered {
                plane
                    .add_ledger(bucket, window, delta)
                    .map_err(|e| e.to_string())?;
            }
            write_costs(plane, &costs).map_err(|e| e.to_string())?;
            // The settlement records the commit the wave makes.
            report.seq = Some(view.seq);
            settle(&report, plane).map_err(|e| e.to_string())
        });
        match result {
            Ok(outcome) => {
                if let Some(seq) = outcome.seq {
                    for id in touched {
                        self.doc_seq.insert(id, seq);
                    }
                }
                report.seq = outcome.seq;
                self.lease_released = outcome.lease_released;
                self.counters.inc(Counter::Waves);
                self.wave_events.clear();
                for id in recovered {
                    self.event_failures.remove(&id);
                }
                for (ev, attempts, _) in dead_letters {
                    self.event_failures.remove(&ev.event_id);
                    self.counters.inc(Counter::EventsDeadLettered);
                    tracing::warn!(event = %ev.event_id, stream = %ev.stream, attempts, "event dead-lettered");
                }
                self.trim_doc_cache();
                Ok(report)
            }
            Err(e) => {
                // Nothing of the wave committed: forget what we believed.
                self.docs.clear();
                self.cache_estimate = 0;
                self.doc_seq.clear();
                self.fresh.clear();
                Err(e.into())
            }
        }
    }
}
