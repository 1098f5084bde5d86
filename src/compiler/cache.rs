//! Host-wide compile cache keyed by the blake3 hash of a program's sources.
//!
//! Knowing a program's hash requires knowing its module graph, which requires parsing. The cache
//! therefore remembers, per entry path, which files the last compile read; a lookup re-reads
//! exactly those files (no parsing), hashes them, and returns the cached program when the hash
//! is known. Any change to any file changes the hash; a file that disappeared, or a new import,
//! shows up as a changed text and so as a miss followed by a full compile.
//!
//! Invariants:
//! - a cached program is shared as `Arc` and never mutated;
//! - only successful compiles are cached; diagnostics are recomputed every time;
//! - the lock is not held while compiling, so one slow compile never blocks cache hits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{
    compile_with_sources, hash_sources, imports, CompiledProgram, Diagnostic, ModuleSource,
};

#[derive(Default)]
struct Inner {
    by_hash: HashMap<[u8; 32], Arc<CompiledProgram>>,
    /// Normalised entry path → (path, canonical name) of every module its last compile read.
    graphs: HashMap<String, Vec<(String, String)>>,
}

/// A compile cache shared by every space of a host.
#[derive(Default)]
pub struct CompileCache {
    inner: Mutex<Inner>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl CompileCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Compile `entry`, or return the cached program if its sources are unchanged.
    pub fn compile(
        &self,
        entry: &str,
        src: &dyn ModuleSource,
    ) -> Result<Arc<CompiledProgram>, Vec<Diagnostic>> {
        let key = imports::normalize(entry);
        if let Some(hit) = self.lookup(&key, src) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let (program, sources) = compile_with_sources(entry, src)?;
        let program = Arc::new(program);
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let shared = inner
            .by_hash
            .entry(program.hash)
            .or_insert_with(|| program.clone())
            .clone();
        inner.graphs.insert(
            key,
            sources
                .into_iter()
                .map(|(path, name, _)| (path, name))
                .collect(),
        );
        Ok(shared)
    }

    fn lookup(&self, key: &str, src: &dyn ModuleSource) -> Option<Arc<CompiledProgram>> {
        let graph = {
            let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            inner.graphs.get(key)?.clone()
        };
        let mut texts = Vec::with_capacity(graph.len());
        for (path, _) in &graph {
            texts.push(src.read(path).ok()?);
        }
        let hash = hash_sources(
            graph
                .iter()
                .zip(&texts)
                .map(|((_, n), t)| (n.as_str(), t.as_str())),
        );
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.by_hash.get(&hash).cloned()
    }

    /// A cached program by hash.
    pub fn get(&self, hash: &[u8; 32]) -> Option<Arc<CompiledProgram>> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_hash
            .get(hash)
            .cloned()
    }

    /// (hits, misses) since creation.
    pub fn stats(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// Number of distinct programs held.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_hash
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compiler::MemorySource;

    const COUNTER: &str = r#"import { pattern } from "commonfabric";
import { double } from "./util";
export default pattern<{ n: number }>(({ n }) => ({ n, d: double(1) }));
"#;

    #[test]
    fn cached_compile_returns_same_arc_without_recompiling() {
        let cache = CompileCache::new();
        let src = MemorySource::new()
            .with("p/counter.tsx", COUNTER)
            .with("p/util.ts", "export const double = (x: number) => x * 2;\n");
        let a = cache.compile("p/counter.tsx", &src).unwrap();
        assert_eq!(cache.stats(), (0, 1));
        let b = cache.compile("p/counter.tsx", &src).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(cache.stats(), (1, 1), "second compile must be a hit");
        assert_eq!(cache.get(&a.hash).map(|p| Arc::ptr_eq(&p, &a)), Some(true));

        // Changing an imported file changes the hash and forces a compile.
        let src2 = src
            .clone()
            .with("p/util.ts", "export const double = (x: number) => x + x;\n");
        let c = cache.compile("p/counter.tsx", &src2).unwrap();
        assert_ne!(a.hash, c.hash);
        assert_eq!(cache.stats(), (1, 2));
        assert_eq!(cache.len(), 2);
    }
}
