//! The space-server thread pool: threads that outlive one tenure.
//!
//! A space server runs on its own thread for the length of a tenure, which
//! may be minutes (a session is attached) or a millisecond (a scheduled
//! wake). Starting and ending a thread per tenure cost a herd of scheduled
//! wakes a tenth of its CPU: the stack is mapped and unmapped (a TLB
//! shootdown on every core), and the allocator's per-thread caches start
//! cold. So a finished server's thread waits a while for the next one.
//!
//! The pool never queues: a job goes to an idle thread if there is one and
//! otherwise to a new thread, so a long tenure can never hold up another
//! space (the same guarantee as a thread per tenure).
//!
//! # Invariants
//! - A job handed to an idle thread is always run: a thread leaves the idle
//!   list only by being taken (then it waits for its job without a
//!   timeout) or by removing itself under the list's lock when it gives up.
//! - At most `max_idle` threads wait; each waits at most `keep`.
//! - What a job hands to [`when_idle`] runs after its thread is back on the
//!   idle list (or about to exit). A job that frees a slot there (a
//!   scheduled activation's) lets the next activation take this thread,
//!   with its engine image, instead of a new one: freed earlier, the slot
//!   was refilled while the thread was still finishing, and a herd of
//!   wakes at cap 8 ran 20-40 threads, most of them building engines
//!   because the images were held by idle threads (`spec/performance.md`,
//!   *Session 38*).

use crate::metrics::{Counter, Counters};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send>;

/// What a job leaves for [`when_idle`] (on its own thread).
type Later = Box<dyn FnOnce()>;

