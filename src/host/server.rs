//! One space server: the thread that holds an active space's tenure.
//!
//! The loop, in order, each turn:
//! 1. wait for a command (or the next deadline: lease renewal, idle park);
//! 2. handle every queued command (sessions, tracking, events, deploys);
//! 3. if demand changed, run a **demand pass** (union of the sessions'
//!    tracked paths and the warm demand);
//! 4. run waves while there is work, until the flush deadline;
//! 5. push updates to sessions whose tracked values changed;
//! 6. renew the lease when due — a failed renewal ends the tenure;
//! 7. park when there are no sessions, no undelivered events and no work,
//!    after the idle time.

use super::tenure::{Lifecycle, Phase};
use super::{Cmd, HostError, HostInner, Reply, Request, SessionId, Update, UpdateSink};
use crate::clock::Stopwatch;
use crate::compiler::MemorySource;
use crate::metrics::Counter;
use crate::runtime::{RuntimeError, SpaceRuntime};
use crate::schedule::fire::FireReport;
use crate::store::{FileAccess, PathSeg};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

/// What one session holds in a space.
struct Session {
    sink: UpdateSink,
    /// Tracked result paths and the seq of the last value sent for each.
    tracked: BTreeMap<(String, Vec<PathSeg>), u64>,
}

/// How long a space with sessions must be quiet after a wave before its
/// WAL is checkpointed. Checkpointing at every idle moment (the instant a
/// wave's acks went out) meant two fsyncs per wave: with 100 busy spaces
/// the disk queue backed up and sends waited up to a second each.
const CHECKPOINT_QUIET_MS: u64 = 50;

/// A space that is never quiet for that long still checkpoints at its
/// first idle moment after this many waves (a few hundred WAL pages),
/// well before SQLite's in-commit safety bound.
const CHECKPOINT_EVERY_WAVES: u32 = 256;

struct Server {
    inner: Arc<HostInner>,
    id: String,
    /// The space's counters (looked up once per tenure).
    counters: crate::metrics::SpaceCounters,
    rt: SpaceRuntime,
    sessions: HashMap<SessionId, Session>,
    warm: BTreeSet<String>,
    demand_dirty: bool,
    work: bool,
    /// Waves committed since the last idle checkpoint.
    waves_since_checkpoint: u32,
    /// Turns with work this tenure ran (a park after many applies the
    /// retention rule).
    busy_turns: u32,
    /// Phase, purpose and the scheduled wake in hand (`tenure.rs`).
    life: Lifecycle,
    /// On the host clock, as every timer of the loop.
    last_activity_ms: u64,
    next_renew_ms: u64,
    /// The storage quota's measure of this space (`quota.rs`).
    quota: super::quota::Gauge,
}

/// One tenure of space `id`, from activation to its end: `trigger` says
/// why the space is activated. The loop is [`Server::turn`]; what it does
/// next at each step is decided by the pure [`before_wait`] and
/// [`after_work`].
pub(crate) fn run(
    inner: Arc<HostInner>,
    id: String,
    generation: u64,
    rx: Receiver<Cmd>,
    trigger: super::Trigger,
) {
    let Some(mut s) = activate(inner, id, generation, &rx, trigger) else {
        return;
    };
    let ended = loop {
        if let Some(ended) = s.turn(&rx, generation) {
            break ended;
        }
    };
    s.end(ended, &rx, generation);
}

/// Opens the space and starts its tenure, handling what was queued for it
/// (`None`: the tenure is already over — an operator's tenure that retired,
/// or an activation that failed and answered everything queued). A
/// scheduled tenure opens its file exclusively until it stops being brief
/// (see `FileAccess`), and one that begins with a firing takes its lease in
/// the firing's transaction.
fn activate(
    inner: Arc<HostInner>,
    id: String,
    generation: u64,
    rx: &Receiver<Cmd>,
    trigger: super::Trigger,
) -> Option<Server> {
    let scheduled = trigger == super::Trigger::Schedule;
    let counters = inner.counters.space(&id);
    let activation = crate::clock::Stopwatch::start();
    let access = if scheduled {
        FileAccess::Exclusive
    } else {
        FileAccess::Shared
    };
    let mut opened = inner
        .store
        .open_space_with(&id, access)
        .map_err(RuntimeError::from);
    // Requests that arrived during an operator's tenure, to handle first.
    let mut queued = Vec::new();
    if trigger == super::Trigger::Operator {
        if let Ok(space) = opened {
            match operate_parked(&inner, &id, generation, rx, space) {
                Parked::Done => {
                    end_tenure(&inner, &counters, &id);
                    return None;
                }
                Parked::Wanted(space, cmds) => {
                    opened = Ok(*space);
                    queued = cmds;
                }
            }
        }
    }
    // A scheduled tenure that begins with a firing takes its lease in the
    // firing's transaction (one transaction fewer per wake).
    if scheduled && queued.is_empty() {
        queued.extend(rx.try_recv().ok());
    }
    let fire_first = matches!(queued.first(), Some(c) if matches!(c.req, Request::FireDue));
    let mut fired_first: Option<(Cmd, FireReport, u64)> = None;
    let started = opened.and_then(|mut space| {
        let mut lease = None;
        if fire_first {
            // As the tenure will run: the directory's "later" move waits for
            // the turn's settle (`Server::turn`).
            space.defer_later_moves();
            // The runtime's start reads next; the firing brings it back.
            space.start_with_next_commit(inner.cfg.runtime.wave_event_limit);
            let now = inner.clock.now_ms();
            let enabled = inner.cfg.schedule.enabled;
            let fired = crate::schedule::fire::fire_due_taking_lease(
                &mut space,
                now,
                &inner.jitter,
                enabled,
            )?;
            // `None`: another holder's lease is live; starting says so.
            if let Some(mut report) = fired {
                after_fire_commit(&report);
                lease = report.lease.take();
                if lease.is_some() {
                    counters.inc(Counter::ScheduleLeaseWithFiring);
                }
                fired_first = Some((queued.remove(0), report, now));
            }
        }
        SpaceRuntime::start_leased(
            space,
            lease,
            inner.clock.clone(),
            inner.store.config().lease_ttl_ms,
            inner.cfg.runtime.clone(),
        )
    });
    let mut rt = match started {
        Ok(rt) => rt,
        Err(e) => {
            tracing::warn!(space = %id, error = %e, "activation failed");
            let refusal = if trigger == super::Trigger::Operator && queued.is_empty() {
                // No back-off for an operator: nothing was tried but the file.
                HostError::Unavailable {
                    space: id.clone(),
                    reason: e.to_string(),
                }
            } else {
                inner.record_failure(&id, trigger, &e)
            };
            for c in queued.into_iter().chain(fired_first.map(|(c, _, _)| c)) {
                if matches!(c.req, Request::FireDue | Request::Prepare { .. }) {
                    inner.end_scheduled(&id);
                }
                if let Some(r) = c.reply {
                    let _ = r.send(Err(refusal.clone()));
                }
            }
            fail_all(&inner, &id, generation, rx, &refusal);
            end_tenure(&inner, &counters, &id);
            return None;
        }
    };
    inner.clear_failures(&id);
    counters.observe(
        crate::metrics::Hist::ActivationDuration,
        activation.elapsed().as_micros() as u64,
    );
    // An effect's outcome comes back as a command of this space (dropped if
    // the space has parked since: it is asked for again when next pulled).
    {
        let weak = Arc::downgrade(&inner);
        let space = id.clone();
        rt.set_effect_sink(Arc::new(move |done| {
            if let Some(inner) = weak.upgrade() {
                inner.send_if_active(&space, Request::EffectDone(done));
            }
        }));
    }
    // A firing that opened the tenure read every entry already: its report
    // sets the gauge (one statement fewer per wake).
    if fired_first.is_none() {
        if let Ok(n) = rt.space().schedule_count() {
            set_indexed(&counters, n);
        }
    }
    // Checkpoint while idle rather than inside whichever commit crosses the
    // threshold; 10,000 pages (about 40 MiB) bounds the WAL meanwhile.
    if let Err(e) = rt.space().defer_checkpoints(10_000) {
        tracing::warn!(space = %id, error = %e, "cannot defer checkpoints");
    }
    // One "later" move of the directory per turn (`Server::turn`), not one
    // transaction after each commit.
    rt.space().defer_later_moves();
    let renew_ms = inner.store.config().lease_renew_ms;
    let started_ms = inner.clock.now_ms();
    let mut s = Server {
        inner,
        id,
        counters,
        rt,
        sessions: HashMap::new(),
        warm: BTreeSet::new(),
        demand_dirty: true,
        work: true,
        waves_since_checkpoint: 0,
        busy_turns: 0,
        life: Lifecycle::new(),
        last_activity_ms: started_ms,
        next_renew_ms: started_ms + renew_ms,
        quota: Default::default(),
    };
    s.life.become_(Phase::Serving);
    if let Some((cmd, report, now)) = fired_first {
        s.handle_fired(cmd, report, now);
    }
    for cmd in queued {
        s.handle(cmd);
    }
    Some(s)
}

