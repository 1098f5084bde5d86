// Type declarations for spacewake's pattern authoring API: the module
// "commonfabric", its subpaths, the global `JSX` namespace and the globals
// the sandbox gives pattern code.
//
// spacewake compiles patterns itself; these declarations exist so that
// `tsc --noEmit` can check a directory of patterns. They follow what the
// runtime (src/runtime/commonfabric.js) accepts: strict where a mistake is
// certain (a name that does not exist, a schedule entry of the wrong shape,
// a call with the wrong arguments), loose where the runtime is dynamic (the
// reactive references a pattern body works with).
//
// Requires TypeScript 5.4 or later (`NoInfer`).

// ---------------------------------------------------------------------------
// Globals of the sandbox beyond the language's own (see GLOBALS in
// src/sandbox/mod.rs): no DOM, no timers, no network.
// ---------------------------------------------------------------------------

/** Each call becomes one line of the piece's log (bounded). */
interface Console {
  log(...data: unknown[]): void;
  info(...data: unknown[]): void;
  warn(...data: unknown[]): void;
  error(...data: unknown[]): void;
  debug(...data: unknown[]): void;
}
declare var console: Console;

/** Query strings: pure string work. */
interface URLSearchParams {
  readonly size: number;
  append(name: string, value: string): void;
  delete(name: string, value?: string): void;
  get(name: string): string | null;
  getAll(name: string): string[];
  has(name: string, value?: string): boolean;
  set(name: string, value: string): void;
  sort(): void;
  forEach(callback: (value: string, key: string, parent: URLSearchParams) => void, thisArg?: unknown): void;
  keys(): IterableIterator<string>;
  values(): IterableIterator<string>;
  entries(): IterableIterator<[string, string]>;
  [Symbol.iterator](): IterableIterator<[string, string]>;
  toString(): string;
}
declare var URLSearchParams: {
  prototype: URLSearchParams;
  new (init?: string | Iterable<readonly [string, string]> | Record<string, string> | URLSearchParams): URLSearchParams;
};

/** The web's URL parser, for the URLs patterns build (no fetching). */
interface URL {
  href: string;
  readonly origin: string;
  protocol: string;
  username: string;
  password: string;
  host: string;
  hostname: string;
  port: string;
  pathname: string;
  search: string;
  readonly searchParams: URLSearchParams;
  hash: string;
  toString(): string;
  toJSON(): string;
}
declare var URL: {
  prototype: URL;
  new (url: string | URL, base?: string | URL): URL;
  canParse(url: string | URL, base?: string | URL): boolean;
  parse(url: string | URL, base?: string | URL): URL | null;
};

/** Base64 of a byte string. */
declare function btoa(data: string): string;
/** A byte string from base64. */
declare function atob(data: string): string;
/** A deep copy of plain data. */
declare function structuredClone<T>(value: T): T;
declare function queueMicrotask(callback: () => void): void;

// ---------------------------------------------------------------------------
// JSX. Patterns write JSX without importing anything: spacewake lowers it to
// `h(tag, props, ...children)` and imports `h` itself, so type-checking uses
// `"jsx": "preserve"` and this global namespace. Elements are plain data
// (`VNode`); tags and attributes are not checked (custom elements such as
// `<cf-button>` are common), but expressions inside them are.
// ---------------------------------------------------------------------------

declare namespace JSX {
  type Element = import("commonfabric").VNode;
  /** Any string tag, or any function taking props (a component, a pattern). */
  type ElementType = string | ((props: any) => unknown);
  interface ElementChildrenAttribute {
    children: {};
  }
  interface IntrinsicAttributes {
    key?: unknown;
  }
  interface IntrinsicElements {
    [tagName: string]: IntrinsicProps;
  }
  interface IntrinsicProps {
    [attribute: string]: any;
  }
}

// ---------------------------------------------------------------------------
// "commonfabric": the authoring API.
// ---------------------------------------------------------------------------

declare module "commonfabric" {
  // Only what is marked `export` is exported.
  export {};

  // ---- Type-level markers (no such properties exist at run time) ----------

  const CELL_MARK: unique symbol;
  const STREAM_MARK: unique symbol;
  const SCHEMA_MARK: unique symbol;
  const UNDECLARED_MARK: unique symbol;

  type Primitive = string | number | boolean | bigint | symbol | null | undefined;
  type IsAny<T> = 0 extends 1 & T ? true : false;
  // (A separate alias: written inline, `unknown extends T` would stop
  // TypeScript from widening literals it infers for `T`.)
  type IsUnknown<T> = unknown extends T ? true : false;
  type StreamLike = { readonly [STREAM_MARK]: any };

  // ---- Reserved result keys -------------------------------------------------
  // Keys of a pattern's result the host reads: `[NAME]` its title, `[UI]` its
  // view, `[SCHEDULE]` its timed callbacks, `[TESTS]` the steps of a pattern
  // test, `[SELF]` (on a pattern's argument) its own result. At run time they
  // are strings ("$NAME", ...); as types they are unique symbols, so only the
  // imported constant names them.

  export const NAME: unique symbol;
  export const UI: unique symbol;
  export const SCHEDULE: unique symbol;
  export const TYPE: unique symbol;
  export const TILE_UI: unique symbol;
  export const CHIP_UI: unique symbol;
  export const FS: unique symbol;
  export const TESTS: unique symbol;
  export const SELF: unique symbol;
  export const ID: unique symbol;
  export const ID_FIELD: unique symbol;

  /** One timed callback (a bound handler or an action) every N minutes (60 to 44640). */
  export interface IntervalEntry {
    intervalMinutes: number;
    callback: Stream<any>;
  }
  /**
   * One timed callback at calendar times: a five-field cron expression (minute, hour, day of
   * month, month, day of week) in an IANA zone (UTC when absent), at least 60 minutes apart.
   */
  export interface CronEntry {
    cron: string;
    timeZone?: string;
    callback: Stream<any>;
  }
  /**
   * One callback once, at the time a field of the pattern's own state holds (epoch milliseconds,
   * or an ISO-8601 string with an offset; nothing disarms it). A handler sets, moves or clears
   * the time; the entry fires once per time the field holds. Name the field (`state.remindAt`,
   * or a cell the pattern owns), never a literal or a call.
   */
  export interface AtEntry {
    at: unknown;
    callback: Stream<any>;
  }
  export type ScheduleEntry = IntervalEntry | CronEntry | AtEntry;
  /** At most four entries, written as an array literal. */
  export type Schedule = readonly [ScheduleEntry?, ScheduleEntry?, ScheduleEntry?, ScheduleEntry?];

  /** A step of a pattern test (`[TESTS]`), run by `spacewake test`. */
  export interface TestStep {
    action?: Stream<any>;
    event?: unknown;
    assertion?: unknown;
    render?: unknown;
    settle?: boolean;
    label?: string;
    await?: unknown;
    skip?: boolean;
  }

