//! The broker: the one place pattern code's requests leave the host.
//!
//! A space submits a request with the [`Delivery`] that hands the outcome
//! back to it. The broker admits it under the space's budget
//! ([`super::budget`]) or holds it (counted) until a request of the space
//! finishes or the bucket refills, then sends it on its own small runtime:
//! through the test runner's mocks when they match, else through the HTTP
//! client under the egress policy. Nothing is dropped: every request
//! submitted is delivered one outcome.
//!
//! Invariant: time comes from the injected clock (the bucket), except the
//! request's own I/O timeouts, which are real time like any socket's.

use super::budget::{self, Admit, Overrides, SpaceBudget};
use super::http::{FetchLimits, HttpFetcher};
use super::mock::Mocks;
use super::model::{ModelClient, ModelConfig};
use super::policy::Allowlist;
use super::{Outcome, Request};
use crate::clock::Clock;
use crate::metrics::{Counter, Counters};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Why a model call has no answer on a host without an endpoint.
pub const NO_MODEL: &str = "no model is configured on this host (serve --model-endpoint)";

/// Where an outcome goes: back to the space that asked (its server's
/// command queue, or a test runner's channel). Called once, on a broker
/// thread.
/// Gets the outcome and the real time the request took.
pub type Delivery = Box<dyn FnOnce(Outcome, std::time::Duration) + Send>;

/// How the broker is set up (`serve`'s flags; the runners' defaults).
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// What a relative URL resolves against: the host's serving origin.
    pub origin: url::Url,
    pub allow: Allowlist,
    pub fetch: FetchLimits,
    pub budget: budget::Limits,
    /// The test runner's `fetchMocks`.
    pub mocks: Mocks,
    /// The operator's model endpoint; without one, model calls answer
    /// `noModel`.
    pub model: Option<ModelConfig>,
}

impl BrokerConfig {
    pub fn new(origin: url::Url) -> Self {
        BrokerConfig {
            origin,
            allow: Allowlist::default(),
            fetch: FetchLimits::default(),
            budget: budget::Limits::default(),
            mocks: Mocks::default(),
            model: None,
        }
    }
}

struct Job {
    request: Request,
    deliver: Delivery,
}

#[derive(Default)]
struct Spaces(HashMap<String, (SpaceBudget, VecDeque<Job>)>);

/// The host's effect broker.
pub struct Broker {
    /// Taken only by `drop`, which may run on one of its own threads.
    runtime: Option<tokio::runtime::Runtime>,
    fetcher: HttpFetcher,
    model: Option<ModelClient>,
    mocks: Mocks,
    limits: budget::Limits,
    /// Spaces' own settings over `limits` (set at activation and when an
    /// operator changes them).
    overrides: Mutex<HashMap<String, budget::Limits>>,
    clock: Arc<dyn Clock>,
    counters: Arc<Counters>,
    spaces: Mutex<Spaces>,
}