/// What the loop looks at to decide its next step, read at one moment of
/// the host clock: plain data, so the decisions are pure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Moment {
    now_ms: u64,
    /// Waves (or a demand pass) are owed.
    work: bool,
    /// A session is attached.
    held: bool,
    /// An effect's outcome is on its way (it holds the space).
    effects_in_flight: bool,
    park_at: u64,
    renew_at: u64,
    /// A prepared wake's own firing.
    fire_at: Option<u64>,
    /// The idle checkpoint.
    checkpoint_at: Option<u64>,
    /// The next boundary of a pulled `#now/N`.
    clock_tick_at: Option<u64>,
}

/// What the loop does before it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BeforeWait {
    /// Idle long enough: compact the history and checkpoint the WAL.
    checkpoint: bool,
    /// Wait for a command until then (on the host clock).
    wait_until_ms: u64,
}

/// Before the loop waits (pure): checkpoint if its time has come, then
/// wait until the earliest timer (see [`next_deadline`]). Parking is a timer
/// only when no session holds the space.
fn before_wait(m: &Moment) -> BeforeWait {
    let checkpoint = m.checkpoint_at.is_some_and(|at| m.now_ms >= at);
    let wait_until_ms = next_deadline(
        m.now_ms,
        m.work,
        m.renew_at,
        [
            (!m.held).then_some(m.park_at),
            m.fire_at,
            // Done at once when due: no longer a timer.
            m.checkpoint_at.filter(|_| !checkpoint),
            m.clock_tick_at,
        ],
    );
    BeforeWait {
        checkpoint,
        wait_until_ms,
    }
}

/// Whether a pulled `#now/N` has reached its next boundary (pure): a wave
/// moves it and what reads it (not activity).
fn clock_tick_due(m: &Moment) -> bool {
    m.clock_tick_at.is_some_and(|at| m.now_ms >= at)
}

/// What the loop does after a turn's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AfterWork {
    /// Make the directory's owed "later" move now.
    settle_directory: bool,
    /// The firing being handled is done: the waker may send another.
    end_firing: bool,
    /// Renew the lease.
    renew: bool,
    /// Nothing holds the space and its park time has come: retire.
    park: bool,
}

/// After the turn's work (pure). Before a firing counts as done the
/// directory must show the space's next wake, or the waker would find it
/// still due; a space about to park does both at park, in the lease's
/// release. An effect on its way holds the space (for at most the broker's
/// total timeout).
fn after_work(m: &Moment) -> AfterWork {
    let park = !m.held && !m.work && !m.effects_in_flight && m.now_ms >= m.park_at;
    AfterWork {
        settle_directory: !park,
        end_firing: !park && !m.work,
        renew: m.now_ms >= m.renew_at,
        park,
    }
}

/// Until when (on the host clock) the loop may wait for its next command
/// (pure): `now` while there is work, else the earliest of the lease
/// renewal and the `timers` that are set (the park, a prepared wake's own
/// firing, the idle checkpoint, the next `#now/N` boundary). The park is passed only when no session
/// holds the space: with one attached, a park time in the past made this a
/// busy loop (until session 6, a session idle for the park time pinned a
/// core).
fn next_deadline(now_ms: u64, work: bool, renew_ms: u64, timers: [Option<u64>; 4]) -> u64 {
    if work {
        return now_ms;
    }
    timers.into_iter().flatten().fold(renew_ms, u64::min)
}

