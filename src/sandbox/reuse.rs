//! Engine reuse across tenures: an imaged sandbox (its heap in a region,
//! `image.rs`) is built once per thread, restored to its start-up state at
//! the end of every tenure, and kept as the thread's spare for the next
//! one ([`TenureSandbox`]).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rquickjs::Runtime;

use super::state::State;
use super::{
    image, internal, meter, Builtins, CallOptions, Handles, Sandbox, SandboxConfig, SandboxError,
    SandboxStats, COMMONFABRIC, INTERNAL_MODULE, NEXT_SANDBOX_ID,
};

/// An imaged sandbox's start-up state.
pub(super) struct Image {
    region: Rc<image::Region>,
    bytes: Box<[u8]>,
    live_bytes: i64,
    /// The authoring API it holds.
    commonfabric: &'static Builtins,
}

impl Drop for Image {
    fn drop(&mut self) {
        IMAGES.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Imaged sandboxes alive in the process (one per thread at most: the spare
/// a thread keeps between tenures, or the one a tenure is using).
static IMAGES: AtomicUsize = AtomicUsize::new(0);

/// How many imaged sandboxes may exist at once by default
/// (`--engine-images`): as many as the host keeps idle threads at its
/// default scheduled cap. Each holds its image twice (the region's resident
/// pages and the copy), about 1 MiB.
pub const DEFAULT_ENGINE_IMAGES: usize = 16;

/// How far above the heap limit a region is mapped: room for the size
/// classes' rounding and for blocks freed in one class and wanted in another.
const REGION_FACTOR: usize = 4;

impl Sandbox {
    /// A sandbox whose engine heap lives in a region of its own, with the
    /// authoring API imported, and its start-up state kept as an image that
    /// [`Sandbox::restore_image`] puts back (see `image.rs`).
    pub fn new_imaged(
        config: SandboxConfig,
        commonfabric_source: &'static Builtins,
    ) -> Result<Sandbox, SandboxError> {
        let state = Rc::new(State::new());
        let len = config
            .memory_limit_bytes
            .saturating_mul(REGION_FACTOR)
            .clamp(64 << 20, 1 << 38);
        let region = image::Region::map(len)
            .ok_or_else(|| SandboxError::Internal("cannot map an engine region".into()))?;
        let runtime = Runtime::new_with_alloc(meter::MeteredAllocator {
            state: state.clone(),
            inner: image::RegionAllocator {
                region: region.clone(),
            },
        })
        .map_err(|e| internal("creating runtime", e))?;
        let mut sb = Sandbox::build(config, commonfabric_source, runtime, state)?;
        let ns = sb.import(COMMONFABRIC, &CallOptions::reactive())?.value;
        sb.release(ns);
        // The private module's namespace too: every tenure's runtime reads
        // its entry points from it, and built here it is part of the image
        // (not rebuilt, names sorted and all, at every activation).
        let ns = sb.import(INTERNAL_MODULE, &CallOptions::reactive())?.value;
        sb.release(ns);
        // Nothing in the image is garbage: a later collection then frees
        // only what a tenure made.
        sb.runtime.run_gc();
        IMAGES.fetch_add(1, Ordering::Relaxed);
        sb.image = Some(Image {
            bytes: region.snapshot(),
            region,
            live_bytes: sb.state.live_bytes.get(),
            commonfabric: commonfabric_source,
        });
        Ok(sb)
    }

    /// The size of the heap image a restore copies back (0: not imaged).
    pub fn image_bytes(&self) -> usize {
        self.image.as_ref().map_or(0, |i| i.bytes.len())
    }

    /// Puts an imaged sandbox back into its start-up state, as if just
    /// built by [`Sandbox::new_imaged`]: every value, module instance and
    /// pending job since is gone, handles from before are refused (a new
    /// sandbox id). False, and nothing done, when the sandbox cannot be
    /// restored (not imaged, or tainted): drop it instead.
    pub fn restore_image(&mut self) -> bool {
        let Some(img) = &self.image else {
            return false;
        };
        if self.tainted.get() {
            return false;
        }
        // The handles go first, on the live heap.
        *self.handles.borrow_mut() = Handles::default();
        img.region.restore(&img.bytes);
        self.state.end();
        self.state.logs.borrow_mut().clear();
        self.state.logs_dropped.set(0);
        self.state.live_bytes.set(img.live_bytes);
        self.registry.modules.borrow_mut().clear();
        self.stats.set(SandboxStats::default());
        self.id = NEXT_SANDBOX_ID.fetch_add(1, Ordering::Relaxed);
        // The engine's stack bound is per thread; this one may differ from
        // the thread that took the image.
        self.realms.borrow()[0].with(|ctx| {
            // SAFETY: the runtime is alive and not running JS.
            unsafe {
                rquickjs::qjs::JS_UpdateStackTop(rquickjs::qjs::JS_GetRuntime(
                    ctx.as_raw().as_ptr(),
                ))
            }
        });
        true
    }
}

thread_local! {
    /// The imaged sandbox this thread's last tenure used, restored.
    static SPARE: RefCell<Option<Sandbox>> = const { RefCell::new(None) };
}

/// A sandbox for one tenure (derefs to [`Sandbox`]). With reuse on, it is
/// the thread's spare imaged sandbox when there is one with the same limits
/// and authoring API, restored to its start-up state, or a new imaged one;
/// when dropped it is restored and kept as the thread's spare. With reuse
/// off (`max_images` 0, or that many imaged sandboxes alive) it is built
/// from scratch and freed.
pub struct TenureSandbox {
    sandbox: Option<Sandbox>,
    reused: bool,
}

impl TenureSandbox {
    /// A sandbox with `config`'s limits whose authoring API is `commonfabric`
    /// and already imported.
    pub fn get(
        config: &SandboxConfig,
        commonfabric: &'static Builtins,
        max_images: usize,
    ) -> Result<TenureSandbox, SandboxError> {
        if max_images > 0 {
            let spare = SPARE.with(|s| s.borrow_mut().take());
            if let Some(sb) = spare {
                let fits = sb.config == *config
                    && sb.image.as_ref().is_some_and(|i| {
                        std::ptr::eq(i.commonfabric, commonfabric)
                            || *i.commonfabric == *commonfabric
                    });
                if fits {
                    return Ok(TenureSandbox {
                        sandbox: Some(sb),
                        reused: true,
                    });
                }
            }
            if IMAGES.load(Ordering::Relaxed) < max_images {
                return Ok(TenureSandbox {
                    sandbox: Some(Sandbox::new_imaged(config.clone(), commonfabric)?),
                    reused: false,
                });
            }
        }
        let sb = Sandbox::new(config.clone(), commonfabric)?;
        sb.import(COMMONFABRIC, &CallOptions::reactive())?;
        Ok(TenureSandbox {
            sandbox: Some(sb),
            reused: false,
        })
    }

    /// Whether this tenure got a restored image rather than a new sandbox.
    pub fn reused(&self) -> bool {
        self.reused
    }
}

impl std::ops::Deref for TenureSandbox {
    type Target = Sandbox;
    fn deref(&self) -> &Sandbox {
        self.sandbox.as_ref().expect("present until drop")
    }
}

impl Drop for TenureSandbox {
    fn drop(&mut self) {
        let Some(mut sb) = self.sandbox.take() else {
            return;
        };
        // A panic may have left the engine mid-call: free it rather than keep it.
        if std::thread::panicking() || !sb.restore_image() {
            return;
        }
        SPARE.with(|s| {
            let mut spare = s.borrow_mut();
            if spare.is_none() {
                *spare = Some(sb);
            }
        });
    }
}
