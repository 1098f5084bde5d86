//! Counters: the one place behaviour is made visible.
//!
//! Every counter is declared once in [`Counter`], with its block (the JSON
//! object it appears under in `servingLoop`), its name and its help text.
//! Each is kept host-wide and per space; the health route renders them as
//! JSON and `/metrics` as Prometheus text, both from the same atomics.
//!
//! Invariant: an increment is a relaxed atomic add on a pre-resolved
//! per-space set plus the host set; the hot path takes no lock.

use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

pub mod exposition;
pub mod histogram;
pub use histogram::Hist;

macro_rules! counters {
    ($( $variant:ident => ($block:literal, $name:literal, $kind:ident, $help:literal), )*) => {
        /// Every counter and gauge spacewake keeps.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum Counter { $( $variant, )* }

        impl Counter {
            pub const ALL: &'static [Counter] = &[ $( Counter::$variant, )* ];
            pub fn block(self) -> &'static str { match self { $( Counter::$variant => $block, )* } }
            pub fn name(self) -> &'static str { match self { $( Counter::$variant => $name, )* } }
            pub fn kind(self) -> Kind { match self { $( Counter::$variant => Kind::$kind, )* } }
            pub fn help(self) -> &'static str { match self { $( Counter::$variant => $help, )* } }
        }
    };
}

/// Counters only go up; gauges go both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

