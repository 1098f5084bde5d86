//! Removes ambient capabilities from a fresh context and installs the
//! mode-aware clock and entropy.
//!
//! What pattern code can reach after `install` (and why):
//! - No `eval` (deleted), and the `Function`, `GeneratorFunction`,
//!   `AsyncFunction`, `AsyncGeneratorFunction` constructors are replaced by
//!   stubs that throw a `CapabilityError`. The engine itself keeps its
//!   compiler (the embedder needs it to compile modules), but code can no
//!   longer turn strings into code, so what runs is exactly what the pattern
//!   compiler validated and the module cache hashed.
//! - No `SharedArrayBuffer`, `Atomics` (deleted), no `performance`, no
//!   `WeakRef`/`FinalizationRegistry` (their intrinsics are never added:
//!   finalization timing would leak GC behaviour into results). No timers, no
//!   filesystem, network or `os`/`std` modules: the context is built from
//!   QuickJS's pure-language intrinsics only, never from quickjs-libc.
//! - `Date` is replaced by a wrapper whose zero-argument forms (`new Date()`,
//!   `Date()`) and `Date.now` ask a native function for the time; `Math.random`
//!   is native. Those natives read the host-side mode (see `state.rs`), so a
//!   mode switch costs no JS at all. The original `Date` constructor is only
//!   held in the wrapper's closure: `Date.prototype.constructor` is the
//!   wrapper and is non-writable, non-configurable, like `globalThis.Date`,
//!   `Date.now` and `Math.random`.
//!
//! The lockdown script runs once, before any pattern code, and captures the
//! builtins it uses (`Reflect.construct`, ...) so later monkey-patching by
//! pattern code cannot subvert the wrapper.

use std::rc::Rc;

use rquickjs::{Ctx, Exception, Function, Object};

use super::state::{Capability, State};

