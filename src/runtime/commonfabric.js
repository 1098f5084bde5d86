// The implementation of the `commonfabric` authoring API. The sandbox loads
// it as its private module ("spacewake:internal"): patterns import the
// public module (`commonfabric_public.js`), which re-exports the API and
// not the host entry points below, and cannot import this one.
//
// A pattern body runs once per instantiation, with *references* (not values)
// for its argument. The API calls made during that run record a graph —
// derivation nodes, handler bindings, local cells — which the Rust runtime
// stores and drives: it resolves inputs, calls back into `__runNode` and
// `__runHandler` below, and commits what they write. Nothing here touches
// storage or time; the host passes values in and takes writes out.

export const NAME = "$NAME";
export const UI = "$UI";
export const SCHEDULE = "$SCHEDULE";
export const TYPE = "$TYPE";
export const TILE_UI = "$TILE_UI";
export const CHIP_UI = "$CHIP_UI";
export const FS = "$FS";
export const TESTS = "$TESTS";

const REF = Symbol("commonfabric.ref");
const STREAM = Symbol("commonfabric.stream");

// ---- registries ------------------------------------------------------------

const fns = [];          // function index -> JS function (this sandbox only)
// A program is evaluated once per piece (its own module-level state): each
// evaluation is an instance, keyed `hash/k` in registration order.
const programs = new Map(); // instance key -> module namespace
const instanceCount = new Map(); // program hash -> instances registered
// Every pattern of a program, in creation order (deterministic: module
// evaluation order), so one a handler spawns is named by `#ordinal`.
let pendingPatterns = [];
const programPatterns = new Map(); // instance key -> [pattern]
const patternInfo = new WeakMap(); // pattern -> {hash, ordinal}
// Handler factories likewise (`h#ordinal`): one a handler binds becomes a
// piece of its own whose result is the bound stream.
let pendingHandlers = [];
const programHandlers = new Map(); // instance key -> [factory]
const handlerInfo = new WeakMap(); // factory -> {hash, ordinal}

// Module evaluation of a program the host is loading (between
// `__beginProgram` and `__registerProgram`): not recording a body, not
// running anything. Only then does `pattern()` or `handler()` join the
// program's ordinals, so a program's ordinals come from its own evaluation.
let loading = false;
function evaluatingModules() {
  return loading && builder === null && runKind === null;
}

// Outside module evaluation, a body or a run (say, after an `await` in a
// handler, when its run has ended) there is nothing a builder could join.
function checkBuilderContext(what) {
  if (builder === null && runKind === null && !loading) {
    throw new Error("commonfabric: " + what + "() can only be called at a module's top level, " +
      "in a pattern body or while a handler or derivation runs (not after an await)");
  }
}
let builder = null;      // the graph being recorded, during __instantiate
// While a derivation ("node") or a handler runs: its id, and (a handler's)
// documents and output. Its frame is made on first use, so a run that
// builds nothing costs nothing extra.
let runKind = null;
let runId = null;
let runIo = null;

function currentBuilder() {
  if (builder !== null || runKind === null) return builder;
  builder = runKind === "node" ? newFrame(runId) : newHandlerFrame(runId, runIo);
  return builder;
}

function newFrame(id) {
  return { pieceId: id, prefix: "", counter: 0, nodes: [], streams: [], cells: [], writes: [], frame: true };
}

function newHandlerFrame(id, io) {
  return { pieceId: id, prefix: "", counter: 0, nodes: [], streams: [], cells: [], spawns: [],
    docs: io.docs, writes: io.writes, sends: io.sends, frame: true, handler: true };
}

function inHandler() {
  return runKind === "handler";
}

function registerFn(fn) {
  fns.push(fn);
  return fns.length - 1;
}

function nextId(kind) {
  if (!currentBuilder()) {
    throw new Error("commonfabric: " + kind + " can only be created inside a pattern body");
  }
  return builder.pieceId + "/" + builder.prefix + kind + builder.counter++;
}

// ---- references --------------------------------------------------------------

function makeRef(doc, path, schema, root) {
  const meta = { doc, path, schema: schema || null, root: root || schema || null };
  let self;
  const handler = {
    get(_t, prop) {
      if (prop === REF) return meta;
      if (typeof prop === "symbol") return undefined;
      if (prop === "key") {
        return (...ks) => ks.some(isRef)
          // A key that is itself reactive (`rack.key(letter.index)` in a
          // rendering map): the value there, as a derivation of both.
          ? addNode("lift", (base, keys) => keys.reduce((v, k) => (v === null || v === undefined ? undefined : v[k]), base),
            [self, ks], "key")
          : ks.reduce((r, k) => childRef(r[REF], String(k)), self);
      }
      if (prop === "getAsNormalizedFullLink") return () => normalizedLink(doc, path);
      if (prop === "sourceURI") return entityUri(doc);
      if (prop === "map") return (fn) => mapNode(self, fn);
      // The reference's `mapWithPattern(P, params)`: `P` instantiated per
      // element with `{element, index, array, params}`.
      if (prop === "mapWithPattern") {
        return (p, params) => mapNode(self, (element, index) => p({ element, index, array: self, params: params === undefined ? {} : params }));
      }
      // `.for(cause)` names a cell for id stability in the reference (here
      // ids come from the graph's order); `.asSchema(s)` and
      // `.resolveAsCell()` view the same cell.
      if (prop === "for" || prop === "asSchema" || prop === "resolveAsCell") return () => self;
      if (prop === "toJSON") return () => ({ $link: { doc, path } });
      if (prop === "then") return undefined;
      return childRef(meta, prop);
    },
    has() { return false; },
    ownKeys() { return []; },
    getOwnPropertyDescriptor() { return undefined; },
    set() { throw new Error("commonfabric: a reference cannot be assigned to; use a handler"); },
  };
  self = new Proxy({}, handler);
  return self;
}

// A field of a reference: its type goes with it (the field's schema in the
// parent's), so a `Writable<T>` field captured by a derivation is handed over
// as the cell its type says it is, as the reference decides by type.
function childRef(meta, prop) {
  const sub = childSchema(meta.schema, meta.root, prop);
  return makeRef(meta.doc, meta.path.concat([prop]), sub, sub === null ? null : meta.root);
}
function childSchema(schema, root, prop) {
  const s = schemaRef(schema, root);
  if (!s || typeof s !== "object") return null;
  if (s.properties && s.properties[prop] !== undefined) return s.properties[prop];
  if (s.items && /^[0-9]+$/.test(prop)) return s.items;
  // A union (or an intersection, `Omit<T, "k"> & {k: Cell<U>}`): the branch
  // that types the field as a cell, if one does (its value is then a cell
  // wherever it is one), else the first that types it.
  let first = null;
  for (const branch of branches(s)) {
    const b = childSchema(branch, root, prop);
    if (b !== null && cellShape(b, root) !== null) return b;
    if (first === null) first = b;
  }
  if (first !== null) return first;
  if (s.additionalProperties && typeof s.additionalProperties === "object") return s.additionalProperties;
  return null;
}

// The reference's address of a cell (`getAsNormalizedFullLink()`): an `of:`
// entity id (the document's id, escaped so it holds no `/` or `~`), the
// path inside it, and the space (`did:space:NAME` here: a space's name is its
// identity). `cellFromUrl` reads the same form back.
let spaceName = "";
function entityUri(doc) {
  return "of:" + encodeURIComponent(doc).replace(/~/g, "%7E");
}
function normalizedLink(doc, path) {
  return { id: entityUri(doc), path: path.map(String), space: "did:space:" + spaceName, type: "application/json" };
}

function isRef(v) {
  return v !== null && (typeof v === "object" || typeof v === "function") && v[REF] !== undefined;
}

function makeStreamRef(id) {
  return { [STREAM]: id, toJSON() { return { $stream: id }; } };
}

// Turns a value built during graph recording into plain JSON data:
// references become {$link}, streams {$stream}; functions are dropped.
function serialize(v, depth) {
  depth = depth || 0;
  if (depth > 64) throw new Error("commonfabric: value nested too deeply");
  if (v === undefined || typeof v === "function" && !isRef(v)) return null;
  if (v === null || typeof v !== "object" && typeof v !== "function") return v;
  if (v[CELL_INPUT] === true || v[HANDLE] === true) return v.toJSON();
  if (v instanceof ReadCell) {
    const l = ReadCell.linkOf(v);
    return l ? { $link: { doc: l.doc, path: l.path } } : serialize(v.get(), depth + 1);
  }
  if (isRef(v)) { const m = v[REF]; return { $link: { doc: m.doc, path: m.path } }; }
  if (v[STREAM] !== undefined) return { $stream: v[STREAM] };
  // A linked input handed on unchanged stays the link (not into the run's
  // own document).
  const from = sourceOf(v);
  if (from !== undefined && from.at.path.length === 0 && from.at.doc !== runId) return { $link: from.link };
  if (Array.isArray(v)) return v.map((x) => serialize(x, depth + 1));
  const out = {};
  for (const k of Object.keys(v)) {
    const s = serialize(v[k], depth + 1);
    if (s !== null || v[k] === null) out[k] = s;
  }
  return out;
}

// ---- graph-building API ------------------------------------------------------

function addNode(kind, fn, args, label) {
  const id = nextId("n");
  serializedHandle = false;
  const stored = serialize(args);
  const index = registerFn(fn);
  if (serializedHandle) HANDLE_FNS.add(index);
  serializedHandle = false;
  builder.nodes.push({ id, kind, fn: index, args: stored, label: label || kind });
  const ref = makeRef(id, []);
  ref[REF].node = true;
  return ref;
}

// A reactive `.map(fn)`: `fn` runs once per element as a sub-pattern, with
// a reference to the element (and its index), inside the node's frame (see
// `__runMap`). Outside a pattern body (a lift's plain array) it is a map.
function mapNode(ref, fn) {
  return addNode("map", fn, [ref], "map");
}

// A `Cell`-typed input: the run gets a cell for it, not its value.
function asCellRef(v) {
  if (!isRef(v)) return v;
  const m = v[REF];
  return { [CELL_INPUT]: true, toJSON() { return { $link: { doc: m.doc, path: m.path, asCell: true } }; }, [REF]: m };
}
const CELL_INPUT = Symbol("commonfabric.cellInput");
export function __asCell(v) {
  return asCellRef(v);
}

// Marks the fields of a lift's input that its argument type says are cells.
function markCells(input, schema) {
  const s = schema && schema.argument;
  if (!s) return input;
  if (cellShape(s, s) === "cell") return asCellRef(input);
  const props = schemaRef(s, s) && schemaRef(s, s).properties;
  if (!props || input === null || typeof input !== "object" || isRef(input) || Array.isArray(input)) return input;
  const out = {};
  for (const k of Object.keys(input)) out[k] = markedAs(input[k], cellShape(props[k], s));
  return out;
}
function markedAs(v, shape) {
  return shape === "cell" ? asCellRef(v) : shape === "items" ? asCellItemsRef(v) : v;
}

// An object schema's properties, those of every branch of a union merged
// (a field typed a cell in the branch that has it).
// The branches of a union or an intersection.
function branches(s) {
  return [].concat(s.anyOf || [], s.oneOf || [], s.allOf || []);
}

function schemaProps(schema, root, depth) {
  const s = schemaRef(schema, root);
  if (!s || typeof s !== "object" || (depth || 0) > 8) return null;
  let out = s.properties ? Object.assign({}, s.properties) : null;
  for (const b of branches(s)) {
    const p = schemaProps(b, root, (depth || 0) + 1);
    if (p) {
      out = out || {};
      for (const k of Object.keys(p)) if (!(k in out) || cellShape(p[k], root)) out[k] = p[k];
    }
  }
  return out;
}

// Whether a value of this schema is or holds cells (at its top or in its
// fields): a handler gets such a value as a cell, so the cells stay cells.
function holdsCells(schema, root) {
  if (cellShape(schema, root) !== null) return true;
  const props = schemaProps(schema, root);
  return props !== null && Object.values(props).some((f) => cellShape(f, root) !== null);
}

// Whether a schema says a cell (`"cell"`), an array of cells (`"items"`), or
// neither (null), looking through `$ref`s and the branches of a union
// (`Writable<T>[] | Default<[]>`).
function cellShape(schema, root, depth) {
  const s = schemaRef(schema, root);
  if (!s || typeof s !== "object" || (depth || 0) > 8) return null;
  if (s.asCell) return "cell";
  const items = s.items && schemaRef(s.items, root);
  if (items && items.asCell) return "items";
  for (const b of branches(s)) {
    const k = cellShape(b, root, (depth || 0) + 1);
    if (k) return k;
  }
  return null;
}