counters! {
    CommitsAuthored => ("store", "commitsAuthored", Counter, "Authored commits accepted"),
    CommitsDerived => ("store", "commitsDerived", Counter, "Derived commits accepted"),
    CommitsSystem => ("store", "commitsSystem", Counter, "System commits accepted"),
    CommitsRejected => ("store", "commitsRejected", Counter, "Commits refused (bad operation, hook failure, lease)"),
    HookFailures => ("store", "hookFailures", Counter, "Index hooks that failed and aborted their commit"),
    SpacesOpened => ("store", "spacesOpened", Counter, "Space files opened"),
    SpacesOpen => ("store", "spacesOpen", Gauge, "Space files currently open"),
    SpacesOpenedExclusive => ("store", "spacesOpenedExclusive", Counter, "Space files opened for one connection alone (scheduled tenures: no shared-memory WAL index)"),
    SpacesExclusiveFallbacks => ("store", "spacesExclusiveFallbacks", Counter, "Exclusive opens that found the file open elsewhere and opened it shared instead"),
    SpacesReopenedShared => ("store", "spacesReopenedShared", Counter, "Exclusively opened space files reopened shared (a session attached, or the tenure ran past a lease renewal)"),
    SpacesQuarantined => ("store", "spacesQuarantined", Counter, "Space files found corrupt and set aside"),
    WalCheckpoints => ("store", "walCheckpoints", Counter, "WAL checkpoints a space server ran while sessions were attached (after 50 ms quiet or 256 waves)"),
    DirectoryMovedEarlier => ("store", "directoryMovedEarlier", Counter, "Directory projections moved earlier before a space commit"),
    DirectoryMovedLater => ("store", "directoryMovedLater", Counter, "Directory projections moved later after a space commit"),
    EventsAppended => ("events", "appended", Counter, "Stream events appended"),
    EventsDuplicate => ("events", "skippedDuplicate", Counter, "Event appends skipped because the eventId was already stored"),
    WatermarksAdvanced => ("events", "watermarksAdvanced", Counter, "Stream watermarks advanced by a commit"),
    LeaseAcquired => ("lease", "acquired", Counter, "Execution leases acquired"),
    LeaseRefused => ("lease", "refused", Counter, "Lease acquisitions refused because another holder's lease was live"),
    LeaseRenewed => ("lease", "renewed", Counter, "Execution leases renewed"),
    LeaseRenewedAfterExpiry => ("lease", "renewedAfterExpiry", Counter, "Renewals of a lease that had expired but that nobody had taken (a wave that outlived the TTL)"),
    LeaseRenewedByKeeper => ("lease", "renewedByKeeper", Counter, "Renewals made by the lease keeper thread for a turn that ran longer than a renewal interval"),
    LeaseLost => ("lease", "lost", Counter, "Renewals that found the lease expired or taken"),
    LeaseReleased => ("lease", "released", Counter, "Execution leases released"),
    LeaseReleasedWithWave => ("lease", "releasedWithWave", Counter, "Leases given back in the commit of a parking tenure's last wave (no transaction of their own)"),
    LeaseRetakeRefused => ("lease", "retakeRefused", Counter, "A tenure that gave its lease back with its last wave could not take it again: another host wrote the space meanwhile (PostgreSQL), so the tenure ends"),
    LeaseTakenOver => ("lease", "takenOver", Counter, "Acquisitions that took over an expired lease of another holder"),
    LeaseTakenOverFromOwnDeadInstance => ("lease", "takenOverFromOwnDeadInstance", Counter, "Acquisitions that took over, at once, a live lease left by a dead earlier instance of this host (the data directory's lock proves it dead)"),
    DerivedRefused => ("lease", "derivedCommitsRefused", Counter, "Derived commits refused because the writer did not hold the lease"),
    FleetClaims => ("lease", "fleetClaims", Counter, "Due spaces this host claimed from the fleet's shared wake directory (PostgreSQL store): each claim takes the space's lease"),
    PgWakeNotices => ("store", "postgresWakeNotices", Counter, "Commits on the PostgreSQL store that made their space need a host sooner and told the fleet's wakers (NOTIFY; a latency hint)"),
    PgStatements => ("store", "postgresStatements", Counter, "Statements this host sent to PostgreSQL through the store, each a round trip (BEGIN and COMMIT one each): divided by wakes, the statements a wake costs"),
    PgWholeTransactions => ("store", "postgresWholeTransactions", Counter, "Transactions sent as one statement (spacewake_tx): bodies that read nothing their handle did not know, sent with their checks and writes in place of BEGIN, a lock, reads and COMMIT"),
    PgStartReadWithCommit => ("store", "postgresStartReadsWithCommit", Counter, "Tenure starts whose reads came back with the firing that opened the tenure (spacewake_tx reading spacewake_start after its writes), not a statement of their own"),
    PgStaleRefused => ("store", "postgresStaleRefused", Counter, "Transactions refused, nothing written, because the space had moved since its handle read what they relied on (its head seq, its schedule, a firing's event id); the caller reads again"),
    PgConnections => ("store", "postgresConnections", Counter, "Connections to PostgreSQL this host's store opened (its pool keeps up to 24 idle; more means operations outnumbered them, and each new one prepares its statements again)"),
    PgConnectionsWarmed => ("store", "postgresConnectionsWarmed", Counter, "Connections to PostgreSQL a serving host opened ahead of its wakes and warmed (spacewake_warm ran a wake's writes and start read, rolled back), so its first wakes do not compile and plan the store's functions"),
    PgOpenedWithClaim => ("store", "postgresOpensWithClaim", Counter, "Spaces opened on what the waker's claim read in its own statement (the schedule, head seq and schedule revision, under the lease the claim took), with no statement of their own"),
    PgReconnects => ("store", "postgresReconnects", Counter, "Connections to PostgreSQL found broken (a server restart) and replaced: an open space's, or an idle one of the pool"),
    LeaseSelfFenced => ("lease", "selfFenced", Counter, "Derived commits a host refused itself, before asking the database, because its own monotonic clock said its lease's TTL (less a margin) had passed since the last renewal that succeeded"),
    PlaneWritesRefused => ("lease", "planeWritesRefused", Counter, "Plane-only writes (schedule state, ledger, dead letters) a host made under a lease that the database no longer showed it holding, refused (PostgreSQL store)"),
    ScheduleIndexed => ("schedule", "indexedEntries", Gauge, "Schedule entries in the index (as of each space's last activation)"),
    ScheduleDue => ("schedule", "due", Counter, "Schedule entries found due by a firing pass"),
    ScheduleFired => ("schedule", "fired", Counter, "Wake events appended (write-first) to callback streams"),
    ScheduleFiringsRedecided => ("schedule", "firingsRedecided", Counter, "Firings that found, inside their transaction, that another host of the fleet had changed the rows they decided on, and decided again (nothing of the first decision written)"),
    ScheduleMissedCoalesced => ("schedule", "missedPeriodsCoalesced", Counter, "Periods missed while the host was down, coalesced into one wake"),
    ScheduleSuppressed => ("schedule", "suppressed", Counter, "Due wakes not fired because scheduled wakes are switched off"),
    ScheduleRetried => ("schedule", "retried", Counter, "Failed wake deliveries scheduled for retry (1, 5, 30 min)"),
    ScheduleRefusedEntries => ("schedule", "refusedDeclarations", Counter, "New pieces refused because a [SCHEDULE] entry could never fire (its callback is not a stream)"),
    ScheduleInvalidEntries => ("schedule", "invalidEntries", Counter, "[SCHEDULE] entries that can never fire found on a piece as it loaded (a piece made before such entries were refused); listed as invalid with why, never indexed"),
    ScheduleUnvalidated => ("schedule", "unvalidatedDeclarations", Counter, "Piece results whose $SCHEDULE matched no declaration the compiler validated (dropped, never indexed)"),
    ScheduleDeadLettered => ("schedule", "deadLettered", Counter, "Wake occurrences given up after their retries"),
    ScheduleEndedByDeletion => ("schedule", "endedByDeletion", Counter, "Pending wakes (undelivered, awaiting a retry or a trigger) that ended because their piece was deleted"),
    ScheduleDelivered => ("schedule", "delivered", Counter, "Wake events whose callback ran and committed"),
    ScheduledInFlight => ("schedule", "activationsInFlight", Gauge, "Scheduled activations dispatched and not yet done (fired and delivered, or prepared)"),
    SchedulePrepared => ("schedule", "prepared", Counter, "Spaces activated ahead of a wake's due time (the waker's lead), to fire on time"),
    ScheduleLeaseWithFiring => ("schedule", "leaseWithFiring", Counter, "Scheduled tenures that took their lease in their first firing's transaction (one transaction fewer per wake)"),
    ScheduleSelfFired => ("schedule", "firedByPreparedSpace", Counter, "Firings a prepared space started itself at the due time (no waker round trip)"),
    ScheduleOneOffArmed => ("schedule", "oneOffArmed", Counter, "One-off (at) entries given a new time by their field, in the commit that wrote it"),
    ScheduleOneOffCleared => ("schedule", "oneOffCleared", Counter, "One-off (at) entries disarmed because their field was emptied"),
    ScheduleOneOffUnreadable => ("schedule", "oneOffUnreadable", Counter, "One-off (at) entries disarmed because their field held something that is not a time"),
    ScheduleOneOffRefused => ("schedule", "oneOffRefused", Counter, "One-off (at) times not armed because the space already held the most one-off times it may (256)"),
    ScheduleOneOffCaughtUp => ("schedule", "oneOffCaughtUp", Counter, "One-off (at) wakes fired a minute or more after their time (the host was down or the space could not be woken)"),
    ActivationsSchedule => ("activation", "bySchedule", Counter, "Activations triggered by a due schedule"),
    WakerPasses => ("schedule", "wakerPasses", Counter, "Passes the waker finished over the directory (it sleeps between)"),
    WakerCatchingUp => ("schedule", "wakerCatchUpPasses", Counter, "Waker passes that found a due wake waiting past 5 ms and allowed up to max_scheduled activations in flight (on time: at most on_time_scheduled)"),
    LatenessLe10Ms => ("schedule", "wakeLatenessLe10Ms", Counter, "Wakes fired within 10 ms of their due time (histogram bucket)"),
    LatenessLe100Ms => ("schedule", "wakeLatenessLe100Ms", Counter, "Wakes fired within 100 ms of their due time (histogram bucket)"),
    LatenessLe1000Ms => ("schedule", "wakeLatenessLe1000Ms", Counter, "Wakes fired within 1 s of their due time (histogram bucket)"),
    LatenessLe60000Ms => ("schedule", "wakeLatenessLe60000Ms", Counter, "Wakes fired within 1 min of their due time (histogram bucket)"),
    LatenessCount => ("schedule", "wakeLatenessCount", Counter, "Wakes whose lateness was observed (the histogram's +Inf bucket)"),
    LatenessSumMs => ("schedule", "wakeLatenessSumMs", Counter, "Sum of wake lateness (fire time - due time), in ms"),
    LedgerWaves => ("ledger", "waves", Counter, "Waves recorded in the ledger"),
    LedgerCpuUsScheduled => ("ledger", "scheduledCpuUs", Counter, "Thread CPU µs of waves billed to the scheduled bucket"),
    LedgerCpuUsSession => ("ledger", "sessionCpuUs", Counter, "Thread CPU µs of waves billed to the session bucket"),
    LedgerWallUsScheduled => ("ledger", "scheduledWallUs", Counter, "Wall µs of waves billed to the scheduled bucket"),
    LedgerWallUsSession => ("ledger", "sessionWallUs", Counter, "Wall µs of waves billed to the session bucket"),
    LedgerWavesScheduled => ("ledger", "scheduledWaves", Counter, "Waves billed to the scheduled bucket"),
    LedgerWavesSession => ("ledger", "sessionWaves", Counter, "Waves billed to the session bucket"),
    LedgerActions => ("ledger", "actions", Counter, "Actions run in metered waves"),
    ScheduleBackedOff => ("ledger", "backedOffEntries", Counter, "Times an entry's effective interval doubled because nothing read its output"),
    ScheduleBackoffRestored => ("ledger", "backoffRestored", Counter, "Backed-off entries restored to their declared interval by a session read"),
    LedgerBudgetSkips => ("ledger", "budgetSkips", Counter, "Scheduled wakes not activated because the space's scheduled budget was spent"),
    DemandPasses => ("demand", "passes", Counter, "Demand passes run"),
    EventsProcessed => ("events", "processed", Counter, "Events consumed by a wave"),
    EventsUnknownStream => ("events", "unknownStream", Counter, "Events consumed whose stream has no handler"),
    EventsInFailedWaves => ("events", "inFailedWaves", Counter, "Events consumed by a wave that failed its tenure (each is retried, alone, after a back-off)"),
    TenureRetries => ("activation", "tenureRetries", Counter, "Tenures that ended in failure and were scheduled to be activated again after a back-off"),
    EventsDeadLettered => ("events", "deadLettered", Counter, "Events consumed without delivery after their retries, recorded as dead letters"),
    PiecesCreated => ("actions", "piecesCreated", Counter, "Pieces instantiated from a pattern"),
    PiecesDeleted => ("actions", "piecesDeleted", Counter, "Pieces deleted by their space's owner or an operator (result, argument and listing removed; schedule entries out of the index in the same commit)"),
    PiecesSetAside => ("actions", "piecesSetAside", Counter, "Pieces an activation could not load, set aside (their events dead-lettered) while the space serves its other pieces"),
    HandlerRuns => ("actions", "handlerRuns", Counter, "Handler and action runs"),
    DerivationRuns => ("actions", "derivationRuns", Counter, "Derivation (lift/derive/computed/str) runs"),
    ClockTicks => ("actions", "clockTicks", Counter, "Times a #now or #now/N wish took a new time (its first run, or a grid boundary passed while something demanded it)"),
    DerivationsSkippedFresh => ("actions", "derivationsSkippedFresh", Counter, "Pulled derivations not re-run because their inputs were unchanged"),
    EffectsRequested => ("effects", "requested", Counter, "Effect requests a pulled effect node submitted to the broker (new inputs)"),
    EffectsReissued => ("effects", "reissued", Counter, "Effect requests submitted again because the one in flight was lost (the space parked or the host stopped)"),
    EffectsReused => ("effects", "reused", Counter, "Pulled effect nodes answered by their committed result (the same request already answered)"),
    EffectsCompleted => ("effects", "completed", Counter, "Effect requests answered by a response (any status)"),
    EffectsFailed => ("effects", "failed", Counter, "Effect requests that failed (unreachable, timed out, too large, too many redirects)"),
    EffectsRefused => ("effects", "refused", Counter, "Effect requests the egress policy refused (egressRefused)"),
    EffectsHeld => ("effects", "held", Counter, "Effect requests held by a space's in-flight cap or token bucket before going out"),
    EffectsDiscarded => ("effects", "discarded", Counter, "Effect outcomes dropped because the node's inputs had changed since the request"),
    EffectsSkippedBudget => ("effects", "skippedBudget", Counter, "Effect requests not sent on a scheduled wake because the space's scheduled budget is spent"),
    EffectsBytes => ("effects", "bytesReceived", Counter, "Response bytes the broker received for a space"),
    EffectsInFlight => ("effects", "inFlight", Gauge, "Effect requests on their way (held ones included)"),
    DerivationsDeferred => ("actions", "derivationsDeferred", Counter, "Derivations not run while an input they read was itself being computed for the first time (a cycle through data); run when next pulled"),
    ActionsFailed => ("actions", "failed", Counter, "Actions that threw; their writes were discarded"),
    ActionsPreempted => ("actions", "preempted", Counter, "Actions stopped by their interrupt budget; their writes were discarded"),
    PatternLogLines => ("actions", "logLines", Counter, "Lines pattern code wrote with console.* that reached the host's log"),
    PatternLogDropped => ("actions", "logLinesDropped", Counter, "console.* lines dropped: past the bound of one action (64) or the space's rate (120 at once, then 120 a minute)"),
    ActionsOutOfMemory => ("actions", "outOfMemory", Counter, "Actions stopped by the space's memory limit"),
    ActionsCapabilityDenied => ("actions", "capabilityDenied", Counter, "Actions that used a capability denied in their context"),
    ActionsRefused => ("actions", "refused", Counter, "Actions refused because a write, send or reference they returned went outside what they were given; nothing of them applied"),
    Waves => ("waves", "committed", Counter, "Waves that committed"),
    ActiveSpaces => ("activation", "activeSpaces", Gauge, "Spaces with a running space server"),
    ServerWakeups => ("activation", "serverWakeups", Counter, "Turns of a space server's loop (a command arrived or a timer fell due); an idle space adds none"),
    ServerThreadsStarted => ("activation", "serverThreadsStarted", Counter, "Threads started to run a space server (none idle to reuse)"),
    ServerThreadsReused => ("activation", "serverThreadsReused", Counter, "Space servers run on an idle thread of an earlier tenure"),
    EngineImagesReused => ("activation", "engineImagesReused", Counter, "Tenures whose sandbox was a reused engine restored to its start-up heap image"),
    EngineSandboxesBuilt => ("activation", "engineSandboxesBuilt", Counter, "Tenures whose sandbox was built anew (no spare image on the thread, reuse off, or the image cap reached)"),
    DocsEvicted => ("activation", "docsEvicted", Counter, "Cached documents an active space runtime dropped between waves to stay within its document cache budget (read again from the store when needed)"),
    RuntimeMemoryBytes => ("activation", "runtimeMemoryBytes", Gauge, "JavaScript heap bytes held by active space runtimes (0 once parked)"),
    ActivationsSession => ("activation", "bySession", Counter, "Activations triggered by a session"),
    ActivationsEvents => ("activation", "byEvents", Counter, "Activations triggered by undelivered events"),
    ActivationsWarm => ("activation", "byWarm", Counter, "Activations triggered by a warm request"),
    ActivationsOperator => ("activation", "byOperator", Counter, "Parked spaces opened for an operator's action (no lease, no runtime)"),
    OperatorActions => ("operator", "actions", Counter, "Operator actions done through the operator API (trigger, pause, resume, budget, grant, create)"),
    OperatorReads => ("operator", "reads", Counter, "Operator API reads answered"),
    ConsolePages => ("operator", "consolePages", Counter, "Console pages served (GET /console...)"),
    ConsoleSignIns => ("operator", "consoleSignIns", Counter, "Console sign-ins with the operator token"),
    ConsoleSignInsRefused => ("operator", "consoleSignInsRefused", Counter, "Console sign-ins refused (wrong token)"),
    ConsoleActions => ("operator", "consoleActions", Counter, "Actions taken through the console (trigger, pause, resume, budget)"),
    ConsoleActionsRefused => ("operator", "consoleActionsRefused", Counter, "Console actions refused (not signed in, another site, or the action failed)"),
    ConsoleWrongHost => ("operator", "consoleWrongHost", Counter, "Console requests refused (421) because their Host header named neither the listen address nor a --public-origin"),
    ConsoleReadsRefused => ("operator", "consoleReadsRefused", Counter, "Console pages refused to a browser not signed in, under serve --console-read token"),
    ConsoleSignInsRateLimited => ("operator", "consoleSignInsRateLimited", Counter, "Console sign-in attempts refused (429) because their peer address made more than --console-sign-ins-per-minute"),
    OperatorRefused => ("operator", "refused", Counter, "Operator API requests refused: bad, stale or replayed signatures, or a did that is not an operator"),
    OperatorReplaysRefused => ("operator", "replaysRefused", Counter, "Operator actions refused because their signature (as decoded bytes, however it was spelled) was already accepted, also before a restart or by another host of the fleet"),
    ActivationsBoot => ("activation", "byBoot", Counter, "Activations by boot discovery"),
    ActivationFailures => ("activation", "failures", Counter, "Activations that failed (retried with back-off)"),
    ActivationsDeferred => ("activation", "deferred", Counter, "Requests refused while a failed space backs off"),
    ActivationRetriedAfterLease => ("activation", "retriedAfterLease", Counter, "Activations started again once the live lease of another holder that refused an earlier one could expire"),
    ActivationsRefusedAtCapacity => ("activation", "refusedAtCapacity", Counter, "Requests refused because the host was at its limit of active spaces"),
    ActivationsQueued => ("activation", "queuedAtCapacity", Counter, "Wakes (boot discovery) that waited for a slot because the host was at its limit of active spaces"),
    Parks => ("activation", "parks", Counter, "Spaces parked (runtime disposed, lease released)"),
    HistoryOpsCompacted => ("store", "historyOpsCompacted", Counter, "Operations of old commits removed from the log by the retention rule"),
    HistoryPayloadsCompacted => ("store", "historyPayloadsCompacted", Counter, "Payloads of old, delivered events removed by the retention rule"),
    SpacesRefusedByQuota => ("store", "spacesRefusedByQuota", Counter, "Creates refused because the identity already owns as many spaces as the host allows"),
    CreatesRefusedNotAllowed => ("store", "createsRefusedNotAllowed", Counter, "Creates refused because the did is not among the host's space creators (--space-creators)"),
    CreatesRefusedByRate => ("store", "createsRefusedByRate", Counter, "Creates refused because the peer address used up its creation rate (--space-creates-per-minute)"),
    WritesRefusedByQuota => ("store", "writesRefusedByQuota", Counter, "Events and deploys refused because the space's file holds its storage quota (--space-quota-mib)"),
    SpacesCreated => ("store", "spacesCreated", Counter, "Spaces created by an explicit create (an open with create, a first deploy, an operator)"),
    StoppedAtShutdown => ("activation", "stoppedAtShutdown", Counter, "Space servers stopped by a graceful shutdown (wave finished, lease released, file checkpointed)"),
    SessionsClosedAtShutdown => ("sessions", "closedAtShutdown", Counter, "Sessions told the host is shutting down and closed (1011)"),
    TenuresLost => ("lease", "tenuresLost", Counter, "Tenures ended because a lease renewal failed"),
    BootDiscovered => ("activation", "bootDiscovered", Counter, "Spaces found by boot discovery"),
    DemandedInstances => ("demand", "demandedInstances", Gauge, "Result paths in the space's current demand"),
    SessionsAttached => ("sessions", "attached", Counter, "Sessions attached to a space"),
    SessionsOpen => ("sessions", "open", Gauge, "Open WebSocket sessions"),
    SessionsOpened => ("sessions", "opened", Counter, "Sessions opened (signature verified)"),
    SessionsTimedOut => ("sessions", "timedOut", Counter, "Connections closed because the client sent nothing (not even a pong to the server's ping) or took no frame for the session timeout"),
    SessionsEndedByServer => ("sessions", "endedByServer", Counter, "Sessions closed because their space's server stopped (a failed tenure, a lost lease, the host stopping)"),
    SessionsRevoked => ("sessions", "revoked", Counter, "Open sessions ended because their principal's grant was revoked"),
    SessionsRejected => ("sessions", "rejected", Counter, "Session opens refused (bad signature, access)"),
    FramesRejected => ("sessions", "framesRejected", Counter, "Client frames answered with an error"),
    UpdatesSent => ("sessions", "updatesSent", Counter, "Updates pushed to sessions"),
    ConnectionsAccepted => ("connections", "accepted", Counter, "TCP connections accepted and served (after the per-peer cap)"),
    ConnectionsOpen => ("connections", "open", Gauge, "TCP connections open, WebSocket ones included"),
    ConnectionsRefusedPerPeer => ("connections", "refusedPerPeerCap", Counter, "TCP connections closed at accept because their peer address already held as many as --max-connections-per-peer allows"),
    ConnectionsHeaderTimeout => ("connections", "closedByHeaderTimeout", Counter, "Connections closed because a request's head was not complete within --header-read-timeout-ms of its first byte"),
    ConnectionsIdleTimeout => ("connections", "closedIdle", Counter, "Connections closed because they sent nothing (no first request within --idle-timeout-ms, or no next request on a kept-alive connection)"),
    ConnectionsNoSessionOpened => ("connections", "closedNoSessionOpened", Counter, "WebSocket connections closed because no session was opened within --ws-open-timeout-ms of the upgrade (pings and other frames do not extend it)"),
    RelaySessions => ("relay", "sessions", Counter, "Sessions for a space another host of the fleet holds, opened there and relayed through this host"),
    RelayRequests => ("relay", "requests", Counter, "Ingests, warm requests and operator actions for a space another host holds, sent on to it and its answer passed back"),
    RelayServed => ("relay", "served", Counter, "Sessions and requests another host of the fleet relayed here, checked and served"),
    RelayUnreachable => ("relay", "unreachable", Counter, "Sessions and requests answered heldElsewhere because the space's holder could not be reached (not registered, no heartbeat within a TTL, or the connection failed)"),
    RelayRefused => ("relay", "refused", Counter, "Relayed requests refused: the sender is not a live registered host, its signature or time does not check, or a session's challenge was used before"),
    RelayHolderLost => ("relay", "holderLost", Counter, "Relayed sessions ended with close 1012 (reconnect) because the connection to the holder broke"),
}