/// A module whose default export installs the lockdown. A module rather than
/// a script so its bytecode can be cached (see `bytecode.rs`): parsing it
/// anew was a fifth of a sandbox's start-up.
const LOCKDOWN_JS: &str = concat!(
    include_str!("url.js"),
    include_str!("intl.js"),
    r#"
export default (function (dateNow, nowFor, mathRandom, deny, log, zoneOffset) {
  "use strict";
  const g = globalThis;
  const OrigDate = g.Date;
  const DateProto = OrigDate.prototype;
  const construct = Reflect.construct;
  const apply = Reflect.apply;
  const defineProperty = Object.defineProperty;
  const getPrototypeOf = Object.getPrototypeOf;
  const dateToString = DateProto.toString;
  const fixed = (value) => ({ value, writable: false, enumerable: false, configurable: false });

  // Zero-argument forms read the clock through the mode-aware native; every
  // other form is the original constructor, unchanged.
  const Date = function Date(...args) {
    if (new.target === undefined) {
      return apply(dateToString, construct(OrigDate, [nowFor(2)]), []);
    }
    if (args.length === 0) {
      return construct(OrigDate, [nowFor(1)], new.target);
    }
    return construct(OrigDate, args, new.target);
  };
  defineProperty(Date, "length", { value: 7 });
  defineProperty(Date, "prototype", fixed(DateProto));
  defineProperty(Date, "now", fixed(dateNow));
  defineProperty(Date, "parse", fixed(OrigDate.parse));
  defineProperty(Date, "UTC", fixed(OrigDate.UTC));
  defineProperty(DateProto, "constructor", fixed(Date));
  defineProperty(g, "Date", fixed(Date));
  defineProperty(Math, "random", fixed(mathRandom));

  // `console`: each call becomes one line for the host (its arguments as
  // text, objects as JSON), which attributes, bounds and counts it. Frozen
  // with everything else; never throws for what it is given.
  const jsonText = g.JSON.stringify;
  const toText = (v) => {
    if (typeof v === "string") return v;
    try {
      const s = jsonText(v);
      return s === undefined ? g.String(v) : s;
    } catch (e) {
      try { return g.String(v); } catch (e2) { return "[unprintable]"; }
    }
  };
  const consoleObject = {};
  const levels = [["debug", 0], ["trace", 0], ["log", 1], ["info", 1], ["warn", 2], ["error", 3]];
  for (let i = 0; i < levels.length; i++) {
    const level = levels[i][1];
    const method = function (...args) {
      let text = "";
      for (let j = 0; j < args.length; j++) text += (j > 0 ? " " : "") + toText(args[j]);
      log(level, text);
    };
    defineProperty(method, "name", { value: levels[i][0] });
    defineProperty(consoleObject, levels[i][0], fixed(method));
  }
  defineProperty(g, "console", { value: consoleObject, writable: false, enumerable: false, configurable: false });

  const ctors = [
    [getPrototypeOf(function () {}), "Function", 4],
    [getPrototypeOf(function* () {}), "GeneratorFunction", 5],
    [getPrototypeOf(async function () {}), "AsyncFunction", 6],
    [getPrototypeOf(async function* () {}), "AsyncGeneratorFunction", 7],
  ];
  for (let i = 0; i < ctors.length; i++) {
    const proto = ctors[i][0], name = ctors[i][1], code = ctors[i][2];
    const stub = function () { return deny(code); };
    defineProperty(stub, "name", { value: name });
    defineProperty(stub, "prototype", fixed(proto));
    defineProperty(proto, "constructor", fixed(stub));
    if (name === "Function") defineProperty(g, "Function", fixed(stub));
  }

  // `URL` and `URLSearchParams` (`url.js`): pure string work.
  installUrl(g, defineProperty);
  // `Intl` and the `toLocale*String` methods (`intl.js`): pure formatting
  // over CLDR data; zone offsets from the host's compiled-in zone database.
  installIntl(g, defineProperty, zoneOffset);

  // `btoa` and `atob`, the web's base64 of byte strings: pure string work.
  const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  // The web throws a DOMException named so; its `name` is what code reads.
  const invalidCharacter = (message) => {
    const e = new g.Error(message);
    e.name = "InvalidCharacterError";
    return e;
  };
  const btoa = function btoa(data) {
    const s = g.String(data);
    let out = "";
    for (let i = 0; i < s.length; i += 3) {
      const a = s.charCodeAt(i), b = s.charCodeAt(i + 1), c = s.charCodeAt(i + 2);
      if (a > 255 || b > 255 || c > 255) {
        throw invalidCharacter("The string to be encoded contains characters outside of the Latin1 range.");
      }
      const n = (a << 16) | ((b || 0) << 8) | (c || 0);
      out += B64[n >> 18] + B64[(n >> 12) & 63] + (i + 1 < s.length ? B64[(n >> 6) & 63] : "=") + (i + 2 < s.length ? B64[n & 63] : "=");
    }
    return out;
  };
  const atob = function atob(data) {
    let s = g.String(data).replace(/[\t\n\f\r ]/g, "");
    if (s.length % 4 === 0) s = s.replace(/==?$/, "");
    if (s.length % 4 === 1 || /[^A-Za-z0-9+/]/.test(s)) {
      throw invalidCharacter("The string to be decoded is not correctly encoded.");
    }
    let out = "";
    let bits = 0, n = 0;
    for (let i = 0; i < s.length; i++) {
      n = (n << 6) | B64.indexOf(s[i]);
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        out += g.String.fromCharCode((n >> bits) & 255);
      }
    }
    return out;
  };
  defineProperty(g, "btoa", { value: btoa, writable: false, enumerable: false, configurable: false });
  defineProperty(g, "atob", { value: atob, writable: false, enumerable: false, configurable: false });

  // The web's deep copy, for JSON-shaped data (what patterns hold): the
  // engine has none of its own.
  const parse = JSON.parse, stringify = JSON.stringify;
  const structuredClone = function structuredClone(value) {
    return value === undefined ? undefined : parse(stringify(value));
  };
  defineProperty(g, "structuredClone", { value: structuredClone, writable: false, enumerable: false, configurable: false });

  delete g.eval;
  delete g.SharedArrayBuffer;
  delete g.Atomics;
  delete g.performance;
  delete g.WeakRef;
  delete g.FinalizationRegistry;

  // Array built-ins loop over indices natively, and the engine polls its
  // interrupt handler between bytecodes, not inside a built-in: on a sparse
  // array of length 2^32-1, `indexOf` or `reverse` would run for minutes
  // past any budget. A dense array that long cannot exist within a space's
  // memory, so a length past MAX_SCAN means a sparse one: those calls throw
  // a RangeError at once instead.
  const MAX_SCAN = 16777216;
  const ArrayProto = g.Array.prototype;
  const scanning = ["indexOf", "lastIndexOf", "includes", "reverse", "copyWithin", "fill",
    "forEach", "map", "filter", "some", "every", "reduce", "reduceRight", "find", "findIndex",
    "findLast", "findLastIndex", "join", "toString", "toLocaleString", "splice", "slice", "flat",
    "flatMap", "sort", "toSorted", "toReversed", "toSpliced", "with", "unshift", "shift", "concat"];
  for (let i = 0; i < scanning.length; i++) {
    const name = scanning[i];
    const original = ArrayProto[name];
    if (typeof original !== "function") continue;
    const guarded = {
      [name](...args) {
        const len = this === null || this === undefined ? 0 : this.length;
        if (len > MAX_SCAN) {
          throw new g.RangeError("Array.prototype." + name + " over " + len +
            " elements is refused in patterns (an array that long is sparse: a dense one " +
            "would not fit in a space's memory)");
        }
        return apply(original, this, args);
      },
    }[name];
    defineProperty(guarded, "length", { value: original.length });
    defineProperty(ArrayProto, name, { value: guarded, writable: true, enumerable: false, configurable: true });
  }

  // Assigning a property that a frozen prototype holds as a data property
  // throws in strict code (the "override mistake"), which would break
  // ordinary code such as `this.name = "MyError"`. For the properties code
  // commonly assigns, the prototype's value becomes an accessor whose setter
  // defines the property on the object assigned to, as SES does.
  const getOwn = Object.getOwnPropertyDescriptor;
  const tame = (proto, names) => {
    for (let i = 0; i < names.length; i++) {
      const name = names[i];
      const d = getOwn(proto, name);
      if (d === undefined || !("value" in d) || !d.configurable) continue;
      const value = d.value;
      defineProperty(proto, name, {
        get() { return value; },
        set(v) {
          if (this === proto) throw new TypeError("Cannot assign to read only property '" + String(name) + "'");
          defineProperty(this, name, { value: v, writable: true, enumerable: true, configurable: true });
        },
        enumerable: d.enumerable,
        configurable: false,
      });
    }
  };
  tame(Object.prototype, ["constructor", "toString", "valueOf", "toLocaleString"]);
  tame(Function.prototype, ["constructor", "toString"]);
  const errors = [g.Error, g.TypeError, g.RangeError, g.SyntaxError, g.ReferenceError,
    g.EvalError, g.URIError, g.AggregateError];
  for (let i = 0; i < errors.length; i++) {
    if (typeof errors[i] === "function") {
      tame(errors[i].prototype, ["constructor", "name", "message", "toString"]);
    }
  }

  // The engine keeps `Error.prepareStackTrace` and `Error.stackTraceLimit`
  // per realm, behind accessors whose setters work on a frozen `Error`: a
  // piece that set the first would run inside every other piece's run that
  // makes an error, and see it. Both become fixed data properties (the
  // engine's own defaults, read natively, stay as they are).
  defineProperty(g.Error, "prepareStackTrace", fixed(undefined));
  defineProperty(g.Error, "stackTraceLimit", fixed(10));

  // Every intrinsic, and the global object, is frozen before any pattern
  // code runs (by `freeze_reachable`, natively: a walk in JS cost 6 ms per
  // sandbox). The walk starts from the global object and the intrinsics it
  // does not reach by name (iterator and generator prototypes,
  // %TypedArray%), returned here, and from every prototype the engine keeps
  // per class (`freeze_reachable` enumerates them: iterator helpers,
  // wrapped iterators and whatever a later engine adds are found there,
  // not from a list).
  const iter = (x) => getPrototypeOf(x[Symbol.iterator]());
  return [
    g,
    getPrototypeOf(function* () {}),
    getPrototypeOf(async function () {}),
    getPrototypeOf(async function* () {}),
    getPrototypeOf((function* () {})()),
    getPrototypeOf((async function* () {})()),
    iter([]), iter(""), iter(new g.Map()), iter(new g.Set()),
    getPrototypeOf(/a/[Symbol.matchAll]("")),
    getPrototypeOf(g.Int8Array),
  ];
})
"#
);

