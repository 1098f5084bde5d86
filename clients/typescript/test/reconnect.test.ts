// Reconnects against a real server that is killed, stopped, restarted, or
// whose space another host holds: the app sees every update once, and
// every event it sent is appended once.

import assert from "node:assert/strict";
import { join } from "node:path";
import { after, test } from "node:test";
import { ConnectionClosedError, ConnectionLostError, HeldElsewhereError, Identity, TimeoutError } from "@spacewake/client";
import type { SessionState, StateDetail, Update } from "@spacewake/client";
import { COUNTER, eventually, open, Server, sleep, sqlite } from "./helpers.js";

const servers: Server[] = [];
after(async () => {
  for (const s of servers) await s.dispose();
});

async function start(): Promise<Server> {
  const s = await Server.start();
  servers.push(s);
  return s;
}

async function restart(s: Server): Promise<Server> {
  const again = await s.restart();
  servers.push(again);
  return again;
}

/** Records every state a session goes through, with its detail. */
function recorder() {
  const states: Array<[SessionState, StateDetail]> = [];
  return { states, onStateChange: (s: SessionState, d: StateDetail) => states.push([s, d]) };
}

/** Collects a tracker's updates until `until` holds for one. */
function collect(tracker: AsyncIterable<Update>, until: (u: Update) => boolean): { seen: Update[]; done: Promise<void> } {
  const seen: Update[] = [];
  const done = (async () => {
    for await (const u of tracker) {
      seen.push(u);
      if (until(u)) return;
    }
  })();
  return { seen, done };
}

function assertOnceEach(seen: Update[]): void {
  for (let i = 1; i < seen.length; i++) {
    assert.ok(seen[i]!.seq > seen[i - 1]!.seq, `update ${i} (seq ${seen[i]!.seq}) after seq ${seen[i - 1]!.seq}: doubled or out of order`);
    assert.ok((seen[i]!.value as number) >= (seen[i - 1]!.value as number), "the counter never goes back");
  }
}

test("SIGKILLed and restarted on the same data directory: no update lost or doubled, no event twice", async () => {
  let server = await start();
  const me = await Identity.generate();
  const rec = recorder();
  const s = await open(server, me, "killed", { create: true, reconnect: { initialDelayMs: 50, maxDelayMs: 500 }, onStateChange: rec.onStateChange });
  const piece = await s.deploy({ files: { "counter.tsx": COUNTER }, argument: { value: 0 } });
  const N = 40;
  const { seen, done } = collect(await s.track(piece, "value"), (u) => u.value === N);

  const acks = [];
  for (let i = 0; i < 15; i++) acks.push(await s.send(piece, "increment", { amount: 1 }, { eventId: `e-${i}` }));
  // Fifteen more in flight when the process dies: some reached its log
  // (the resend is a duplicate), some did not (the resend appends them).
  const inFlight = [];
  for (let i = 15; i < 30; i++) inFlight.push(s.send(piece, "increment", { amount: 1 }, { eventId: `e-${i}` }));
  await server.stop("SIGKILL");
  await eventually("the session noticed", () => s.state === "reconnecting");
  await sleep(300); // attempts fail meanwhile: nothing listens
  server = await restart(server);
  acks.push(...(await Promise.all(inFlight)));
  for (let i = 30; i < N; i++) acks.push(await s.send(piece, "increment", { amount: 1 }, { eventId: `e-${i}` }));
  await done;

  assert.equal(acks.length, N);
  assert.deepEqual(acks.map((a) => a.eventId), Array.from({ length: N }, (_, i) => `e-${i}`));
  assertOnceEach(seen);
  assert.equal(seen.at(-1)!.value, N, "every event counted once");
  assert.equal((await s.read(piece, "value")).value, N);
  await sleep(300);
  assert.equal((await s.read(piece, "value")).value, N, "and nothing after");
  const states = rec.states.map(([st]) => st);
  assert.deepEqual(states.slice(0, 2), ["open", "reconnecting"]);
  assert.equal(states.at(-1), "open");
  assert.ok(rec.states.some(([st, d]) => st === "reconnecting" && d.error instanceof ConnectionClosedError));
  s.close();
});

test("a request in flight when the connection drops: a send is resent with its eventId, a deploy fails as lost", async () => {
  let server = await start();
  const me = await Identity.generate();
  const s = await open(server, me, "stopped", { create: true, reconnect: { initialDelayMs: 50, maxDelayMs: 300 } });
  const piece = await s.deploy({ files: { "counter.tsx": COUNTER }, argument: { value: 0 } });
  // A stopped process reads nothing: these are certainly unanswered.
  await server.freeze();
  const send = s.send(piece, "increment", { amount: 7 }, { eventId: "while-stopped" });
  const deployLost = assert.rejects(s.deploy({ files: { "counter.tsx": COUNTER } }), ConnectionLostError);
  await sleep(100);
  await server.stop("SIGKILL");
  await deployLost;
  server = await restart(server);
  const ack = await send;
  assert.equal(ack.duplicate, false, "the server had never seen it");
  assert.equal(ack.eventId, "while-stopped");
  await eventually("the event handled", async () => (await s.read(piece, "value")).value === 7);
  // The resent event is stored under its id: a third send is a duplicate.
  const again = await s.send(piece, "increment", { amount: 7 }, { eventId: "while-stopped" });
  assert.deepEqual([again.duplicate, again.seq], [true, ack.seq]);
  s.close();
});