thread_local! {
    /// On a pool thread: what its job left to run once the thread is idle.
    static WHEN_IDLE: std::cell::RefCell<Option<Vec<Later>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` once the calling pool thread has finished its job and is ready
/// for another (at once on a thread outside the pool).
pub(crate) fn when_idle(f: impl FnOnce() + 'static) {
    let f: Later = Box::new(f);
    let now = WHEN_IDLE.with(|w| match w.borrow_mut().as_mut() {
        Some(later) => {
            later.push(f);
            None
        }
        None => Some(f),
    });
    if let Some(f) = now {
        f();
    }
}

/// Runs what the finished job left for [`when_idle`].
fn run_when_idle() {
    let later = WHEN_IDLE.with(|w| w.borrow_mut().as_mut().map(std::mem::take));
    for f in later.into_iter().flatten() {
        f();
    }
}

/// What an idle thread is handed: a job, or leave now.
enum Msg {
    Run(Job),
    Quit,
}

struct Idle {
    id: u64,
    tx: Sender<Msg>,
}

pub(crate) struct Pool {
    idle: Mutex<Vec<Idle>>,
    next_id: std::sync::atomic::AtomicU64,
    stack_bytes: usize,
    max_idle: usize,
    keep: Duration,
    counters: Arc<Counters>,
}

impl Pool {
    pub fn new(
        stack_bytes: usize,
        max_idle: usize,
        keep: Duration,
        counters: Arc<Counters>,
    ) -> Arc<Pool> {
        Arc::new(Pool {
            idle: Mutex::new(Vec::new()),
            next_id: 0.into(),
            stack_bytes,
            max_idle,
            keep,
            counters,
        })
    }

    /// Runs `job` on an idle thread (the most recently idle: its caches are
    /// warmest) or on a new one. `name` names the thread while it runs.
    pub fn run(
        self: &Arc<Self>,
        name: String,
        job: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<()> {
        let mut job: Job = Box::new(move || {
            set_thread_name(&name);
            job();
        });
        loop {
            let taken = self.lock().pop();
            let Some(worker) = taken else { break };
            match worker.tx.send(Msg::Run(job)) {
                Ok(()) => {
                    self.counters.add_host(Counter::ServerThreadsReused, 1);
                    return Ok(());
                }
                // Its thread died (a panicking job): try the next one.
                Err(mpsc::SendError(Msg::Run(j))) => job = j,
                Err(mpsc::SendError(Msg::Quit)) => unreachable!("a job was sent"),
            }
        }
        let (tx, rx) = mpsc::channel();
        tx.send(Msg::Run(job)).expect("the receiver is alive");
        let pool = self.clone();
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::thread::Builder::new()
            .name("space-server".into())
            .stack_size(self.stack_bytes)
            .spawn(move || pool.work(id, tx, rx))?;
        self.counters.add_host(Counter::ServerThreadsStarted, 1);
        Ok(())
    }

    /// Threads waiting for a job.
    #[cfg(test)]
    fn idle_threads(&self) -> usize {
        self.lock().len()
    }

    /// Ends every idle thread now rather than after `keep`: what a thread
    /// keeps between tenures (its engine image, which counts against the
    /// process's budget of them, and its stack) goes with it. For a host
    /// that is going away; threads still running a job are not touched.
    pub fn release_idle(&self) {
        for worker in self.lock().drain(..) {
            let _ = worker.tx.send(Msg::Quit);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn work(&self, id: u64, tx: Sender<Msg>, rx: Receiver<Msg>) {
        WHEN_IDLE.with(|w| *w.borrow_mut() = Some(Vec::new()));
        // The first job was sent before the thread started.
        let mut next = rx.try_recv().ok();
        while let Some(Msg::Run(job)) = next.take() {
            job();
            set_thread_name("space-server");
            {
                let mut idle = self.lock();
                if idle.len() >= self.max_idle {
                    drop(idle);
                    run_when_idle();
                    return;
                }
                idle.push(Idle { id, tx: tx.clone() });
            }
            run_when_idle();
            next = match rx.recv_timeout(self.keep) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => {
                    let mut idle = self.lock();
                    if let Some(i) = idle.iter().position(|w| w.id == id) {
                        idle.remove(i);
                        return;
                    }
                    drop(idle);
                    // Taken just now: its job is on the way (this thread
                    // holds a sender, so the channel cannot disconnect).
                    rx.recv().ok()
                }
                Err(RecvTimeoutError::Disconnected) => None,
            };
        }
    }
}

/// Names the calling thread (as `ps` and `perf` show it; Linux keeps 15
/// bytes), so a pooled thread is named for the space it serves.
fn set_thread_name(name: &str) {
    #[cfg(target_os = "linux")]
    {
        let mut bytes: Vec<u8> = name.bytes().filter(|b| *b != 0).take(15).collect();
        bytes.push(0);
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16
        // bytes from the pointer, which `bytes` outlives.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, bytes.as_ptr() as libc::c_ulong, 0, 0, 0);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = name;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn wait_for(what: &str, f: impl Fn() -> bool) {
        let waiting = crate::clock::Stopwatch::start();
        while !f() {
            assert!(
                !waiting.passed(Duration::from_secs(10)),
                "timed out: {what}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_finished_thread_runs_the_next_job() {
        let pool = Pool::new(256 * 1024, 4, Duration::from_secs(10), Counters::new());
        let (tx, rx) = mpsc::channel();
        for i in 0..20 {
            let tx = tx.clone();
            pool.run(format!("job{i}"), move || {
                tx.send(std::thread::current().id()).unwrap();
            })
            .unwrap();
            rx.recv().unwrap();
            wait_for("the thread to go idle", || pool.idle_threads() == 1);
        }
        // Twenty jobs one after another: one thread served them all.
        assert_eq!(pool.next_id.load(Ordering::Relaxed), 1);
        let c = pool.counters.host();
        assert_eq!(c.get(Counter::ServerThreadsStarted), 1);
        assert_eq!(c.get(Counter::ServerThreadsReused), 19);
    }

    /// Job `i` of `n`: its thread, then (once idle) the next job.
    fn chained(pool: Arc<Pool>, i: usize, n: usize, tx: mpsc::Sender<std::thread::ThreadId>) {
        pool.clone()
            .run(format!("job{i}"), move || {
                tx.send(std::thread::current().id()).unwrap();
                if i + 1 < n {
                    when_idle(move || chained(pool, i + 1, n, tx));
                }
            })
            .unwrap();
    }

    #[test]
    fn what_a_job_leaves_for_when_idle_runs_once_its_thread_can_take_the_next_job() {
        // Each job starts the next one as it finishes (as a scheduled
        // tenure frees the waker's slot): one thread serves the chain.
        let pool = Pool::new(256 * 1024, 4, Duration::from_secs(10), Counters::new());
        let (tx, rx) = mpsc::channel();
        chained(pool.clone(), 0, 20, tx);
        let threads: std::collections::HashSet<_> = (0..20)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(threads.len(), 1);
        assert_eq!(pool.counters.host().get(Counter::ServerThreadsStarted), 1);
        // A thread that exits (no idle place left) still runs it.
        let full = Pool::new(256 * 1024, 0, Duration::from_secs(10), Counters::new());
        let (tx, rx) = mpsc::channel();
        full.run("last".into(), move || {
            when_idle(move || tx.send(7).unwrap())
        })
        .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 7);
        // Off the pool, at once.
        let ran = std::cell::Cell::new(false);
        let ran = std::rc::Rc::new(ran);
        let r = ran.clone();
        when_idle(move || r.set(true));
        assert!(ran.get());
    }

    #[test]
    fn a_busy_pool_starts_threads_instead_of_queueing() {
        let pool = Pool::new(256 * 1024, 2, Duration::from_secs(10), Counters::new());
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let running = Arc::new(AtomicUsize::new(0));
        for i in 0..5 {
            let (running, release_rx) = (running.clone(), release_rx.clone());
            pool.run(format!("job{i}"), move || {
                running.fetch_add(1, Ordering::SeqCst);
                let _ = release_rx.lock().unwrap().recv();
            })
            .unwrap();
        }
        // All five run at once although at most two threads may idle.
        wait_for("five jobs running", || running.load(Ordering::SeqCst) == 5);
        for _ in 0..5 {
            release_tx.send(()).unwrap();
        }
        wait_for("two threads kept", || pool.idle_threads() == 2);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(pool.idle_threads(), 2, "the other three exited");
    }

    #[test]
    fn released_idle_threads_exit_at_once_and_drop_what_they_kept() {
        // What a thread keeps between jobs (as a sandbox keeps its engine
        // image): dropped only when the thread exits.
        struct Kept(Arc<AtomicUsize>);
        impl Drop for Kept {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        thread_local! {
            static KEPT: std::cell::RefCell<Option<Kept>> = const { std::cell::RefCell::new(None) };
        }
        let pool = Pool::new(256 * 1024, 4, Duration::from_secs(600), Counters::new());
        let dropped = Arc::new(AtomicUsize::new(0));
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        for i in 0..3 {
            let (dropped, release_rx) = (dropped.clone(), release_rx.clone());
            pool.run(format!("job{i}"), move || {
                KEPT.with(|k| *k.borrow_mut() = Some(Kept(dropped)));
                let _ = release_rx.lock().unwrap().recv();
            })
            .unwrap();
        }
        for _ in 0..3 {
            release_tx.send(()).unwrap();
        }
        wait_for("three idle threads", || pool.idle_threads() == 3);
        assert_eq!(dropped.load(Ordering::SeqCst), 0, "kept while idle");
        pool.release_idle();
        assert_eq!(pool.idle_threads(), 0);
        // Long before the ten-minute keep.
        wait_for("what they kept dropped", || {
            dropped.load(Ordering::SeqCst) == 3
        });
        // The pool still works after.
        let (tx, rx) = mpsc::channel();
        pool.run("after".into(), move || tx.send(7).unwrap())
            .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 7);
    }

    #[test]
    fn idle_threads_exit_after_their_keep_time_and_a_panic_costs_one_thread() {
        let pool = Pool::new(256 * 1024, 4, Duration::from_millis(30), Counters::new());
        pool.run("quick".into(), || {}).unwrap();
        wait_for("idle", || pool.idle_threads() == 1);
        wait_for("gone after keep", || pool.idle_threads() == 0);
        pool.run("boom".into(), || panic!("a job that panics"))
            .unwrap();
        let (tx, rx) = mpsc::channel();
        pool.run("after".into(), move || tx.send(7).unwrap())
            .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 7);
    }
}
