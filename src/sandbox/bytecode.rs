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
    declare_as(ctx, name, name, source)
}

/// Declares module `name` as an instance of `template`: the same source,
/// instantiated apart from it (its own module record and top-level state).
/// The bytecode is cached under `template` and renamed to `name` on load,
/// so a program instantiated once per piece is still compiled once. The two
/// names must have the same length (a rename never moves a byte); with
/// another length, or the same name, it is [`declare`] of `name`.
pub(crate) fn declare_as<'js>(
    ctx: &Ctx<'js>,
    template: &str,
    name: &str,
    source: &str,
) -> rquickjs::Result<Module<'js, Declared>> {
    let template = if template.len() == name.len() {
        template
    } else {
        name
    };
    let key = key(template, source);
    if let Some(code) = get(&key).and_then(|c| rename(&c, template, name)) {
        // SAFETY: written by `Module::write` in this process from this
        // source under `template` (the key hashes both); a rename replaced
        // the bytes of atom strings equal to `template` with as many bytes
        // of `name`.
        if let Ok(m) = unsafe { Module::load(ctx.clone(), &code) } {
            return Ok(m);
        }
    }
    let module = Module::declare(ctx.clone(), name, source.as_bytes())?;
    if let Some(code) = module
        .write(WriteOptions::default())
        .ok()
        .and_then(|c| rename(&c, name, template))
    {
        put(key, code);
    }
    Ok(module)
}

/// Declares one of the host's own modules (the authoring API, the private
/// module, the lockdown) from bytecode without its functions' source text.
///
/// Why: the engine keeps every function's source beside its bytecode (for
/// `Function.prototype.toString`), nested functions again inside their
/// outer one's, and these modules live in the engine image that every
/// tenure copies back: their source was a fifth of the image. A pattern's
/// own modules keep their source (an author may print a function).
/// The module is compiled once per process in a scratch runtime, so the
/// sandbox only ever loads the stripped bytecode; a compile error (never
/// expected of the host's own code) is reported by compiling in `ctx`.
pub(crate) fn declare_builtin<'js>(
    ctx: &Ctx<'js>,
    name: &str,
    source: &str,
) -> rquickjs::Result<Module<'js, Declared>> {
    let key = key(&format!("{name}\0stripped"), source);
    let code = match get(&key) {
        Some(code) => Some(code),
        None => compile_stripped(name, source).map(|code| {
            put(key, code.clone());
            Arc::from(code)
        }),
    };
    if let Some(code) = code {
        // SAFETY: written by `Module::write` in this process from this
        // source under this name (the key hashes both).
        if let Ok(m) = unsafe { Module::load(ctx.clone(), &code) } {
            return Ok(m);
        }
    }
    Module::declare(ctx.clone(), name, source.as_bytes())
}

/// `source` compiled as module `name` in a runtime of its own, written
/// without function source; `None` when it does not compile.
fn compile_stripped(name: &str, source: &str) -> Option<Vec<u8>> {
    let rt = rquickjs::Runtime::new().ok()?;
    let ctx = rquickjs::Context::full(&rt).ok()?;
    ctx.with(|ctx| {
        Module::declare(ctx, name, source.as_bytes())
            .ok()?
            .write(WriteOptions {
                strip_source: true,
                ..WriteOptions::default()
            })
            .ok()
    })
}

