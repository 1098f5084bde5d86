//! A process-wide cache of compiled module bytecode.
//!
//! Every activation builds a fresh sandbox, and parsing the authoring API
//! and the pattern's modules again was most of a sandbox's start-up cost.
//! The first sandbox to load a `(name, source)` pair compiles it and keeps
//! the bytecode here; later sandboxes — on any thread, any runtime — read
//! the bytecode instead of parsing. Keys hash the name with the source, so
//! a name never maps to stale code. The cache is bounded by bytes and drops
//! its oldest entries first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

/// Upper bound on cached bytecode; a module's bytecode is a few times its
/// source, so this holds hundreds of patterns.
const MAX_BYTES: usize = 16 * 1024 * 1024;

pub(crate) type Key = [u8; 32];

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

pub(crate) fn key(name: &str, source: &str) -> Key {
    let mut h = blake3::Hasher::new();
    h.update(name.as_bytes());
    h.update(&[0]);
    h.update(source.as_bytes());
    *h.finalize().as_bytes()
}

pub(crate) fn get(key: &Key) -> Option<Arc<[u8]>> {
    cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .map
        .get(key)
        .cloned()
}

pub(crate) fn put(key: Key, bytecode: Vec<u8>) {
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
