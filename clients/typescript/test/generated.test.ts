// The message types cannot drift from the server's schemas: the committed
// generated modules must be exactly what the generator makes from
// schema/protocol/*.schema.json now.

import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { test } from "node:test";
import { ERROR_CODE_VALUES, PROTOCOL, RefusedError, refusal, SERVER_MESSAGE_TYPES } from "@spacewake/client";
import { PACKAGE_DIR, REPO_DIR } from "./helpers.js";

type Generator = { generate(schemaDir?: string): Array<[string, string]> };

test("src/generated is what scripts/generate-types.mjs makes from the schemas now", async () => {
  const { generate } = (await import(pathToFileURL(join(PACKAGE_DIR, "scripts/generate-types.mjs")).href)) as Generator;
  const made = generate(join(REPO_DIR, "schema/protocol"));
  const schemas = readdirSync(join(REPO_DIR, "schema/protocol")).filter((f) => f.endsWith(".schema.json"));
  assert.equal(made.length, schemas.length, "one module per schema");
  for (const [name, text] of made) {
    const path = join(PACKAGE_DIR, "src/generated", name);
    assert.ok(existsSync(path), `src/generated/${name} is missing: run npm run generate`);
    assert.equal(readFileSync(path, "utf8"), text, `src/generated/${name} is stale: run npm run generate (in clients/typescript) and commit it`);
  }
  const committed = readdirSync(join(PACKAGE_DIR, "src/generated")).sort();
  assert.deepEqual(committed, made.map(([n]) => n).sort(), "no generated module without its schema");
});

test("the run-time values come from the schemas", () => {
  const server = JSON.parse(readFileSync(join(REPO_DIR, "schema/protocol/server-messages.schema.json"), "utf8"));
  assert.deepEqual([...ERROR_CODE_VALUES], server.$defs.error.properties.code.enum);
  assert.equal(PROTOCOL, server.$defs.challenge.properties.protocol.const);
  assert.deepEqual([...SERVER_MESSAGE_TYPES], server.oneOf.map((r: { $ref: string }) => server.$defs[r.$ref.split("/").pop()!].properties.type.const));
});

test("every error code becomes a RefusedError of its own class where it has one", () => {
  for (const code of ERROR_CODE_VALUES) {
    const e = refusal(code, "a sentence", { retryInMs: 5 });
    assert.ok(e instanceof RefusedError);
    assert.equal(e.code, code);
    assert.match(e.message, new RegExp(`^${code}: a sentence$`));
  }
  assert.equal(refusal("heldElsewhere", "x", { holder: "h", retryInMs: 7 }).constructor.name, "HeldElsewhereError");
  assert.equal(refusal("heldElsewhere", "x", { retryInMs: 7 }).retryInMs, 7);
  assert.equal(refusal("somethingNew", "x").constructor.name, "RefusedError", "a code from a newer server");
});
