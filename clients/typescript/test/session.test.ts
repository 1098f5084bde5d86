// Every call of the client against a real server: open (with and without
// create), deploy, read, track, send (eventId, duplicate), delete, ping,
// grant, and the refusals as typed errors.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  ForbiddenError,
  Identity,
  InvalidArgumentError,
  InvalidPatternError,
  OperatorClient,
  RefusedError,
  SessionClosedError,
  UnknownPieceError,
  UnknownSpaceError,
  UnknownStreamError,
} from "@spacewake/client";
import type { Session, Update } from "@spacewake/client";
import { loadKeyFile } from "@spacewake/client/node";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { COUNTER, eventually, open, REPO_DIR, Server, sleep } from "./helpers.js";

let server: Server;
let owner: Identity;
let session: Session;
let piece: string;

before(async () => {
  server = await Server.start();
  owner = await Identity.generate();
  session = await open(server, owner, "home", { create: true });
  piece = await session.deploy({ files: { "counter.tsx": COUNTER }, argument: { value: 1 } });
});

after(async () => {
  session?.close();
  await server?.dispose();
});

describe("open", () => {
  test("with create makes the space, owned by the identity that opened it", () => {
    assert.equal(session.opened.type, "opened");
    assert.equal(session.opened.space, "home");
    assert.equal(session.access, "owner");
    assert.equal(session.state, "open");
    assert.match(session.opened.session, /.+/);
  });

  test("without create, a space that does not exist is UnknownSpaceError, and is not made", async () => {
    const err = await open(server, owner, "nosuchspace").then(
      () => assert.fail("opened a space that does not exist"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof UnknownSpaceError, String(err));
    assert.equal(err.code, "unknownSpace");
    assert.equal(err.retryable, false);
    const operator = new OperatorClient({ server: server.http, identity: await loadKeyFile(`${server.data}/host.key`) });
    const lookup = await operator.call("GET", "/api/operator/spaces/nosuchspace").catch((e: unknown) => e);
    assert.ok(lookup instanceof UnknownSpaceError && lookup.status === 404, `no space was made: ${lookup}`);
    // A second identity may not open the owner's space.
    const stranger = await Identity.generate();
    const refused = await open(server, stranger, "home").catch((e: unknown) => e);
    assert.ok(refused instanceof ForbiddenError, String(refused));
  });

  test("headSeq is the space's latest commit", async () => {
    const again = await open(server, owner, "home");
    const { seq } = await again.read(piece, "value");
    assert.ok(again.opened.headSeq >= seq, `${again.opened.headSeq} >= ${seq}`);
    again.close();
  });
});

describe("deploy", () => {
  test("answers with a piece id; the pattern's argument and Defaults hold", async () => {
    assert.match(piece, /^pc-[0-9a-f]{16}$/);
    const all = await session.read(piece);
    assert.deepEqual((all.value as { value: number; items: string[] }).value, 1);
    assert.deepEqual((all.value as { items: string[] }).items, []);
  });

  test("a pattern that does not compile is InvalidPatternError with the diagnostics", async () => {
    const err = await session
      .deploy({ files: { "bad.tsx": 'import { pattern } from "commonfabric";\nexport default pattern(() => { return ; ' } })
      .catch((e: unknown) => e);
    assert.ok(err instanceof InvalidPatternError, String(err));
    assert.match(err.diagnostics, /bad\.tsx:\d+:\d+/);
  });

  test("an argument that does not fit is InvalidArgumentError with path, expected, got", async () => {
    const err = await session.deploy({ files: { "counter.tsx": COUNTER }, argument: { value: "notanumber" } }).catch((e: unknown) => e);
    assert.ok(err instanceof InvalidArgumentError, String(err));
    assert.equal(err.path, "value");
    assert.equal(err.expected, "a number");
    assert.match(err.got ?? "", /notanumber/);
  });

  test("names the export and the entry among several files", async () => {
    const files = {
      "composed.tsx": readFileSync(join(REPO_DIR, "fixtures/patterns/composed.tsx"), "utf8"),
      "counter-child.tsx": readFileSync(join(REPO_DIR, "fixtures/patterns/counter-child.tsx"), "utf8"),
    };
    const child = await session.deploy({ files, entry: "counter-child.tsx", export: "Counter", argument: { value: 40 } });
    assert.equal((await session.read(child, "value")).value, 40);
    const composed = await session.deploy({ files, entry: "composed.tsx" });
    assert.equal((await session.read(composed, "left.value")).value, 10);
    await assert.rejects(session.deploy({ files }), /entry/);
  });
});

describe("read", () => {
  test("a path, a dotted path, the whole result, a missing path, a document", async () => {
    const value = await session.read(piece, ["value"]);
    assert.equal(typeof value.value, "number");
    assert.ok(value.seq > 0);
    assert.deepEqual((await session.read(piece, "value")).value, value.value);
    assert.equal((await session.read(piece, "doubled")).value, (value.value as number) * 2);
    assert.equal((await session.read(piece, "no.such.path")).value, null);
    const doc = await session.readDoc("space/pieces");
    assert.ok(JSON.stringify(doc.value).includes(piece), JSON.stringify(doc.value));
  });

  test("an unknown piece is UnknownPieceError", async () => {
    await assert.rejects(session.read("pc-0000000000000000", "value"), UnknownPieceError);
  });
});

describe("send", () => {
  test("acks with the commit's seq; the same eventId again is a duplicate of that seq", async () => {
    const before = (await session.read(piece, "value")).value as number;
    const first = await session.send(piece, "increment", { amount: 5 }, { eventId: "evt-once" });
    assert.deepEqual(first, { seq: first.seq, duplicate: false, eventId: "evt-once" });
    assert.ok(first.seq > 0);
    const again = await session.send(piece, ["increment"], { amount: 5 }, { eventId: "evt-once" });
    assert.deepEqual(again, { seq: first.seq, duplicate: true, eventId: "evt-once" });
    await eventually("the handler ran once", async () => (await session.read(piece, "value")).value === before + 5);
    await sleep(200);
    assert.equal((await session.read(piece, "value")).value, before + 5, "not twice");
  });

  test("without an eventId one is made, so two sends are two events", async () => {
    const a = await session.send(piece, "increment");
    const b = await session.send(piece, "increment");
    assert.notEqual(a.eventId, b.eventId);
    assert.ok(b.seq > a.seq);
    assert.equal(a.duplicate || b.duplicate, false);
  });

  test("a path that is not a stream is UnknownStreamError; nothing is appended", async () => {
    const err = await session.send(piece, "value", {}).catch((e: unknown) => e);
    assert.ok(err instanceof UnknownStreamError, String(err));
    assert.ok(err instanceof RefusedError);
    await assert.rejects(session.send("pc-0000000000000000", "increment"), UnknownPieceError);
  });
});

describe("track", () => {
  test("an async iterator: the current value first, then every change, in seq order", async () => {
    const tracker = await session.track(piece, "value");
    const seen: Update[] = [];
    const start = (await session.read(piece, "value")).value as number;
    const done = (async () => {
      for await (const u of tracker) {
        seen.push(u);
        if (u.value === start + 3) break; // leaving the loop stops the tracking
      }
    })();
    for (let i = 0; i < 3; i++) await session.send(piece, "increment", { amount: 1 });
    await done;
    assert.equal(seen[0]!.value, start, "the current value first");
    assert.deepEqual(seen[0]!.path, ["value"]);
    assert.equal(seen[0]!.piece, piece);
    assert.equal(seen.at(-1)!.value, start + 3);
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i]!.seq > seen[i - 1]!.seq, "seqs grow");
    assert.ok(tracker.stopped);
    assert.equal(tracker.value, start + 3);
    assert.equal(tracker.seq, seen.at(-1)!.seq);
  });

  test("a callback; stop() ends the updates", async () => {
    const seen: unknown[] = [];
    const tracker = await session.track(piece, ["doubled"], { onUpdate: (u) => seen.push(u.value) });
    await eventually("the current value", () => seen.length === 1);
    const v = (await session.read(piece, "value")).value as number;
    assert.equal(seen[0], v * 2);
    await session.send(piece, "increment", { amount: 1 });
    await eventually("the change", () => seen.includes((v + 1) * 2));
    assert.throws(() => tracker[Symbol.asyncIterator](), /callback/);
    await tracker.stop();
    const count = seen.length;
    await session.send(piece, "increment", { amount: 1 });
    await eventually("the change committed", async () => (await session.read(piece, "value")).value === v + 2);
    await sleep(300);
    assert.equal(seen.length, count, "no update after stop");
  });

  test("since: only a value changed after it; two trackers of one target each see it once", async () => {
    const { value, seq } = await session.read(piece, "value");
    const quiet = await session.track(piece, "value", { since: seq + 1_000_000 });
    const a: number[] = [];
    const b: number[] = [];
    const ta = await session.track(piece, "value", { onUpdate: (u) => a.push(u.seq) });
    await eventually("a's current value", () => a.length === 1);
    const tb = await session.track(piece, "value", { onUpdate: (u) => b.push(u.seq) });
    await eventually("b's current value", () => b.length === 1);
    await session.send(piece, "increment", { amount: 1 });
    await eventually("both see the change", () => a.length === 2 && b.length === 2);
    await sleep(200);
    assert.equal(a.length, 2, "a saw the current value and the change, once each");
    assert.equal(new Set(a).size, a.length);
    assert.deepEqual(a, b);
    assert.equal(quiet.value, undefined, "nothing newer than its since");
    assert.equal(ta.value, (value as number) + 1);
    await Promise.all([quiet.stop(), ta.stop(), tb.stop()]);
  });

  test("an unknown piece is refused and yields no tracker", async () => {
    await assert.rejects(session.track("pc-0000000000000000", "value"), UnknownPieceError);
  });
});