#[derive(Debug)]
pub struct CounterSet {
    values: Vec<AtomicI64>,
}

impl Default for CounterSet {
    fn default() -> Self {
        Self {
            values: Counter::ALL.iter().map(|_| AtomicI64::new(0)).collect(),
        }
    }
}

impl CounterSet {
    fn from_row(row: &[i64]) -> CounterSet {
        CounterSet {
            values: row.iter().map(|v| AtomicI64::new(*v)).collect(),
        }
    }
    fn to_row(&self) -> Vec<i64> {
        self.values
            .iter()
            .map(|v| v.load(Ordering::Relaxed))
            .collect()
    }
    pub fn get(&self, c: Counter) -> i64 {
        self.values[c as usize].load(Ordering::Relaxed)
    }
    fn add(&self, c: Counter, n: i64) {
        self.values[c as usize].fetch_add(n, Ordering::Relaxed);
    }
    /// This set as `{block: {name: value}}`.
    pub fn to_json(&self) -> Value {
        let mut blocks: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
        for &c in Counter::ALL {
            blocks
                .entry(c.block())
                .or_default()
                .insert(c.name().to_string(), json!(self.get(c)));
        }
        Value::Object(
            blocks
                .into_iter()
                .map(|(k, v)| (k.to_string(), Value::Object(v)))
                .collect(),
        )
    }
}