/// Throw a JS error named `CapabilityError` carrying the capability's name.
pub(crate) fn throw_capability<'js>(
    ctx: &Ctx<'js>,
    cap: Capability,
    message: &str,
) -> rquickjs::Error {
    match Exception::from_message(ctx.clone(), message) {
        Ok(exc) => {
            let obj: Object<'js> = exc.into_object();
            if let Err(e) = obj.set("name", "CapabilityError") {
                return e;
            }
            if let Err(e) = obj.set("capability", cap.name()) {
                return e;
            }
            ctx.throw(obj.into_value())
        }
        Err(e) => e,
    }
}

/// Install the lockdown into `ctx`. Runs once per sandbox.
/// A zone's offset from UTC at an instant, in minutes (`None`: no such zone,
/// or an instant chrono cannot represent). Pure: the database is compiled in.
fn zone_offset_minutes(zone: &str, at_ms: f64) -> Option<f64> {
    use chrono::{Offset, TimeZone};
    let tz = chrono_tz::Tz::from_str_insensitive(zone).ok()?;
    if !at_ms.is_finite() {
        return None;
    }
    let utc = chrono::DateTime::from_timestamp_millis(at_ms.floor() as i64)?;
    let secs = tz
        .offset_from_utc_datetime(&utc.naive_utc())
        .fix()
        .local_minus_utc();
    Some(f64::from(secs) / 60.0)
}

