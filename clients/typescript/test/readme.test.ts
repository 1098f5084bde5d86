// The README's client example, run exactly as written: type-checked as
// TypeScript, then run with node from the repository root against a real
// server, with the CLI's variables naming the server and the key.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { cli, cleanEnv, PACKAGE_DIR, REPO_DIR, Server, tempDir } from "./helpers.js";

let server: Server;
let dir: string;
const files = ["readme-example.mjs", "readme-example.mts"].map((f) => join(PACKAGE_DIR, f));

before(async () => {
  server = await Server.start();
  dir = tempDir("spacewake-readme-");
});

after(async () => {
  for (const f of files) rmSync(f, { force: true });
  await server?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

/** The TypeScript block after `<!-- clients-example -->`. */
function example(): string {
  const readme = readFileSync(join(REPO_DIR, "README.md"), "utf8");
  const m = /<!-- clients-example -->\s*```ts\n([\s\S]*?)```/.exec(readme);
  assert.ok(m, "the README marks its client example");
  return m[1]!;
}

test("the README's client example type-checks and runs as written", () => {
  const code = example();
  assert.ok(code.split("\n").length <= 20, "a short example");
  const [mjs, mts] = files as [string, string];
  writeFileSync(mjs, code);
  writeFileSync(mts, code);

  const tsc = spawnSync(
    process.execPath,
    [join(PACKAGE_DIR, "node_modules/typescript/bin/tsc"), "--noEmit", "--strict", "--module", "nodenext", "--target", "es2022", "--types", "node", "--skipLibCheck", mts],
    { cwd: PACKAGE_DIR, encoding: "utf8" },
  );
  assert.equal(tsc.status, 0, `tsc: ${tsc.stdout}${tsc.stderr}`);

  const key = join(dir, "identity.key");
  const run = spawnSync(process.execPath, [mjs], {
    cwd: REPO_DIR,
    env: cleanEnv({ SPACEWAKE_SERVER: server.addr, SPACEWAKE_KEY: key }),
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(run.status, 0, `node: ${run.stdout}${run.stderr}`);
  assert.match(run.stdout, /^value 1 at seq \d+\nvalue 3 at seq \d+\n$/);

  // It made the key the CLI signs with: the CLI reads what it wrote.
  const did = cli(["identity", "--key", key]);
  const pieces = cli(["pieces", "--space", "demo", "--server", server.addr, "--data", server.data, "--json"]);
  assert.equal(pieces.status, 0, pieces.stderr);
  const piece = JSON.parse(pieces.stdout).pieces[0].id as string;
  const read = cli(["read", "--server", server.addr, "--space", "demo", "--key", key, "--piece", piece, "--path", "value"]);
  assert.equal(read.status, 0, `${did.stdout} ${read.stderr}`);
  assert.equal(JSON.parse(read.stdout), 3);
});