/// How many parked spaces keep their per-space counter values (the most
/// recently parked, in the parked ring). Older ones are dropped, so a host
/// that has served a million spaces does not hold a million sets;
/// host-wide counters are kept separately and never drop.
pub const RETAINED_PARKED_SPACES: usize = 256;

/// Host-wide counters plus one set per space (active spaces and the most
/// recently parked ones).
#[derive(Debug, Default)]
pub struct Counters {
    host: CounterSet,
    /// Sets of active spaces (and of parked ones until their last handle
    /// is dropped).
    spaces: RwLock<HashMap<Arc<str>, Arc<CounterSet>>>,
    /// Spaces that parked and whose sets are still in use, oldest first,
    /// each once. The ids are the map's own keys, shared: retiring a space
    /// allocates nothing on the space server's thread.
    retired: std::sync::Mutex<std::collections::VecDeque<Arc<str>>>,
    /// The values of the most recently parked spaces.
    parked: std::sync::Mutex<ParkedRing>,
    /// Host-wide only: per space they would multiply series by spaces.
    histograms: histogram::Histograms,
}

/// The longest space id the parked ring holds (ids are at most 200 bytes;
/// see `store::validate_space_id`). A longer one is not kept once parked.
const MAX_KEPT_ID: usize = 200;

/// Bytes of the parked ring's log: room for [`RETAINED_PARKED_SPACES`]
/// entries of a typical size (an id and some 30 non-zero counters).
const PARKED_LOG_BYTES: usize = RETAINED_PARKED_SPACES * 128;

