//! Where pattern sources come from: the [`ModuleSource`] trait and its two implementations.
//!
//! Invariants:
//! - paths handed to [`ModuleSource::read`] are '/'-separated and lexically normalised by the
//!   compiler (no `.` segments, `..` only at the front of a relative path); an implementation
//!   never has to resolve anything itself;
//! - a source reports absence and other failures as `Err(sentence)`; the compiler turns that
//!   into a diagnostic at the import that asked for the file.

use std::collections::HashMap;
use std::path::PathBuf;

/// One source text with the path it is displayed under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// Display path (what diagnostics print).
    pub path: String,
    /// The TypeScript/TSX text.
    pub text: String,
}

/// Reads a pattern's own modules. Only relative imports among the pattern's files reach it.
pub trait ModuleSource {
    /// Return the text at `path`, or a short sentence saying why it cannot be read.
    fn read(&self, path: &str) -> Result<String, String>;
}

/// Reads from the filesystem, relative paths against `base` (the process's working directory
/// when `base` is empty).
#[derive(Debug, Clone, Default)]
pub struct FsSource {
    pub base: PathBuf,
}

impl FsSource {
    pub fn new(base: impl Into<PathBuf>) -> Self {
        Self { base: base.into() }
    }
}

impl ModuleSource for FsSource {
    fn read(&self, path: &str) -> Result<String, String> {
        let full = self.base.join(path);
        std::fs::read_to_string(&full).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "no such file".to_string(),
            _ => e.to_string(),
        })
    }
}

/// An in-memory set of files keyed by normalised path; what a host uses for sources it
/// stores itself (for example a deployed pattern kept in a space).
#[derive(Debug, Clone, Default)]
pub struct MemorySource {
    files: HashMap<String, String>,
}

impl MemorySource {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a file; the path is normalised so `./a/../b.ts` and `b.ts` are the same file.
    pub fn with(mut self, path: &str, text: &str) -> Self {
        self.insert(path, text);
        self
    }

    pub fn insert(&mut self, path: &str, text: &str) {
        self.files
            .insert(crate::compiler::imports::normalize(path), text.to_string());
    }

    pub fn from_files(files: &[SourceFile]) -> Self {
        let mut s = Self::new();
        for f in files {
            s.insert(&f.path, &f.text);
        }
        s
    }
}

impl ModuleSource for MemorySource {
    fn read(&self, path: &str) -> Result<String, String> {
        self.files
            .get(path)
            .cloned()
            .ok_or_else(|| "no such file".to_string())
    }
}
