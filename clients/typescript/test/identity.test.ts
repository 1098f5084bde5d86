// Identities: did:key, the key-file format, signatures, base58btc.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { base58btcDecode, base58btcEncode, base64urlEncode, didFromPublicKey, Identity, openMessage, publicKeyFromDid } from "@spacewake/client";
import { loadKeyFile, loadOrCreateKeyFile, saveKeyFile } from "@spacewake/client/node";

// RFC 8032, section 7.1, test 1; the did is what `spacewake identity`
// prints for this secret.
const RFC_SECRET = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
const RFC_PUBLIC = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
const RFC_SIGNATURE_OF_EMPTY =
  "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b";
const RFC_DID = "did:key:z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw";

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

test("a known key: its did:key and signature are the RFC's and the CLI's", async () => {
  const id = await Identity.fromKeyFile(RFC_SECRET + "\n");
  assert.equal(hex(id.publicKey), RFC_PUBLIC);
  assert.equal(id.did, RFC_DID);
  assert.equal(hex(await id.sign(new Uint8Array())), RFC_SIGNATURE_OF_EMPTY);
  assert.equal(hex(publicKeyFromDid(RFC_DID)), RFC_PUBLIC);
  assert.equal(didFromPublicKey(Buffer.from(RFC_PUBLIC, "hex")), RFC_DID);
  assert.equal(await id.toKeyFile(), RFC_SECRET + "\n");
  assert.equal(JSON.stringify(id), JSON.stringify({ did: RFC_DID }), "never the secret");
});

test("the key file: hex as the CLI writes it, base64url and base64 (padded or not) as it reads them", async () => {
  const secret = Buffer.from(RFC_SECRET, "hex");
  for (const text of [
    RFC_SECRET,
    RFC_SECRET.toUpperCase(),
    `  ${RFC_SECRET}\r\n`,
    base64urlEncode(secret),
    secret.toString("base64"),
    secret.toString("base64").replace(/=+$/, ""),
  ]) {
    assert.equal((await Identity.fromKeyFile(text)).did, RFC_DID, text);
  }
  for (const bad of ["", "xyz", RFC_SECRET.slice(2), RFC_SECRET + "00", "!!!!"]) {
    await assert.rejects(Identity.fromKeyFile(bad), /neither 64 hex digits nor 32 bytes/, JSON.stringify(bad));
  }
});

test("keys on disk: saved 0600 as 64 hex digits and a newline, loaded back, created once", async () => {
  const dir = mkdtempSync(join(tmpdir(), "spacewake-keys-"));
  try {
    const id = await Identity.generate();
    const path = join(dir, "me.key");
    await saveKeyFile(id, path);
    assert.match(readFileSync(path, "utf8"), /^[0-9a-f]{64}\n$/);
    assert.equal(statSync(path).mode & 0o777, 0o600);
    assert.equal((await loadKeyFile(path)).did, id.did);
    const made = join(dir, "made.key");
    const first = await loadOrCreateKeyFile(made);
    assert.equal((await loadOrCreateKeyFile(made)).did, first.did, "the second call loads it");
    assert.equal(statSync(made).mode & 0o777, 0o600);
    writeFileSync(join(dir, "bad.key"), "not a key");
    await assert.rejects(loadOrCreateKeyFile(join(dir, "bad.key")), /bad\.key/, "a bad file is not replaced");
    await assert.rejects(loadKeyFile(join(dir, "missing.key")), /cannot read the key/);
  } finally {
    rmSync(dir, { recursive: true });
  }
});

test("a non-extractable identity signs but cannot be saved", async () => {
  const id = await Identity.generate({ extractable: false });
  assert.match(id.did, /^did:key:z6Mk[1-9A-HJ-NP-Za-km-z]{44}$/);
  const message = openMessage("nonce", "home");
  const signature = await id.sign(message);
  const pub = await crypto.subtle.importKey("raw", id.publicKey, { name: "Ed25519" }, true, ["verify"]);
  assert.ok(await crypto.subtle.verify({ name: "Ed25519" }, pub, signature, message));
  await assert.rejects(id.toKeyFile(), /not extractable/);
  const again = await Identity.fromKeyPair({ privateKey: id.privateKey, publicKey: pub });
  assert.equal(again.did, id.did);
});

test("did:key decoding says what is wrong", () => {
  assert.throws(() => publicKeyFromDid("did:web:example.com"), /not a did:key/);
  assert.throws(() => publicKeyFromDid("did:key:m123"), /multibase/);
  assert.throws(() => publicKeyFromDid("did:key:z0OIl"), /base58btc/);
  assert.throws(() => publicKeyFromDid("did:key:z" + base58btcEncode(Uint8Array.of(0xe7, 0x01, ...new Uint8Array(33)))), /multicodec/);
  assert.throws(() => publicKeyFromDid("did:key:z" + base58btcEncode(Uint8Array.of(0xed, 0x01, 1, 2, 3))), /3 key bytes/);
  assert.throws(() => publicKeyFromDid("did:key:z" + "1".repeat(200)), /characters long/);
});

test("base58btc round-trips, leading zero bytes included", () => {
  assert.equal(base58btcEncode(new TextEncoder().encode("Hello World!")), "2NEpo7TZRRrLZSi2U");
  assert.equal(base58btcEncode(Uint8Array.of(0, 0, 0x28, 0x7f, 0xb4, 0xcd)), "11233QC4");
  for (let n = 0; n < 200; n++) {
    const bytes = crypto.getRandomValues(new Uint8Array(n % 40));
    if (n % 5 === 0 && bytes.length > 2) bytes[0] = bytes[1] = 0;
    assert.deepEqual(base58btcDecode(base58btcEncode(bytes)), bytes);
  }
  assert.equal(base58btcEncode(new Uint8Array()), "");
});