// An array input whose elements are `Cell`-typed (`Writable<T>[]`): the run
// gets the array with a cell for each element.
function asCellItemsRef(v) {
  if (!isRef(v)) return v;
  const m = v[REF];
  return { [CELL_INPUT]: true, toJSON() { return { $link: { doc: m.doc, path: m.path, cellItems: true } }; }, [REF]: m };
}

// The captures the compiler passes to a `lift` written inline in a pattern
// body (`lift(fn, __captures({...}))`): tagged, since a lift's trailing
// arguments may also be its schema.
const CAPTURES = Symbol("commonfabric.captures");
export function __captures(c) {
  return { [CAPTURES]: c };
}

export function lift(...given) {
  const tagged = given.find((x) => x !== null && typeof x === "object" && x[CAPTURES] !== undefined);
  const captures = tagged === undefined ? undefined : tagged[CAPTURES];
  const [a, b, c] = given.filter((x) => x !== tagged);
  // `lift(fn, schema?)` or the reference's `lift(argumentSchema, resultSchema, fn)`.
  const [fn, schema] = typeof a === "function" ? [a, b] : [c, { argument: a, result: b }];
  if (typeof fn !== "function") throw new Error("commonfabric: lift expects a function");
  const applied = (input) => {
    // In a handler, or over plain values while a derivation runs, a lift
    // is a function of its input: apply it (once, in the handler's run).
    if (inHandler()) return fn(input, captures);
    if (inRun() && !hasRefs(input, 0) && !hasRefs(captures, 0)) return fn(input, captures);
    const args = captures === undefined ? [markCells(input, schema)] : [markCells(input, schema), captures];
    const out = addNode("lift", fn, args, fn.name || applied.__label || "lift");
    // The result's type travels with its reference: a derivation capturing
    // a `Writable<T>[]` result gets a cell per element, as in the reference.
    if (schema && schema.result) { out[REF].schema = schema.result; out[REF].root = schema.result; }
    return out;
  };
  applied.__lift = true;
  return applied;
}

// While a derivation runs (not while a pattern body records its graph).
function inRun() {
  return builder === null || builder.frame === true;
}

function hasRefs(v, depth) {
  if (depth > 16 || v === null || (typeof v !== "object" && typeof v !== "function")) return false;
  if (isRef(v)) return true;
  if (Array.isArray(v)) return v.some((x) => hasRefs(x, depth + 1));
  if (Object.getPrototypeOf(v) !== Object.prototype) return false;
  return Object.keys(v).some((k) => hasRefs(v[k], depth + 1));
}

// `ifElse(c, a, b)`: `a` when `c` is truthy, else `b`. `when(c, v)`: `v`
// when `c` is truthy, else `c` (as `&&`). `unless(c, v)`: `c` when truthy,
// else `v` (as `||`). Plain values give plain answers.
export function ifElse(cond, a, b) {
  if (!hasRefs(cond, 0)) return cond ? a : b;
  return addNode("lift", (c, x, y) => (c ? x : y), [cond, a, b], "ifElse");
}
export function when(cond, v) {
  if (!hasRefs(cond, 0)) return cond ? v : cond;
  return addNode("lift", (c, x) => (c ? x : c), [cond, v], "when");
}
export function unless(cond, v) {
  if (!hasRefs(cond, 0)) return cond ? cond : v;
  return addNode("lift", (c, x) => (c ? c : x), [cond, v], "unless");
}

export function derive(input, fn, captures) {
  if (inHandler()) return fn(input, captures);
  if (inRun() && !hasRefs(input, 0) && !hasRefs(captures, 0)) return fn(input, captures);
  return addNode("derive", fn, captures === undefined ? [input] : [input, captures], fn.name || "derive");
}

export function computed(fn, ...rest) {
  // The compiler adds the declared result type as `{__resultSchema}` beside
  // the captures.
  const meta = rest.find(isResultMeta);
  const captures = rest.find((x) => x !== meta);
  if (inHandler()) return fn(captures);
  if (inRun() && !hasRefs(captures, 0)) return fn(captures);
  const given = captures === undefined ? undefined : withArgumentCells(captures);
  const out = addNode("computed", fn, given === undefined ? [] : [given], "computed");
  registerCellTypes(given);
  if (meta) { out[REF].schema = meta.__resultSchema; out[REF].root = meta.__resultSchema; }
  return out;
}

// Captures that are a pattern's whole argument (`computed(() =>
// state.value.get())`): given field by field, each field its argument type
// says is a cell as a cell, as the reference gives `state.value`.
// The schema of a declared result the compiler appends to a call
// (`computed<T>`, `fetchJson<T>`): a key no capture object has.
function isResultMeta(x) {
  return x !== null && typeof x === "object" && !isRef(x) && Object.keys(x).length === 1 &&
    x.__resultSchema !== null && typeof x.__resultSchema === "object";
}

// The last node's captures that are typed cells: their types, by key.
function registerCellTypes(given) {
  if (given === null || typeof given !== "object" || isRef(given)) return;
  const types = { type: "object", properties: {} };
  let any = false;
  for (const k of Object.keys(given)) {
    const v = given[k];
    if (v !== null && typeof v === "object" && v[CELL_INPUT] === true && v[REF] && v[REF].schema) {
      types.properties[k] = { __typed: v[REF].schema, __root: v[REF].root };
      any = true;
    }
  }
  if (any) TYPED_FNS.set(builder.nodes[builder.nodes.length - 1].fn, types);
}

function withArgumentCells(captures) {
  if (captures === null || typeof captures !== "object" || isRef(captures)) return captures;
  const out = {};
  for (const k of Object.keys(captures)) {
    const v = captures[k];
    // A capture handed over as its fields (`{ subject: { title: subject.title } }`):
    // each field by its own type.
    if (v !== null && typeof v === "object" && !isRef(v) && !Array.isArray(v) && v[CELL_INPUT] !== true &&
        v[ARG_SCHEMA] === undefined && Object.getPrototypeOf(v) === Object.prototype && Object.values(v).some(isRef)) {
      const fields = {};
      for (const f of Object.keys(v)) fields[f] = argumentFields(v[f]);
      out[k] = fields;
    } else {
      out[k] = argumentFields(v);
    }
  }
  return out;
}
function argumentFields(v) {
  const root = isRef(v) ? v[REF].root : v !== null && typeof v === "object" ? v[ARG_SCHEMA] : undefined;
  const schema = schemaRef(isRef(v) ? v[REF].schema : root, root);
  if (schema && isRef(v)) {
    const shape = cellShape(schema, root);
    if (shape !== null) return markedAs(v, shape);
  }
  const props = schemaProps(schema, root);
  if (!props || !Object.values(props).some((f) => cellShape(f, root) === "cell")) return v;
  if (isRef(v)) {
    // A reference (a child's result): whole, its cell-typed fields marked.
    const m = v[REF];
    const cellFields = Object.keys(props).filter((k) => cellShape(props[k], root) === "cell");
    return { [CELL_INPUT]: true, toJSON() { return { $link: { doc: m.doc, path: m.path, cellFields } }; }, [REF]: m };
  }
  const out = {};
  for (const k of Object.keys(props)) out[k] = cellShape(props[k], root) === "cell" ? asCellRef(v[k]) : v[k];
  return out;
}
const ARG_SCHEMA = Symbol("commonfabric.argumentSchema");

export function str(strings, ...values) {
  const parts = Array.from(strings);
  const fn = (...vals) => parts.reduce((acc, s, i) => acc + s + (i < vals.length ? fmt(vals[i]) : ""), "");
  if (inRun() && !hasRefs(values, 0)) return fn(...values);
  return addNode("str", fn, values, "str");
}