/// `code` with every atom of its atom table that reads exactly `from`
/// rewritten as `to` (a module's name is one atom, shared by its functions'
/// debug file names). The table leads the bytecode: a version byte, a
/// LEB128 count, then per atom a type byte and either a 4-byte constant
/// index (type 0) or a string (LEB128 `len << 1 | wide`, then its bytes).
/// `None` when the table cannot be read or no atom matched; the code as
/// it is when `from` is `to`.
fn rename(code: &[u8], from: &str, to: &str) -> Option<Vec<u8>> {
    if from == to {
        return Some(code.to_vec());
    }
    if from.len() != to.len() || !from.is_ascii() || !to.is_ascii() {
        return None;
    }
    fn leb128(code: &[u8], at: &mut usize) -> Option<u32> {
        let mut v: u32 = 0;
        for i in 0..5 {
            let b = *code.get(*at)?;
            *at += 1;
            v |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    let mut out = code.to_vec();
    let mut at = 1; // the version byte
    let count = leb128(code, &mut at)?;
    let mut renamed = false;
    for _ in 0..count {
        let kind = *code.get(at)?;
        at += 1;
        if kind == 0 {
            at += 4;
            continue;
        }
        let header = leb128(code, &mut at)?;
        let wide = header & 1 == 1;
        let len = (header >> 1) as usize * if wide { 2 } else { 1 };
        let bytes = code.get(at..at + len)?;
        if !wide && bytes == from.as_bytes() {
            out[at..at + len].copy_from_slice(to.as_bytes());
            renamed = true;
        }
        at += len;
    }
    renamed.then_some(out)
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
    fn instances_of_a_template_share_its_bytecode_and_not_its_state() {
        let src = "let n = 0; export function bump() { return ++n; }";
        let (template, a, b) = (
            "inst-test/000/m.js",
            "inst-test/001/m.js",
            "inst-test/002/m.js",
        );
        let rt = rquickjs::Runtime::new().unwrap();
        let ctx = rquickjs::Context::full(&rt).unwrap();
        fn bump<'js>(m: Module<'js, Declared>) -> (i32, rquickjs::Function<'js>) {
            let (m, done) = m.eval().unwrap();
            done.finish::<()>().unwrap();
            let f: rquickjs::Function = m.namespace().unwrap().get("bump").unwrap();
            (f.call::<_, i32>(()).unwrap(), f)
        }
        ctx.with(|ctx| {
            // The first instance compiles and keeps the bytecode under the
            // template's name; the second loads it renamed.
            let (first, fa) = bump(declare_as(&ctx, template, a, src).unwrap());
            assert!(
                get(&key(template, src)).is_some(),
                "kept under the template"
            );
            let (second, fb) = bump(declare_as(&ctx, template, b, src).unwrap());
            assert_eq!((first, second), (1, 1), "each instance has its own `n`");
            assert_eq!(fa.call::<_, i32>(()).unwrap(), 2);
            assert_eq!(fb.call::<_, i32>(()).unwrap(), 2);
        });
        // The kept bytecode names the template, never an instance.
        let code = get(&key(template, src)).unwrap();
        assert!(rename(&code, template, a).is_some());
        assert!(rename(&code, a, template).is_none());
        assert!(rename(&code, template, "short").is_none());
    }

    #[test]
    fn a_builtin_module_loads_without_its_source_and_keeps_its_line_numbers() {
        let name = "builtin-test.js";
        let src =
            "export function where() {\n  // secret comment\n  return new Error('x').stack;\n}";
        let rt = rquickjs::Runtime::new().unwrap();
        let ctx = rquickjs::Context::full(&rt).unwrap();
        ctx.with(|ctx| {
            let (m, done) = declare_builtin(&ctx, name, src).unwrap().eval().unwrap();
            done.finish::<()>().unwrap();
            let f: rquickjs::Function = m.namespace().unwrap().get("where").unwrap();
            let text: String = ctx
                .eval::<rquickjs::Function, _>("(f) => Function.prototype.toString.call(f)")
                .unwrap()
                .call((f.clone(),))
                .unwrap();
            assert!(!text.contains("secret"), "no source: {text}");
            let stack: String = f.call(()).unwrap();
            assert!(
                stack.contains("builtin-test.js:3"),
                "debug info kept: {stack}"
            );
        });
        // A pattern's module keeps its source.
        ctx.with(|ctx| {
            let (m, done) = declare(&ctx, "pattern-test.js", src)
                .unwrap()
                .eval()
                .unwrap();
            done.finish::<()>().unwrap();
            let f: rquickjs::Function = m.namespace().unwrap().get("where").unwrap();
            let text: String = ctx
                .eval::<rquickjs::Function, _>("(f) => Function.prototype.toString.call(f)")
                .unwrap()
                .call((f,))
                .unwrap();
            assert!(text.contains("secret"), "{text}");
        });
    }

    #[test]
    fn a_syntax_error_is_the_engines_and_nothing_is_kept() {
        let rt = rquickjs::Runtime::new().unwrap();
        let ctx = rquickjs::Context::full(&rt).unwrap();
        ctx.with(|ctx| assert!(declare(&ctx, "broken.js", "export const = ;").is_err()));
        assert_eq!(get(&key("broken.js", "export const = ;")), None);
    }
}
