// Who a client is: an ed25519 key (WebCrypto), named as a did:key, in the
// same key-file format as the CLI's `--key FILE`.

import { base58btcDecode, base58btcEncode, base64Decode, concat, hexDecode, hexEncode } from "./encoding.js";

/** Everything before the multibase payload; `z` is base58btc. */
const DID_KEY_PREFIX = "did:key:z";
/** The unsigned varint of multicodec `ed25519-pub` (0xed). */
const ED25519_MULTICODEC = Uint8Array.of(0xed, 0x01);
/** The DER header of a PKCS#8 ed25519 private key, before its 32-byte seed:
 * WebCrypto imports no raw private keys, so a seed is wrapped in this. */
const PKCS8_ED25519_PREFIX = hexDecode("302e020100300506032b657004220420");
const ED25519 = { name: "Ed25519" } as const;

/** The did:key of an ed25519 public key (32 bytes). */
export function didFromPublicKey(publicKey: Uint8Array): string {
  if (publicKey.length !== 32) throw new Error(`an ed25519 public key has 32 bytes, not ${publicKey.length}`);
  return DID_KEY_PREFIX + base58btcEncode(concat(ED25519_MULTICODEC, publicKey));
}

/** The 32-byte public key a did:key names; throws saying what is wrong. */
export function publicKeyFromDid(did: string): Uint8Array {
  if (did.length > 128) throw new Error(`did is ${did.length} characters long; an ed25519 did:key is 56`);
  if (!did.startsWith("did:key:")) throw new Error(`${JSON.stringify(did.slice(0, 64))} is not a did:key (it must start with \`did:key:z\`)`);
  if (!did.startsWith(DID_KEY_PREFIX)) throw new Error("did:key uses a multibase other than base58btc (`z`)");
  let bytes: Uint8Array;
  try {
    bytes = base58btcDecode(did.slice(DID_KEY_PREFIX.length));
  } catch (e) {
    throw new Error(`did:key payload is not valid base58btc: ${(e as Error).message}`);
  }
  if (bytes[0] !== 0xed || bytes[1] !== 0x01) throw new Error("did:key multicodec is not ed25519-pub (0xed 0x01)");
  if (bytes.length !== 34) throw new Error(`did:key carries ${bytes.length - 2} key bytes; an ed25519 public key has 32`);
  return bytes.slice(2);
}

function subtle(): SubtleCrypto {
  const s = globalThis.crypto?.subtle;
  if (!s) throw new Error("WebCrypto is not available (a browser page needs a secure context: https or localhost)");
  return s;
}

/**
 * An ed25519 signing key and its did:key. Keys are WebCrypto `CryptoKey`s,
 * so a browser can keep a non-extractable one (in IndexedDB) that no
 * script can read back; only an extractable identity can be saved as a
 * key file.
 */
export class Identity {
  /** `did:key:z6Mk…`, the name the server knows this key by. */
  readonly did: string;

  private constructor(
    readonly publicKey: Uint8Array,
    readonly privateKey: CryptoKey,
  ) {
    this.did = didFromPublicKey(publicKey);
  }

  /** A fresh random identity. `extractable: false` keeps the secret
   * inside WebCrypto (it can sign, and be stored in IndexedDB, but never
   * be saved as a key file). */
  static async generate(options: { extractable?: boolean } = {}): Promise<Identity> {
    const pair = (await subtle().generateKey(ED25519, options.extractable ?? true, ["sign", "verify"])) as CryptoKeyPair;
    return Identity.fromKeyPair(pair);
  }

  /** The identity of a WebCrypto ed25519 key pair (for example one kept in IndexedDB). */
  static async fromKeyPair(pair: CryptoKeyPair): Promise<Identity> {
    const raw = new Uint8Array(await subtle().exportKey("raw", pair.publicKey));
    return new Identity(raw, pair.privateKey);
  }

  /** The identity whose ed25519 secret key (seed) is these 32 bytes. */
  static async fromSecret(secret: Uint8Array): Promise<Identity> {
    if (secret.length !== 32) throw new Error(`an ed25519 secret key has 32 bytes, not ${secret.length}`);
    const privateKey = await subtle().importKey("pkcs8", concat(PKCS8_ED25519_PREFIX, secret), ED25519, true, ["sign"]);
    // WebCrypto derives the public half; a JWK export carries it as `x`.
    const jwk = await subtle().exportKey("jwk", privateKey);
    if (!jwk.x) throw new Error("WebCrypto exported no public key for this secret");
    return new Identity(base64Decode(jwk.x), privateKey);
  }

  /**
   * Parses a key file's text, as the CLI reads `--key FILE`: 64 hex digits
   * (what the CLI writes), or the 32 bytes as base64url or base64, padded
   * or not; surrounding whitespace (the trailing newline) is ignored.
   */
  static async fromKeyFile(text: string): Promise<Identity> {
    const t = text.trim();
    let bytes: Uint8Array;
    try {
      bytes = t.length === 64 && /^[0-9a-fA-F]+$/.test(t) ? hexDecode(t) : base64Decode(t);
    } catch {
      throw new Error("the key is neither 64 hex digits nor 32 bytes of base64/base64url");
    }
    if (bytes.length !== 32) throw new Error("the key is neither 64 hex digits nor 32 bytes of base64/base64url");
    return Identity.fromSecret(bytes);
  }

  /** The 32-byte secret; throws for a non-extractable key. */
  async secret(): Promise<Uint8Array> {
    if (!this.privateKey.extractable) throw new Error("this identity's key is not extractable: it cannot be saved");
    const pkcs8 = new Uint8Array(await subtle().exportKey("pkcs8", this.privateKey));
    return pkcs8.slice(pkcs8.length - 32);
  }

  /** The key file's text, exactly as the CLI writes it: the secret as 64
   * lowercase hex digits and a newline. (Keep the file private: mode 0600.) */
  async toKeyFile(): Promise<string> {
    return hexEncode(await this.secret()) + "\n";
  }

  /** An ed25519 signature (64 bytes) over `bytes`. */
  async sign(bytes: Uint8Array): Promise<Uint8Array> {
    return new Uint8Array(await subtle().sign(ED25519, this.privateKey, bytes));
  }

  toString(): string {
    return this.did;
  }

  /** Only the public half: identities end up in logs. */
  toJSON(): { did: string } {
    return { did: this.did };
  }
}