impl Broker {
    pub fn new(
        cfg: BrokerConfig,
        clock: Arc<dyn Clock>,
        counters: Arc<Counters>,
    ) -> Result<Arc<Self>, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("effects")
            .enable_all()
            .build()
            .map_err(|e| format!("the effect broker's runtime: {e}"))?;
        let fetcher = HttpFetcher::new(cfg.origin, cfg.allow, cfg.fetch)?;
        let model = cfg.model.map(ModelClient::new).transpose()?;
        Ok(Arc::new(Broker {
            runtime: Some(runtime),
            fetcher,
            model,
            mocks: cfg.mocks,
            limits: cfg.budget,
            overrides: Mutex::new(HashMap::new()),
            clock,
            counters,
            spaces: Mutex::new(Spaces::default()),
        }))
    }

    /// The host's default knobs.
    pub fn limits(&self) -> budget::Limits {
        self.limits
    }

    /// A space's own settings of its knobs (none: the host's defaults).
    pub fn set_space_limits(&self, space: &str, o: &Overrides) {
        let mut m = self.overrides.lock().unwrap_or_else(|p| p.into_inner());
        if o.is_empty() {
            m.remove(space);
        } else {
            m.insert(space.to_string(), o.apply(&self.limits));
        }
    }

    /// The knobs that apply to `space`.
    pub fn limits_for(&self, space: &str) -> budget::Limits {
        let m = self.overrides.lock().unwrap_or_else(|p| p.into_inner());
        m.get(space).copied().unwrap_or(self.limits)
    }

    /// Whether model calls have an endpoint to go to.
    pub fn has_model(&self) -> bool {
        self.model.is_some()
    }

    /// Sends `request` for `space` when its budget admits it; `deliver`
    /// gets the outcome.
    pub fn submit(self: &Arc<Self>, space: &str, request: Request, deliver: Delivery) {
        let sc = self.counters.space(space);
        sc.inc(Counter::EffectsInFlight);
        let now = self.clock.now_ms();
        let limits = self.limits_for(space);
        let mut spaces = self.spaces.lock().unwrap_or_else(|p| p.into_inner());
        let (budget, held) = spaces
            .0
            .entry(space.to_string())
            .or_insert_with(|| (SpaceBudget::new(&limits, now), VecDeque::new()));
        let job = Job { request, deliver };
        if !held.is_empty() {
            // Behind those already waiting: first come, first sent.
            held.push_back(job);
            sc.inc(Counter::EffectsHeld);
            return;
        }
        match budget.admit(&limits, now) {
            Admit::Go => {
                drop(spaces);
                self.send(space.to_string(), job);
            }
            Admit::Hold { at_ms } => {
                held.push_back(job);
                sc.inc(Counter::EffectsHeld);
                drop(spaces);
                if let Some(at) = at_ms {
                    self.pump_at(space.to_string(), at);
                }
            }
        }
    }

    /// Sends what the space's budget now admits of what it holds.
    fn pump(self: &Arc<Self>, space: &str) {
        let now = self.clock.now_ms();
        let limits = self.limits_for(space);
        let mut go = Vec::new();
        let mut retry = None;
        {
            let mut spaces = self.spaces.lock().unwrap_or_else(|p| p.into_inner());
            let Some((budget, held)) = spaces.0.get_mut(space) else {
                return;
            };
            while !held.is_empty() {
                match budget.admit(&limits, now) {
                    Admit::Go => go.extend(held.pop_front()),
                    Admit::Hold { at_ms } => {
                        retry = at_ms;
                        break;
                    }
                }
            }
            // Forgotten only once its buckets are full again: a space
            // that asks one request at a time is paced all the same.
            if held.is_empty() && go.is_empty() && budget.at_rest(&limits, now) {
                spaces.0.remove(space);
            }
        }
        for job in go {
            self.send(space.to_string(), job);
        }
        if let Some(at) = retry {
            self.pump_at(space.to_string(), at);
        }
    }

    /// Looks at the space's held requests again at `at_ms` on the host
    /// clock (a manual clock's jump is noticed by the next finish or submit).
    fn pump_at(self: &Arc<Self>, space: String, at_ms: u64) {
        let Some(wait) = self.clock.real_wait_until(at_ms) else {
            return;
        };
        let me = self.clone();
        self.handle().spawn(async move {
            tokio::time::sleep(wait).await;
            me.pump(&space);
        });
    }

    fn send(self: &Arc<Self>, space: String, job: Job) {
        let me = self.clone();
        self.handle().spawn(async move {
            let started = crate::clock::Stopwatch::start();
            let outcome = match &job.request {
                Request::Fetch(spec) => match me.mocks.find(&spec.url) {
                    Some(m) => {
                        if !m.delay.is_zero() {
                            tokio::time::sleep(m.delay).await;
                        }
                        m.outcome()
                    }
                    None => me.fetcher.fetch(spec).await,
                },
                Request::Model(call) => match &me.model {
                    Some(client) => client.call(call).await,
                    None => Outcome::failed("noModel", NO_MODEL),
                },
            };
            let bytes = match &outcome {
                Outcome::Response { body, .. } => body.len(),
                _ => 0,
            };
            let sc = me.counters.space(&space);
            sc.add(Counter::EffectsBytes, bytes as i64);
            sc.add(Counter::EffectsInFlight, -1);
            {
                let mut spaces = me.spaces.lock().unwrap_or_else(|p| p.into_inner());
                if let Some((budget, _)) = spaces.0.get_mut(&space) {
                    budget.finished(&me.limits_for(&space), me.clock.now_ms(), bytes);
                }
            }
            me.pump(&space);
            (job.deliver)(outcome, started.elapsed());
        });
    }
}

impl Broker {
    fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime
            .as_ref()
            .expect("the runtime lives as long as the broker")
            .handle()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // The last reference may go on a broker thread: never block there.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}
