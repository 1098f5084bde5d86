// The exact bytes each kind of request signs (spec/protocol.md,
// *Authentication*; spec/operators.md, *Signing a request*). Each starts
// with its own prefix so a signature for one purpose is never valid for
// another.

import { base64urlEncode, concat, utf8 } from "./encoding.js";
import type { Identity } from "./identity.js";

/** `"spacewake-session-v1:" ++ nonce ++ ":" ++ space`: the nonce as the
 * base64url text received (not its decoded bytes), the space id as sent. */
export function openMessage(nonce: string, space: string): Uint8Array {
  return utf8(`spacewake-session-v1:${nonce}:${space}`);
}

/** The `open.signature` for `space` under this connection's challenge. */
export async function signOpen(identity: Identity, nonce: string, space: string): Promise<string> {
  return base64urlEncode(await identity.sign(openMessage(nonce, space)));
}

/** `"spacewake-operator-v1:" ++ time ++ ":" ++ METHOD ++ ":" ++ path-and-query ++ ":" ++ body`. */
export function operatorMessage(timeMs: number, method: string, pathAndQuery: string, body: Uint8Array): Uint8Array {
  return concat(utf8(`spacewake-operator-v1:${timeMs}:${method}:${pathAndQuery}:`), body);
}

/** `"spacewake-ingest-v1:" ++ space ++ ":" ++ body`, for the HTTP event and warm routes. */
export function ingestMessage(space: string, body: Uint8Array): Uint8Array {
  return concat(utf8(`spacewake-ingest-v1:${space}:`), body);
}