/// Right after a firing's commit: the crash tests' first firing step.
fn after_fire_commit(report: &FireReport) {
    if !report.fired.is_empty() {
        crate::schedule::delivery::crash_point(crate::schedule::delivery::CrashPoint::AfterFire);
    }
}

/// How an operator's tenure ended.
enum Parked {
    /// Every queued operation done and nothing else asked: retired.
    Done,
    /// Another request arrived: the space is wanted for a full tenure,
    /// which handles these first.
    Wanted(Box<crate::store::Space>, Vec<Cmd>),
}

/// An operator's tenure on a parked space: operations run on the file
/// (no lease — they are plane writes, which need none — and no runtime);
/// it retires as soon as its channel is empty, under the host's lock like
/// any park, so a request sent meanwhile is never lost: the first one that
/// is not an operation turns this into a full tenure.
fn operate_parked(
    inner: &HostInner,
    id: &str,
    generation: u64,
    rx: &Receiver<Cmd>,
    mut space: crate::store::Space,
) -> Parked {
    let mut pending: std::collections::VecDeque<Cmd> = std::collections::VecDeque::new();
    loop {
        let cmd = match pending.pop_front().or_else(|| rx.try_recv().ok()) {
            Some(c) => c,
            None => match inner.try_retire(id, generation, rx) {
                None => return Parked::Done,
                Some(left) => {
                    pending.extend(left);
                    continue;
                }
            },
        };
        match cmd.req {
            Request::Operate(op) => {
                let result = (op.0)(&mut space);
                if let Some(r) = cmd.reply {
                    let _ = r.send(Ok(Reply::Operated(result)));
                }
            }
            // Shutting down: there is nothing to stop but this; and no
            // timer runs here.
            Request::Stop | Request::ClockMoved | Request::EffectDone(_) => {}
            req => {
                let mut cmds = vec![Cmd {
                    req,
                    reply: cmd.reply,
                }];
                cmds.extend(pending);
                return Parked::Wanted(Box::new(space), cmds);
            }
        }
    }
}

/// How a tenure's loop ended.
enum Ended {
    /// Idle: park.
    Parked,
    /// The host is shutting down.
    Stopped,
    /// An error ended the tenure (a lost lease, a failed commit).
    Failed(RuntimeError),
}

/// The space is no longer active, however its tenure ended: its gauges
/// drop to what a parked space holds (no runtime memory, no demand) and its
/// counter set may be retired.
fn end_tenure(inner: &Arc<HostInner>, counters: &crate::metrics::SpaceCounters, id: &str) {
    for gauge in [Counter::RuntimeMemoryBytes, Counter::DemandedInstances] {
        counters.add(gauge, -counters.get(gauge));
    }
    counters.add(Counter::ActiveSpaces, -1);
    inner.counters.retire_space(id);
    // A slot is free: a wake waiting for one may go.
    inner.admit_waiting();
}

/// Retires a failed server and answers every command still queued for it
/// with `error`.
fn fail_all(inner: &HostInner, id: &str, generation: u64, rx: &Receiver<Cmd>, error: &HostError) {
    loop {
        match inner.try_retire(id, generation, rx) {
            None => return,
            Some(cmds) => {
                for c in cmds {
                    if matches!(c.req, Request::FireDue | Request::Prepare { .. }) {
                        inner.end_scheduled(id);
                    }
                    if let Some(r) = c.reply {
                        let _ = r.send(Err(error.clone()));
                    }
                }
            }
        }
    }
}

impl Server {
    /// When an idle server parks: at once for a scheduled tenure nobody
    /// attached to (a herd of wakes must not hold thousands of spaces
    /// active), otherwise after the configured idle time — and never
    /// before a prepared wake's due time.
    fn park_at(&self) -> u64 {
        // A brief tenure (a scheduled wake nobody joined) parks at once.
        let idle = if self.life.brief() {
            0
        } else {
            self.inner.cfg.idle_park_ms
        };
        let at = self.last_activity_ms + idle;
        self.life.hold_until().map_or(at, |h| at.max(h))
    }

    /// What the loop looks at now ([`Moment`]).
    fn moment(&self) -> Moment {
        Moment {
            now_ms: self.inner.clock.now_ms(),
            work: self.work,
            held: !self.sessions.is_empty(),
            effects_in_flight: self.rt.effects_in_flight() > 0,
            park_at: self.park_at(),
            renew_at: self.next_renew_ms,
            fire_at: self.life.fire_at(),
            checkpoint_at: self.checkpoint_at(),
            clock_tick_at: self.rt.next_clock_tick(),
        }
    }

