//! A process-wide cache of compiled module bytecode.
//!
//! Every activation builds a fresh sandbox, and parsing the authoring API
//! and the pattern's modules again was most of a sandbox's start-up cost.
//! The first sandbox to load a `(name, source)` pair compiles it and keeps
//! the bytecode here; later sandboxes — on any thread, any runtime — read
//! the bytecode instead of parsing. Keys hash the name with the source, so
//! a name never maps to stale code. The cache is bounded by bytes and drops
//! its oldest entries first.

use rquickjs::module::{Declared, WriteOptions};
use rquickjs::{Ctx, Module};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

/// Upper bound on cached bytecode; a module's bytecode is a few times its
/// source, so this holds hundreds of patterns.
const MAX_BYTES: usize = 16 * 1024 * 1024;

type Key = [u8; 32];

/// Declares module `name` with `source` in `ctx`, from cached bytecode when
/// this process has compiled the same name and source before; otherwise
/// compiles it and keeps its bytecode. Compile errors are the engine's own.
pub(crate) fn declare<'js>(
    ctx: &Ctx<'js>,
    name: &str,
    source: &str,
) -> rquickjs::Result<Module<'js, Declared>> {
    let key = key(name, source);
    if let Some(code) = get(&key) {
        // SAFETY: the bytes were written by `Module::write` in this process
        // from exactly this name and source (the key hashes both).
        if let Ok(m) = unsafe { Module::load(ctx.clone(), &code) } {
            return Ok(m);
        }
    }
    let module = Module::declare(ctx.clone(), name, source.as_bytes())?;
    if let Ok(code) = module.write(WriteOptions::default()) {
        put(key, code);
    }
    Ok(module)
}

#[derive(Default)]
struct Cache {
    map: HashMap<Key, Arc<[u8]>>,
    order: VecDeque<Key>,
    bytes: usize,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

fn key(name: &str, source: &str) -> Key {
    let mut h = blake3::Hasher::new();
    h.update(name.as_bytes());
    h.update(&[0]);
    h.update(source.as_bytes());
    *h.finalize().as_bytes()
}

fn get(key: &Key) -> Option<Arc<[u8]>> {
    cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .map
        .get(key)
        .cloned()
}

fn put(key: Key, bytecode: Vec<u8>) {
    if bytecode.len() > MAX_BYTES / 4 {
        return;
    }
    let mut c = cache().lock().unwrap_or_else(|p| p.into_inner());
    if c.map.contains_key(&key) {
        return;
    }
    c.bytes += bytecode.len();
    c.map.insert(key, Arc::from(bytecode));
    c.order.push_back(key);
    while c.bytes > MAX_BYTES {
        let Some(old) = c.order.pop_front() else {
            break;
        };
        if let Some(b) = c.map.remove(&old) {
            c.bytes -= b.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_is_compiled_once_and_loaded_from_bytecode_after() {
        let name = "bytecode-test.js";
        let src = "export const answer = 6 * 7;";
        let run = || {
            let rt = rquickjs::Runtime::new().unwrap();
            let ctx = rquickjs::Context::full(&rt).unwrap();
            ctx.with(|ctx| {
                let (m, done) = declare(&ctx, name, src).unwrap().eval().unwrap();
                done.finish::<()>().unwrap();
                m.namespace().unwrap().get::<_, i32>("answer").unwrap()
            })
        };
        assert_eq!(get(&key(name, src)), None);
        assert_eq!(run(), 42);
        assert!(get(&key(name, src)).is_some(), "bytecode kept");
        // A second runtime loads the kept bytecode and gets the same module.
        assert_eq!(run(), 42);
        // Same name, other source: another key, never the stale code.
        assert_ne!(key(name, src), key(name, "export const answer = 0;"));
    }

    #[test]
    fn a_syntax_error_is_the_engines_and_nothing_is_kept() {
        let rt = rquickjs::Runtime::new().unwrap();
        let ctx = rquickjs::Context::full(&rt).unwrap();
        ctx.with(|ctx| assert!(declare(&ctx, "broken.js", "export const = ;").is_err()));
        assert_eq!(get(&key("broken.js", "export const = ;")), None);
    }
}