pub(crate) fn install<'js>(ctx: &Ctx<'js>, state: &Rc<State>) -> rquickjs::Result<()> {
    let st = state.clone();
    let date_now = Function::new(ctx.clone(), move |ctx: Ctx<'js>| -> rquickjs::Result<f64> {
        st.now_ms(Capability::DateNow)
            .map_err(|m| throw_capability(&ctx, Capability::DateNow, &m))
    })?
    .with_name("now")?;

    let st = state.clone();
    let now_for = Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, code: i32| -> rquickjs::Result<f64> {
            let cap = Capability::from_code(code).unwrap_or(Capability::NewDate);
            st.now_ms(cap).map_err(|m| throw_capability(&ctx, cap, &m))
        },
    )?;

    let st = state.clone();
    let math_random = Function::new(ctx.clone(), move |ctx: Ctx<'js>| -> rquickjs::Result<f64> {
        st.random()
            .map_err(|m| throw_capability(&ctx, Capability::MathRandom, &m))
    })?
    .with_name("random")?;

    let st = state.clone();
    let deny = Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, code: i32| -> rquickjs::Result<()> {
            let cap = Capability::from_code(code).unwrap_or(Capability::FunctionCtor);
            let message = st.deny(cap);
            Err(throw_capability(&ctx, cap, &message))
        },
    )?;

    let st = state.clone();
    let log = Function::new(ctx.clone(), move |code: i32, text: String| {
        st.log(code, text);
    })?;

    // The name resolves for nobody: pattern imports of it are refused.
    const NAME: &str = "spacewake:lockdown";
    let declared = super::bytecode::declare_builtin(ctx, NAME, LOCKDOWN_JS)?;
    let (module, done) = declared.eval()?;
    done.finish::<()>()?;
    let installer: Function = module.namespace()?.get("default")?;
    let zone_offset = Function::new(ctx.clone(), |zone: String, at_ms: f64| {
        zone_offset_minutes(&zone, at_ms)
    })?;
    let roots: rquickjs::Value =
        installer.call((date_now, now_for, math_random, deny, log, zone_offset))?;
    freeze_reachable(ctx, &roots)?;
    for proto in class_prototypes(ctx) {
        freeze_reachable(ctx, &proto)?;
    }
    Ok(())
}