function fmt(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

export function cell(initial, _schema) {
  if (inHandler()) {
    // A cell a handler makes: a new document, writable in this run.
    const id = nextId("c");
    const v = initial === undefined ? null : clone(serializeValue(initial));
    builder.cells.push({ id, initial: v });
    builder.docs[id] = clone(v);
    return cellView(new Cell(MINT, id, [], builder.docs, builder.writes, builder.sends));
  }
  const id = nextId("c");
  builder.cells.push({ id, initial: initial === undefined ? null : serialize(initial) });
  return makeRef(id, []);
}

function frameCell(initial) {
  const id = nextId("c");
  builder.cells.push({ id, initial: serialize(initial), result: true });
  return makeRef(id, []);
}

export function handler(a, b, c) {
  // `handler(fn, schema?)` or the reference's `handler(eventSchema, contextSchema, fn)`.
  const [fn, schema] = typeof a === "function" ? [a, b] : [c, { event: a, context: b }];
  if (typeof fn !== "function") {
    throw new Error("commonfabric: handler(fn) expects a function");
  }
  checkBuilderContext("handler");
  const context = (schema && schema.context) || null;
  if (schema && schema.event) EVENT_SCHEMAS.set(fn, schema.event);
  const factory = (ctx) => {
    if (inHandler()) return spawnBinding(factory, ctx === undefined ? {} : ctx);
    return bindStream(fn, ctx === undefined ? {} : ctx, context, "handler", factory.__label);
  };
  factory.__handler = true;
  if (evaluatingModules()) pendingHandlers.push(factory);
  return factory;
}

// A handler function's event type: which references its payload holds as
// cells (`Writable<T>` fields) rather than as values.
const EVENT_SCHEMAS = new WeakMap();

// An event's payload as a handler gets it: each reference the host resolved
// (`{$from, $at, value}`) is a cell where the event type says `Writable`,
// else its value (sendable streams in it, compared by where it leads).
function eventArg(v, schema, root, docs, writes, sends, depth) {
  const s = schemaRef(schema, root);
  if ((typeof v === "string" || typeof v === "number") && s && s.asCell) return new ReadCell(MINT, undefined, null);
  if (v === null || typeof v !== "object" || depth > 64) return v;
  if (isFrom(v)) {
    if (s && s.asCell) return cellView(new Cell(MINT, v.$at.doc, v.$at.path || [], docs, writes, sends));
    return withSources(withStreams(v, sends, 0), 0, null);
  }
  // A cell-typed field given data, not a reference: a cell over that data,
  // and over nothing when it is a bare string or number (no document is
  // behind it, as the reference answers).
  if (s && s.asCell && depth > 0 && !Array.isArray(v) && v.$stream === undefined) {
    return new ReadCell(MINT, withStreams(v, sends, 0), null);
  }
  if (Array.isArray(v)) return v.map((x) => eventArg(x, s && s.items, root, docs, writes, sends, depth + 1));
  if (v.$stream !== undefined) return withStreams(v, sends, 0);
  const props = s && s.properties;
  const out = {};
  for (const k of Object.keys(v)) out[k] = eventArg(v[k], props && props[k], root, docs, writes, sends, depth + 1);
  return out;
}
function schemaRef(s, root) {
  for (let i = 0; s && typeof s.$ref === "string" && i < 16; i++) {
    const m = /^#\/\$defs\/(.+)$/.exec(s.$ref);
    s = m && root && root.$defs ? root.$defs[m[1]] : undefined;
  }
  return s;
}

export function action(fn, ...rest) {
  // The compiler adds the event type as `{actionEvent}` beside the captures.
  const isMeta = (x) => x !== null && typeof x === "object" && !isRef(x) &&
    Object.keys(x).length === 1 && x.actionEvent !== null && typeof x.actionEvent === "object" && !isRef(x.actionEvent);
  const meta = rest.find(isMeta);
  const captures = rest.find((x) => x !== meta);
  if (meta) EVENT_SCHEMAS.set(fn, meta.actionEvent);
  const caps = captures || {};
  const props = {};
  for (const k of Object.keys(caps)) {
    // A derived value (a computed's, a lift's) is given as its value, as the
    // reference gives a capture typed as what it holds; unless the action
    // uses it as a cell (the compiler marks those) or its type says cell.
    const v = caps[k];
    const derived = isRef(v) && v[CELL_INPUT] !== true && v[REF].node === true && v[REF].path.length === 0 &&
      !holdsCells(v[REF].schema, v[REF].root);
    if (!derived) props[k] = { asCell: true };
  }
  return bindStream(fn, caps, { type: "object", properties: props }, "action");
}

// An event handler written inline in JSX (the compiler's rewrite of
// `onClick={() => ...}`): an action whose captures named in `cellKeys` are
// cells and the rest values.
export function __inlineAction(fn, captures, cellKeys) {
  const caps = captures || {};
  const props = {};
  for (const k of cellKeys || []) props[k] = { asCell: true };
  return bindStream(fn, caps, { type: "object", properties: props }, "action");
}

function bindStream(fn, ctx, contextSchema, kind, label) {
  const id = nextId("s");
  const index = registerFn(fn);
  if (contextSchema) TYPED_FNS.set(index, contextSchema);
  const def = { id, kind, fn: index, context: serialize(ctx), schema: contextSchema };
  if (typeof label === "string") def.label = label;
  builder.streams.push(def);
  return makeStreamRef(id);
}

// The declared types of what a function is handed (a handler's context, a
// derivation's captures), by function: a cell it gets hands out the cells
// its type names inside its value (`entry.piece.get()`), as the
// reference's schema-driven reads do.
const TYPED_FNS = new Map();

export function pattern(a, b, c) {
  let name = null, fn, schema;
  if (typeof a === "string") { name = a; fn = b; schema = c; } else { fn = a; schema = b; }
  if (typeof fn !== "function") throw new Error("commonfabric: pattern(fn) expects a function");
  checkBuilderContext("pattern");
  const p = (arg) => instantiateInline(p, arg);
  p.__pattern = { fn, schema: schema || {}, name };
  // Frozen: a piece cannot change a pattern another piece instantiates.
  harden(p);
  if (evaluatingModules()) pendingPatterns.push(p);
  return p;
}
export const recipe = pattern;

// A pattern called inside another pattern's body: its graph joins the
// caller's piece under its own id prefix, and its argument fields alias the
// references passed in (plain values and defaults become local cells).
function instantiateInline(p, arg) {
  if (!currentBuilder()) throw new Error("commonfabric: a pattern can only be called inside a pattern body");
  if (builder.handler) return spawn(p, arg);
  const saved = builder.prefix;
  builder.prefix = saved + "p" + builder.counter++ + "/";
  try {
    const props = (p.__pattern.schema.argument && p.__pattern.schema.argument.properties) || {};
    const given = arg || {};
    const fields = {};
    let selfId = null;
    const argProxy = new Proxy({}, {
      get(_t, k) {
        if (k === ARG_SCHEMA) return p.__pattern.schema.argument;
        // `[SELF]`: the instance's own result (its id taken when first
        // asked for, so patterns that never ask keep their ids).
        if (k === SELF) {
          if (selfId === null) selfId = nextId("r");
          return makeRef(selfId, [], p.__pattern.schema.result);
        }
        if (typeof k === "symbol") return undefined;
        if (!(k in fields)) {
          let v = given[k];
          // A reference passed in takes the type the child's argument gives
          // the field (a `Writable<T>` there makes it a cell to the child).
          if (isRef(v) || (v && v[STREAM] !== undefined)) fields[k] = v;
          else {
            if (v === undefined && props[k] && "default" in props[k]) v = props[k].default;
            // In a frame (a derivation's run), the values come from the
            // run's inputs: the child's cells follow them on each run.
            fields[k] = builder.frame ? frameCell(v === undefined ? null : v) : cell(v === undefined ? null : v);
          }
          const f = fields[k];
          if (isRef(f) && props[k] && !f[CELL_INPUT]) fields[k] = makeRef(f[REF].doc, f[REF].path, props[k], p.__pattern.schema.argument);
        }
        return fields[k];
      },
      // The whole argument passed on (`roll(state)`): its fields, as named by
      // the schema or given.
      ownKeys() {
        return [...new Set([...Object.keys(props), ...Object.keys(given)])];
      },
      getOwnPropertyDescriptor(_t, k) {
        if (typeof k === "symbol" || !(k in props || k in given)) return undefined;
        return { value: this.get(_t, k), enumerable: true, configurable: true, writable: false };
      },
    });
    const result = p.__pattern.fn(argProxy);
    if (result !== null && typeof result === "object" && !isRef(result) && SCHEDULE in result) {
      // Only a piece's own result is indexed: an inner instance's schedule
      // would be stored and never fire.
      throw new Error("commonfabric: pattern " + (p.__pattern.name || "(unnamed)") +
        " declares [SCHEDULE] and cannot be instantiated inside another pattern; " +
        "deploy it as a piece of its own, or declare the schedule on the outer pattern");
    }
    // The caller gets a reference to the child's result, as in the
    // reference: usable as a value, with `.key()`, in JSX.
    const id = selfId === null ? nextId("r") : selfId;
    builder.cells.push({ id, initial: serialize(result), result: true });
    // The result's type travels with the reference: a derivation capturing
    // the child gets its `Writable<T>` fields as cells.
    return makeRef(id, [], p.__pattern.schema.result);
  } finally {
    builder.prefix = saved;
  }
}

// A pattern called by a handler becomes a piece of its own (its state must
// outlive the run), created by the host when the handler's writes apply.
function spawn(p, arg) {
  const info = patternInfo.get(p);
  if (!info) throw new Error("commonfabric: this pattern is not part of a loaded program");
  const id = builder.pieceId + "-" + builder.counter++;
  builder.spawns.push({ id, program: info.hash, export: "#" + info.ordinal, argument: serializeValue(arg === undefined ? {} : arg) });
  return makeRef(id, []);
}

// A handler bound by a handler: a piece whose body binds it to the given
// context (its argument, field by field), so the binding outlives the run.
function spawnBinding(factory, ctx) {
  const info = handlerInfo.get(factory);
  if (!info) {
    throw new Error("commonfabric: a handler can bind only handlers declared at a module's top level");
  }
  const keys = Object.keys(ctx);
  if (keys.some((k) => k.includes(",") || k.includes(":"))) {
    throw new Error("commonfabric: a context bound by a handler needs plain field names");
  }
  const b = currentBuilder();
  const id = b.pieceId + "-" + b.counter++;
  const argument = {};
  for (const k of keys) argument[k] = contextValue(ctx[k]);
  b.spawns.push({ id, program: info.hash, export: "h#" + info.ordinal + ":" + keys.join(","), argument });
  return makeRef(id, []);
}

// A context field as stored: cells and streams by reference, values as data.
function contextValue(v) {
  if (v instanceof Cell) return { $link: Cell.linkOf(v) };
  return serializeValue(v);
}

// ---- JSX ----------------------------------------------------------------------

export function h(tag, props, ...children) {
  const kids = flatten(children);
  if (typeof tag === "function" && !isRef(tag)) {
    return tag(Object.assign({}, props || {}, { children: kids }));
  }
  return { type: "vnode", name: tag, props: props || {}, children: kids };
}
h.fragment = "fragment";

function flatten(children) {
  const out = [];
  for (const c of children) {
    if (Array.isArray(c)) out.push(...flatten(c));
    else if (c !== undefined && c !== null && c !== false && c !== true) out.push(c);
  }
  return out;
}

// ---- host entry points (called by the Rust runtime) ------------------------------

export function __beginProgram(origin, space) {
  if (typeof origin === "string") patternOrigin = origin;
  if (typeof space === "string") spaceName = space;
  loading = true;
  pendingPatterns = [];
  pendingHandlers = [];
}

export function __registerProgram(hash, ns) {
  loading = false;
  const k = instanceCount.get(hash) || 0;
  instanceCount.set(hash, k + 1);
  const key = hash + "/" + k;
  programs.set(key, ns);
  programPatterns.set(key, pendingPatterns);
  pendingPatterns.forEach((p, ordinal) => patternInfo.set(p, { hash, ordinal }));
  pendingPatterns = [];
  programHandlers.set(key, pendingHandlers);
  pendingHandlers.forEach((h, ordinal) => handlerInfo.set(h, { hash, ordinal }));
  pendingHandlers = [];
}

// Records the graph of one piece. Deterministic: the same pattern and piece id
// give the same node, stream and cell ids, so a re-activated space rebuilds
// its graph without rewriting anything.
// A piece's argument, whose `[SELF]` is the piece's own result.
function withSelf(argument, pieceId, p) {
  return new Proxy(argument, {
    get(t, k) {
      return k === SELF ? makeRef(pieceId, [], p.__pattern.schema.result) : t[k];
    },
  });
}

export function __instantiate(instance, exportName, pieceId) {
  const ns = programs.get(instance);
  if (!ns) throw new Error("commonfabric: program instance " + instance + " is not loaded");
  const name = exportName || "default";
  if (name.startsWith("h#")) return instantiateBinding(instance, name, pieceId);
  const p = name.startsWith("#") ? (programPatterns.get(instance) || [])[Number(name.slice(1))] : ns[name];
  if (typeof p !== "function" || !p.__pattern) {
    throw new Error("commonfabric: export '" + (exportName || "default") + "' is not a pattern");
  }
  builder = { pieceId, prefix: "", counter: 0, nodes: [], streams: [], cells: [] };
  try {
    const argument = withSelf(makeRef(pieceId + "/argument", [], p.__pattern.schema.argument), pieceId, p);
    const result = p.__pattern.fn(argument);
    return {
      name: p.__pattern.name,
      argumentSchema: p.__pattern.schema.argument || null,
      result: serialize(result),
      nodes: builder.nodes,
      streams: builder.streams,
      cells: builder.cells,
    };
  } finally {
    builder = null;
  }
}

// `h#K:a,b`: the piece a handler made by binding handler K to fields a, b.
function instantiateBinding(instance, name, pieceId) {
  const [ordinal, fields] = name.slice(2).split(":");
  const factory = (programHandlers.get(instance) || [])[Number(ordinal)];
  if (typeof factory !== "function") throw new Error("commonfabric: handler " + name + " is not in program " + instance);
  builder = { pieceId, prefix: "", counter: 0, nodes: [], streams: [], cells: [] };
  try {
    const ctx = {};
    for (const k of fields ? fields.split(",") : []) ctx[k] = makeRef(pieceId + "/argument", [k]);
    const stream = factory(ctx);
    return { name: null, argumentSchema: null, result: serialize(stream), nodes: builder.nodes,
      streams: builder.streams, cells: builder.cells };
  } finally {
    builder = null;
  }
}

// A derivation runs inside a frame: whatever it builds (nodes, bound
// handlers, cells, inner patterns) joins the graph under the node's id, as
// the reference runs a frame's builders as a pattern.
export function __runNode(fnIndex, args, nodeId, hasCells) {
  let given = hasCells ? withSources(args.map(withCells), 0, null) : args;
  if (HANDLE_FNS.has(fnIndex)) given = withHandles(given, 0);
  const typed = TYPED_FNS.get(fnIndex);
  if (typed && hasCells && given[0] !== null && typeof given[0] === "object") {
    for (const k of Object.keys(typed.properties)) {
      const c = given[0][k];
      if (c instanceof ReadCell) given[0][k] = ReadCell.typed(c, typed.properties[k].__typed, typed.properties[k].__root);
    }
  }
  const savedBuilder = builder, savedKind = runKind, savedId = runId;
  builder = null;
  runKind = "node";
  runId = nodeId;
  try {
    const v = fns[fnIndex](...given);
    const value = v === undefined ? null : serialize(v);
    return builder === null ? { value, built: null } : frameResult(builder, value);
  } finally {
    builder = savedBuilder;
    runKind = savedKind;
    runId = savedId;
  }
}

// One sub-pattern per element: element `i` is a reference to it.
export function __runMap(fnIndex, nodeId, link, n, values) {
  const savedBuilder = builder, savedKind = runKind, savedId = runId;
  const f = newFrame(nodeId);
  builder = f;
  runKind = "node";
  runId = nodeId;
  try {
    const out = [];
    for (let i = 0; i < n; i++) {
      f.prefix = i + "/";
      f.counter = 0;
      const element = link ? makeRef(link.doc, link.path.concat([i])) : withSources(values[i], 0, null);
      const v = fns[fnIndex](element, i);
      out.push(v === undefined ? null : serialize(v));
    }
    return frameResult(f, out);
  } finally {
    builder = savedBuilder;
    runKind = savedKind;
    runId = savedId;
  }
}

// What a run returns to the host: its value, and what it built (`null`
// when it built and wrote nothing, the common case). Always this shape, so
// the host learns what a run built from the run itself: no value a pattern
// returns can pose as a frame.
function frameResult(f, value) {
  if (f.nodes.length === 0 && f.streams.length === 0 && f.cells.length === 0 && f.writes.length === 0) {
    return { value, built: null };
  }
  return { value, built: { nodes: f.nodes, streams: f.streams, cells: f.cells, writes: f.writes } };
}

// `{$cell, value}` (a Cell-typed input) becomes a read-only cell.
function withCells(v) {
  if (v === null || typeof v !== "object") return v;
  if (Array.isArray(v)) return v.map(withCells);
  if (v.$cell !== undefined && Object.keys(v).length === 2 && "value" in v) {
    return new ReadCell(MINT, v.value, v.$cell);
  }
  const out = {};
  for (const k of Object.keys(v)) out[k] = withCells(v[k]);
  return out;
}

// `ctx` describes each context field: {value} for a plain value, or
// {cell: {doc, path}} / {stream: id}. `docs` holds the current value of every
// document a cell refers to. Returns the writes and sends, applied by the host
// only if the handler returns normally.
export function __runHandler(fnIndex, event, ctx, docs, shape, frameId) {
  const writes = [];
  const sends = [];
  const local = JSON.parse(JSON.stringify(docs || {}));
  const arg = buildContext(ctx, local, writes, sends, shape, TYPED_FNS.get(fnIndex) || null)
  const eventSchema = EVENT_SCHEMAS.get(fns[fnIndex]);
  event = eventArg(event, eventSchema, eventSchema, local, writes, sends, 0);
  // The handler's frame (made on first use): patterns it calls become
  // pieces, cells it makes are new documents.
  const savedBuilder = builder, savedKind = runKind, savedId = runId, savedIo = runIo;
  builder = null;
  runKind = "handler";
  runId = frameId;
  runIo = { docs: local, writes, sends };
  let ran, frame;
  try {
    ran = fns[fnIndex](event, arg);
  } finally {
    frame = builder;
    builder = savedBuilder;
    runKind = savedKind;
    runId = savedId;
    runIo = savedIo;
  }
  if (frame !== null && (frame.nodes.length > 0 || frame.streams.length > 0)) {
    throw new Error("commonfabric: a handler cannot create derivations itself; " +
      "call a pattern that does, and it becomes a piece of its own");
  }
  const async = ran !== null && (typeof ran === "object" || typeof ran === "function") &&
    typeof ran.then === "function";
  if (frame === null && !async) return { writes, sends };
  const done = () => {
    const out = { writes, sends };
    if (frame !== null && frame.spawns.length > 0) out.spawns = frame.spawns;
    if (frame !== null && frame.cells.length > 0) out.cells = frame.cells;
    return out;
  };
  // An async handler: its writes (before and after each await) apply when
  // it settles; there is nothing to wait for but its own promises.
  return async ? Promise.resolve(ran).then(done) : done();
}

function buildContext(ctx, docs, writes, sends, shape, schema) {
  if (shape === "value") return ctx.value;
  const out = {};
  for (const k of Object.keys(ctx || {})) {
    const f = ctx[k];
    const typed = f.cell && schema ? childSchema(schema, schema, k) : null;
    if (f.cell) out[k] = cellView(new Cell(MINT, f.cell.doc, f.cell.path, docs, writes, sends, typed, typed && schema));
    else if (f.stream) out[k] = new Stream(MINT, f.stream, sends);
    else out[k] = withSources(withStreams(f.value, sends, 0), 0, null);
  }
  return out;
}

// A value given to a handler, with the streams in it made sendable (a
// child piece's result passed whole: `suite.trigger.send()`).
function withStreams(v, sends, depth) {
  if (v === null || typeof v !== "object" || depth > 64) return v;
  if (Array.isArray(v)) return v.map((x) => withStreams(x, sends, depth + 1));
  const keys = Object.keys(v);
  if (keys.length === 1 && keys[0] === "$stream" && typeof v.$stream === "string") {
    return new Stream(MINT, v.$stream, sends);
  }
  for (const k of keys) v[k] = withStreams(v[k], sends, depth + 1);
  return v;
}

// Between an array's document and the documents of its keyed elements
// (`Cell.elementById`); the host's capability check reads the same form.
const ELEMENT_MARK = "/#el/";
function encodeSegment(s) {
  return encodeURIComponent(String(s)).replace(/~/g, "%7E");
}

// `v` (read from the cell at `loc`, `{doc, path}`) with each part below the
// top that its type says is a cell made one by `make(value, loc, schema)`.
// `addressed`: locations by the path from the cell (a handler's cells: a
// write through them follows the links on the way, within what the handler
// was given), else where each part was read from.
function typedCells(v, schema, root, loc, depth, make, addressed) {
  if (depth > 32 || !schema || v === undefined) return v;
  const t = !addressed && v !== null && typeof v === "object" ? targetOf(v) : undefined;
  if (depth > 0 && cellShape(schema, root) === "cell") return make(v, t !== undefined ? t : loc, schema);
  if (v === null || typeof v !== "object") return v;
  const base = t !== undefined ? t : loc;
  const child = (k) => base && { doc: base.doc, path: base.path.map(String).concat([String(k)]) };
  if (Array.isArray(v)) {
    const s = schemaRef(schema, root);
    const arrays = s ? [s].concat(branches(s).map((b) => schemaRef(b, root))) : [];
    const items = (arrays.find((b) => b && b.items) || {}).items;
    if (!items) return v;
    for (let i = 0; i < v.length; i++) v[i] = typedCells(v[i], items, root, child(i), depth + 1, make, addressed);
    return v;
  }
  const props = schemaProps(schema, root);
  if (!props) return v;
  for (const k of Object.keys(props)) {
    if (k in v) v[k] = typedCells(v[k], props[k], root, child(k), depth + 1, make, addressed);
  }
  return v;
}

// A value read in a handler, with the links to element documents the run
// holds replaced by their values, each remembered with its link (as the
// host's `{$from, $at, value}`), so it is that element wherever it goes.
function withElements(v, docs, depth) {
  if (v === null || typeof v !== "object" || depth > 32) return v;
  if (Array.isArray(v)) return v.map((x) => withElements(x, docs, depth + 1));
  const l = v.$link;
  if (l && typeof l.doc === "string" && l.doc.includes(ELEMENT_MARK) && docs[l.doc] !== undefined) {
    const at = resolveIn(docs, l.doc, (l.path || []).map(String));
    const value = withElements(clone(getAt(docs[l.doc], l.path || [])), docs, depth + 1);
    return { $from: { doc: l.doc, path: l.path || [] }, $at: at, value };
  }
  for (const k of Object.keys(v)) v[k] = withElements(v[k], docs, depth + 1);
  return v;
}

// ---- elements as entities -----------------------------------------------------
//
// As in the reference, a plain object a handler writes into an array becomes
// a document of its own (an *element*), the array holding a link to it: a
// cell set to it (`held.set(items.get()[0])`) then follows that element
// wherever the list moves it, and `equals` finds it by identity. Its id names
// the array it was written into (where the write addressed it, so the
// capability check of keyed elements covers it) and the run that made it:
// `ARRAYDOC/#el/SEG…/~@FRAME.N`, N counting the run's elements, so a replay
// of the event makes the same ids. Not anchored: what is already a link, a
// cell or a stream; an element read from a list and written back unchanged
// (it stays where and what it was); rendered trees (`{type: "vnode"}`).

// The anchoring context of one handler run (null elsewhere).
function anchorContext(docs, writes) {
  if (runKind !== "handler" || typeof runId !== "string" || runIo === null) return null;
  // One count for the whole run: every write of it names its elements apart.
  if (runIo.anchored === undefined) runIo.anchored = { n: 0 };
  return { seed: runId, count: runIo.anchored, docs, writes, seen: new Map() };
}
function isLinkJson(v) {
  const keys = Object.keys(v);
  return keys.length >= 1 && (v.$link !== undefined || v.$stream !== undefined || v.$cell !== undefined || v.$alias !== undefined) &&
    keys.every((k) => k.startsWith("$"));
}
function anchorable(v) {
  if (Array.isArray(v) || v instanceof Cell || v instanceof ReadCell || v instanceof Stream || isRef(v)) return false;
  const proto = Object.getPrototypeOf(v);
  if (proto !== Object.prototype && proto !== null) return false;
  return !isFrom(v) && !isLinkJson(v) && v.type !== "vnode";
}
// An element read from a list (inline, not an element of its own) and
// unchanged since: written back, it stays inline.
function keptInline(v, docs) {
  const s = SOURCES.get(v);
  if (s === undefined || s.link !== null || s.loc === null) return false;
  const at = pathOfLoc(s.loc);
  const stored = getAt(docs[at.doc], at.path);
  return stored !== undefined && JSON.stringify(stored) === JSON.stringify(serializeValue(v));
}
// `v`, an element of the array at `arr` ({doc, path}), made a document of
// its own; returns the link the array holds.
function anchorElement(v, at, arr, cx) {
  const known = cx.seen.get(v);
  if (known !== undefined) return { $link: known };
  const doc = arr.doc + ELEMENT_MARK + arr.path.map((seg) => encodeSegment(seg) + "/").join("") +
    "~@" + cx.seed + "." + cx.count.n++;
  const link = { doc, path: [] };
  cx.seen.set(v, link);
  const value = serializeFields(v, at, cx, { doc, path: [] });
  setAt(cx.docs, doc, [], clone(value));
  cx.writes.push({ doc, path: [], value: clone(value) });
  return { $link: link };
}

function getAt(v, path) {
  let cur = unwrapFrom(v);
  for (const seg of path) {
    if (cur === null || cur === undefined || typeof cur !== "object") return undefined;
    cur = unwrapFrom(cur[seg]);
  }
  return cur;
}

function setAt(docs, doc, path, value) {
  if (path.length === 0) { docs[doc] = value; return; }
  if (docs[doc] === null || typeof docs[doc] !== "object") docs[doc] = {};
  let cur = unwrapFrom(docs[doc]);
  for (let i = 0; i < path.length - 1; i++) {
    const seg = path[i];
    if (cur[seg] === null || typeof cur[seg] !== "object") cur[seg] = {};
    cur = unwrapFrom(cur[seg]);
  }
  cur[path[path.length - 1]] = value;
}

// A linked value in a handler's documents comes as `{$from, $at, value}`:
// the link as stored and where it leads (the host follows it). Pattern code
// gets the value, remembered with both and with its JSON as read: written
// back unchanged it is stored as the link again, as the reference's query
// results are. Every object or array read out of a cell is also remembered
// with where it lives (`loc`: a base location and the keys under it, made
// into a path only when asked), so `equals` and `remove` compare what was
// read by where it lives and a fresh object equals none of it, as in the
// reference.
const SOURCES = new WeakMap();
function isFrom(v) {
  return v !== null && typeof v === "object" && v.$from !== undefined && v.$at !== undefined &&
    "value" in v && !Array.isArray(v) && Object.keys(v).length === 3;
}
function unwrapFrom(v) {
  return isFrom(v) ? v.value : v;
}
// `loc`: where `v` lives (`{base: {doc, path}}` or `{parent, key}`), or
// null when unknown.
function withSources(v, depth, loc) {
  if (v === null || typeof v !== "object" || depth > 64) return v;
  if (isFrom(v)) {
    const at = linkOfJson(v.$at);
    const inner = withSources(v.value, depth + 1, { base: at });
    if (inner !== null && typeof inner === "object") {
      SOURCES.set(inner, { link: linkOfJson(v.$from), loc: { base: at }, json: JSON.stringify(inner) });
    }
    return inner;
  }
  if (v instanceof Cell || v instanceof ReadCell || v instanceof Stream) return v;
  if (loc && !SOURCES.has(v)) SOURCES.set(v, { link: null, loc, json: null });
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) v[i] = withSources(v[i], depth + 1, loc && { parent: loc, key: String(i) });
    return v;
  }
  for (const k of Object.keys(v)) v[k] = withSources(v[k], depth + 1, loc && { parent: loc, key: k });
  return v;
}
function pathOfLoc(loc) {
  const keys = [];
  let l = loc;
  while (l.parent) { keys.push(l.key); l = l.parent; }
  return { doc: l.base.doc, path: l.base.path.map(String).concat(keys.reverse()) };
}
function linkOfJson(l) {
  return { doc: l.doc, path: l.path || [] };
}
// Where a value read in a handler came from, if it is a linked value unchanged.
function sourceOf(v) {
  const s = v !== null && typeof v === "object" ? SOURCES.get(v) : undefined;
  return s !== undefined && s.link !== null && JSON.stringify(v) === s.json
    ? { link: s.link, at: pathOfLoc(s.loc) }
    : undefined;
}
// Where `doc` at `path` leads in a run's documents: through the links the
// host followed (`$at`) and those it kept (keyed elements).
function resolveIn(docs, doc, path) {
  const l = locate(docs, doc, path);
  return { doc: l.doc, path: l.path };
}
// The same walk, with the value found there (`undefined` when the walk
// leaves the run's documents).
function locate(docs, doc, path) {
  let cur = docs[doc], at = { doc, path: [] }, rest = path.map(String);
  for (let steps = 0; steps < 4096; steps++) {
    if (isFrom(cur)) {
      at = { doc: cur.$at.doc, path: (cur.$at.path || []).map(String) };
      cur = cur.value;
    } else if (cur !== null && typeof cur === "object" && cur.$link && typeof cur.$link.doc === "string" &&
      Object.keys(cur).length === 1 && docs[cur.$link.doc] !== undefined) {
      const l = cur.$link;
      rest = (l.path || []).map(String).concat(rest);
      at = { doc: l.doc, path: [] };
      cur = docs[l.doc];
    } else if (rest.length === 0) {
      break;
    } else if (cur === null || typeof cur !== "object") {
      return { doc: at.doc, path: at.path.concat(rest), value: undefined };
    } else {
      cur = cur[rest[0]];
      at = { doc: at.doc, path: at.path.concat([rest[0]]) };
      rest = rest.slice(1);
    }
  }
  return { doc: at.doc, path: at.path, value: cur };
}
// The link stored at `doc`/`path` in a run's documents (the slot itself
// holds a reference), or undefined when a value is stored there.
function storedLinkIn(docs, doc, path) {
  if (path.length === 0) return undefined;
  const parent = locate(docs, doc, path.slice(0, -1)).value;
  if (parent === null || typeof parent !== "object") return undefined;
  const cur = parent[String(path[path.length - 1])];
  if (isFrom(cur)) return linkOfJson(cur.$from);
  if (cur !== null && typeof cur === "object" && cur.$link && Object.keys(cur).length === 1) return linkOfJson(cur.$link);
  return undefined;
}
// What `v` refers to, resolved, if it is a cell or a reference: for
// `equals`, which compares references by where they lead.
function targetOf(v) {
  if (v === null || typeof v !== "object") return undefined;
  if (v instanceof Cell) return Cell.resolved(v);
  if (v instanceof ReadCell) { const l = ReadCell.linkOf(v); return l ? { doc: l.doc, path: l.path.map(String) } : undefined; }
  if (isRef(v)) return { doc: v[REF].doc, path: v[REF].path.map(String) };
  if (isFrom(v)) return { doc: v.$at.doc, path: (v.$at.path || []).map(String) };
  const s = SOURCES.get(v);
  if (s !== undefined) return pathOfLoc(s.loc);
  if (v.$link && typeof v.$link.doc === "string" && Object.keys(v).length === 1) {
    const docs = runIo ? runIo.docs : {};
    return resolveIn(docs, v.$link.doc, (v.$link.path || []).map(String));
  }
  return undefined;
}
function sameTarget(a, b) {
  return a.doc === b.doc && a.path.length === b.path.length && a.path.every((s, i) => s === b.path[i]);
}
function overlaps(target, at) {
  if (at === undefined || target.doc !== at.doc) return false;
  const [a, b] = target.path.length <= at.path.length ? [target.path, at.path] : [at.path, target.path];
  return a.every((seg, i) => String(seg) === String(b[i]));
}