    /// One turn of the loop: wait for a command (or the next deadline),
    /// handle every queued command, do the work (demand pass, waves,
    /// updates), then settle the directory, renew the lease and park when
    /// idle. `Some`: the tenure ends so.
    fn turn(&mut self, rx: &Receiver<Cmd>, generation: u64) -> Option<Ended> {
        let before = before_wait(&self.moment());
        if before.checkpoint {
            self.checkpoint_idle();
        }
        self.counters.inc(Counter::ServerWakeups);
        // On a manual clock no deadline comes by itself: its jumps arrive
        // as `ClockMoved` commands.
        let received = match self.inner.clock.real_wait_until(before.wait_until_ms) {
            Some(wait) => rx.recv_timeout(wait),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match received {
            Ok(cmd) => self.handle(cmd),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Some(Ended::Parked),
        }
        while let Ok(cmd) = rx.try_recv() {
            self.handle(cmd);
        }
        if self.life.phase() == Phase::Draining {
            // Between waves: the one in flight (if any) has committed.
            return Some(Ended::Stopped);
        }
        if let Err(e) = self.share_file_unless_brief() {
            return Some(Ended::Failed(e));
        }
        self.fire_if_prepared();
        if clock_tick_due(&self.moment()) {
            self.work = true;
        }
        if let Err(e) = self.work() {
            return Some(Ended::Failed(e));
        }
        let after = after_work(&self.moment());
        if after.settle_directory {
            if let Err(e) = self.rt.space().settle_projection() {
                return Some(Ended::Failed(e.into()));
            }
        }
        if after.end_firing {
            self.end_firing();
        }
        if after.renew {
            if let Err(e) = self.renew() {
                return Some(Ended::Failed(e));
            }
        }
        if after.park {
            match self.inner.try_retire(&self.id, generation, rx) {
                None => return Some(Ended::Parked),
                Some(leftover) => {
                    for cmd in leftover {
                        self.handle(cmd);
                    }
                }
            }
        }
        None
    }

    /// Idle: apply the log's retention rule first (a no-op until enough
    /// history is new), then checkpoint what it freed.
    fn checkpoint_idle(&mut self) {
        if let Err(e) = self.rt.space().compact_history() {
            tracing::warn!(space = %self.id, error = %e, "history compaction failed");
        }
        match self.rt.space().checkpoint() {
            Ok(()) => self.rt.space().counters().inc(Counter::WalCheckpoints),
            Err(e) => tracing::warn!(space = %self.id, error = %e, "checkpoint failed"),
        }
        self.waves_since_checkpoint = 0;
    }

    /// Renews the lease. A tenure lasting past a renewal is no longer brief
    /// enough to keep the file to itself (another host may want the lease).
    fn renew(&mut self) -> Result<(), RuntimeError> {
        self.rt.renew_lease()?;
        if self.rt.space().access() == FileAccess::Exclusive {
            self.rt.space().share()?;
        }
        self.next_renew_ms = self.inner.clock.now_ms() + self.inner.store.config().lease_renew_ms;
        Ok(())
    }

    /// Ends the tenure as `ended` says: parked (lease given back, the
    /// directory settled in its transaction), stopped at shutdown (flushed,
    /// checkpointed, everything queued refused) or failed (retried later if
    /// events are pending).
    fn end(mut self, ended: Ended, rx: &Receiver<Cmd>, generation: u64) {
        self.life.become_(match ended {
            Ended::Failed(_) => Phase::Failed,
            Ended::Parked | Ended::Stopped => Phase::Parked,
        });
        let (inner, id, counters) = (self.inner.clone(), self.id.clone(), self.counters.clone());
        match ended {
            Ended::Stopped => {
                // Shutdown: keep what was computed, give the lease back (the
                // next process serves the space at once), checkpoint and close.
                let firing = self.life.firing_done();
                if let Err(e) = self.rt.flush() {
                    tracing::warn!(space = %id, error = %e, "flush at shutdown failed");
                }
                match self.rt.stop() {
                    Ok(mut space) => {
                        if let Err(e) = space.checkpoint_all() {
                            tracing::warn!(space = %id, error = %e, "checkpoint at shutdown failed");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(space = %id, error = %e, "lease release at shutdown failed")
                    }
                }
                if firing {
                    inner.end_scheduled(&id);
                }
                let leaving = HostError::Unavailable {
                    space: id.clone(),
                    reason: "the host is shutting down".into(),
                };
                fail_all(&inner, &id, generation, rx, &leaving);
                counters.inc(Counter::StoppedAtShutdown);
                end_tenure(&inner, &counters, &id);
            }
            Ended::Parked => {
                // Park: give the lease back (settling the directory in the same
                // transaction); the runtime and the file close on drop.
                let firing = self.life.firing_done();
                let _ = self.rt.flush();
                if self.busy_turns >= COMPACT_AFTER_TURNS {
                    // A busy tenure without idle checkpoints (no sessions):
                    // the retention rule runs at its park instead.
                    if let Err(e) = self.rt.space().compact_history() {
                        tracing::warn!(space = %id, error = %e, "history compaction failed");
                    }
                }
                let _ = self.rt.stop();
                end_tenure(&inner, &counters, &id);
                if firing {
                    // Once this thread can take the next activation (see
                    // `pool::when_idle`).
                    let (inner, id) = (inner.clone(), id.clone());
                    super::pool::when_idle(move || inner.end_scheduled(&id));
                }
                // Trimming walks every arena (~10% of a scheduled wake's CPU in
                // a herd): skip it while other scheduled activations are in
                // flight (this one still counts until its thread is idle),
                // except every 32nd park, and trim on every other park so a
                // quiet host hands its memory back.
                let parks = counters.get(Counter::Parks);
                let others = inner.scheduled_in_flight().iter().any(|s| *s != id);
                if !others || parks % 32 == 31 {
                    crate::allocator::release_freed_memory();
                }
                counters.inc(Counter::Parks);
            }
            Ended::Failed(e) => {
                tracing::warn!(space = %id, error = %e, "tenure ended");
                if matches!(e, RuntimeError::LeaseLost) {
                    counters.inc(Counter::TenuresLost);
                }
                // Dropping the space settles the directory (best effort) before
                // the waker may look at it again.
                let firing = self.life.firing_done();
                let attempts = self.rt.failed_wave_attempts();
                let pending = self.rt.space().has_undelivered().unwrap_or(true);
                drop(self);
                if pending {
                    // Nothing else would run the space again: no event can
                    // wedge it (its retries are bounded, then it is
                    // dead-lettered).
                    inner.retry_failed_tenure(&id, attempts, &e);
                }
                if firing {
                    inner.end_scheduled(&id);
                }
                let stopped = HostError::Unavailable {
                    space: id.clone(),
                    reason: format!("its server stopped: {e}"),
                };
                fail_all(&inner, &id, generation, rx, &stopped);
                end_tenure(&inner, &counters, &id);
            }
        }
    }

    /// When the WAL gets its checkpoint: once the space has been quiet for
    /// [`CHECKPOINT_QUIET_MS`] after a wave, or at the first idle moment after
    /// [`CHECKPOINT_EVERY_WAVES`] waves. `None` with no session attached:
    /// the space is about to park, and closing the file checkpoints anyway
    /// (doing both doubled the cost of a scheduled wake).
    fn checkpoint_at(&self) -> Option<u64> {
        if self.work || self.sessions.is_empty() || self.waves_since_checkpoint == 0 {
            return None;
        }
        if self.waves_since_checkpoint >= CHECKPOINT_EVERY_WAVES {
            return Some(self.last_activity_ms);
        }
        Some(self.last_activity_ms + CHECKPOINT_QUIET_MS)
    }

    /// A tenure that opened its file exclusively shares it once it is no
    /// longer brief, so other readers and hosts are not kept waiting.
    fn share_file_unless_brief(&mut self) -> Result<(), RuntimeError> {
        if self.rt.space().access() == FileAccess::Exclusive && self.life.held() {
            self.rt.space().share()?;
        }
        Ok(())
    }

    /// The wave of a handled firing is done (or the tenure ended): the
    /// waker may dispatch another scheduled activation.
    fn end_firing(&mut self) {
        if self.life.firing_done() {
            self.inner.end_scheduled(&self.id);
        }
    }

    fn handle(&mut self, cmd: Cmd) {
        if matches!(cmd.req, Request::ClockMoved) {
            // Not activity: the loop only looks at its timers again.
            return;
        }
        self.last_activity_ms = self.inner.clock.now_ms();
        self.life.command(matches!(
            cmd.req,
            Request::FireDue | Request::Prepare { .. }
        ));
        let result = self.handle_request(cmd.req);
        if let Some(reply) = cmd.reply {
            let _ = reply.send(result);
        }
    }

    fn handle_request(&mut self, req: Request) -> Result<Reply, HostError> {
        match req {
            Request::Attach(super::Attach { session, sink }) => {
                self.sessions.insert(
                    session,
                    Session {
                        sink,
                        tracked: BTreeMap::new(),
                    },
                );
                self.counters().inc(Counter::SessionsAttached);
                self.life.joined();
                let head_seq = self
                    .rt
                    .space()
                    .head_seq()
                    .map_err(|e| HostError::Internal(e.to_string()))?;
                Ok(Reply::Attached { head_seq })
            }
            Request::Detach { session } => {
                if self.sessions.remove(&session).is_some() {
                    self.demand_dirty = true;
                }
                Ok(Reply::Done)
            }
            Request::Track {
                session,
                piece,
                path,
                since,
            } => {
                if !self.rt.has_piece(&piece) {
                    return Err(self.missing_piece(piece));
                }
                let s = self
                    .sessions
                    .get_mut(&session)
                    .ok_or_else(|| HostError::BadRequest("the session is not attached".into()))?;
                // A resuming client has seen everything up to `since`.
                s.tracked.insert((piece, path), since.unwrap_or(0));
                self.demand_dirty = true;
                self.work = true;
                Ok(Reply::Done)
            }
            Request::Untrack {
                session,
                piece,
                path,
            } => {
                if let Some(s) = self.sessions.get_mut(&session) {
                    s.tracked.remove(&(piece, path));
                }
                self.demand_dirty = true;
                Ok(Reply::Done)
            }
            Request::Send(e) => self.send(e),
            Request::Read(super::Read { piece, doc, path }) => self.read(piece, doc, path),
            Request::Deploy(d) => self.deploy(d),
            Request::DeletePiece(super::DeletePiece { piece }) => {
                let ended_wakes = self.rt.delete_piece(&piece).map_err(|e| match e {
                    RuntimeError::UnknownPiece(p) => HostError::UnknownPiece(p),
                    other => internal(other),
                })?;
                self.rt.flush().map_err(internal)?;
                Ok(Reply::Deleted { ended_wakes })
            }
            Request::Warm { pieces } => {
                for p in &pieces {
                    if !self.rt.has_piece(p) {
                        return Err(self.missing_piece(p.clone()));
                    }
                }
                self.warm.extend(pieces);
                self.life.joined();
                self.demand_dirty = true;
                self.work = true;
                Ok(Reply::Done)
            }
            Request::Wake => {
                self.work = true;
                Ok(Reply::Done)
            }
            Request::EffectDone(done) => {
                self.rt
                    .apply_effect(done)
                    .map_err(|e| HostError::Unavailable {
                        space: self.id.clone(),
                        reason: e.to_string(),
                    })?;
                self.work = true;
                Ok(Reply::Done)
            }
            Request::Stop => {
                self.life.become_(Phase::Draining);
                Ok(Reply::Done)
            }
            Request::Operate(op) => Ok(Reply::Operated((op.0)(self.rt.space()))),
            Request::FireDue => {
                // Counted in flight until its wave is done (`end_firing`).
                self.life.fire();
                self.fire_due()
            }
            Request::ClockMoved => Ok(Reply::Done),
            Request::Prepare { due_ms } => {
                // Held until the due time plus a margin for the waker's pass.
                self.life.prepare(due_ms, due_ms + PREPARED_HOLD_MS);
                self.counters().inc(Counter::SchedulePrepared);
                self.inner.end_scheduled(&self.id);
                Ok(Reply::Done)
            }
        }
    }

    /// A prepared wake's due time has come: fire it as the waker would,
    /// counted in flight. If the waker got there first (the space is in
    /// flight) its request is on the way.
    fn fire_if_prepared(&mut self) {
        let now = self.inner.clock.now_ms();
        if self.life.fire_at().is_none_or(|due_ms| now < due_ms) {
            return;
        }
        self.life.take_fire_at();
        if self.inner.begin_scheduled(&self.id) {
            self.counters().inc(Counter::ScheduleSelfFired);
            self.handle(Cmd {
                req: Request::FireDue,
                reply: None,
            });
        }
    }

    /// Write-first firing of every due entry, then the ordinary event path
    /// delivers the wakes (their handlers pull only what they read).
    fn fire_due(&mut self) -> Result<Reply, HostError> {
        let now = self.inner.clock.now_ms();
        let enabled = self.inner.cfg.schedule.enabled;
        let report =
            crate::schedule::fire::fire_due(self.rt.space(), now, &self.inner.jitter, enabled)
                .map_err(|e| HostError::Internal(e.to_string()))?;
        after_fire_commit(&report);
        self.fired(report, now)
    }

    /// The first command of a tenure was a firing, done with the lease in
    /// its transaction before the runtime started: account for it as
    /// [`Server::handle`] would have.
    fn handle_fired(&mut self, cmd: Cmd, report: FireReport, now: u64) {
        self.last_activity_ms = self.inner.clock.now_ms();
        self.life.command(true);
        self.life.fire();
        let result = self.fired(report, now);
        if let Some(reply) = cmd.reply {
            let _ = reply.send(result);
        }
    }

    /// Counts a firing's report and corrects an early directory.
    fn fired(&mut self, report: FireReport, now: u64) -> Result<Reply, HostError> {
        let c = self.counters();
        c.add(Counter::ScheduleDue, report.due as i64);
        c.add(Counter::ScheduleSuppressed, report.suppressed as i64);
        for f in &report.fired {
            c.inc(Counter::ScheduleFired);
            c.add(Counter::ScheduleMissedCoalesced, f.missed_periods as i64);
            if f.caught_up() {
                c.inc(Counter::ScheduleOneOffCaughtUp);
            }
            c.observe_lateness(f.lateness_ms);
        }
        if report.due == 0 {
            // The directory was early (allowed), or this request raced a
            // firing that just finished: correct it. Hold the space off a
            // moment only if it still looks due, so a projection that stays
            // early cannot loop — and a next wake already in the future is
            // not delayed by the hold (it was, by up to a second).
            let truth = self.rt.space().reconcile_projection();
            if truth.map_or(true, |p| p.next_wake_ms.is_some_and(|t| t <= now)) {
                self.inner.report_nothing_due(&self.id);
            }
        }
        set_indexed(&c, report.indexed as u64);
        self.work = true;
        Ok(Reply::Done)
    }

    /// The refusal for a piece this tenure does not serve: set aside (with
    /// why), or unknown.
    fn missing_piece(&self, piece: String) -> HostError {
        match self.rt.set_aside().get(&piece) {
            Some(reason) => HostError::PieceSetAside {
                reason: reason.clone(),
                piece,
            },
            None => HostError::UnknownPiece(piece),
        }
    }

    fn counters(&self) -> crate::metrics::SpaceCounters {
        self.counters.clone()
    }

    /// Whether `incoming` more bytes fit the space's storage quota: what
    /// the space holds (its file's pages in use, or its rows in a fleet's
    /// database, see `quota.rs`) before the write is accepted. Only what
    /// clients bring in is refused (events, deploys); the host's own
    /// commits (waves, wakes, the ledger) are not, so a full space still
    /// settles what it already accepted.
    fn within_quota(&mut self, incoming: u64) -> Result<(), HostError> {
        let limit = self.inner.cfg.space_quota_bytes;
        if limit == 0 {
            return Ok(());
        }
        let space = self.rt.space();
        let scan = space.measuring_is_a_scan();
        let admitted = self
            .quota
            .admit(incoming, limit, scan, || space.bytes_used())
            .map_err(|e| HostError::Internal(e.to_string()))?;
        let Err(used) = admitted else {
            return Ok(());
        };
        self.counters().inc(Counter::WritesRefusedByQuota);
        Err(HostError::StorageQuota {
            space: self.id.clone(),
            used_bytes: used,
            incoming_bytes: incoming,
            limit_bytes: limit,
        })
    }

    /// What the space's storage quota has left (`None`: no quota).
    fn storage_left(&mut self) -> Result<Option<u64>, crate::store::StoreError> {
        let limit = self.inner.cfg.space_quota_bytes;
        if limit == 0 {
            return Ok(None);
        }
        let space = self.rt.space();
        let scan = space.measuring_is_a_scan();
        self.quota
            .left(limit, scan, || space.bytes_used())
            .map(Some)
    }

    fn send(&mut self, e: super::SendEvent) -> Result<Reply, HostError> {
        let super::SendEvent {
            author,
            piece,
            path,
            event_id,
            payload,
        } = e;
        if !self.rt.has_piece(&piece) {
            return Err(self.missing_piece(piece));
        }
        let event_id = event_id.unwrap_or_else(|| format!("ev-{:016x}", rand::random::<u64>()));
        // Measured the way the store will write it (its JSON text).
        let incoming = serde_json::to_string(&payload).map_or(0, |t| t.len()) + event_id.len();
        self.within_quota(incoming as u64)?;
        let seq = self
            .rt
            .send(&piece, &path, &event_id, payload, &author)
            .map_err(|e| match e {
                RuntimeError::Invalid(m) => HostError::UnknownStream(m),
                // The store's own guard on names a client chose.
                RuntimeError::Store(crate::store::StoreError::InvalidCommit(m)) => {
                    HostError::BadRequest(m)
                }
                other => internal(other),
            })?;
        self.work = true;
        if seq != 0 {
            return Ok(Reply::Appended(super::Appended {
                seq,
                duplicate: false,
            }));
        }
        // A duplicate: answer with the commit that first appended it.
        let first = self
            .rt
            .space()
            .event(&event_id)
            .map_err(|e| HostError::Internal(e.to_string()))?
            .map_or(0, |e| e.seq);
        Ok(Reply::Appended(super::Appended {
            seq: first,
            duplicate: true,
        }))
    }

    fn read(
        &mut self,
        piece: Option<String>,
        doc: Option<String>,
        path: Vec<PathSeg>,
    ) -> Result<Reply, HostError> {
        let (value, seq) = match (piece, doc) {
            (Some(p), _) => {
                if !self.rt.has_piece(&p) {
                    return Err(HostError::UnknownPiece(p));
                }
                self.rt.read_tracked(&p, &path).map_err(internal)?
            }
            (None, Some(d)) => {
                let (v, seq) = self.rt.read_doc(&d).map_err(internal)?;
                let v = v.unwrap_or(Value::Null);
                let v = crate::store::path::get_at(&v, &path)
                    .cloned()
                    .unwrap_or(Value::Null);
                (v, seq)
            }
            (None, None) => {
                return Err(HostError::BadRequest("read needs a piece or a doc".into()))
            }
        };
        // A read may have pulled derivations: keep what they computed.
        self.rt.flush().map_err(internal)?;
        self.note_session_reads();
        Ok(Reply::Value(super::ValueAt { value, seq }))
    }

    fn deploy(&mut self, d: super::Deploy) -> Result<Reply, HostError> {
        let super::Deploy {
            entry,
            files,
            export,
            argument,
        } = d;
        let sources: usize = files.iter().map(|(n, t)| n.len() + t.len()).sum();
        let argument_len = serde_json::to_string(&argument).map_or(0, |t| t.len());
        self.within_quota((sources + argument_len) as u64)?;
        let mut src = MemorySource::new();
        for (name, text) in &files {
            src.insert(name, text);
        }
        let program = crate::runtime::compile_cache()
            .compile(&entry, &src)
            .map_err(|d| HostError::InvalidPattern {
                diagnostics: diagnostics_for_client(&d),
            })?;
        let piece = self
            .rt
            .deploy_piece(&program, export.as_deref(), &argument)
            .map_err(|e| match e {
                RuntimeError::Sandbox(s) => HostError::InvalidPattern {
                    diagnostics: s.to_string(),
                },
                RuntimeError::Invalid(m) => HostError::InvalidPattern {
                    diagnostics: crate::human::truncate_message(&m, MAX_DIAGNOSTICS_CHARS),
                },
                RuntimeError::InvalidArgument(m) => HostError::InvalidArgument(m),
                other => internal(other),
            })?;
        self.rt.flush().map_err(internal)?;
        Ok(Reply::Deployed { piece })
    }

    /// Steps 3-5 of the loop: demand pass, waves, updates.
    fn work(&mut self) -> Result<(), RuntimeError> {
        // A brief tenure nobody joined parks as soon as its work is done:
        // its last wave gives the lease back in its own commit. On a
        // fleet's database another host may take the space the moment it
        // is given back; work arriving before this server parks takes the
        // lease again only if nobody wrote the space meanwhile (the store
        // refuses it otherwise, and the tenure ends: its runtime is out of
        // date).
        let parks_after =
            self.life.brief() && self.sessions.is_empty() && self.life.hold_until().is_none();
        self.rt.release_with_last_wave(parks_after);
        // While the turn runs, the keeper renews the lease if it runs long.
        let keeper = self.inner.keeper.clone();
        let access = self.rt.space().access();
        let _watch = keeper.watch(&self.id, self.rt.lease(), access);
        self.work_inner()
    }

    /// Whether the space's scheduled budget for this window is spent.
    fn scheduled_budget_spent(&mut self) -> Result<bool, RuntimeError> {
        let host_default = self.inner.cfg.schedule.scheduled_budget_us;
        let now = self.inner.clock.now_ms();
        let window = self.inner.cfg.runtime.ledger_window_ms;
        let space = self.rt.space();
        let budget = crate::accounting::scheduled_budget_us(space, host_default)?;
        Ok(crate::accounting::scheduled_budget_spent(
            space, budget, now, window,
        )?)
    }

    fn work_inner(&mut self) -> Result<(), RuntimeError> {
        if self.demand_dirty {
            self.demand_pass()?;
        }
        if !self.work {
            return Ok(());
        }
        // Real time: how long waves may run before their updates go out.
        let flush = Duration::from_millis(self.inner.cfg.flush_deadline_ms);
        let running = Stopwatch::start();
        // Waves of a tenure started by a scheduled wake, with no session
        // attached, bill the scheduled bucket; everything else bills session.
        let scheduled = self.life.bills_scheduled(!self.sessions.is_empty());
        self.rt.set_bucket(if scheduled {
            crate::store::Bucket::Scheduled
        } else {
            crate::store::Bucket::Session
        });
        if scheduled && self.rt.has_effect_nodes() {
            // A spent scheduled budget stops this tenure's effects (its
            // compute was admitted at activation, its waves committed since
            // are in the ledger). A space without effects reads nothing.
            let spent = self.scheduled_budget_spent()?;
            self.rt.set_scheduled_budget_spent(spent);
        }
        loop {
            let span = tracing::info_span!("wave", space = %self.id);
            let _entered = span.enter();
            let now = self.inner.clock.now_ms();
            let limit = self.inner.cfg.runtime.wave_event_limit;
            let backoff = self.inner.cfg.schedule.backoff;
            // Handlers of events accepted under the quota must not write
            // the space past it: what is left bounds the wave's writes.
            let left = self.storage_left()?;
            self.rt.set_storage_left(left);
            let (report, delivery) =
                super::wave::run_wave_with(&mut self.rt, now, limit, &backoff)?;
            self.quota.add(report.written_bytes);
            let c = self.counters();
            c.add(Counter::ScheduleDelivered, delivery.delivered as i64);
            c.add(Counter::ScheduleRetried, delivery.retried as i64);
            c.add(Counter::ScheduleDeadLettered, delivery.dead_lettered as i64);
            c.add(Counter::ScheduleBackedOff, delivery.backed_off as i64);
            tracing::debug!(events = report.events, seq = ?report.seq, handlers = report.handler_runs, derivations = report.derivation_runs, "wave committed");
            if report.events > 0 {
                self.last_activity_ms = self.inner.clock.now_ms();
            }
            // A wave that took fewer events than it could took every event
            // there was: another would read the streams to find none. Events
            // its handlers appended are seen below (`work`), and run next
            // turn.
            if report.events < limit || running.passed(flush) {
                break;
            }
        }
        self.push_updates()?;
        self.waves_since_checkpoint = self.waves_since_checkpoint.saturating_add(1);
        self.busy_turns = self.busy_turns.saturating_add(1);
        self.work = self.rt.space().has_undelivered()?;
        self.report_memory();
        Ok(())
    }

    /// What sessions read may be a schedule's output: mark it read, and
    /// restore any backed-off entry to its declared interval.
    fn note_session_reads(&mut self) {
        let read = self.rt.take_session_reads();
        let now = self.inner.clock.now_ms();
        match crate::schedule::backoff::note_session_reads(self.rt.space(), &read, now) {
            Ok(n) => self
                .counters()
                .add(Counter::ScheduleBackoffRestored, n as i64),
            Err(e) => tracing::warn!(space = %self.id, error = %e, "cannot record session reads"),
        }
    }

    /// Keeps the runtime-memory gauge equal to this space's JS heap.
    fn report_memory(&mut self) {
        let c = self.counters();
        let now = self.rt.memory_used_bytes() as i64;
        c.add(
            Counter::RuntimeMemoryBytes,
            now - c.get(Counter::RuntimeMemoryBytes),
        );
    }

    fn demand_pass(&mut self) -> Result<(), RuntimeError> {
        self.rt.clear_demand();
        let mut n = 0i64;
        let mut set = BTreeSet::new();
        for s in self.sessions.values() {
            for (piece, path) in s.tracked.keys() {
                set.insert((piece.clone(), path.clone()));
            }
        }
        for piece in self.warm.clone() {
            for key in self.rt.data_keys(&piece)? {
                set.insert((piece.clone(), vec![PathSeg::Key(key)]));
            }
        }
        for (piece, path) in &set {
            self.rt.demand(piece, path);
            n += 1;
        }
        let c = self.counters();
        c.inc(Counter::DemandPasses);
        let before = c.get(Counter::DemandedInstances);
        c.add(Counter::DemandedInstances, n - before);
        self.demand_dirty = false;
        Ok(())
    }

    /// Sends each session the tracked values that changed since it last saw
    /// them, in seq order, each at most once.
    fn push_updates(&mut self) -> Result<(), RuntimeError> {
        let mut sent = 0;
        let ids: Vec<SessionId> = self.sessions.keys().copied().collect();
        for sid in ids {
            let tracked: Vec<((String, Vec<PathSeg>), u64)> = self.sessions[&sid]
                .tracked
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            let mut updates = Vec::new();
            for ((piece, path), last) in tracked {
                let (value, seq) = self.rt.read_tracked(&piece, &path)?;
                if seq > last || (last == 0 && seq == 0) {
                    updates.push(Update {
                        seq: seq.max(1),
                        piece: piece.clone(),
                        path: path.clone(),
                        value,
                    });
                    if let Some(s) = self.sessions.get_mut(&sid) {
                        s.tracked.insert((piece, path), seq.max(1));
                    }
                }
            }
            updates.sort_by_key(|u| u.seq);
            let s = &self.sessions[&sid];
            for u in updates {
                if s.sink.send(u).is_ok() {
                    sent += 1;
                }
            }
        }
        self.counters().add(Counter::UpdatesSent, sent);
        self.rt.flush()?;
        self.note_session_reads();
        Ok(())
    }
}

/// How long past its due time a prepared space stays active, for the
/// waker's pass to reach it if it did not fire itself.
const PREPARED_HOLD_MS: u64 = 50;

/// Turns with work after which a tenure applies the log's retention rule at
/// its park (tenures with sessions apply it at their idle checkpoints).
const COMPACT_AFTER_TURNS: u32 = 256;

fn internal(e: RuntimeError) -> HostError {
    HostError::Internal(crate::human::truncate_message(
        &e.to_string(),
        MAX_DIAGNOSTICS_CHARS,
    ))
}

/// A refused deploy's diagnostics are cut to this many characters on the
/// wire (`spacewake check` prints them all, locally).
pub const MAX_DIAGNOSTICS_CHARS: usize = 32_768;

/// The first diagnostics, rendered, and how many were left out.
fn diagnostics_for_client(d: &[crate::compiler::Diagnostic]) -> String {
    const SHOWN: usize = 50;
    let mut text = crate::compiler::render(&d[..d.len().min(SHOWN)]);
    if d.len() > SHOWN {
        text.push_str(&format!(
            "… and {} more (run `spacewake check` to see them all)\n",
            crate::human::thousands((d.len() - SHOWN) as u64)
        ));
    }
    crate::human::truncate_message(&text, MAX_DIAGNOSTICS_CHARS)
}

/// Keeps the `schedule.indexedEntries` gauge equal to the space's rows.
fn set_indexed(c: &crate::metrics::SpaceCounters, n: u64) {
    c.add(
        Counter::ScheduleIndexed,
        n as i64 - c.get(Counter::ScheduleIndexed),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_waits_for_its_earliest_timer_and_not_at_all_with_work() {
        let now = 10_000;
        let renew = now + 1_000;
        assert_eq!(
            next_deadline(now, true, renew, [Some(now + 5), None, None, None]),
            now
        );
        assert_eq!(
            next_deadline(now, false, renew, [None, None, None, None]),
            renew
        );
        assert_eq!(
            next_deadline(
                now,
                false,
                renew,
                [
                    Some(now + 300),
                    Some(now + 40),
                    Some(now + 50),
                    Some(now + 60)
                ]
            ),
            now + 40
        );
        assert_eq!(
            next_deadline(now, false, renew, [Some(now - 10), None, None, None]),
            now - 10,
            "a timer in the past: at once"
        );
    }

    fn idle(now_ms: u64) -> Moment {
        Moment {
            now_ms,
            work: false,
            held: false,
            effects_in_flight: false,
            park_at: now_ms + 100,
            renew_at: now_ms + 1_000,
            fire_at: None,
            checkpoint_at: None,
            clock_tick_at: None,
        }
    }

    #[test]
    fn before_waiting_a_due_checkpoint_runs_and_is_no_longer_a_timer() {
        let now = 10_000;
        let m = idle(now);
        assert_eq!(
            before_wait(&m),
            BeforeWait {
                checkpoint: false,
                wait_until_ms: now + 100
            },
            "an unheld space waits for its park"
        );
        let held = Moment { held: true, ..m };
        assert_eq!(
            before_wait(&held).wait_until_ms,
            now + 1_000,
            "held: no park timer"
        );
        let due = Moment {
            held: true,
            checkpoint_at: Some(now - 1),
            ..m
        };
        assert_eq!(
            before_wait(&due),
            BeforeWait {
                checkpoint: true,
                wait_until_ms: now + 1_000
            }
        );
        let later = Moment {
            held: true,
            checkpoint_at: Some(now + 50),
            fire_at: Some(now + 70),
            ..m
        };
        assert_eq!(before_wait(&later).wait_until_ms, now + 50);
        assert_eq!(
            before_wait(&Moment {
                work: true,
                ..later
            })
            .wait_until_ms,
            now
        );
        assert!(!clock_tick_due(&m));
        assert!(clock_tick_due(&Moment {
            clock_tick_at: Some(now),
            ..m
        }));
    }

    #[test]
    fn after_the_work_an_idle_space_past_its_park_time_parks_and_nothing_else_does() {
        let now = 10_000;
        let past = Moment {
            park_at: now,
            ..idle(now)
        };
        assert_eq!(
            after_work(&past),
            AfterWork {
                settle_directory: false,
                end_firing: false,
                renew: false,
                park: true
            },
            "the park settles the directory and ends the firing itself"
        );
        for holds in [
            Moment { held: true, ..past },
            Moment { work: true, ..past },
            Moment {
                effects_in_flight: true,
                ..past
            },
            Moment {
                park_at: now + 1,
                ..past
            },
        ] {
            assert!(!after_work(&holds).park, "{holds:?}");
            assert!(after_work(&holds).settle_directory);
        }
        assert!(
            !after_work(&Moment { work: true, ..past }).end_firing,
            "a wave is still owed"
        );
        assert!(after_work(&Moment { held: true, ..past }).end_firing);
        assert!(
            after_work(&Moment {
                renew_at: now,
                ..past
            })
            .renew
        );
    }
}