/// The prototype the engine keeps for every class registered with the
/// runtime (one per kind of object it can make: arrays, each iterator and
/// generator kind, iterator helpers, typed arrays, promises, …), whether or
/// not any name reaches it. Enumerated, so a hidden intrinsic cannot be
/// missed by a list.
pub(crate) fn class_prototypes<'js>(ctx: &Ctx<'js>) -> Vec<rquickjs::Value<'js>> {
    use rquickjs::qjs;
    // Class ids are small and dense; the engine defines about 60 and
    // rquickjs a few more. Past the last registered id nothing follows.
    const MAX_CLASS_ID: u32 = 1024;
    let raw = ctx.as_raw().as_ptr();
    let mut out = Vec::new();
    // SAFETY: `JS_GetClassProto` is called only for ids the runtime has
    // registered (which bounds them by its class count, the assertion the
    // call makes), and returns an owned value that `Value::from_raw` takes.
    unsafe {
        let rt = qjs::JS_GetRuntime(raw);
        for id in 1..MAX_CLASS_ID {
            if !qjs::JS_IsRegisteredClass(rt, id) {
                continue;
            }
            let proto = qjs::JS_GetClassProto(raw, id);
            out.push(rquickjs::Value::from_raw(ctx.clone(), proto));
        }
    }
    out
}

/// Freezes `root` and every object reachable from it: property values,
/// accessors and prototypes, depth-first. No piece can then change what
/// another piece's code calls (wrapping `JSON.stringify`, patching
/// `Array.prototype.push`) or leave state on a built-in for another to
/// find. Native rather than JS for speed (0.1 ms instead of 6 ms for the
/// 585 objects and 1,761 properties of a fresh context).
fn freeze_reachable<'js>(ctx: &Ctx<'js>, root: &rquickjs::Value<'js>) -> rquickjs::Result<()> {
    use rquickjs::qjs;
    let raw = ctx.as_raw().as_ptr();
    let mut seen: std::collections::HashSet<usize> = std::collections::HashSet::new();
    // SAFETY: every JSValue on `stack` is an owned reference (duplicated,
    // or returned owned by JS_GetOwnProperty / JS_GetPrototype) and is
    // freed exactly once, when popped; `tab` is freed with its length.
    unsafe {
        let mut stack: Vec<qjs::JSValue> = vec![qjs::JS_DupValue(raw, root.as_raw())];
        let mut failed = false;
        while let Some(v) = stack.pop() {
            if failed || !qjs::JS_IsObject(v) || !seen.insert(qjs::JS_VALUE_GET_PTR(v) as usize) {
                qjs::JS_FreeValue(raw, v);
                continue;
            }
            if qjs::JS_FreezeObject(raw, v) < 0 {
                failed = true;
                qjs::JS_FreeValue(raw, v);
                continue;
            }
            let mut tab: *mut qjs::JSPropertyEnum = std::ptr::null_mut();
            let mut len: u32 = 0;
            let flags = (qjs::JS_GPN_STRING_MASK | qjs::JS_GPN_SYMBOL_MASK) as i32;
            if qjs::JS_GetOwnPropertyNames(raw, &mut tab, &mut len, v, flags) == 0 {
                for i in 0..len as usize {
                    let atom = (*tab.add(i)).atom;
                    let mut d: qjs::JSPropertyDescriptor = std::mem::zeroed();
                    if qjs::JS_GetOwnProperty(raw, &mut d, v, atom) == 1 {
                        stack.push(d.value);
                        stack.push(d.getter);
                        stack.push(d.setter);
                    }
                }
                qjs::JS_FreePropertyEnum(raw, tab, len);
            } else {
                failed = true;
            }
            stack.push(qjs::JS_GetPrototype(raw, v));
            qjs::JS_FreeValue(raw, v);
        }
        if failed {
            return Err(rquickjs::Error::Exception);
        }
    }
    Ok(())
}