function clone(v) {
  return v === undefined ? undefined : JSON.parse(JSON.stringify(v));
}

// A cell handed to a handler. Opaque: its target and the run's output live
// in private fields no pattern code can read or set, and only this module
// can construct one (the host checks every write and send anyway).
const MINT = Symbol("commonfabric.mint");

class Cell {
  #doc; #path; #docs; #writes; #sends; #schema; #root;
  constructor(mint, doc, path, docs, writes, sends, schema, root) {
    if (mint !== MINT) throw new TypeError("commonfabric: cells are given, not made");
    this.#doc = doc; this.#path = path; this.#docs = docs; this.#writes = writes; this.#sends = sends;
    this.#schema = schema || null; this.#root = root || schema || null;
    Object.freeze(this);
  }
  // Streams in the value are sendable (a button's `onClick` in a piece's UI).
  get() {
    const v = withElements(clone(locate(this.#docs, this.#doc, this.#path).value), this.#docs, 0);
    const here = Cell.resolved(this);
    // An element's whole value is that element (handed on, it is its link).
    const read = here.path.length === 0 && here.doc.includes(ELEMENT_MARK) && v !== null && typeof v === "object"
      ? withSources({ $from: here, $at: here, value: withStreams(v, this.#sends, 0) }, 0, null)
      : withSources(withStreams(v, this.#sends, 0), 0, { base: here });
    if (!this.#schema) return read;
    const [docs, writes, sends, root] = [this.#docs, this.#writes, this.#sends, this.#root];
    const from = { doc: this.#doc, path: this.#path.map(String) };
    return typedCells(read, this.#schema, root, from, 0,
      (_value, at, sub) => cellView(new Cell(MINT, at.doc, at.path, docs, writes, sends, sub, root)), true);
  }
  set(value) {
    const at = { doc: this.#doc, path: this.#path };
    const cx = anchorContext(this.#docs, this.#writes);
    const v = value === undefined ? null : clone(serializeValue(value, at, cx, { doc: at.doc, path: at.path.map(String) }, false));
    this.#write(v);
    return this;
  }
  #write(v) {
    setAt(this.#docs, this.#doc, this.#path, v);
    this.#writes.push({ doc: this.#doc, path: this.#path, value: clone(v) });
  }
  update(partial) {
    for (const k of Object.keys(partial || {})) this.key(k).set(partial[k]);
  }
  push(...items) {
    // Only the length is needed: no copy of the list (n pushes stay linear).
    const cur = getAt(this.#docs[this.#doc], this.#path);
    if (!Array.isArray(cur)) {
      this.set(items);
      return;
    }
    // Appends: the elements already there (links to children among them)
    // are not rewritten.
    let n = cur.length;
    const cx = anchorContext(this.#docs, this.#writes);
    for (const item of items) {
      const path = this.#path.concat([n++]);
      const v = clone(serializeValue(item, { doc: this.#doc, path }, cx, { doc: this.#doc, path: path.map(String) }, true));
      setAt(this.#docs, this.#doc, path, v);
      this.#writes.push({ doc: this.#doc, path, value: clone(v) });
    }
  }
  remove(item) {
    const cur = getAt(this.#docs[this.#doc], this.#path);
    if (!Array.isArray(cur)) return;
    const target = targetOf(item);
    if (target !== undefined) {
      // A reference: the first element that is it, or that leads where it
      // does, as in the reference.
      const here = Cell.resolved(this);
      const at = cur.findIndex((x, i) => {
        const t = targetOf(x) || { doc: here.doc, path: here.path.concat([String(i)]) };
        return sameTarget(t, target);
      });
      // Only takes out: what stays is written as it was (nothing anchored).
      if (at !== -1) this.#write(clone(serializeValue(cur.filter((_, i) => i !== at), { doc: this.#doc, path: this.#path })));
      return;
    }
    const s = JSON.stringify(serializeValue(item));
    this.#write(clone(serializeValue(cur.filter((x) => JSON.stringify(serializeValue(x)) !== s), { doc: this.#doc, path: this.#path })));
  }
  key(...ks) {
    let sub = this.#schema;
    for (const k of ks.map(String)) sub = sub && childSchema(sub, this.#root, k);
    return cellView(new Cell(MINT, this.#doc, this.#path.concat(ks.map(String)), this.#docs, this.#writes, this.#sends, sub, this.#root));
  }
  // The reference's keyed element of an array: a document of its own, named
  // after the array (its document and path) and the key, so the same key
  // always names the same element. An array holds it by link (`addUnique`),
  // and `removeByValue` of it takes the link out.
  elementById(idKey) {
    const doc = this.#doc + ELEMENT_MARK + this.#path.map((s) => encodeSegment(s) + "/").join("") +
      "~" + encodeSegment(idKey);
    return cellView(new Cell(MINT, doc, [], this.#docs, this.#writes, this.#sends));
  }
  send(event) {
    this.#sends.push({ cell: { doc: this.#doc, path: this.#path }, payload: serializeValue(event) });
  }
  // Same target: another cell, or a link read out of a document (an entry of
  // a list of pieces).
  equals(other) {
    const o = targetOf(other);
    return o !== undefined && sameTarget(o, Cell.resolved(this));
  }
  // Where this cell leads in the run's documents.
  static resolved(c) {
    const t = CELL_VIEWS.get(c) || c;
    return resolveIn(t.#docs, t.#doc, t.#path.map(String));
  }
  // The reference's mergeable writes, as plain read-modify-writes of this
  // run (a handler's writes apply together).
  increment(by) {
    const cur = this.get();
    this.set((typeof cur === "number" ? cur : 0) + (by === undefined ? 1 : by));
  }
  // A cell or reference is there when an element leads where it does (as in
  // the reference, both sides resolved); a plain value when one is equal.
  addUnique(...items) {
    for (const item of items) {
      const cur = getAt(this.#docs[this.#doc], this.#path);
      const list = Array.isArray(cur) ? cur : [];
      const target = item instanceof Cell || item instanceof ReadCell || isRef(item) || isFrom(item) ? targetOf(item) : undefined;
      let known;
      if (target !== undefined) {
        const here = Cell.resolved(this);
        known = list.some((x, i) => sameTarget(targetOf(x) || { doc: here.doc, path: here.path.concat([String(i)]) }, target));
      } else {
        const s = JSON.stringify(serializeValue(item));
        known = list.some((x) => JSON.stringify(serializeValue(x)) === s);
      }
      if (!known) this.push(item);
    }
  }
  removeByValue(item) {
    this.remove(item);
  }
  // The value here, uncopied (for the view's property reads).
  static peek(c) {
    const t = CELL_VIEWS.get(c) || c;
    return locate(t.#docs, t.#doc, t.#path).value;
  }
  for() { return this; }
  asSchema() { return this; }
  // The cell where this one leads, links followed.
  resolveAsCell() {
    const r = Cell.resolved(this);
    return cellView(new Cell(MINT, r.doc, r.path, this.#docs, this.#writes, this.#sends));
  }
  getAsNormalizedFullLink() {
    return normalizedLink(this.#doc, this.#path);
  }
  get sourceURI() {
    return entityUri(this.#doc);
  }
  static linkOf(c) {
    const t = CELL_VIEWS.get(c) || c;
    return { doc: t.#doc, path: t.#path };
  }
  static storedLink(c) {
    const t = CELL_VIEWS.get(c) || c;
    return storedLinkIn(t.#docs, t.#doc, t.#path);
  }
}

// What pattern code holds of a handler's cell: the cell, whose other
// properties read into it as in the reference (`counter.increment.send()`,
// `state.count + 1`): a field holding a plain value reads as the value, any
// other field as the cell at that path. The cell's own methods win, except
// that a field of the value named like one of the newer ones (a piece's
// `increment` stream) is the field.
const CELL_VIEWS = new WeakMap(); // view -> cell
const CORE_METHODS = new Set(["get", "set", "update", "key", "send", "equals", "sample"]);
// A cell over an array reads like the array, as the reference's query
// results do (`todoList.items.filter(...)`, `[...list]`): its methods run
// over the elements, each a plain value or a view of the cell at its index.
const ARRAY_READS = new Set([
  "at", "concat", "entries", "every", "filter", "find", "findIndex", "findLast", "findLastIndex",
  "flat", "flatMap", "forEach", "includes", "indexOf", "join", "keys", "lastIndexOf", "map",
  "reduce", "reduceRight", "slice", "some", "toReversed", "toSorted", "toSpliced", "values", "with",
]);
function elementViews(t, own) {
  return own.map((x, i) => (x === null || typeof x !== "object" ? x : t.key(i)));
}
const CELL_VIEW_HANDLER = {
  get(t, prop) {
    if (prop === Symbol.iterator && Array.isArray(Cell.peek(t))) {
      return () => elementViews(t, Cell.peek(t))[Symbol.iterator]();
    }
    if (typeof prop === "symbol") return Reflect.get(t, prop);
    if (prop === "then") return undefined;
    const own = Cell.peek(t);
    if (Array.isArray(own) && ARRAY_READS.has(prop)) {
      return (...args) => Array.prototype[prop].apply(elementViews(t, own), args);
    }
    const isField = own !== null && typeof own === "object" && !Array.isArray(own) &&
      Object.prototype.hasOwnProperty.call(own, prop);
    if (prop in t && (CORE_METHODS.has(prop) || !isField)) {
      const v = Reflect.get(t, prop);
      return typeof v === "function" ? v.bind(t) : v;
    }
    const sub = t.key(prop);
    const v = Cell.peek(sub);
    return v !== undefined && (v === null || typeof v !== "object") ? v : sub;
  },
  set() {
    throw new Error("commonfabric: a cell's fields are written with .set() or .key(k).set()");
  },
  defineProperty() { return false; },
  deleteProperty() { return false; },
};
function cellView(c) {
  const view = new Proxy(c, CELL_VIEW_HANDLER);
  CELL_VIEWS.set(view, c);
  return view;
}

class Stream {
  #id; #sends;
  constructor(mint, id, sends) {
    if (mint !== MINT) throw new TypeError("commonfabric: streams are given, not made");
    this.#id = id; this.#sends = sends;
    Object.freeze(this);
  }
  send(event) { this.#sends.push({ stream: this.#id, payload: serializeValue(event === undefined ? {} : event) }); }
  toJSON() { return { $stream: this.#id }; }
}

// A cell given to a derivation: it reads; writing belongs in a handler.
class ReadCell {
  #value; #link; #schema; #root;
  constructor(mint, value, link, schema, root) {
    if (mint !== MINT) throw new TypeError("commonfabric: cells are given, not made");
    this.#value = value;
    this.#link = link || null;
    this.#schema = schema || null;
    this.#root = root || schema || null;
    Object.freeze(this);
  }
  // The same cell, read as `schema` says.
  static typed(c, schema, root) {
    return new ReadCell(MINT, c.#value, c.#link, schema, root);
  }
  get() {
    const l = this.#link;
    const v = withSources(clone(this.#value), 0, l ? { base: { doc: l.doc, path: l.path.map(String) } } : null);
    const loc = l && { doc: l.doc, path: l.path.map(String) };
    return this.#schema ? typedCells(v, this.#schema, this.#root, loc, 0, (value, at, sub) => new ReadCell(MINT, value, at, sub, this.#root), false) : v;
  }
  sample() { return this.get(); }
  // Links on the way are followed; one stored at the last key is kept, for
  // `resolveAsCell`.
  key(...ks) {
    let v = this.#value, l = this.#link;
    for (const k of ks.map(String)) {
      if (isFrom(v)) { l = linkOfJson(v.$at); v = v.value; }
      v = v !== null && typeof v === "object" ? v[k] : undefined;
      l = l && { doc: l.doc, path: l.path.concat([k]) };
    }
    let sub = this.#schema;
    for (const k of ks.map(String)) sub = sub && childSchema(sub, this.#root, k);
    return new ReadCell(MINT, v, l, sub, this.#root);
  }
  for() { return this; }
  asSchema() { return this; }
  // Through a link the host followed, the cell it leads to.
  resolveAsCell() {
    const v = this.#value;
    return isFrom(v) ? new ReadCell(MINT, v.value, linkOfJson(v.$at)) : this;
  }
  getAsNormalizedFullLink() {
    return this.#link ? normalizedLink(this.#link.doc, this.#link.path) : undefined;
  }
  get sourceURI() {
    return this.#link ? entityUri(this.#link.doc) : undefined;
  }
  equals(other) {
    const o = targetOf(other);
    const me = targetOf(this);
    return o !== undefined && me !== undefined && sameTarget(o, me);
  }
  // Handed to a handler bound in the derivation's frame: the cell itself.
  static linkOf(c) { return c.#link; }
  // Writes from a derivation apply when its run ends (as the reference
  // allows; keep them idempotent: the run may repeat).
  set(value) {
    if (!this.#link || !currentBuilder() || !builder.frame) {
      throw new Error("commonfabric: this cell cannot be written here; write in a handler");
    }
    const v = value === undefined ? null : clone(serializeValue(value));
    this.#value = v;
    builder.writes.push({ doc: this.#link.doc, path: this.#link.path, value: clone(v) });
  }
  update(partial) {
    const cur = this.get();
    const base = cur !== null && typeof cur === "object" && !Array.isArray(cur) ? cur : {};
    this.set(Object.assign(base, serializeValue(partial || {})));
  }
  push(...items) {
    const cur = this.get();
    this.set((Array.isArray(cur) ? cur : []).concat(items.map((x) => serializeValue(x))));
  }
  send(event) { this.set(event); }
  toJSON() { return this.#value === undefined ? null : unwrapFrom(this.#value); }
  valueOf() { return unwrapFrom(this.#value); }
}

// `at`: where a write puts the value, if it is one. A cell, or a linked
// value read unchanged, is stored as its link (the reference's write of a
// cell), unless that link would point into the write's own target.
function serializeValue(v, at, cx, loc, inArray) {
  if (v instanceof ReadCell) return v.get();
  if (v instanceof Cell) {
    // A whole document (a piece, a cell of its own, a keyed element) is
    // held by link; a value inside one is copied as it is now (a card taken
    // out of one pile and put on another).
    const l = Cell.linkOf(v);
    const r = Cell.resolved(v);
    // A cell over a list's slot holding an element is that element.
    if (r.path.length === 0 && r.doc.includes(ELEMENT_MARK) && !overlaps(r, at)) return { $link: { doc: r.doc, path: [] } };

    // An inline element of a list is copied as it is now (a card taken
    // out of one pile and put on another: the slot will hold another card);
    // any other cell is stored as its link.
    const inlineElement = r.path.length > 0 && /^[0-9]+$/.test(String(r.path[r.path.length - 1]));
    if (inlineElement || overlaps(l, at)) return v.get();
    // A cell addressed through a link (`entry.piece` read from a list) is
    // stored as where it leads: the slot it was read through may be gone
    // when the link is next read (the entry moved to the trash).
    const stored = r.doc !== l.doc ? Cell.storedLink(v) : undefined;
    return { $link: stored !== undefined ? stored : { doc: l.doc, path: l.path } };
  }
  if (isRef(v)) { const m = v[REF]; return { $link: { doc: m.doc, path: m.path } }; }
  if (v instanceof Stream) return v.toJSON();
  if (v === undefined) return null;
  if (v === null || typeof v !== "object") return v;
  if (isFrom(v)) return { $link: linkOfJson(v.$from) };
  const from = sourceOf(v);
  if (from !== undefined && from.at.path.length === 0 && !overlaps(from.at, at)) return { $link: from.link };
  if (cx && inArray && anchorable(v) && !keptInline(v, cx.docs)) {
    return anchorElement(v, at, { doc: loc.doc, path: loc.path.slice(0, -1) }, cx);
  }
  if (Array.isArray(v)) {
    return v.map((x, i) => serializeValue(x, at, cx, cx && { doc: loc.doc, path: loc.path.concat([String(i)]) }, true));
  }
  return serializeFields(v, at, cx, loc);
}
function serializeFields(v, at, cx, loc) {
  const out = {};
  for (const k of Object.keys(v)) {
    if (v[k] !== undefined) out[k] = serializeValue(v[k], at, cx, cx && { doc: loc.doc, path: loc.path.concat([k]) }, false);
  }
  return out;
}

// Types exist only for TypeScript; these names keep `import { Cell }` working
// if a pattern imports a type as a value by mistake.
// Schemas: `toSchema<T>()` is replaced by the compiler with T's schema (this
// runtime fallback accepts anything); `schema(s)` is `s`.
export function toSchema(s) {
  return s === undefined ? {} : s;
}
export function schema(s) {
  return s;
}

// `Cell.of(v)` / `Writable.of(v)` / `new Writable(v)`: the reference's
// spellings of `cell(v)`; `Cell.equals(a, b)` compares two cells or values.
function CellApi(initial, schema) {
  return cell(initial, schema);
}
CellApi.of = (initial, schema) => cell(initial, schema);
// The reference's scoped cells (per session, per user, per space): a space
// here is one scope, so each is a cell of the piece. Plain functions, since
// the reference also spells them `new Writable.perSession(v)` and
// `Writable.perSession.of(v)`.
for (const scope of ["perSession", "perUser", "perSpace"]) {
  const scoped = { [scope]: function (initial, schema) { return cell(initial, schema); } }[scope];
  scoped.of = (initial, schema) => cell(initial, schema);
  CellApi[scope] = scoped;
}
CellApi.equals = (a, b) => equals(a, b);
// The reference's other cell constructors (what they add is in the types):
// the same constructor here.
export {
  CellApi as Cell, CellApi as Writable, CellApi as OpaqueCell, CellApi as Stream,
  CellApi as ComparableCell, CellApi as ReadonlyCell, CellApi as WriteonlyCell,
};

// Structural equality of values (cells compare by what they hold, or by
// target when both are cells).
export function equals(a, b) {
  if (a === b) return a !== undefined;
  const [ta, tb] = [targetOf(a), targetOf(b)];
  if (ta !== undefined || tb !== undefined) return ta !== undefined && tb !== undefined && sameTarget(ta, tb);
  return JSON.stringify(serializeValue(a)) === JSON.stringify(serializeValue(b));
}

// What a space cannot do: no network, no model, no shell, no other spaces.
// Exported so patterns that import them load; calling one says why.
function unsupported(name, why) {
  return () => {
    throw new Error("commonfabric: " + name + " is not available in spacewake (" + why + ")");
  };
}
// `wish(query)` / `wish({ query })`. `#now` is the time the piece first
// loaded and `#now/N` the host clock on an N-second grid (N a whole number,
// 1 to 86400): in a pattern body each is a host node (kind "clock", the
// grid in ms, 0 for the one-shot) whose result the runtime computes from its
// clock and moves on at each grid boundary while something demands it
// (`runtime/now.rs`). Every other query is one a space cannot answer
// here, and gets the reference's not-found state; a malformed `#now` gets
// its error state. A wish never throws.
export function wish(target, ...rest) {
  // `wish<T>`: the compiler appends `T` as `{__resultSchema}`; a default in
  // it is what an unanswered wish's `result` reads, as the reference's read
  // through the schema gives.
  const meta = rest.find(isResultMeta);
  const fallback = meta && meta.__resultSchema && "default" in meta.__resultSchema ? clone(meta.__resultSchema.default) : undefined;
  const query = typeof target === "string" ? target : target && typeof target === "object" && !isRef(target) ? target.query : undefined;
  const interval = typeof query === "string" ? nowInterval(query.trim()) : null;
  if (typeof interval === "string") {
    return settledState({ result: undefined, candidates: [], error: interval });
  }
  if (typeof interval === "number") {
    if (builder !== null && !inHandler()) return addNode("clock", null, [interval], query.trim());
    if (inHandler()) {
      const grid = interval || 1000; // the one-shot keeps the second
      const ms = Math.floor(Date.now() / grid) * grid;
      return { result: ms, candidates: [ms] };
    }
  }
  const home = typeof query === "string" ? homeTarget(query.trim(), target) : null;
  if (home !== null && builder !== null && !inHandler() && !inRun()) {
    const ref = makeRef(HOME_DOC, home);
    // `wish<Cell<T>>`: the result is a cell to its readers.
    if (meta) { ref[REF].schema = meta.__resultSchema; ref[REF].root = meta.__resultSchema; }
    return { result: ref, candidates: [ref] };
  }
  return settledState({ result: fallback, candidates: [] });
}

// The space's home document (`runtime::HOME_DOC`): what the reference keeps
// under the space's default pattern, shared by every piece of the space.
const HOME_DOC = "space/home";
const HOME_PATHS = {
  "#default": [],
  "#pieceRegistry": ["pieceRegistry"],
  "#mentionable": ["backlinksIndex", "mentionable"],
  "#recent": ["recentPieces"],
  "#summaryIndex": ["summaryIndex"],
  "#knowledgeGraph": ["knowledgeGraph"],
  "#suggestions": ["suggestionHistory"],
  // The reference keeps these in the user's home space; a space here is its
  // own home, so they are the space's.
  "#learned": ["learned"],
  "#learnedSummary": ["learned", "summary"],
};
// The path in the home document a query names (its tag, the segments after
// it, then the wish's `path`), or null for a query it does not answer.
function homeTarget(query, target) {
  const parts = query.split("/").filter((p) => p.length > 0);
  const prefix = HOME_PATHS[parts[0]];
  if (prefix === undefined) return null;
  const extra = target && typeof target === "object" && Array.isArray(target.path) ? target.path.map(String) : [];
  return prefix.concat(parts.slice(1), extra);
}

// The grid of a `#now` query in ms (0: the one-shot `#now`), the reference's
// error text for a malformed one, or null for any other query.
function nowInterval(query) {
  const parts = query.split("/").filter((p) => p.length > 0);
  if (parts[0] !== "#now") return null;
  if (parts.length === 1) return 0;
  if (parts.length > 2) return 'Wish now target "' + query + '" is not recognized.';
  if (!/^[0-9]+$/.test(parts[1])) {
    return 'Wish now interval "' + parts[1] + '" must be a whole number of seconds in base ten.';
  }
  const seconds = Number.parseInt(parts[1], 10);
  if (seconds < 1 || seconds > 86400) {
    return 'Wish now interval "' + parts[1] + '" must be between 1 and 86400 seconds.';
  }
  return seconds * 1000;
}

// A builtin's state that will not change: a cell of the piece when a
// pattern body is being recorded, the plain value in a handler or a
// derivation (which read it at once).
function settledState(state) {
  return builder !== null && !inHandler() ? cell(state) : state;
}
// `navigateTo(piece)`: there is no shell here to navigate; like the
// reference's builtin before a shell acts on it, it answers `false`.
export function navigateTo() {
  return settledState(false);
}
// An effect builtin the host has no broker for yet: it answers the
// reference's state shape, settled with the error, so an app that builds
// one into its graph still loads and its read says why (in a pattern body
// the state is a cell of the piece, elsewhere a plain value).
function unavailableEffect(name, why) {
  return function () {
    return settledState({
      pending: false,
      result: undefined,
      error: "commonfabric: " + name + " is not available in spacewake (" + why + ")",
    });
  };
}
export const llmDialog = unavailableEffect("llmDialog", "a space has no model access");
// An effect the host's broker serves (`runtime/effects.rs`): a node of the
// graph whose output, `{pending, result, error}`, the host computes when it
// is pulled, by sending the request its inputs (`{url, options, …}`)
// describe. The compiler adds `fetchJson<T>`'s `T` as `{__resultSchema}`.
function brokeredEffect(name) {
  return function (inputs, ...rest) {
    const meta = rest.find(isResultMeta);
    if (builder === null || inHandler()) {
      return settledState({
        pending: false,
        result: undefined,
        error: "commonfabric: " + name + " is made in a pattern body (its result is state of the piece)",
      });
    }
    const schema = meta ? meta.__resultSchema : null;
    const given = inputs === undefined ? {} : inputs;
    const ref = addNode("effect", null, schema ? [name, given, schema] : [name, given], name);
    ref[REF].schema = { type: "object", properties: { pending: { type: "boolean" }, result: schema || {}, error: {} } };
    ref[REF].root = schema || ref[REF].schema;
    return ref;
  };
}
export const fetchData = brokeredEffect("fetchData");
export const fetchJson = brokeredEffect("fetchJson");
export const fetchJsonUnchecked = brokeredEffect("fetchJsonUnchecked");
export const fetchText = brokeredEffect("fetchText");
export const fetchBinary = brokeredEffect("fetchBinary");
// Model calls, to the operator's endpoint (`effects/model.rs`); the
// compiler adds `generateObject<T>`'s `T` as its schema.
export const generateText = brokeredEffect("generateText");
export const generateObject = brokeredEffect("generateObject");
export const llm = brokeredEffect("llm");
export const fetchProgram = unavailableEffect("fetchProgram", "a space has no network");
export const streamData = unavailableEffect("streamData", "a space has no network");
// `compileAndRun`: a pattern cannot compile code at run time here (the host
// compiles at deploy); its state answers that, settled.
export function compileAndRun() {
  return settledState({
    pending: false,
    result: undefined,
    error: "commonfabric: compileAndRun is not available in spacewake (patterns are compiled by the host at deploy)",
    errors: [],
  });
}
export const resultOf = unsupported("resultOf", "it reads results of network and model calls");
export const SELF = "$SELF";
export const ID = "$ID";
export const ID_FIELD = "$ID_FIELD";
export const Default = undefined;
export const OpaqueRef = undefined;
export const VNode = undefined;

// ---- the rest of the reference's value exports --------------------------------
// Each exists so an app that imports it loads; each behaves as the reference
// does wherever a space can, and otherwise answers the reference's error or
// empty state when called.

// `patternTool(pattern, extraParams?)`: a tool description a model call
// would use (the pattern itself is not data: a stored result keeps only its
// parameters).
export function patternTool(p, extraParams) {
  return { pattern: p, extraParams: extraParams === undefined ? {} : extraParams };
}

// `cellFromUrl({url})`: a cell of another space, which a space cannot reach.
export function cellFromUrl() {
  return settledState({
    pending: false,
    cell: undefined,
    error: "commonfabric: cellFromUrl is not available in spacewake (a space cannot read cells of other spaces)",
  });
}

// `dataFile("./x.json")`: the compiler replaces a call with a literal path
// by the file's text; a call it could not see (a computed path) lands here.
export function dataFile(path) {
  throw new Error("commonfabric: no attached data file " + JSON.stringify(String(path)) +
    " (dataFile takes a string literal naming a file of the program)");
}

// SQLite builtins: a space has no per-piece SQL database. `table` and
// `cfLink` are pure (they describe a table as a schema), the rest answer
// the settled error state.
const SQLITE_UNAVAILABLE = "commonfabric: sqlite is not available in spacewake (a piece has no SQL database)";
function sqlTypeToJson(sqlType) {
  const head = String(sqlType).trim().toLowerCase().split(/\s+/)[0] || "";
  if (head === "integer" || head === "int") return "integer";
  if (["real", "float", "double", "numeric", "decimal"].includes(head)) return "number";
  return "string";
}
export function cfLink() {
  return { type: "string", cfLink: true, sqlType: "text" };
}
export function table(columns, rule, opts) {
  const properties = {};
  const required = [];
  for (const name of Object.keys(columns || {})) {
    if (!/^[A-Za-z_][A-Za-z0-9_$]*$/.test(name)) throw new TypeError('invalid column name "' + name + '"');
    const spec = columns[name];
    const col = typeof spec === "string"
      ? { type: sqlTypeToJson(spec), sqlType: spec }
      : Object.assign({}, spec, { sqlType: spec && spec.sqlType !== undefined ? spec.sqlType : "text" });
    if (name.endsWith("_cf_link")) col.cfLink = true;
    else if (col.cfLink === true) throw new TypeError('cfLink column "' + name + '" must end in "_cf_link"');
    properties[name] = col;
    required.push(name);
  }
  const out = { type: "object", properties, required };
  if (typeof rule === "function") {
    const fields = {};
    for (const name of required) fields[name] = { field: name };
    out.rowLabel = rule(fields);
  }
  if (opts && opts.allowReadClearance) {
    if (typeof rule !== "function") {
      throw new Error("table(): allowReadClearance needs a rowLabel rule");
    }
    out.rowLabelReadClearance = true;
  }
  return out;
}
const rowLabel = (kind) => (...terms) => ({ kind, terms });
export const cfSqlite = {
  table, cfLink,
  match: (field, re, opts) => ({ kind: "match", field, pattern: re instanceof RegExp ? re.source : String(re), opts: opts || {} }),
  principal: (protocol, of) => ({ kind: "principal", protocol, of }),
  all: rowLabel("all"),
  any: rowLabel("any"),
  intersect: rowLabel("intersect"),
  whenMatches: (field, re, then) => ({ kind: "whenMatches", field, pattern: re instanceof RegExp ? re.source : String(re), then }),
  dbOwner: () => ({ kind: "dbOwner" }),
  endorsedBy: (p) => ({ kind: "endorsedBy", principal: p }),
  authoredBy: (p) => ({ kind: "authoredBy", principal: p }),
  constant: (atom) => ({ kind: "constant", atom }),
};
function sqliteUnavailableQuery() {
  return settledState({ pending: false, result: undefined, error: SQLITE_UNAVAILABLE });
}
// A database handle: stored as a marker, and a handle again in the
// derivations it is handed to (`db.query(...)` in a computed answers the
// unavailable state there too, never "not a function").
const SQLITE_MARKER = "$sqliteDatabase";
const HANDLE = Symbol("commonfabric.handle");
function sqliteDatabaseImpl() {
  return {
    query: sqliteUnavailableQuery,
    exec() { throw new Error(SQLITE_UNAVAILABLE); },
    toJSON() { serializedHandle = true; return { [SQLITE_MARKER]: "unavailable", error: SQLITE_UNAVAILABLE }; },
    [HANDLE]: true,
  };
}
// Set while a node's arguments are serialized, when they hold a handle.
let serializedHandle = false;
// Node functions whose arguments hold handles to rebuild at each run.
const HANDLE_FNS = new Set();
function withHandles(v, depth) {
  if (v === null || typeof v !== "object" || depth > 32) return v;
  if (Array.isArray(v)) return v.map((x) => withHandles(x, depth + 1));
  if (v[SQLITE_MARKER] !== undefined) return sqliteDatabaseImpl();
  const out = {};
  for (const k of Object.keys(v)) out[k] = withHandles(v[k], depth + 1);
  return out;
}
sqliteDatabaseImpl.asScope = () => sqliteDatabaseImpl;
export const sqliteDatabase = sqliteDatabaseImpl;
export const sqliteQuery = sqliteUnavailableQuery;

// `inspectConfLabel`: this server keeps no confidentiality labels.
export function inspectConfLabel() {
  return settledState({ status: "notAvailable" });
}

// `uiVariant(piece, kind)`: a piece rendered in one of its variants.
export function uiVariant(piece, kind) {
  return h("cf-render", { variant: kind === undefined ? "full" : kind, $cell: piece });
}

// UI helpers of the reference: an element with `data-ui-*` attributes.
function uiHelper(defaultTag, dataAttrs, helperOnly) {
  return (props) => {
    const p = props || {};
    const attrs = {};
    for (const k of Object.keys(p)) {
      if (k !== "children" && !helperOnly.includes(k)) attrs[k] = p[k];
    }
    for (const [prop, attr] of dataAttrs) if (p[prop] !== undefined) attrs[attr] = p[prop];
    const kids = p.children === undefined || p.children === null ? []
      : Array.isArray(p.children) ? p.children : [p.children];
    return h(p.as === undefined ? defaultTag : p.as, attrs, ...kids);
  };
}
export const UiAction = uiHelper("ct-button", [["action", "data-ui-action"]], ["as", "action"]);
export const UiPromptSlot = uiHelper("ct-textarea",
  [["surface", "data-ui-surface"], ["role", "data-ui-role"]], ["as", "surface", "role"]);
export const UiDisclosure = uiHelper("ct-card", [["kind", "data-ui-disclosure-kind"]], ["as", "kind"]);

// `multiUserTest(descriptor)`: a tag for the reference's test runner.
export function multiUserTest(descriptor) {
  return descriptor;
}

// `createNodeFactory({type, implementation})`: a JavaScript module is a
// lift; a reference names a builtin.
const BUILTIN_NODES = {
  ifElse: (a) => ifElse(a.condition, a.ifTrue, a.ifFalse),
  when: (a) => when(a.condition, a.value),
  unless: (a) => unless(a.condition, a.fallback),
  str: (a) => str(a.strings, ...(a.values || [])),
  wish: (a) => wish(a),
  fetchJson, fetchJsonUnchecked, fetchText, fetchBinary, fetchData, fetchProgram, streamData,
  generateText, generateObject, llm, llmDialog, cellFromUrl, sqliteQuery, inspectConfLabel,
};
export function createNodeFactory(spec) {
  const s = spec || {};
  if (s.type === "javascript" && typeof s.implementation === "function") return lift(s.implementation);
  if (s.type === "ref" && typeof s.implementation === "string") {
    if (Object.prototype.hasOwnProperty.call(BUILTIN_NODES, s.implementation)) {
      return BUILTIN_NODES[s.implementation];
    }
    throw new Error("commonfabric: no builtin node named " + JSON.stringify(s.implementation));
  }
  throw new Error("commonfabric: createNodeFactory expects {type: \"javascript\", implementation: fn} " +
    "or {type: \"ref\", implementation: name}");
}
export function byRef(ref) {
  return createNodeFactory({ type: "ref", implementation: ref });
}

// Entity ids: a cell's document, as the reference's `{"/": id}` form.
export function getEntityId(value) {
  if (value === null || (typeof value !== "object" && typeof value !== "function")) return undefined;
  if (value instanceof Cell) return { "/": Cell.linkOf(value).doc };
  if (value instanceof ReadCell) {
    const l = ReadCell.linkOf(value);
    return l ? { "/": l.doc } : undefined;
  }
  if (isRef(value)) return { "/": value[REF].doc };
  const id = value["/"];
  return typeof id === "string" ? { "/": id } : undefined;
}
export function entityRefToString(ref) {
  if (ref !== null && typeof ref === "object" && typeof ref["/"] === "string") return ref["/"];
  if (typeof ref === "string") return ref;
  throw new TypeError("commonfabric: entityRefToString expects {\"/\": id}");
}

// `getPatternEnvironment()`: where the serving host answers (its first
// `--public-origin`, or its listen address), which the host hands in when
// it loads a program.
let patternOrigin = "http://localhost:8000";
export function getPatternEnvironment() {
  return Object.freeze({ apiUrl: new URL(patternOrigin) });
}

// Structural equality of data, as the reference's `valueEqual`: numbers by
// `Object.is` apart from 0 and -0, objects by their own enumerable keys.
export function valueEqual(a, b) {
  return deepEqual(a, b, 0);
}
function deepEqual(a, b, depth) {
  if (a === b) return true;
  if (typeof a === "number" && typeof b === "number") return Number.isNaN(a) && Number.isNaN(b);
  if (a === null || b === null || typeof a !== "object" || typeof b !== "object") return false;
  if (depth > 256) throw new RangeError("commonfabric: valueEqual over a value nested too deeply");
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;
  const ka = Object.keys(a), kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  for (const k of ka) {
    if (!Object.prototype.hasOwnProperty.call(b, k) || !deepEqual(a[k], b[k], depth + 1)) return false;
  }
  return true;
}

// Debug strings of values, as the reference renders them: JSON where the
// value is JSON, bare tokens (`undefined`, `42n`, `NaN`, `-0`,
// `function f(...) {...}`, `Symbol("d")`, `new Map(...)`) where it is not,
// `<circle>` for a repeated ancestor.
function debugString(value, indent) {
  const stack = [];
  const pad = (n) => indent === undefined ? "" : "\n" + " ".repeat(indent * n);
  const colon = indent === undefined ? ":" : ": ";
  const render = (v, level) => {
    if (v !== null && typeof v === "object" && typeof v.toJSON === "function" && !(v instanceof Date)) {
      v = v.toJSON();
    }
    switch (typeof v) {
      case "bigint": return v + "n";
      case "function": return v.name === "" ? "(...) => {...}" : "function " + v.name + "(...) {...}";
      case "number":
        if (Object.is(v, -0)) return "-0";
        if (Number.isNaN(v)) return "NaN";
        if (v === Infinity) return "Infinity";
        if (v === -Infinity) return "-Infinity";
        return JSON.stringify(v);
      case "undefined": return "undefined";
      case "symbol": {
        const key = Symbol.keyFor(v);
        if (key !== undefined) return "Symbol.for(" + JSON.stringify(key) + ")";
        return v.description === undefined ? "Symbol()" : "Symbol(" + JSON.stringify(v.description) + ")";
      }
      case "string": case "boolean": return JSON.stringify(v);
    }
    if (v === null) return "null";
    if (v instanceof Date) return JSON.stringify(v.toJSON());
    if (stack.includes(v)) return "<circle>";
    const proto = Object.getPrototypeOf(v);
    if (!Array.isArray(v) && proto !== Object.prototype && proto !== null) {
      const name = v.constructor && v.constructor.name ? v.constructor.name : "<anonymous>";
      return "new " + name + "(...)";
    }
    stack.push(v);
    try {
      if (Array.isArray(v)) {
        if (v.length === 0) return "[]";
        const items = v.map((x) => pad(level + 1) + render(x, level + 1));
        return "[" + items.join(",") + pad(level) + "]";
      }
      const keys = Object.keys(v);
      if (keys.length === 0) return "{}";
      const items = keys.map((k) => pad(level + 1) + JSON.stringify(k) + colon + render(v[k], level + 1));
      return "{" + items.join(",") + pad(level) + "}";
    } finally {
      stack.pop();
    }
  };
  try {
    return render(value, 0);
  } catch (e) {
    return "<unrenderable debug string>";
  }
}
export function toCompactDebugString(value, maxLength) {
  const s = debugString(value, undefined);
  if (typeof maxLength === "number") {
    const max = Math.max(Math.floor(maxLength), 3);
    if (s.length > max) return s.slice(0, max - 3) + "...";
  }
  return s;
}
export function toIndentedDebugString(value) {
  return debugString(value, 2);
}

// `__cf_data(v)`: plain data, frozen deeply.
export function __cf_data(v) {
  harden(v);
  return v;
}

// The reference's schemas of an OAuth token and of a webhook's settings.
export const AuthSchema = {
  type: "object",
  properties: {
    token: { type: "string", default: "" },
    tokenType: { type: "string", default: "" },
    scope: { type: "array", items: { type: "string" }, default: [] },
    expiresIn: { type: "number", default: 0 },
    expiresAt: { type: "number", default: 0 },
    refreshToken: { type: "string", default: "" },
    user: {
      type: "object",
      properties: {
        email: { type: "string", default: "" },
        name: { type: "string", default: "" },
        picture: { type: "string", default: "" },
      },
    },
  },
};
export const WebhookConfigSchema = {
  type: "object",
  properties: {
    url: { type: "string", default: "" },
    secret: { type: "string", default: "" },
  },
  required: ["url", "secret"],
};

// Special values of the reference's data model. This server stores JSON
// only, so these exist for `instanceof` and construction; a stored one is
// kept as its JSON form.
export class FabricSpecialObject {
  constructor() {
    if (new.target === FabricSpecialObject) throw new TypeError("FabricSpecialObject is abstract");
  }
}
export class FabricInstance extends FabricSpecialObject {}
export class FabricPrimitive extends FabricSpecialObject {}
// A class named `name` holding its value at `field`.
const fabricValue = (name, field) => ({
  [name]: class extends FabricPrimitive {
    constructor(value) {
      super();
      this[field] = value;
      Object.freeze(this);
    }
    toJSON() { return this[field]; }
  },
})[name];
export const FabricEpochNsec = fabricValue("FabricEpochNsec", "value");
export const FabricEpochDay = fabricValue("FabricEpochDay", "value");
export const FabricHash = fabricValue("FabricHash", "hash");
export const FabricBytes = fabricValue("FabricBytes", "bytes");
export const FabricRegExp = fabricValue("FabricRegExp", "source");
export const FabricKeyPair = fabricValue("FabricKeyPair", "publicKey");
export class FabricLink extends FabricInstance {
  constructor(link) {
    super();
    this.link = link;
    Object.freeze(this);
  }
  toJSON() { return this.link; }
}
export class FabricError extends FabricInstance {
  constructor(error) {
    super();
    this.name = error && error.name !== undefined ? String(error.name) : "Error";
    this.message = error && error.message !== undefined ? String(error.message) : String(error);
    Object.freeze(this);
  }
  toJSON() { return { name: this.name, message: this.message }; }
}

// `assert(() => boolean)`: an assertion of a pattern test (`[TESTS]`, run
// by `spacewake test`): a derivation of the record the runner reads,
// `{ok, source, parts}`. The compiler names the call's source and wraps the
// operands of its comparison (`__assertWith`, `__part`), so a failure can
// show what each side was.
export function assert(check, captures) {
  return assertWith("", [], check, captures);
}
let assertParts = null;
function assertWith(source, partSources, check, captures) {
  if (typeof check !== "function") throw new TypeError("commonfabric: assert expects a function");
  const record = (caps) => {
    const saved = assertParts;
    assertParts = [];
    let ok, seen;
    try {
      ok = check(caps);
    } finally {
      seen = assertParts;
      assertParts = saved;
    }
    const parts = [];
    partSources.forEach((src, i) => {
      if (i in seen) parts.push({ src, rendered: toCompactDebugString(seen[i], 200) });
    });
    return { ok: ok === true, source, parts };
  };
  return computed(record, captures);
}
// The compiler's name for a handler, lift or derivation bound to a `const`
// (`const sweep = handler(...)` becomes `__named("sweep", handler(...))`):
// its streams and nodes carry it, so operators see the source's name.
export function __named(name, value) {
  if (typeof value === "function" && (value.__handler || value.__lift)) {
    if (value.__label === undefined) value.__label = name;
  } else if (builder !== null && isRef(value) && value[REF].node) {
    // `const total = computed(...)`: the node it just added keeps the name
    // unless its function had one of its own.
    const id = value[REF].doc;
    const node = builder.nodes.find((n) => n.id === id);
    if (node !== undefined && node.label === node.kind) node.label = name;
  }
  return value;
}

export function __assertWith(source, partSources) {
  return (check, captures) => assertWith(source, partSources, check, captures);
}
export function __part(i, value) {
  if (assertParts !== null) assertParts[i] = value;
  return value;
}

// Constants of the reference's API module (frozen, deeply, with the rest of
// the API below).
export const FABRIC_SPECIAL_OBJECT_BRAND = "@commonfabric/FabricSpecialObject";
export const MERGEABLE_OP_METHODS = [
  { method: "push", wireOp: "append", kind: "array-identity-writer" },
  { method: "addUnique", wireOp: "add-unique", kind: "array-identity-writer" },
  { method: "removeByValue", wireOp: "remove-by-value", kind: "array-identity-writer" },
  { method: "increment", wireOp: "increment", kind: "scalar-writer" },
];
export const FABRIC_PRIMITIVE_SCHEMA_TYPES = [
  "FabricBytes", "FabricEpochDay", "FabricEpochNsec", "FabricHash", "FabricKeyPair", "FabricRegExp",
];
export function isFabricPrimitiveSchemaType(t) {
  return FABRIC_PRIMITIVE_SCHEMA_TYPES.includes(t);
}
export const CFC_CANONICAL_ALIAS_NAMES = [
  "Cfc", "Confidential", "Integrity", "AddIntegrity", "RepresentsCurrentUser",
  "AuthoredByCurrentUser", "RequiresIntegrity", "MaxConfidentiality", "AnyOf", "PolicyOf",
  "WriteAuthorizedBy", "TrustedActionWriteWithIntegrity", "TrustedActionWrite",
  "TrustedActionUiContract", "ExactCopy", "ProjectionPath", "ProjectionOf", "Projection",
];

// `import cf from "commonfabric"`: the same API as one object.
const api = {
  NAME, UI, SCHEDULE, TYPE, SELF, ID, ID_FIELD, lift, derive, computed, str, cell, handler, action,
  pattern, recipe, h, ifElse, when, unless, Cell: CellApi, Writable: CellApi, equals, toSchema,
  schema, wish, navigateTo, generateText, generateObject, llm, llmDialog, fetchData, fetchJson,
  fetchJsonUnchecked, fetchText, fetchBinary, fetchProgram, streamData, compileAndRun, resultOf,
  TILE_UI, CHIP_UI, FS, TESTS, OpaqueCell: CellApi, Stream: CellApi, ComparableCell: CellApi,
  ReadonlyCell: CellApi, WriteonlyCell: CellApi, patternTool, cellFromUrl, dataFile, cfLink, table, cfSqlite, sqliteDatabase, sqliteQuery,
  inspectConfLabel, uiVariant, UiAction, UiPromptSlot, UiDisclosure, multiUserTest, createNodeFactory,
  byRef, getEntityId, entityRefToString, getPatternEnvironment, valueEqual, toCompactDebugString,
  toIndentedDebugString, __cf_data, AuthSchema, WebhookConfigSchema, FabricSpecialObject,
  FabricInstance, FabricPrimitive, FabricEpochNsec, FabricEpochDay, FabricHash, FabricLink,
  FabricBytes, FabricRegExp, FabricKeyPair, FabricError, assert, FABRIC_SPECIAL_OBJECT_BRAND,
  MERGEABLE_OP_METHODS, FABRIC_PRIMITIVE_SCHEMA_TYPES, isFabricPrimitiveSchemaType,
  CFC_CANONICAL_ALIAS_NAMES,
};
// The reference's `__cfHelpers` is the API itself.
api.__cfHelpers = api;
export const __cfHelpers = api;
export default api;

// The authoring API is frozen, deeply, before any pattern code runs (the
// intrinsics already are, by the sandbox's lockdown): one piece cannot change
// what another piece's code calls, nor rewrite a Cell's methods.
function harden(root) {
  const stack = [root];
  while (stack.length > 0) {
    const o = stack.pop();
    if (o === null || (typeof o !== "object" && typeof o !== "function") || Object.isFrozen(o)) continue;
    Object.freeze(o);
    for (const k of Reflect.ownKeys(o)) {
      const d = Object.getOwnPropertyDescriptor(o, k);
      if ("value" in d) stack.push(d.value);
      else stack.push(d.get, d.set);
    }
    stack.push(Object.getPrototypeOf(o));
  }
}
harden(api);
for (const api of [lift, derive, computed, str, cell, handler, action, __inlineAction, pattern, h, Cell, Stream,
  ReadCell, CellApi, equals, toSchema, schema, __captures, __assertWith, __named, __part, ifElse, when, unless, __asCell, __beginProgram, __registerProgram, __instantiate, __runNode, __runMap,
  __runHandler]) {
  harden(api);
}