  /** The reserved keys a pattern's result may carry. */
  export interface ReservedKeys {
    [NAME]?: unknown;
    [UI]?: unknown;
    [SCHEDULE]?: Schedule;
    [TESTS]?: readonly TestStep[];
    [TYPE]?: unknown;
    [TILE_UI]?: unknown;
    [CHIP_UI]?: unknown;
    [FS]?: unknown;
  }

  // ---- JSON and schemas -----------------------------------------------------

  export type JSONValue = null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue };
  export type JSONSchemaTypeName = "object" | "array" | "string" | "number" | "integer" | "boolean" | "null";

  /** A JSON Schema, with the reference's `asCell` / `asStream` flags. */
  export interface JSONSchemaObject {
    type?: JSONSchemaTypeName | readonly JSONSchemaTypeName[];
    properties?: { readonly [name: string]: JSONSchema };
    required?: readonly string[];
    additionalProperties?: JSONSchema;
    items?: JSONSchema;
    enum?: readonly unknown[];
    const?: unknown;
    anyOf?: readonly JSONSchema[];
    oneOf?: readonly JSONSchema[];
    allOf?: readonly JSONSchema[];
    $ref?: string;
    $defs?: { readonly [name: string]: JSONSchema };
    default?: unknown;
    title?: string;
    description?: string;
    asCell?: boolean;
    asStream?: boolean;
    [keyword: string]: unknown;
  }
  export type JSONSchema = JSONSchemaObject | boolean;

  /** A schema that stands for the type `T` (what `toSchema<T>()` gives). */
  export type TypedSchema<T> = JSONSchemaObject & { readonly [SCHEMA_MARK]: T };

  /** The TypeScript type a JSON Schema literal (`as const`) describes. */
  export type Schema<S> = S extends true
    ? unknown
    : S extends false
      ? never
      : S extends { readonly asCell: true }
        ? Cell<SchemaData<S>>
        : S extends { readonly asStream: true }
          ? Stream<SchemaData<S>>
          : SchemaData<S>;
  type SchemaData<S> = S extends { readonly const: infer C }
    ? C
    : S extends { readonly enum: readonly (infer E)[] }
      ? E
      : S extends { readonly anyOf: readonly (infer B)[] }
        ? Schema<B>
        : S extends { readonly oneOf: readonly (infer B)[] }
          ? Schema<B>
          : S extends { readonly type: infer N }
            ? SchemaOfType<N, S>
            : unknown;
  type SchemaOfType<N, S> = N extends readonly (infer M)[]
    ? SchemaOfType<M, S>
    : N extends "string"
      ? string
      : N extends "number" | "integer"
        ? number
        : N extends "boolean"
          ? boolean
          : N extends "null"
            ? null
            : N extends "array"
              ? S extends { readonly items: infer I } ? Schema<I>[] : unknown[]
              : N extends "object"
                ? SchemaObject<S>
                : unknown;
  type SchemaRequired<S> = S extends { readonly required: readonly (infer R)[] } ? R : never;
  type SchemaObject<S> = S extends { readonly properties: infer P }
    ? Flatten<
        { -readonly [K in keyof P as K extends SchemaRequired<S> ? K : never]: Schema<P[K]> } & {
          -readonly [K in keyof P as K extends SchemaRequired<S> ? never : K]?: Schema<P[K]>;
        }
      >
    : S extends { readonly additionalProperties: infer A }
      ? { [key: string]: Schema<A> }
      : { [key: string]: unknown };
  type Flatten<T> = { [K in keyof T]: T[K] };

  /** `Default<T, V>`: a field of type `T` whose value is `V` when not given. `V` must be a `T`. */
  export type Default<T, V extends T = T> = T;

  // ---- Cells and streams ----------------------------------------------------
  // A `Cell<T>` is what a handler is given for a context field typed
  // `Cell<T>` / `Writable<T>`: it reads (`get`) and writes (`set`, `push`,
  // `key(k).set`, ...). Writes are applied when the handler's run ends.

  type ElementOf<T> = NonNullable<T> extends readonly (infer E)[] ? E : never;
  /** The keys `key()` accepts: indices of an array, fields of an object. */
  type FieldKey<T> = [NonNullable<T>] extends [readonly unknown[]]
    ? number
    : [keyof NonNullable<T>] extends [never]
      ? string | number
      : Extract<keyof NonNullable<T>, string | number>;
  type FieldAt<T, K> = NonNullable<T> extends infer V
    ? V extends readonly (infer E)[]
      ? E
      : K extends keyof V
        ? V[K]
        : unknown
    : never;

  /** Where a cell leads: the reference's address of a document and a path in it. */
  export interface NormalizedLink {
    id: string;
    path: string[];
    space: string;
    type: string;
  }

  /** What every cell and reference can do. */
  interface CellBase<T> {
    readonly [CELL_MARK]: T;
    /** The current value. */
    get(): T;
    /** The current value, without recording a read. */
    sample(): T;
    /** Replaces the value (a cell or reference given is stored as a link). */
    set(value: Opaque<T>): void;
    /** Sets the given fields. */
    update(values: { [K in keyof T]?: Opaque<T[K]> }): void;
    /** Appends to an array. */
    push(...items: Opaque<ElementOf<T>>[]): void;
    /** Appends what is not there yet (by value, or by where a cell leads). */
    addUnique(...items: Opaque<ElementOf<T>>[]): void;
    /** Takes the first matching element out of an array. */
    remove(item: Opaque<ElementOf<T>>): void;
    removeByValue(item: Opaque<ElementOf<T>>): void;
    /** The array's keyed element: a document of its own, named by the key. */
    elementById(id: string): Cell<ElementOf<T>>;
    /** Adds to a number (1 by default). */
    increment(by?: number): void;
    /** Sends an event to the stream this cell holds. */
    send(event: Opaque<T>): void;
    /**
     * Maps an array: in a pattern body a reactive map (`fn` runs once per
     * element, as a sub-pattern), elsewhere over the current elements.
     */
    map<U>(fn: (element: OpaqueRef<ElementOf<T>>, index: number) => U): OpaqueRef<StripRefs<U>[]>;
    /** Whether both lead to the same place. */
    equals(other: unknown): boolean;
    for(cause: unknown): this;
    asSchema(schema?: JSONSchema): this;
    getAsNormalizedFullLink(): NormalizedLink;
    readonly sourceURI: string;
  }

  /** A cell of a document: read and written in handlers. */
  export interface Cell<T = any> extends CellBase<T> {
    /** The cell at a field or index (several keys walk down). */
    key<K extends FieldKey<T>>(key: K): Cell<FieldAt<T, K>>;
    key<K1 extends FieldKey<T>, K2 extends FieldKey<FieldAt<T, K1>>>(
      key1: K1,
      key2: K2,
    ): Cell<FieldAt<FieldAt<T, K1>, K2>>;
    key<
      K1 extends FieldKey<T>,
      K2 extends FieldKey<FieldAt<T, K1>>,
      K3 extends FieldKey<FieldAt<FieldAt<T, K1>, K2>>,
    >(key1: K1, key2: K2, key3: K3): Cell<FieldAt<FieldAt<FieldAt<T, K1>, K2>, K3>>;
    /** The cell a link leads to. */
    resolveAsCell(): Cell<T>;
  }
  export type Writable<T = any> = Cell<T>;
  export type OpaqueCell<T = any> = OpaqueRef<T>;
  export type ComparableCell<T = any> = Cell<T>;
  export type ReadonlyCell<T = any> = Cell<T>;
  export type WriteonlyCell<T = any> = Cell<T>;

  type SendArgs<T> = undefined extends T ? [event?: Opaque<T>] : [event: Opaque<T>];

  /** Where events go: a bound handler, an action, a stream field of a piece. */
  export interface Stream<T = any, _Result = unknown> {
    readonly [STREAM_MARK]: T;
    /** Queues an event; it is processed in the next wave. */
    send(...event: SendArgs<T>): void;
  }

  /** Makes cells: `new Writable(v)`, `Cell.of(v)`, `Writable.perSession.of(v)`, ... */
  export interface CellConstructor {
    new <T = any>(initial?: T, schema?: JSONSchema): OpaqueRef<T>;
    <T = any>(initial?: T, schema?: JSONSchema): OpaqueRef<T>;
    of<T = any>(initial?: T, schema?: JSONSchema): OpaqueRef<T>;
    /** Scoped cells of the reference; a space is the one scope here. */
    readonly perSession: ScopedCellConstructor;
    readonly perUser: ScopedCellConstructor;
    readonly perSpace: ScopedCellConstructor;
    /** Whether two cells lead to the same place, or two values are equal. */
    equals(a: unknown, b: unknown): boolean;
  }
  export interface ScopedCellConstructor {
    new <T = any>(initial?: T, schema?: JSONSchema): OpaqueRef<T>;
    <T = any>(initial?: T, schema?: JSONSchema): OpaqueRef<T>;
    of<T = any>(initial?: T, schema?: JSONSchema): OpaqueRef<T>;
  }
  export const Cell: CellConstructor;
  export const Writable: CellConstructor;
  export const OpaqueCell: CellConstructor;
  export const Stream: CellConstructor;
  export const ComparableCell: CellConstructor;
  export const ReadonlyCell: CellConstructor;
  export const WriteonlyCell: CellConstructor;

  // ---- Reactive references --------------------------------------------------
  // In a pattern body, the argument's fields, local cells and the results of
  // lift / derive / computed / str / child patterns are references. Written
  // in the body they become part of the graph (`count * 2`, `list.map(...)`,
  // `a.b.c`), and inside computed / derive / action / JSX they read as their
  // values; spacewake's compiler arranges both. `OpaqueRef<T>` is therefore
  // typed as the value `T` (fields and elements references again) together
  // with the cell methods.

  /** The cell methods of a reference (its `key` gives references). */
  interface RefMethods<T> extends CellBase<T> {
    key<K extends FieldKey<T>>(key: K): KeyRef<FieldAt<T, K>>;
    key<K1 extends FieldKey<T>, K2 extends FieldKey<FieldAt<T, K1>>>(
      key1: K1,
      key2: K2,
    ): KeyRef<FieldAt<FieldAt<T, K1>, K2>>;
    key<
      K1 extends FieldKey<T>,
      K2 extends FieldKey<FieldAt<T, K1>>,
      K3 extends FieldKey<FieldAt<FieldAt<T, K1>, K2>>,
    >(key1: K1, key2: K2, key3: K3): KeyRef<FieldAt<FieldAt<FieldAt<T, K1>, K2>, K3>>;
    resolveAsCell(): KeyRef<T>;
    /** The pattern instantiated per element with `{ element, index, array, params }`. */
    mapWithPattern(pattern: PatternFactory<any, any>, params?: unknown): OpaqueRef<any[]>;
  }
  /** What `key()` gives: a reference, with its methods even where its type is unknown. */
  type KeyRef<T> = IsUnknown<T> extends true ? RefMethods<unknown> : OpaqueRef<T>;

  /** A reactive reference to a value of type `T`. */
  export type OpaqueRef<T> = RefTo<T, []>;
  // `D` counts arrays nested directly in arrays: TypeScript expands an array
  // type's elements at once, so a recursive element type (JSON values) is
  // cut off after a few levels (plain values from there on).
  type RefTo<T, D extends 0[]> = IsAny<T> extends true
    ? any
    : IsUnknown<T> extends true
      ? unknown
      : MakeRef<StripRefs<T>, D>;
  type StripRefs<T> = T extends { readonly [CELL_MARK]: infer U } ? U : T;
  // `V` itself, behind a conditional: TypeScript then widens what it infers
  // for a literal argument (`cell(0)` is a reference to a number, not to 0).
  type Same<V> = V extends unknown ? V : never;
  type MakeRef<V, D extends 0[]> = [V] extends [void | null | undefined]
    ? Same<V>
    : [Extract<V, StreamLike>] extends [never]
      ? [NonNullable<V>] extends [never]
        ? RefMethods<V>
        : RefMethods<V> & View<NonNullable<V>, D>
      : Extract<V, StreamLike>;
  /** A value read through a reference: fields and elements are references too. */
  type View<V, D extends 0[]> = V extends Primitive
    ? V
    : V extends (...args: any[]) => any
      ? V
      : V extends readonly unknown[]
        ? D["length"] extends 4
          ? V
          : { [K in keyof V]-?: RefTo<V[K], [...D, 0]> }
        : { [K in keyof V]-?: RefTo<K extends OptionalKeys<V> ? Exclude<V[K], undefined> : V[K], []> };
  type OptionalKeys<V> = { [K in keyof V]-?: {} extends Pick<V, K> ? K : never }[keyof V];

  /**
   * What may be passed where a `T` is expected (a handler's context, a lift's
   * input, a child pattern's argument, a write): the value, a reference or
   * cell of it, or an object whose fields are any of these.
   */
  export type Opaque<T> = OpaqueTo<T, []>;
  type OpaqueTo<T, D extends 0[]> = IsAny<T> extends true ? any : OpaqueValue<StripRefs<T>, D>;
  type OpaqueValue<T, D extends 0[]> = T | Cell<T> | OpaqueEach<T, D>;
  type OpaqueEach<T, D extends 0[]> = T extends StreamLike
    ? T
    : T extends Primitive
      ? Cell<T>
      : T extends (...args: any[]) => any
        ? T
        : T extends readonly unknown[]
          ? D["length"] extends 4
            ? Cell<T>
            : Cell<T> | { [K in keyof T]: OpaqueTo<T[K], [...D, 0]> }
          : Cell<T> | { [K in keyof T]: OpaqueTo<T[K], []> };
  /** The fields of `T`, each given as `Opaque` (a handler's context, a child's argument). */
  type OpaqueFields<T> = IsAny<T> extends true ? any : { [K in keyof T]: Opaque<T[K]> };

  // ---- Patterns ---------------------------------------------------------------

  /** Marks a pattern whose result type was not declared. */
  interface Undeclared {
    readonly [UNDECLARED_MARK]: true;
  }
  /** A reference to a pattern instance's result (loose where the type is not declared). */
  type ResultRef<O> = [O] extends [Undeclared] ? any : OpaqueRef<O> & { readonly [field: string]: any };
  /**
   * What a pattern body may return: an object with the declared fields (any
   * others too) and well-formed reserved keys. (`object` keeps an object
   * with none of the reserved keys acceptable.)
   */
  type PatternBody<O> = [O] extends [Undeclared] ? ReservedKeys & object : OpaqueFields<O> & ReservedKeys;
  /** A pattern body's argument: references to the argument's fields, and `[SELF]`. */
  export type PatternArgument<A, O = Undeclared> = OpaqueRef<A> & { readonly [SELF]: ResultRef<O> };

  /** A pattern: called in a pattern body (or a handler) with its argument, it gives its result. */
  export interface PatternFactory<A = any, O = any> {
    (argument?: IsAny<A> extends true ? any : { [K in keyof A]?: Opaque<A[K]> }): ResultRef<O>;
  }
  export type Pattern<A = any, O = any> = PatternFactory<A, O>;
  export type Recipe<A = any, O = any> = PatternFactory<A, O>;

  /**
   * Declares a pattern. `A` is the argument's type (fields typed
   * `Default<T, V>` take `V` when not given), `O` the result's, if declared.
   */
  export function pattern<A = any, O = Undeclared>(
    body: (argument: PatternArgument<A, O>) => NoInfer<PatternBody<O>>,
  ): PatternFactory<A, O>;
  export function pattern<A = any, O = Undeclared>(
    name: string,
    body: (argument: PatternArgument<A, O>) => NoInfer<PatternBody<O>>,
  ): PatternFactory<A, O>;
  /** The reference's older name for `pattern`. */
  export const recipe: typeof pattern;

  // ---- Handlers and actions ---------------------------------------------------

  /** A declared handler: bound to a context (`inc({ count })`), it is a stream of events. */
  export type HandlerFactory<E = any, C = any> = (
    ...context: {} extends OpaqueFields<C> ? [context?: OpaqueFields<C>] : [context: OpaqueFields<C>]
  ) => Stream<E>;

  /**
   * Declares a handler: `fn(event, context)` runs for each event, with the
   * context's `Cell`/`Writable` fields as cells it can write.
   */
  export function handler<E = any, C = any, _Result = unknown>(fn: (event: E, context: C) => unknown): HandlerFactory<E, C>;
  /** The reference's schema-first form: `handler(eventSchema, contextSchema, fn)`. */
  export function handler<E = any, C = any, _Result = unknown>(
    eventSchema: TypedSchema<E> | JSONSchema,
    contextSchema: TypedSchema<C> | JSONSchema,
    fn: (event: E, context: C) => unknown,
  ): HandlerFactory<E, C>;

  /** A stream whose handler is `fn`; the body values it uses are its context. */
  export function action<E = void, _Result = unknown>(fn: (event: E) => unknown): Stream<E>;

  // ---- Derivations --------------------------------------------------------------

  /** A lifted function: applied to references, it is a derivation of them. */
  export type ModuleFactory<A = any, R = any> = (
    ...input: undefined extends A ? [input?: Opaque<A>] : [input: Opaque<A>]
  ) => OpaqueRef<R>;
  export type Lifted<A = any, R = any> = ModuleFactory<A, R>;

  /** Lifts `fn` over references: `lift(fn)(input)` recomputes when the input changes. */
  export function lift<A = any, R = any>(fn: (input: A) => R): ModuleFactory<A, R>;
  /** The reference's schema-first form: `lift(argumentSchema, resultSchema, fn)`. */
  export function lift<A = any, R = any>(
    argumentSchema: TypedSchema<A> | JSONSchema,
    resultSchema: TypedSchema<R> | JSONSchema,
    fn: (input: A) => R,
  ): ModuleFactory<A, R>;

  /** `fn` over `input` (a reference, or an object or array of them), recomputed when it changes. */
  export function derive<In extends readonly unknown[] | [], R>(input: In, fn: (input: In) => R): OpaqueRef<R>;
  export function derive<In, R>(input: In, fn: (input: In) => R): OpaqueRef<R>;

  /** A value computed from the references `fn` reads, recomputed when they change. */
  export function computed<T>(fn: () => T): OpaqueRef<T>;

  /** A string template over references: str`${count} items`. */
  export function str(strings: TemplateStringsArray, ...values: unknown[]): OpaqueRef<string>;

  /** `ifTrue` when `condition` is truthy, else `ifFalse`. */
  export function ifElse<T, F>(condition: unknown, ifTrue: T, ifFalse: F): OpaqueRef<StripRefs<T> | StripRefs<F>>;
  /** `value` when `condition` is truthy, else the condition (as `&&`). */
  export function when<C, V>(condition: C, value: V): OpaqueRef<StripRefs<C> | StripRefs<V>>;
  /** The condition when it is truthy, else `fallback` (as `||`). */
  export function unless<C, V>(condition: C, fallback: V): OpaqueRef<StripRefs<C> | StripRefs<V>>;

  /** A cell local to the piece (in a handler: a new document). */
  export function cell<T = any>(initial?: T, schema?: JSONSchema): OpaqueRef<T>;

  /** Whether two cells lead to the same place, or two values are equal. */
  export function equals(a: unknown, b: unknown): boolean;

  /** `T`'s schema; the compiler puts it in place of the call. */
  export function toSchema<T>(): TypedSchema<T>;
  /** A schema written by hand, kept as written (its type is `Schema<typeof s>`). */
  export function schema<const S extends JSONSchema>(s: S): S;

  // ---- JSX --------------------------------------------------------------------

  /** A rendered element: plain data. */
  export interface VNode {
    type: "vnode";
    name: string | ((props: any) => unknown);
    props: { [attribute: string]: unknown };
    children: unknown[];
  }
  /** A function component. */
  export type Component<P = any> = (props: P) => unknown;

  /** The JSX factory (`<div a={1}>x</div>` is `h("div", { a: 1 }, "x")`). */
  export function h(
    tag: string | Component,
    props: { readonly [attribute: string]: unknown } | null,
    ...children: unknown[]
  ): VNode;
  export namespace h {
    /** The tag of a fragment (`<>...</>`). */
    const fragment: "fragment";
  }

  export interface UiHelperProps {
    /** The element to render instead of the default one. */
    as?: string;
    children?: unknown;
    [attribute: string]: unknown;
  }
  /** A button carrying `data-ui-action`. */
  export function UiAction(props: UiHelperProps & { action?: string }): VNode;
  /** A text area carrying `data-ui-surface` / `data-ui-role`. */
  export function UiPromptSlot(props: UiHelperProps & { surface?: string; role?: string }): VNode;
  /** A card carrying `data-ui-disclosure-kind`. */
  export function UiDisclosure(props: UiHelperProps & { kind?: string }): VNode;
  /** A piece rendered in one of its variants ("full" by default). */
  export function uiVariant(piece: unknown, kind?: string): VNode;

  // ---- Builtins: wishes, fetches, models ----------------------------------------
  // In a pattern body each is a node of the graph whose state is a reference;
  // in a handler or derivation it answers its state at once.

  /** The state of an effect: pending until answered, then a result or an error. */
  export interface EffectState<T> {
    pending: boolean;
    result?: T;
    error?: any;
    requestHash?: string;
  }

  export interface WishParams {
    /** `#now`, `#now/N`, `#pieceRegistry`, `#default`, ... */
    query: string;
    /** A path below what the query names. */
    path?: readonly (string | number)[];
    context?: { [name: string]: unknown };
    scope?: readonly string[];
    schema?: JSONSchema;
    [option: string]: unknown;
  }
  export interface WishState<T> {
    result?: T;
    candidates: T[];
    error?: string;
  }
  /** Asks the space for something by tag (`#now/60`, `#pieceRegistry`, ...). */
  export function wish<T = any>(target: string | WishParams): OpaqueRef<WishState<T>>;

  export interface FetchOptions {
    method?: string;
    headers?: { [name: string]: string };
    body?: unknown;
    [option: string]: unknown;
  }
  export interface FetchParams {
    url: Opaque<string>;
    mode?: "json" | "text";
    options?: Opaque<FetchOptions>;
    [option: string]: unknown;
  }
  export interface BinaryResult {
    bytes: number[];
    mediaType: string;
  }
  /** GETs (or sends) a request through the host's broker and parses JSON (checked against `T`). */
  export function fetchJson<T = any>(params: FetchParams): OpaqueRef<EffectState<T>>;
  export function fetchJsonUnchecked<T = any>(params: FetchParams): OpaqueRef<EffectState<T>>;
  export function fetchData<T = any>(params: FetchParams): OpaqueRef<EffectState<T>>;
  export function fetchText(params: FetchParams): OpaqueRef<EffectState<string>>;
  export function fetchBinary(params: FetchParams): OpaqueRef<EffectState<BinaryResult>>;
  /** Not available here: answers its settled error state. */
  export function fetchProgram(params?: unknown): OpaqueRef<EffectState<any>>;
  /** Not available here: answers its settled error state. */
  export function streamData(params?: unknown): OpaqueRef<EffectState<any>>;

  export interface ModelParams {
    prompt?: Opaque<string>;
    messages?: Opaque<readonly unknown[]>;
    system?: Opaque<string>;
    model?: Opaque<string>;
    maxTokens?: Opaque<number>;
    [option: string]: unknown;
  }
  /** A text answer of the operator's model endpoint. */
  export function generateText(params: ModelParams): OpaqueRef<EffectState<string>>;
  /** An object of type `T` from the model (its schema is `T`'s). */
  export function generateObject<T = any>(params: ModelParams): OpaqueRef<EffectState<T>>;
  export function llm(params: ModelParams): OpaqueRef<EffectState<any>>;
  /** Not available here: answers its settled error state. */
  export function llmDialog(params?: unknown): OpaqueRef<EffectState<any>>;

  /** Not available here: programs are compiled by the host at deploy. */
  export function compileAndRun(params?: unknown): OpaqueRef<EffectState<any> & { errors: unknown[] }>;
  /** Not available here: calling it throws. */
  export function resultOf(...args: unknown[]): never;
  /** There is no shell to navigate: answers `false`. */
  export function navigateTo(target: unknown): OpaqueRef<boolean>;
  /** A cell of another space: not reachable here (its state says so). */
  export function cellFromUrl(params?: unknown): OpaqueRef<{ pending: boolean; cell?: unknown; error?: string }>;
  /** The confidentiality label of a value: none are kept here. */
  export function inspectConfLabel(value?: unknown): OpaqueRef<{ status: "notAvailable" }>;

  /** A pattern offered to a model as a tool, with parameters filled in beforehand. */
  export interface PatternToolResult<X = {}> {
    pattern: PatternFactory<any, any>;
    extraParams: X;
  }
  /** A tool description of a pattern for a model call. */
  export function patternTool<X = {}>(pattern: PatternFactory<any, any>, extraParams?: X): PatternToolResult<X>;

  /** The text of a file of the program (`dataFile("./data/x.json")`), read at compile time. */
  export function dataFile(path: string): string;

  /** Where the serving host answers. */
  export function getPatternEnvironment(): { readonly apiUrl: URL };

  // ---- SQLite (no database here: tables are schemas, queries answer errors) -----

  export type SqlColumn = string | { sqlType?: string; cfLink?: boolean; [keyword: string]: unknown };
  export interface RowLabel {
    kind: string;
    [field: string]: unknown;
  }
  export interface TableSchema {
    type: "object";
    properties: { [column: string]: JSONSchemaObject & { sqlType: string; cfLink?: boolean } };
    required: string[];
    rowLabel?: unknown;
    rowLabelReadClearance?: boolean;
  }
  export function table(
    columns: { readonly [column: string]: SqlColumn },
    rowLabel?: (fields: { [column: string]: { field: string } }) => unknown,
    options?: { allowReadClearance?: boolean },
  ): TableSchema;
  export function cfLink(): { type: "string"; cfLink: true; sqlType: "text" };
  export const cfSqlite: {
    table: typeof table;
    cfLink: typeof cfLink;
    match(field: string | { field: string }, pattern: RegExp | string, options?: unknown): RowLabel;
    principal(protocol: string, of: unknown): RowLabel;
    all(...terms: unknown[]): RowLabel;
    any(...terms: unknown[]): RowLabel;
    intersect(...terms: unknown[]): RowLabel;
    whenMatches(field: string | { field: string }, pattern: RegExp | string, then: unknown): RowLabel;
    dbOwner(): RowLabel;
    endorsedBy(principal: unknown): RowLabel;
    authoredBy(principal: unknown): RowLabel;
    constant(atom: unknown): RowLabel;
  };
  export interface SqliteDatabase {
    query<Row = any>(...args: unknown[]): OpaqueRef<EffectState<Row[]>>;
    /** Throws: a piece has no SQL database. */
    exec(...args: unknown[]): never;
  }
  export const sqliteDatabase: {
    (...args: unknown[]): SqliteDatabase;
    asScope(...args: unknown[]): (...args: unknown[]) => SqliteDatabase;
  };
  export function sqliteQuery(...args: unknown[]): OpaqueRef<EffectState<any>>;

  // ---- Pattern tests ----------------------------------------------------------

  /** The record an assertion derives: whether it held, its source and its operands. */
  export interface AssertionRecord {
    ok: boolean;
    source: string;
    parts: { src: string; rendered: string }[];
  }
  /** An assertion of a pattern test: `{ assertion: assert(() => c.value === 2) }`. */
  export function assert(check: () => boolean): OpaqueRef<AssertionRecord>;
  /** A multi-user test descriptor (not run by spacewake). */
  export function multiUserTest<T>(descriptor: T): T;

  // ---- Nodes, entities, values --------------------------------------------------

  export type NodeFactory = (...args: any[]) => any;
  /** A lift of a JavaScript function, or a builtin named by reference. */
  export function createNodeFactory(
    spec: { type: "javascript"; implementation: (input: any) => any } | { type: "ref"; implementation: string },
  ): NodeFactory;
  /** A builtin node by name (`byRef("fetchJson")`). */
  export function byRef(ref: string): NodeFactory;

  export interface EntityId {
    "/": string;
  }
  /** The document a cell or reference is in, as `{ "/": id }`. */
  export function getEntityId(value: unknown): EntityId | undefined;
  export function entityRefToString(ref: EntityId | string): string;

  /** Structural equality of plain data. */
  export function valueEqual(a: unknown, b: unknown): boolean;
  /** A one-line rendering of any value, cut to `maxLength`. */
  export function toCompactDebugString(value: unknown, maxLength?: number): string;
  /** An indented rendering of any value. */
  export function toIndentedDebugString(value: unknown): string;

  /** Schema of an OAuth token. */
  export const AuthSchema: JSONSchemaObject;
  /** Schema of a webhook's settings. */
  export const WebhookConfigSchema: JSONSchemaObject;

  // Special values of the reference's data model (stored here as their JSON form).
  export abstract class FabricSpecialObject {}
  export class FabricInstance extends FabricSpecialObject {}
  export class FabricPrimitive extends FabricSpecialObject {}
  export class FabricEpochNsec extends FabricPrimitive {
    constructor(value: bigint | number);
    readonly value: bigint | number;
    toJSON(): unknown;
  }
  export class FabricEpochDay extends FabricPrimitive {
    constructor(value: number);
    readonly value: number;
    toJSON(): unknown;
  }
  export class FabricHash extends FabricPrimitive {
    constructor(hash: string);
    readonly hash: string;
    toJSON(): unknown;
  }
  export class FabricBytes extends FabricPrimitive {
    constructor(bytes: Uint8Array | readonly number[]);
    readonly bytes: Uint8Array | readonly number[];
    toJSON(): unknown;
  }
  export class FabricRegExp extends FabricPrimitive {
    constructor(source: string);
    readonly source: string;
    toJSON(): unknown;
  }
  export class FabricKeyPair extends FabricPrimitive {
    constructor(publicKey: unknown);
    readonly publicKey: unknown;
    toJSON(): unknown;
  }
  export class FabricLink extends FabricInstance {
    constructor(link: unknown);
    readonly link: unknown;
    toJSON(): unknown;
  }
  export class FabricError extends FabricInstance {
    constructor(error: unknown);
    readonly name: string;
    readonly message: string;
    toJSON(): { name: string; message: string };
  }

  export const FABRIC_SPECIAL_OBJECT_BRAND: "@commonfabric/FabricSpecialObject";
  export const MERGEABLE_OP_METHODS: readonly {
    readonly method: "push" | "addUnique" | "removeByValue" | "increment";
    readonly wireOp: string;
    readonly kind: "array-identity-writer" | "scalar-writer";
  }[];
  export type FabricPrimitiveSchemaType =
    | "FabricBytes"
    | "FabricEpochDay"
    | "FabricEpochNsec"
    | "FabricHash"
    | "FabricKeyPair"
    | "FabricRegExp";
  export const FABRIC_PRIMITIVE_SCHEMA_TYPES: readonly FabricPrimitiveSchemaType[];
  export function isFabricPrimitiveSchemaType(t: unknown): t is FabricPrimitiveSchemaType;
  export const CFC_CANONICAL_ALIAS_NAMES: readonly string[];

  // ---- Type-only names of the reference (values are `undefined` at run time) -----

  export const Default: undefined;
  export const OpaqueRef: undefined;
  export const VNode: undefined;

  // ---- More type-only names of the reference -----------------------------------
  // Confidentiality and integrity labels, and cell scopes: spacewake keeps no
  // labels and has one scope (the space), so each wrapper is the type it
  // wraps, whatever labels follow it.

  export type Cfc<T, _Label = unknown> = T;
  export type Confidential<T, _Labels = unknown> = T;
  export type Integrity<T, _Labels = unknown> = T;
  export type AddIntegrity<T, _Labels = unknown> = T;
  export type RequiresIntegrity<T, _Labels = unknown> = T;
  export type MaxConfidentiality<T, _Labels = unknown> = T;
  export type RepresentsCurrentUser<T> = T;
  export type AuthoredByCurrentUser<T> = T;
  export type WriteAuthorizedBy<T, _Binding = unknown> = T;
  export type ExactCopy<T, _Path = unknown> = T;
  export type TrustedActionWrite<T, _Binding = unknown, _Action = unknown, _Pattern = unknown> = T;
  export type TrustedActionWriteWithIntegrity<
    T,
    _Binding = unknown,
    _Action = unknown,
    _Pattern = unknown,
    _Integrity = unknown,
  > = T;
  export type TrustedActionUiContract<T, _Action = unknown, _Pattern = unknown, _Integrity = unknown> = T;
  export type ProjectionPath<T, _From = unknown, _Path = unknown> = T;
  export type ProjectionOf<Root, _Path = unknown> = Root;
  export type Projection<_Source = unknown> = unknown;
  /** Label atoms (inert here). */
  export type AnyOf<_Atoms = unknown> = unknown;
  export type PolicyOf<_Rules = unknown> = unknown;
  /** Stands for the acting user in a label (inert here). */
  export type CurrentPrincipal = object;

  export type Scoped<T, _Scope = unknown> = T;
  export type PerSpace<T> = T;
  export type PerUser<T> = T;
  export type PerSession<T> = T;
  export type PerAny<T> = T;

  /** A value a pattern reads reactively (as written). */
  export type Reactive<T> = T;
  /** A tool input the framework fills in. */
  export type FrameworkProvided<T> = T;
  export type AnyCell<T = unknown> = Cell<T>;
  export type DID = `did:${string}:${string}`;
  /** Anything with a view. */
  export interface UIRenderable {
    [UI]: VNode;
  }

  /** Messages, content and tools of a model conversation. */
  export interface BuiltInLLMContentPart {
    type: string;
    [field: string]: unknown;
  }
  export type BuiltInLLMContent = string | BuiltInLLMContentPart[];
  export interface BuiltInLLMMessage {
    role: "user" | "assistant" | "system" | "tool";
    content: BuiltInLLMContent;
  }
  export interface BuiltInLLMTool {
    description?: string;
    pattern?: PatternFactory<any, any>;
    handler?: Stream<any>;
    extraParams?: { [name: string]: unknown };
    useResultSchemaForObservation?: boolean;
  }
  /** An image as the reference's UI components describe it. */
  export interface ImageData {
    id: string;
    name: string;
    url: string;
    data: string;
    timestamp: number;
    size: number;
    type: string;
    width?: number;
    height?: number;
    exif?: { [tag: string]: unknown };
  }
  export type SqliteDb<_Tables = unknown> = SqliteDatabase;

  // ---- Compiler helpers ----------------------------------------------------------
  // The pattern compiler's output calls these; patterns do not.

  /** @internal compiler helper */
  export function __asCell<T>(value: T): T;
  /** @internal compiler helper */
  export function __captures<C>(captures: C): object;
  /** @internal compiler helper */
  export function __assertWith(
    source: string,
    partSources: readonly string[],
  ): (check: (captures?: any) => unknown, captures?: unknown) => OpaqueRef<AssertionRecord>;
  /** @internal compiler helper */
  export function __named<T>(name: string, value: T): T;
  /** @internal compiler helper */
  export function __part<T>(index: number, value: T): T;
  /** @internal compiler helper */
  export function __inlineAction(
    fn: (event: any, captures: any) => unknown,
    captures?: object,
    cellKeys?: readonly string[],
  ): Stream<any>;
  /** @internal compiler helper (also the reference's `__cfHelpers`: the API as one object) */
  export const __cfHelpers: CommonFabricApi;
  /** @internal compiler helper (the reference's deep-frozen data literal) */
  export function __cf_data<T>(value: T): T;

  // ---- The default export: the API as one object (`import cf from "commonfabric"`) ----

  export interface CommonFabricApi {
    NAME: typeof NAME;
    UI: typeof UI;
    SCHEDULE: typeof SCHEDULE;
    TYPE: typeof TYPE;
    SELF: typeof SELF;
    ID: typeof ID;
    ID_FIELD: typeof ID_FIELD;
    TILE_UI: typeof TILE_UI;
    CHIP_UI: typeof CHIP_UI;
    FS: typeof FS;
    TESTS: typeof TESTS;
    lift: typeof lift;
    derive: typeof derive;
    computed: typeof computed;
    str: typeof str;
    cell: typeof cell;
    handler: typeof handler;
    action: typeof action;
    pattern: typeof pattern;
    recipe: typeof recipe;
    h: typeof h;
    ifElse: typeof ifElse;
    when: typeof when;
    unless: typeof unless;
    Cell: CellConstructor;
    Writable: CellConstructor;
    OpaqueCell: CellConstructor;
    Stream: CellConstructor;
    ComparableCell: CellConstructor;
    ReadonlyCell: CellConstructor;
    WriteonlyCell: CellConstructor;
    equals: typeof equals;
    toSchema: typeof toSchema;
    schema: typeof schema;
    wish: typeof wish;
    navigateTo: typeof navigateTo;
    generateText: typeof generateText;
    generateObject: typeof generateObject;
    llm: typeof llm;
    llmDialog: typeof llmDialog;
    fetchData: typeof fetchData;
    fetchJson: typeof fetchJson;
    fetchJsonUnchecked: typeof fetchJsonUnchecked;
    fetchText: typeof fetchText;
    fetchBinary: typeof fetchBinary;
    fetchProgram: typeof fetchProgram;
    streamData: typeof streamData;
    compileAndRun: typeof compileAndRun;
    resultOf: typeof resultOf;
    patternTool: typeof patternTool;
    cellFromUrl: typeof cellFromUrl;
    dataFile: typeof dataFile;
    cfLink: typeof cfLink;
    table: typeof table;
    cfSqlite: typeof cfSqlite;
    sqliteDatabase: typeof sqliteDatabase;
    sqliteQuery: typeof sqliteQuery;
    inspectConfLabel: typeof inspectConfLabel;
    uiVariant: typeof uiVariant;
    UiAction: typeof UiAction;
    UiPromptSlot: typeof UiPromptSlot;
    UiDisclosure: typeof UiDisclosure;
    multiUserTest: typeof multiUserTest;
    createNodeFactory: typeof createNodeFactory;
    byRef: typeof byRef;
    getEntityId: typeof getEntityId;
    entityRefToString: typeof entityRefToString;
    getPatternEnvironment: typeof getPatternEnvironment;
    valueEqual: typeof valueEqual;
    toCompactDebugString: typeof toCompactDebugString;
    toIndentedDebugString: typeof toIndentedDebugString;
    __cf_data: typeof __cf_data;
    __cfHelpers: CommonFabricApi;
    AuthSchema: typeof AuthSchema;
    WebhookConfigSchema: typeof WebhookConfigSchema;
    FabricSpecialObject: typeof FabricSpecialObject;
    FabricInstance: typeof FabricInstance;
    FabricPrimitive: typeof FabricPrimitive;
    FabricEpochNsec: typeof FabricEpochNsec;
    FabricEpochDay: typeof FabricEpochDay;
    FabricHash: typeof FabricHash;
    FabricLink: typeof FabricLink;
    FabricBytes: typeof FabricBytes;
    FabricRegExp: typeof FabricRegExp;
    FabricKeyPair: typeof FabricKeyPair;
    FabricError: typeof FabricError;
    assert: typeof assert;
    FABRIC_SPECIAL_OBJECT_BRAND: typeof FABRIC_SPECIAL_OBJECT_BRAND;
    MERGEABLE_OP_METHODS: typeof MERGEABLE_OP_METHODS;
    FABRIC_PRIMITIVE_SCHEMA_TYPES: typeof FABRIC_PRIMITIVE_SCHEMA_TYPES;
    isFabricPrimitiveSchemaType: typeof isFabricPrimitiveSchemaType;
    CFC_CANONICAL_ALIAS_NAMES: typeof CFC_CANONICAL_ALIAS_NAMES;
  }
  const commonfabric: CommonFabricApi;
  export default commonfabric;
}