/// The largest entry: an id, and every counter non-zero at its widest.
const MAX_ENTRY: usize = 2 + MAX_KEPT_ID + Counter::ALL.len() * 11;

/// Counter values of the most recently parked spaces: at most
/// [`RETAINED_PARKED_SPACES`] of them, fewer when their entries fill the
/// log. Each entry is the space's id and its non-zero counters, packed
/// (`[id len][id][count]` then per counter `[index][zigzag varint]`), in
/// one circular byte log allocated once when the host starts; the oldest
/// entries are overwritten. Why packed: a parked space has a handful of
/// non-zero counters out of ~80, and 256 full rows were most of what 1,000
/// parked spaces left resident. Why allocated once: sets allocated one by
/// one, as spaces come and go on many threads, each pinned an allocator
/// page after the space's own memory was freed.
#[derive(Debug)]
struct ParkedRing {
    log: Box<[u8]>,
    /// Entries oldest first; `live` is false once taken back or replaced.
    spans: std::collections::VecDeque<Span>,
    /// Where the next entry goes (it wraps to 0 when it would not fit).
    head: usize,
}

#[derive(Debug, Clone, Copy)]
struct Span {
    at: usize,
    len: usize,
    live: bool,
}

impl Default for ParkedRing {
    fn default() -> Self {
        const { assert!(MAX_ENTRY <= PARKED_LOG_BYTES && Counter::ALL.len() <= 255) };
        ParkedRing {
            log: vec![0; PARKED_LOG_BYTES].into_boxed_slice(),
            spans: std::collections::VecDeque::with_capacity(RETAINED_PARKED_SPACES),
            head: 0,
        }
    }
}

/// Appends `v` zigzag-encoded as a LEB128 varint; returns the new length.
fn put_varint(buf: &mut [u8], mut at: usize, v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let byte = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            buf[at] = byte;
            return at + 1;
        }
        buf[at] = byte | 0x80;
        at += 1;
    }
}

