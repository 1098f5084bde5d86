// The example page's script: plain JavaScript on the compiled client, no
// build step and nothing but the browser's own WebSocket and WebCrypto.
import { connect, Identity } from "../dist/index.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const server = params.get("server") ?? "127.0.0.1:8080";
const spaceName = params.get("space") ?? "demo";
const remembered = `spacewake-example:${server}:${spaceName}:piece`;

function log(line) {
  $("log").textContent = `${new Date().toLocaleTimeString()} ${line}\n` + $("log").textContent;
}

function showError(e) {
  $("error").textContent = `${e.name}: ${e.message}`;
}

/** The browser's key pair: made once, kept in IndexedDB. Its private half
 * is not extractable, so no script, this one included, can read it. */
async function keyPair() {
  const db = await new Promise((resolve, reject) => {
    const r = indexedDB.open("spacewake-example", 1);
    r.onupgradeneeded = () => r.result.createObjectStore("keys");
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
  const store = (mode) => db.transaction("keys", mode).objectStore("keys");
  const stored = await new Promise((resolve, reject) => {
    const r = store("readonly").get("identity");
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
  if (stored) return stored;
  const pair = await crypto.subtle.generateKey({ name: "Ed25519" }, false, ["sign", "verify"]);
  await new Promise((resolve, reject) => {
    const r = store("readwrite").put(pair, "identity");
    r.onsuccess = () => resolve();
    r.onerror = () => reject(r.error);
  });
  return pair;
}

let tracker = null;

/** Shows `piece`'s value from now on, live. */
async function show(session, piece) {
  await tracker?.stop();
  $("piece").textContent = piece;
  tracker = await session.track(piece, "value", {
    onUpdate: (u) => {
      $("value").textContent = String(u.value);
      log(`value ${JSON.stringify(u.value)} at seq ${u.seq}`);
    },
  });
  $("increment").disabled = false;
}

async function main() {
  const identity = await Identity.fromKeyPair(await keyPair());
  $("did").textContent = identity.did;
  $("space").textContent = `${spaceName} on ${server}`;
  const session = await connect({
    url: `ws://${server}/ws`,
    space: spaceName,
    identity,
    // The first visit makes the space, owned by this browser's key.
    create: true,
    onStateChange: (state, detail) => {
      $("status").textContent = state;
      if (detail.error) log(`${state}: ${detail.error.message}`);
    },
  });
  $("status").textContent = session.state;
  log(`opened as ${session.access}, head seq ${session.opened.headSeq}`);

  $("deploy").disabled = false;
  $("deploy").onclick = async () => {
    try {
      const source = await (await fetch("./counter.tsx")).text();
      const piece = await session.deploy({ files: { "counter.tsx": source }, argument: { value: 0 } });
      localStorage.setItem(remembered, piece);
      log(`deployed ${piece}`);
      await show(session, piece);
    } catch (e) {
      showError(e);
    }
  };
  $("increment").onclick = async () => {
    try {
      const ack = await session.send($("piece").textContent, "increment", { amount: 1 });
      log(`event ${ack.eventId} appended at seq ${ack.seq}`);
    } catch (e) {
      showError(e);
    }
  };

  const piece = params.get("piece") ?? localStorage.getItem(remembered);
  if (piece) await show(session, piece);
}

main().catch(showError);