describe("delete and ping", () => {
  test("ping answers; the owner deletes a piece, which then is unknown", async () => {
    await session.ping();
    const doomed = await session.deploy({ files: { "counter.tsx": COUNTER } });
    await session.delete(doomed);
    await assert.rejects(session.read(doomed, "value"), UnknownPieceError);
    await assert.rejects(session.delete(doomed), UnknownPieceError);
  });
});

describe("grant", () => {
  test("the operator grants read, then write, then revokes; the session follows", async () => {
    const operator = new OperatorClient({ server: server.http, identity: await loadKeyFile(`${server.data}/host.key`) });
    const friend = await Identity.generate();
    await assert.rejects(open(server, friend, "home"), ForbiddenError);

    const view = await operator.grant("home", friend.did, "read");
    assert.deepEqual(view, { space: "home", did: friend.did, access: "read" });
    const reader = await open(server, friend, "home");
    assert.equal(reader.access, "read");
    assert.equal(typeof (await reader.read(piece, "value")).value, "number");
    const err = await reader.send(piece, "increment").catch((e: unknown) => e);
    assert.ok(err instanceof ForbiddenError, String(err));
    assert.equal(err.required, "write");
    assert.equal(err.granted, "read");
    await assert.rejects(reader.deploy({ files: { "counter.tsx": COUNTER } }), ForbiddenError);

    await operator.grant("home", friend.did, "write");
    // The grant reaches the open session within 100 ms.
    await eventually("write access", async () => (await reader.send(piece, "increment").then(() => true, () => false)));
    await assert.rejects(reader.delete(piece), ForbiddenError, "delete needs the owner");

    // Revoked: the session ends with ForbiddenError, its tracker's
    // iteration throws it, and no reconnect gets around it.
    const tracker = await reader.track(piece, "value");
    const iteration = (async () => {
      for await (const _ of tracker) {
        // drain
      }
    })();
    await operator.grant("home", friend.did, "none");
    const failure = await reader.done;
    assert.ok(failure instanceof ForbiddenError, String(failure));
    assert.equal(reader.state, "closed");
    await assert.rejects(iteration, ForbiddenError);
    await assert.rejects(reader.ping(), ForbiddenError);

    // Only operators may grant.
    const impostor = new OperatorClient({ server: server.url, identity: owner });
    const refused = await impostor.grant("home", friend.did, "write").catch((e: unknown) => e);
    assert.ok(refused instanceof ForbiddenError, String(refused));
    assert.equal(refused.status, 403);
  });
});

describe("close", () => {
  test("ends trackers and refuses later requests", async () => {
    const s = await open(server, owner, "home");
    const tracker = await s.track(piece, "value");
    const it = tracker[Symbol.asyncIterator]();
    assert.equal(typeof (await it.next()).value?.value, "number");
    const waiting = it.next();
    s.close();
    assert.deepEqual(await waiting, { value: undefined, done: true });
    await assert.rejects(s.read(piece), SessionClosedError);
    assert.equal(await s.done, undefined);
  });
});