/// Reads a value written by [`put_varint`]; returns it and the next offset.
fn get_varint(buf: &[u8], mut at: usize) -> (i64, usize) {
    let (mut z, mut shift) = (0u64, 0);
    loop {
        let byte = buf[at];
        at += 1;
        z |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return (((z >> 1) as i64) ^ -((z & 1) as i64), at);
        }
        shift += 7;
    }
}

impl ParkedRing {
    fn id(&self, span: Span) -> &str {
        let n = self.log[span.at] as usize;
        std::str::from_utf8(&self.log[span.at + 1..span.at + 1 + n]).unwrap_or("")
    }

    /// The live entry of `id`, by its position in `spans`.
    fn find(&self, id: &str) -> Option<usize> {
        self.spans.iter().position(|&s| s.live && self.id(s) == id)
    }

    /// Calls `f` with each non-zero counter of the entry.
    fn each(&self, span: Span, mut f: impl FnMut(usize, i64)) {
        let mut at = span.at + 1 + self.log[span.at] as usize;
        let count = self.log[at];
        at += 1;
        for _ in 0..count {
            let idx = self.log[at] as usize;
            let (v, next) = get_varint(&self.log, at + 1);
            at = next;
            f(idx, v);
        }
    }

    fn row(&self, span: Span) -> Vec<i64> {
        let mut row = vec![0; Counter::ALL.len()];
        self.each(span, |i, v| row[i] = v);
        row
    }

    /// Keeps `set` as `id`'s values (replacing any it had), overwriting the
    /// oldest entries as needed; `dropped` gets each evicted space's
    /// non-zero counters, or `set`'s own when the id cannot be kept.
    /// Allocates nothing: it runs on space threads.
    fn keep(&mut self, id: &str, set: &CounterSet, mut dropped: impl FnMut(Counter, i64)) {
        if id.is_empty() || id.len() > MAX_KEPT_ID || RETAINED_PARKED_SPACES == 0 {
            for &c in Counter::ALL {
                dropped(c, set.get(c));
            }
            return;
        }
        if let Some(i) = self.find(id) {
            self.spans[i].live = false;
        }
        let mut entry = [0u8; MAX_ENTRY];
        entry[0] = id.len() as u8;
        entry[1..1 + id.len()].copy_from_slice(id.as_bytes());
        let count_at = 1 + id.len();
        let (mut len, mut count) = (count_at + 1, 0u8);
        for &c in Counter::ALL {
            let v = set.get(c);
            if v != 0 {
                entry[len] = c as usize as u8;
                len = put_varint(&mut entry, len + 1, v);
                count += 1;
            }
        }
        entry[count_at] = count;
        let wrap = self.head + len > self.log.len();
        let at = if wrap { 0 } else { self.head };
        // Oldest first: on a wrap, everything past the old head (the
        // previous lap), then whatever the new entry overlaps.
        while let Some(&front) = self.spans.front() {
            let past_head = wrap && front.at >= self.head;
            let overlaps = front.at < at + len && at < front.at + front.len;
            if !(past_head || overlaps || self.spans.len() >= RETAINED_PARKED_SPACES) {
                break;
            }
            self.spans.pop_front();
            if front.live {
                self.each(front, |i, v| dropped(Counter::ALL[i], v));
            }
        }
        self.log[at..at + len].copy_from_slice(&entry[..len]);
        self.spans.push_back(Span {
            at,
            len,
            live: true,
        });
        self.head = at + len;
    }

    /// Takes `id`'s values out (the space is active again).
    fn take(&mut self, id: &str) -> Option<CounterSet> {
        let i = self.find(id)?;
        self.spans[i].live = false;
        Some(CounterSet::from_row(&self.row(self.spans[i])))
    }

    fn value(&self, id: &str, c: Counter) -> i64 {
        let mut out = 0;
        if let Some(pos) = self.find(id) {
            self.each(self.spans[pos], |idx, v| {
                if idx == c as usize {
                    out = v;
                }
            });
        }
        out
    }

    fn len(&self) -> usize {
        self.spans.iter().filter(|s| s.live).count()
    }

    fn entries(&self) -> impl Iterator<Item = (&str, Vec<i64>)> {
        self.spans
            .iter()
            .filter(|s| s.live)
            .map(|&s| (self.id(s), self.row(s)))
    }
}

/// A handle that increments one space's set and the host set together.
#[derive(Debug, Clone)]
pub struct SpaceCounters {
    counters: Arc<Counters>,
    space: Arc<CounterSet>,
}

impl SpaceCounters {
    /// Records one wake's lateness (fire time - due time) in the cumulative
    /// histogram buckets of the `schedule` block.
    pub fn observe_lateness(&self, lateness_ms: u64) {
        for (le, c) in [
            (10, Counter::LatenessLe10Ms),
            (100, Counter::LatenessLe100Ms),
            (1_000, Counter::LatenessLe1000Ms),
            (60_000, Counter::LatenessLe60000Ms),
        ] {
            if lateness_ms <= le {
                self.inc(c);
            }
        }
        self.inc(Counter::LatenessCount);
        self.add(Counter::LatenessSumMs, lateness_ms as i64);
        self.observe(Hist::WakeLateness, lateness_ms.saturating_mul(1_000));
    }

    /// Records a duration, in µs, in the host's histogram `h`.
    pub fn observe(&self, h: Hist, us: u64) {
        self.counters.histograms.observe(h, us);
    }

    pub fn add(&self, c: Counter, n: i64) {
        self.space.add(c, n);
        self.counters.host.add(c, n);
    }
    pub fn inc(&self, c: Counter) {
        self.add(c, 1);
    }
    pub fn get(&self, c: Counter) -> i64 {
        self.space.get(c)
    }
}

impl Counters {
    pub fn new() -> Arc<Self> {
        let c = Self::default();
        // The retired list holds spaces parking right now (their sets still
        // in use); reserved here so it never grows on a space's thread.
        c.retired
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reserve(64);
        Arc::new(c)
    }

    pub fn host(&self) -> &CounterSet {
        &self.host
    }

    pub fn histograms(&self) -> &histogram::Histograms {
        &self.histograms
    }