// ---------------------------------------------------------------------------
// "commonfabric/cfc": the vocabulary of confidentiality and integrity labels.
// This server enforces no labels: all of it is inert, frozen data.
// ---------------------------------------------------------------------------

declare module "commonfabric/cfc" {
  export {};

  // The label wrappers (types only; identities here).
  export type {
    AddIntegrity,
    AnyOf,
    AuthoredByCurrentUser,
    Cfc,
    Confidential,
    CurrentPrincipal,
    ExactCopy,
    Integrity,
    MaxConfidentiality,
    PolicyOf,
    Projection,
    ProjectionOf,
    ProjectionPath,
    RepresentsCurrentUser,
    RequiresIntegrity,
    TrustedActionUiContract,
    TrustedActionWrite,
    TrustedActionWriteWithIntegrity,
    WriteAuthorizedBy,
  } from "commonfabric";

  export type CfcAtomTypeName =
    | "BoundaryContext"
    | "Builtin"
    | "Caveat"
    | "CaveatAssessment"
    | "CaveatScreened"
    | "Concept"
    | "Context"
    | "DisclaimerAttached"
    | "DisclosureAcknowledged"
    | "DisclosureRendered"
    | "Expires"
    | "ExternalIngest"
    | "HasRole"
    | "InjectionSafe"
    | "LinkReference"
    | "LlmDerived"
    | "Origin"
    | "Policy"
    | "PolicyCertified"
    | "PersonalSpace"
    | "PromptSlotBound"
    | "PromptSlotInfluence"
    | "Resource"
    | "Space"
    | "TransformedBy"
    | "User"
    | "UserSurfaceInput";
  /** An atom type's URI. */
  export type CfcAtomType<N extends CfcAtomTypeName = CfcAtomTypeName> = `https://commonfabric.org/cfc/atom/${N}`;
  /** A label atom: its type and its fields. */
  export interface CfcAtom<N extends CfcAtomTypeName = CfcAtomTypeName> {
    readonly type: CfcAtomType<N>;
    readonly [field: string]: unknown;
  }
  /** A pattern variable of an exchange rule. */
  export interface CfcVariable<N extends string = string> {
    readonly var: N;
  }