test("a server gone silent is dropped by the heartbeat; the session resumes when it answers again", async () => {
  const server = await start();
  const me = await Identity.generate();
  const rec = recorder();
  const s = await open(server, me, "silent", {
    create: true,
    heartbeatMs: 200,
    requestTimeoutMs: 1_000,
    reconnect: { initialDelayMs: 50, maxDelayMs: 200 },
    onStateChange: rec.onStateChange,
  });
  const piece = await s.deploy({ files: { "counter.tsx": COUNTER }, argument: { value: 0 } });
  const { seen, done } = collect(await s.track(piece, "value"), (u) => u.value === 1);
  await eventually("the current value", () => seen.length === 1);
  await server.freeze();
  await eventually("the heartbeat gave up", () => s.state === "reconnecting", 5_000);
  await eventually("an attempt timed out", () => rec.states.some(([, d]) => d.error instanceof TimeoutError), 5_000);
  server.process.kill("SIGCONT");
  await eventually("open again", () => s.state === "open", 10_000);
  await s.send(piece, "increment", {});
  await done;
  assertOnceEach(seen);
  assert.deepEqual(seen.map((u) => u.value), [0, 1]);
  s.close();
});

test("heldElsewhere: the session waits out the other holder's lease, on reconnect and on connect", async () => {
  let server = await start();
  const me = await Identity.generate();
  const rec = recorder();
  const s = await open(server, me, "held", { create: true, reconnect: { initialDelayMs: 50, maxDelayMs: 300 }, onStateChange: rec.onStateChange });
  const piece = await s.deploy({ files: { "counter.tsx": COUNTER }, argument: { value: 0 } });
  const { seen, done } = collect(await s.track(piece, "value"), (u) => u.value === 1);
  await eventually("the current value", () => seen.length === 1);

  // While no server runs, another host takes the space's lease for 4 s.
  await server.stop("SIGKILL");
  const file = join(server.data, "spaces/held.sqlite");
  sqlite(file, "UPDATE execution_lease SET holder = 'host-elsewhere/1', expires_at_ms = ?", [Date.now() + 4_000]);
  server = await restart(server);
  await eventually("open again", () => s.state === "open", 20_000);
  const held = rec.states.map(([, d]) => d.error).find((e) => e instanceof HeldElsewhereError) as HeldElsewhereError | undefined;
  assert.ok(held, `a heldElsewhere refusal was waited out: ${rec.states.map(([st, d]) => `${st} ${d.error?.message ?? ""}`).join("; ")}`);
  assert.equal(held.holder, "host-elsewhere/1");
  assert.ok(held.retryInMs! > 0 && held.retryInMs! <= 4_000, String(held.retryInMs));
  await s.send(piece, "increment", {});
  await done;
  assert.deepEqual(seen.map((u) => u.value), [0, 1]);
  s.close();

  // A parked space held elsewhere: connect() waits too, then opens.
  await eventually("parked", async () => ((await server.stats()).servingLoop.spaces?.held?.activation?.parks ?? 0) >= 1);
  sqlite(file, "UPDATE execution_lease SET holder = 'host-elsewhere/2', expires_at_ms = ?", [Date.now() + 3_000]);
  const first = recorder();
  const t0 = Date.now();
  const s2 = await open(server, me, "held", { onStateChange: first.onStateChange });
  assert.ok(Date.now() - t0 >= 1_000, `waited ${Date.now() - t0} ms`);
  const waited = first.states.find(([st, d]) => st === "connecting" && d.error instanceof HeldElsewhereError);
  assert.ok(waited, "connect was refused heldElsewhere first");
  assert.equal((waited[1].error as HeldElsewhereError).holder, "host-elsewhere/2");
  assert.equal((await s2.read(piece, "value")).value, 1);
  s2.close();
});

test("with reconnect off, a drop ends the session and fails what waits", async () => {
  const server = await start();
  const me = await Identity.generate();
  const s = await open(server, me, "once", { create: true, reconnect: false });
  const piece = await s.deploy({ files: { "counter.tsx": COUNTER } });
  const tracker = await s.track(piece, "value");
  const it = tracker[Symbol.asyncIterator]();
  await it.next();
  await server.freeze();
  const sendFails = assert.rejects(s.send(piece, "increment", {}), ConnectionClosedError);
  await server.stop("SIGKILL");
  const failure = await s.done;
  assert.ok(failure instanceof ConnectionClosedError, String(failure));
  assert.equal(s.state, "closed");
  await sendFails;
  await assert.rejects(it.next(), ConnectionClosedError);
  // A connection that cannot be made fails at once, not after retries.
  const t0 = Date.now();
  await assert.rejects(open(server, me, "once"), ConnectionClosedError);
  assert.ok(Date.now() - t0 < 2_000);
});