    /// Host-only increment, for events that belong to no space.
    pub fn add_host(&self, c: Counter, n: i64) {
        self.host.add(c, n);
    }

    pub fn space(self: &Arc<Self>, id: &str) -> SpaceCounters {
        if let Some(s) = self
            .spaces
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
        {
            return SpaceCounters {
                counters: self.clone(),
                space: s.clone(),
            };
        }
        let mut map = self.spaces.write().unwrap_or_else(|p| p.into_inner());
        let set = match map.get(id) {
            Some(set) => set.clone(),
            None => {
                // A parked space active again takes its values back.
                let set = self
                    .parked
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take(id)
                    .unwrap_or_default();
                let set = Arc::new(set);
                map.insert(Arc::from(id), set.clone());
                set
            }
        };
        SpaceCounters {
            counters: self.clone(),
            space: set,
        }
    }

    /// A space parked: once no handle to its set is live, its values move
    /// to the parked ring (the most recent [`RETAINED_PARKED_SPACES`] are
    /// kept) and the set is freed. Host counters are kept apart and never
    /// drop. Host *gauges* are sums over the spaces whose values are kept: a
    /// space leaving the ring takes its gauge values (indexed entries) out
    /// of the host's, so that when it activates again and reports them
    /// anew they are not counted twice.
    pub fn retire_space(&self, id: &str) {
        let Some(key) = self
            .spaces
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get_key_value(id)
            .map(|(k, _)| k.clone())
        else {
            return; // no set: nothing to keep
        };
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        // Each space once (a tenure's end and its file's close both report it).
        if !retired.iter().any(|r| **r == *id) {
            retired.push_back(key);
        }
        // Move every retired set now idle; one still in use (its handle
        // not yet dropped, or its space active again) waits for a later
        // retirement, so none is ever forgotten in the map.
        let mut map = self.spaces.write().unwrap_or_else(|p| p.into_inner());
        let mut parked = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        retired.retain(|k| match map.get(k) {
            None => false,
            Some(set) => {
                let idle = Arc::strong_count(set) == 1;
                if idle {
                    parked.keep(k, set, |c, v| {
                        if c.kind() == Kind::Gauge && v != 0 {
                            self.host.add(c, -v);
                        }
                    });
                    map.remove(k);
                }
                !idle
            }
        });
    }

    /// Every space's values: active sets, then parked ones (sorted by id).
    fn per_space(&self) -> Vec<(String, Vec<i64>)> {
        let mut out: BTreeMap<String, Vec<i64>> = self
            .parked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entries()
            .map(|(id, row)| (id.to_string(), row))
            .collect();
        for (id, set) in self.spaces.read().unwrap_or_else(|p| p.into_inner()).iter() {
            out.insert(id.to_string(), set.to_row());
        }
        out.into_iter().collect()
    }

    /// Spaces whose counters are kept right now (active and recently parked).
    pub fn space_count(&self) -> usize {
        let active = self.spaces.read().unwrap_or_else(|p| p.into_inner()).len();
        let parked = self.parked.lock().unwrap_or_else(|p| p.into_inner()).len();
        active + parked
    }

    pub fn space_value(&self, id: &str, c: Counter) -> i64 {
        if let Some(set) = self
            .spaces
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
        {
            return set.get(c);
        }
        self.parked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .value(id, c)
    }

    /// The `servingLoop` object of the health route: host-wide blocks at the
    /// top level and the same blocks per space under `spaces`.
    pub fn serving_loop_json(&self) -> Value {
        let mut out = match self.host.to_json() {
            Value::Object(m) => m,
            _ => unreachable!(),
        };
        let per: Map<String, Value> = self
            .per_space()
            .into_iter()
            .map(|(id, row)| (id, CounterSet::from_row(&row).to_json()))
            .collect();
        out.insert("spaces".into(), Value::Object(per));
        Value::Object(out)
    }

    /// The `n` spaces whose kept values of `measure` (summed) are largest
    /// and above zero, largest first (ties by id), with their values.
    pub fn top_spaces(&self, n: usize, measure: &[Counter]) -> Vec<(String, Vec<i64>)> {
        if n == 0 {
            return Vec::new();
        }
        let score = |get: &dyn Fn(Counter) -> i64| measure.iter().map(|&c| get(c)).sum::<i64>();
        let mut ranked: Vec<(i64, String, Vec<i64>)> = self
            .parked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entries()
            .map(|(id, row)| (score(&|c| row[c as usize]), id.to_string(), row))
            .filter(|(s, _, _)| *s > 0)
            .collect();
        {
            // Scored in place: copying every active set's row would cost
            // a scrape of 10,000 spaces megabytes.
            let map = self.spaces.read().unwrap_or_else(|p| p.into_inner());
            let mut active: Vec<(i64, &Arc<str>)> = map
                .iter()
                .map(|(id, set)| (score(&|c| set.get(c)), id))
                .filter(|(s, _)| *s > 0)
                .collect();
            active.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
            active.truncate(n);
            ranked.retain(|(_, id, _)| !map.contains_key(id.as_str()));
            ranked.extend(
                active
                    .into_iter()
                    .map(|(s, id)| (s, id.to_string(), map[id].to_row())),
            );
        }
        ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        ranked.truncate(n);
        ranked.into_iter().map(|(_, id, row)| (id, row)).collect()
    }

    /// `/metrics`: host-wide families, histograms, and per-space families
    /// for the `top` spaces by CPU (see [`exposition`]).
    pub fn prometheus_text(self: &Arc<Self>, top: usize) -> String {
        self.prometheus_text_with(top, Vec::new())
    }