  export const CFC_ATOM_TYPE: { readonly [N in CfcAtomTypeName]: CfcAtomType<N> };
  export const CFC_RUNTIME_SUBJECT: "did:web:commonfabric.org#runtime";
  export const CFC_COMPILED_BY_ATOM_PREFIX: "cf-compiled-by:";
  export const CFC_COMPILED_BY_ATOM: "cf-compiled-by:cf-compiler";
  export const CFC_CONCEPT_KIND: {
    readonly PromptInfluence: string;
    readonly PromptInjectionRiskIngressScreened: string;
    readonly PromptInjectionRiskUnscreened: string;
    readonly PromptInjectionRiskValueScreened: string;
  };
  export const CFC_FUSE_ATOM_CLASS: {
    readonly ProjectionMetadataIncomplete: "CommonFabricFuseProjectionMetadataIncomplete";
    readonly SymlinkTarget: "CommonFabricFuseSymlinkTarget";
    readonly TopologyObservation: "FilesystemTopologyObservation";
  };
  export const CFC_CANONICAL_ALIAS_NAMES: readonly string[];

  /** A pattern variable (a non-empty name). */
  export function v<N extends string>(name: N): CfcVariable<N>;
  /** The policy a module-policy reference selects. */
  export const THIS_POLICY: { readonly thisPolicy: true; readonly subject: { readonly thisPolicyField: "subject" } };
  /** Atoms with pattern variables, for exchange rules. */
  export const cfcPattern: {
    user(subject: unknown): CfcAtom<"User">;
    hasRole(principal: unknown, space: unknown, role: unknown): CfcAtom<"HasRole">;
  };
  export function exchangeRule<R>(rule: R): Readonly<R>;
  export function exchangeRules<R>(rules: readonly R[]): readonly R[];

