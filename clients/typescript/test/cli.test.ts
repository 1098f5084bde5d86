// One key file for the CLI and the client: either may make it, both sign
// as the same did, and what one does the other sees.

import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { ForbiddenError, Identity, OperatorClient } from "@spacewake/client";
import { loadKeyFile, readProgram, saveKeyFile } from "@spacewake/client/node";
import { cli, COUNTER, open, REPO_DIR, Server, tempDir } from "./helpers.js";

let server: Server;
let dir: string;

before(async () => {
  server = await Server.start();
  dir = tempDir("spacewake-cli-");
});

after(async () => {
  await server?.dispose();
});

const counterFile = join(REPO_DIR, "fixtures/patterns/counter.tsx");

test("a key the client saved: the CLI deploys with it, the client owns what it made", async () => {
  const me = await Identity.generate();
  const key = join(dir, "client-made.key");
  await saveKeyFile(me, key);
  const id = cli(["identity", "--key", key]);
  assert.equal(id.status, 0, id.stderr);
  assert.equal(id.stdout.trim(), me.did);

  const deploy = cli(["deploy", counterFile, "--server", server.addr, "--space", "shared", "--key", key, "--argument", '{"value": 5}']);
  assert.equal(deploy.status, 0, deploy.stderr);
  const piece = deploy.stdout.trim();
  assert.match(piece, /^pc-[0-9a-f]{16}$/);

  // The space the CLI created is this identity's: the client opens it
  // (without create) as its owner.
  const s = await open(server, await loadKeyFile(key), "shared");
  assert.equal(s.access, "owner");
  assert.equal((await s.read(piece, "value")).value, 5);

  // An event the CLI sent is a duplicate for the client, and the other way.
  const sent = cli(["send", "--server", server.addr, "--space", "shared", "--key", key, "--piece", piece, "--stream", "increment", "--event-id", "from-cli"]);
  assert.equal(sent.status, 0, sent.stderr);
  const seq = Number(/appended at seq (\d+)/.exec(sent.stdout)?.[1]);
  assert.ok(seq > 0, sent.stdout);
  assert.deepEqual(await s.send(piece, "increment", {}, { eventId: "from-cli" }), { seq, duplicate: true, eventId: "from-cli" });
  const mine = await s.send(piece, "increment", { amount: 10 }, { eventId: "from-client" });
  const again = cli(["send", "--server", server.addr, "--space", "shared", "--key", key, "--piece", piece, "--stream", "increment", "--event-id", "from-client"]);
  assert.equal(again.status, 0, again.stderr);
  assert.match(again.stdout, new RegExp(`duplicate of seq ${mine.seq}\\b`));

  const read = cli(["read", "--server", server.addr, "--space", "shared", "--key", key, "--piece", piece, "--path", "value"]);
  assert.equal(read.status, 0, read.stderr);
  assert.equal(JSON.parse(read.stdout), 16);
  assert.equal((await s.read(piece, "value")).value, 16);
  s.close();
});

test("a key the CLI made: the client loads it as the same did; a grant by the client lets the CLI in", async () => {
  const key = join(dir, "cli-made.key");
  const made = cli(["identity", "--key", key]);
  assert.equal(made.status, 0, made.stderr);
  const friend = await loadKeyFile(key);
  assert.equal(friend.did, made.stdout.trim());

  const owner = await Identity.generate();
  const s = await open(server, owner, "granted", { create: true });
  const piece = await s.deploy({ files: { "counter.tsx": COUNTER }, argument: { value: 2 } });

  const args = ["--server", server.addr, "--space", "granted", "--key", key, "--piece", piece];
  const refused = cli(["read", ...args, "--path", "value"]);
  assert.notEqual(refused.status, 0, "no grant yet");
  assert.match(refused.stderr, /forbidden/i);

  const operator = new OperatorClient({ server: server.addr, identity: await loadKeyFile(join(server.data, "host.key")) });
  await operator.grant("granted", friend.did, "read");
  const read = cli(["read", ...args, "--path", "value"]);
  assert.equal(read.status, 0, read.stderr);
  assert.equal(JSON.parse(read.stdout), 2);
  const send = cli(["send", ...args, "--stream", "increment"]);
  assert.notEqual(send.status, 0, "read access cannot send");

  // The client signing with the same file gets the same access.
  const asFriend = await open(server, friend, "granted");
  assert.equal(asFriend.access, "read");
  await assert.rejects(asFriend.send(piece, "increment"), ForbiddenError);
  asFriend.close();
  s.close();
});

test("readProgram sends what the CLI's deploy sends: relative imports and dataFile attachments", async () => {
  const key = join(dir, "programs.key");
  const me = await Identity.generate();
  await saveKeyFile(me, key);
  const s = await open(server, me, "programs", { create: true });
  // Without `$`-reserved outputs, which name the piece.
  const data = (v: unknown) => JSON.stringify(v, (k, x) => (k.startsWith("$") ? undefined : x));
  for (const [file, expected] of [
    ["data-file.tsx", ["data-file.tsx", "data/cities.json", "data/words.txt"]],
    ["composed.tsx", ["composed.tsx", "counter-child.tsx"]],
    ["nested-app.tsx", null],
  ] as const) {
    const path = join(REPO_DIR, "fixtures/patterns", file);
    const program = await readProgram(path);
    assert.equal(program.entry, file);
    if (expected) assert.deepEqual(Object.keys(program.files).sort(), [...expected].sort());
    const mine = await s.deploy(program);
    const theirs = cli(["deploy", path, "--server", server.addr, "--space", "programs", "--key", key]);
    assert.equal(theirs.status, 0, theirs.stderr);
    const a = (await s.read(mine)).value;
    const b = (await s.read(theirs.stdout.trim())).value;
    assert.equal(data(a), data(b), file);
    assert.ok(data(a).length > 10, `${file}: ${data(a)}`);
  }
  s.close();
});