    /// [`Counters::prometheus_text`] with more metric families beside the
    /// counters (the fleet view on a fleet's database).
    pub fn prometheus_text_with(
        self: &Arc<Self>,
        top: usize,
        extra: Vec<Box<dyn prometheus_client::collector::Collector>>,
    ) -> String {
        use prometheus_client::registry::Registry;
        let mut registry = Registry::default();
        registry.register_collector(Box::new(exposition::Collector {
            counters: self.clone(),
            top,
        }));
        for c in extra {
            registry.register_collector(c);
        }
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_space_increment_counts_host_wide_too() {
        let c = Counters::new();
        let a = c.space("a");
        a.inc(Counter::EventsAppended);
        c.space("b").add(Counter::EventsAppended, 2);
        assert_eq!(c.host().get(Counter::EventsAppended), 3);
        assert_eq!(c.space_value("a", Counter::EventsAppended), 1);
        let j = c.serving_loop_json();
        assert_eq!(j["events"]["appended"], 3);
        assert_eq!(j["spaces"]["b"]["events"]["appended"], 2);
    }

    #[test]
    fn parked_spaces_keep_their_sets_only_while_recent_and_host_totals_stay() {
        let c = Counters::new();
        let n = RETAINED_PARKED_SPACES + 50;
        for i in 0..n {
            c.space(&format!("s{i}")).inc(Counter::Parks);
            c.retire_space(&format!("s{i}"));
        }
        assert_eq!(c.space_count(), RETAINED_PARKED_SPACES);
        assert_eq!(
            c.space_value("s0", Counter::Parks),
            0,
            "the oldest set was dropped"
        );
        assert_eq!(c.space_value(&format!("s{}", n - 1), Counter::Parks), 1);
        // Reported twice (tenure end and file close), a space holds one slot.
        c.retire_space(&format!("s{}", n - 1));
        assert_eq!(
            c.space_value("s50", Counter::Parks),
            1,
            "the oldest kept set stays"
        );
        assert_eq!(
            c.host().get(Counter::Parks),
            n as i64,
            "host totals never drop"
        );
        // A set with a live handle stays live; a parked space's gauge
        // (entries indexed) is kept with it, and leaves the host's sum when
        // the space leaves the ring.
        let held = c.space("held");
        c.space("indexed").add(Counter::ScheduleIndexed, 4);
        c.retire_space("held");
        c.retire_space("indexed");
        assert_eq!(c.space_value("indexed", Counter::ScheduleIndexed), 4);
        assert_eq!(c.host().get(Counter::ScheduleIndexed), 4);
        for i in 0..RETAINED_PARKED_SPACES {
            c.space(&format!("later{i}")).inc(Counter::Parks);
            c.retire_space(&format!("later{i}"));
        }
        assert_eq!(c.space_value("indexed", Counter::ScheduleIndexed), 0);
        assert_eq!(c.host().get(Counter::ScheduleIndexed), 0);
        held.inc(Counter::Parks);
        assert_eq!(c.space_value("held", Counter::Parks), 1);
        // Once the handle is gone, the next retirement parks it: a set that
        // was busy when its space parked is not forgotten in the map.
        drop(held);
        c.space("last").inc(Counter::Parks);
        c.retire_space("last");
        assert_eq!(c.space_value("held", Counter::Parks), 1);
        assert_eq!(c.space_value("last", Counter::Parks), 1);
        assert!(
            c.spaces.read().unwrap().is_empty(),
            "no live set is left once every handle is gone"
        );
        assert_eq!(c.space_count(), RETAINED_PARKED_SPACES);
        // A parked space active again takes its values back, and the JSON
        // and Prometheus views show parked spaces too.
        c.space("held").inc(Counter::Parks);
        assert_eq!(c.space_value("held", Counter::Parks), 2);
        let j = c.serving_loop_json();
        assert_eq!(j["spaces"]["last"]["activation"]["parks"], 1);
        c.space("last").add(Counter::LedgerCpuUsSession, 2_500);
        c.retire_space("last");
        assert!(
            c.prometheus_text(10).contains(
                "spacewake_space_cpu_seconds_total{space=\"last\",bucket=\"session\"} 0.0025"
            ),
            "a parked space among the top spaces has its series"
        );
    }

    #[test]
    fn varints_round_trip_at_the_extremes() {
        let mut buf = [0u8; 16];
        for v in [0, 1, -1, 63, -64, 64, 300, -300, i64::MAX, i64::MIN] {
            let end = put_varint(&mut buf, 0, v);
            assert!(end <= 10);
            assert_eq!(get_varint(&buf, 0), (v, end), "{v}");
        }
    }

    /// Entries of random sizes (up to every counter non-zero and wide),
    /// kept, replaced and taken back against a plain model: every entry the
    /// ring still holds reads back exactly, and every entry it lost was
    /// handed to `dropped` exactly once.
    #[test]
    fn the_parked_ring_keeps_the_newest_entries_exactly_across_wraps() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut ring = ParkedRing::default();
        let mut model: HashMap<String, Vec<i64>> = HashMap::new();
        let n = Counter::ALL.len();
        for step in 0..5_000 {
            let id = format!("space-{}", rng.random_range(0..400));
            if rng.random_bool(0.1) {
                let got = ring.take(&id).map(|set| set.to_row());
                let want = model.remove(&id);
                assert_eq!(got, want, "step {step}: take {id}");
                continue;
            }
            let set = CounterSet::default();
            let wide = rng.random_bool(0.05);
            for &c in Counter::ALL {
                if wide || rng.random_bool(0.2) {
                    let v = if wide {
                        rng.random::<i64>()
                    } else {
                        rng.random_range(-5..1_000)
                    };
                    set.add(c, v);
                }
            }
            let mut lost: HashMap<String, Vec<i64>> = HashMap::new();
            let before: Vec<(String, Vec<i64>)> = ring
                .entries()
                .map(|(id, row)| (id.to_string(), row))
                .collect();
            let mut dropped = vec![0i64; n];
            ring.keep(&id, &set, |c, v| {
                dropped[c as usize] = dropped[c as usize].wrapping_add(v)
            });
            model.insert(id.clone(), set.to_row());
            let after: HashMap<String, Vec<i64>> = ring
                .entries()
                .map(|(id, row)| (id.to_string(), row))
                .collect();
            for (old, row) in before {
                if old != id && !after.contains_key(&old) {
                    lost.insert(old, row);
                }
            }
            let mut want = vec![0i64; n];
            for (old, row) in &lost {
                model.remove(old);
                for (w, v) in want.iter_mut().zip(row) {
                    *w = w.wrapping_add(*v);
                }
            }
            assert_eq!(dropped, want, "step {step}: dropped rows");
            assert_eq!(after.get(&id), model.get(&id), "step {step}: newest kept");
            assert!(after.len() <= RETAINED_PARKED_SPACES);
            for (kept, row) in &after {
                assert_eq!(model.get(kept), Some(row), "step {step}: {kept}");
            }
        }
        assert!(ring.spans.iter().all(|s| s.at + s.len <= PARKED_LOG_BYTES));
    }
}