  type Fields = { readonly [field: string]: unknown };
  /** Atom constructors. */
  export const cfcAtom: {
    resource(className: string, subject?: unknown, scope?: unknown): CfcAtom<"Resource">;
    caveat(kind: unknown, source?: unknown, by?: unknown): CfcAtom<"Caveat">;
    builtin(name: string): CfcAtom<"Builtin">;
    injectionSafe(): CfcAtom<"InjectionSafe">;
    llmDerived(model?: string): CfcAtom<"LlmDerived">;
    userSurfaceInput(user: unknown, surface: unknown, valueDigest: unknown): CfcAtom<"UserSurfaceInput">;
    externalIngest(channel: unknown, audience: unknown, receivedAt: unknown, valueDigest: unknown): CfcAtom<"ExternalIngest">;
    promptSlotBound(
      source: unknown,
      role: unknown,
      kernelName: unknown,
      subject: unknown,
      surface: unknown,
      valueDigest: unknown,
    ): CfcAtom<"PromptSlotBound">;
    user(subject: unknown): CfcAtom<"User">;
    policyRef(name: string, subject: unknown, hash: unknown): CfcAtom<"Policy">;
    contextRef(name: string, subject: unknown, hash: unknown): CfcAtom<"Context">;
    modulePolicyRef(moduleIdentity: unknown, symbol: unknown, policyDigest: unknown, subject?: unknown): CfcAtom<"Policy">;
    space(id: unknown): CfcAtom<"Space">;
    personalSpace(owner: unknown): CfcAtom<"PersonalSpace">;
    expires(timestamp: unknown): CfcAtom<"Expires">;
    hasRole(principal: unknown, space: unknown, role: unknown): CfcAtom<"HasRole">;
    boundaryContext(key: unknown, value: unknown, ref?: unknown): CfcAtom<"BoundaryContext">;
    caveatScreened(fields?: Fields): CfcAtom<"CaveatScreened">;
    disclosureRendered(fields?: Fields): CfcAtom<"DisclosureRendered">;
    disclosureAcknowledged(fields?: Fields): CfcAtom<"DisclosureAcknowledged">;
    disclaimerAttached(fields?: Fields): CfcAtom<"DisclaimerAttached">;
    caveatAssessment(fields?: Fields): CfcAtom<"CaveatAssessment">;
    concept(uri: string): CfcAtom<"Concept">;
  };
}

// "commonfabric/cfc-authoring": the same vocabulary under the reference's other name.
declare module "commonfabric/cfc-authoring" {
  export * from "commonfabric/cfc";
}

// "commonfabric/schema": types only (it has no values at run time).
declare module "commonfabric/schema" {
  export type { JSONSchema, JSONSchemaObject, JSONSchemaTypeName, JSONValue, Schema, TypedSchema } from "commonfabric";
}
