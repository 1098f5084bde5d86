#!/usr/bin/env node
// Generates TypeScript types from the protocol's JSON Schemas
// (schema/protocol/*.schema.json) into src/generated/, one module per
// schema file.
//
// Written here rather than taken from npm: the schemas use a small subset
// of JSON Schema (object, array, enum, const, oneOf/anyOf, $ref into
// $defs), and the general generators bring dozens of dependencies and
// emit names and layouts we would then have to pin. A page of mapping
// keeps the output readable, and stable across versions of nothing.
//
// Besides types, each module exports what a client needs at run time:
// the `type` names of its root union (`CLIENT_MESSAGE_TYPES`), and every
// string enum or constant found on a property of a definition
// (`ERROR_CODE_VALUES`, `CHALLENGE_PROTOCOL`), so the client checks the
// wire against the schema's values, not copies of them.
//
//   node scripts/generate-types.mjs          writes src/generated/*.ts
//   node scripts/generate-types.mjs --check  exits 1 when they are stale

import { readFileSync, readdirSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const PACKAGE_DIR = resolve(here, "..");
export const SCHEMA_DIR = resolve(PACKAGE_DIR, "../../schema/protocol");
export const OUT_DIR = join(PACKAGE_DIR, "src/generated");

// Names a definition may not take as is: they would shadow a global the
// client's own code uses.
const GLOBALS = new Set([
  "Error", "Object", "Array", "String", "Number", "Boolean", "Map", "Set",
  "Date", "Promise", "Symbol", "Record", "Function", "JSON", "Response", "Request",
]);

const pascal = (s) =>
  s.replace(/(^|[-_\s])([a-z0-9])/gi, (_, __, c) => c.toUpperCase()).replace(/^[a-z]/, (c) => c.toUpperCase());
const screaming = (s) => s.replace(/([a-z0-9])([A-Z])/g, "$1_$2").replace(/[-\s]/g, "_").toUpperCase();
const isIdent = (s) => /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(s);

function comment(text, indent) {
  if (!text) return "";
  const lines = text.replace(/\*\//g, "*\\/").split("\n");
  if (lines.length === 1) return `${indent}/** ${lines[0]} */\n`;
  return `${indent}/**\n${lines.map((l) => (l ? `${indent} * ${l}` : `${indent} *`)).join("\n")}\n${indent} */\n`;
}

/** One schema file's module. */
function generateModule(fileName, schema) {
  const stem = fileName.replace(/\.schema\.json$/, "");
  const defs = schema.$defs ?? {};
  const rootRefs = (schema.oneOf ?? []).map((s) => s.$ref?.replace("#/$defs/", "")).filter(Boolean);
  const rootName = schema.oneOf ? pascal(stem.replace(/-messages$/, "-message")) : null;

  // Definition name → type name. Members of the root union are messages.
  const names = new Map();
  for (const def of Object.keys(defs)) {
    let name = pascal(def);
    if (rootRefs.includes(def)) name += "Message";
    else if (GLOBALS.has(name)) name = pascal(stem) + name;
    names.set(def, name);
  }

  const hoisted = []; // [typeName, valuesConstName, values, description]
  const hoistedNames = new Map(); // property schema → its hoisted type name
  const constants = []; // [constName, value]

  function ref(r) {
    const m = /^#\/\$defs\/(.+)$/.exec(r);
    if (!m || !names.has(m[1])) throw new Error(`${fileName}: unsupported $ref ${r}`);
    return names.get(m[1]);
  }

  function union(parts) {
    const uniq = [...new Set(parts)];
    return uniq.length === 1 ? uniq[0] : uniq.map((p) => (p.includes(" & ") ? `(${p})` : p)).join(" | ");
  }

  function objectType(s, indent) {
    const props = s.properties ?? {};
    const required = new Set(s.required ?? []);
    const lines = [];
    for (const [key, sub] of Object.entries(props)) {
      const k = isIdent(key) ? key : JSON.stringify(key);
      lines.push(comment(sub.description, indent + "  ") + `${indent}  ${k}${required.has(key) ? "" : "?"}: ${type(sub, indent + "  ")};`);
    }
    const extra = s.additionalProperties;
    if (extra !== false && (extra !== undefined || Object.keys(props).length === 0)) {
      const t = extra === undefined || extra === true ? "unknown" : type(extra, indent + "  ");
      // An index signature must admit every named property's type.
      lines.push(`${indent}  [key: string]: ${Object.keys(props).length ? "unknown" : t};`);
    }
    return lines.length ? `{\n${lines.join("\n")}\n${indent}}` : "Record<string, never>";
  }

  function type(s, indent = "") {
    if (hoistedNames.has(s)) return hoistedNames.get(s);
    if (s === true || (typeof s === "object" && Object.keys(s).filter((k) => k !== "description").length === 0)) return "unknown";
    if (s.$ref) return ref(s.$ref);
    if ("const" in s) return JSON.stringify(s.const);
    if (s.enum) return union(s.enum.map((v) => JSON.stringify(v)));
    if (s.oneOf || s.anyOf) {
      const branches = union((s.oneOf ?? s.anyOf).map((b) => type(b, indent)));
      const rest = { ...s };
      delete rest.oneOf;
      delete rest.anyOf;
      if (!rest.type && !rest.properties) return branches;
      return `${type(rest, indent)} & (${branches})`;
    }
    const types = Array.isArray(s.type) ? s.type : s.type ? [s.type] : s.properties ? ["object"] : [];
    if (types.length === 0) return "unknown";
    return union(
      types.map((t) => {
        switch (t) {
          case "string":
            return "string";
          case "integer":
          case "number":
            return "number";
          case "boolean":
            return "boolean";
          case "null":
            return "null";
          case "array":
            if (s.prefixItems) return `[${s.prefixItems.map((i) => type(i, indent)).join(", ")}]`;
            return s.items ? `${wrap(type(s.items, indent))}[]` : "unknown[]";
          case "object":
            return objectType(s, indent);
          default:
            throw new Error(`${fileName}: unsupported type ${t}`);
        }
      }),
    );
  }

  const wrap = (t) => (/[|&]/.test(t) ? `(${t})` : t);

  // Hoist string enums and constants on a definition's own properties, so
  // they have a name and a run-time list of values.
  for (const [def, s] of Object.entries(defs)) {
    for (const [prop, sub] of Object.entries(s.properties ?? {})) {
      if (Array.isArray(sub.enum) && sub.enum.every((v) => typeof v === "string")) {
        const typeName = pascal(def) + pascal(prop);
        hoisted.push([typeName, `${screaming(typeName)}_VALUES`, sub.enum, sub.description]);
        hoistedNames.set(sub, typeName);
      } else if (prop !== "type" && typeof sub.const === "string") {
        constants.push([screaming(pascal(def) + pascal(prop)), sub.const]);
      }
    }
  }

  let out = `// Generated by scripts/generate-types.mjs from schema/protocol/${fileName}.\n`;
  out += `// Do not edit: change the schema and run \`npm run generate\`.\n`;
  if (schema.title || schema.description) {
    out += "\n" + comment([schema.title, schema.description].filter(Boolean).join("\n\n"), "");
  } else out += "\n";
  if (rootName) {
    out += `export type ${rootName} =\n${rootRefs.map((r) => `  | ${names.get(r)}`).join("\n")};\n\n`;
    const tags = rootRefs.map((r) => defs[r].properties?.type?.const);
    out += `/** Every \`type\` a ${rootName} may have. */\n`;
    out += `export const ${screaming(rootName)}_TYPES = [${tags.map((t) => JSON.stringify(t)).join(", ")}] as const;\n\n`;
  }
  for (const [typeName, constName, values, description] of hoisted) {
    out += comment(description, "");
    out += `export type ${typeName} = ${values.map((v) => JSON.stringify(v)).join(" | ")};\n`;
    out += `export const ${constName}: readonly ${typeName}[] = [${values.map((v) => JSON.stringify(v)).join(", ")}];\n\n`;
  }
  for (const [name, value] of constants) out += `export const ${name} = ${JSON.stringify(value)};\n\n`;
  for (const [def, s] of Object.entries(defs)) {
    out += comment(s.description, "");
    out += `export type ${names.get(def)} = ${type(s, "")};\n\n`;
  }
  return out.replace(/\n+$/, "\n");
}

/** Every schema file in `schemaDir` → `[output file name, text]`, sorted. */
export function generate(schemaDir = SCHEMA_DIR) {
  return readdirSync(schemaDir)
    .filter((f) => f.endsWith(".schema.json"))
    .sort()
    .map((f) => {
      const schema = JSON.parse(readFileSync(join(schemaDir, f), "utf8"));
      return [f.replace(/\.schema\.json$/, ".ts"), generateModule(f, schema)];
    });
}

function main() {
  const check = process.argv.includes("--check");
  const stale = [];
  mkdirSync(OUT_DIR, { recursive: true });
  for (const [name, text] of generate()) {
    const path = join(OUT_DIR, name);
    let old = null;
    try {
      old = readFileSync(path, "utf8");
    } catch {}
    if (old === text) continue;
    if (check) stale.push(name);
    else {
      writeFileSync(path, text);
      console.log(`wrote src/generated/${name}`);
    }
  }
  if (check && stale.length) {
    console.error(`stale: ${stale.join(", ")} (run npm run generate)`);
    process.exit(1);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
