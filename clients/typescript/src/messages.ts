// The wire messages, as generated from schema/protocol/*.schema.json, and
// the parse step that admits a server frame only when it is one of them.

import { CLIENT_MESSAGE_TYPES } from "./generated/client-messages.js";
import type { ClientMessage, Path, PathSegment, RequestId } from "./generated/client-messages.js";
import { CHALLENGE_PROTOCOL, ERROR_CODE_VALUES, SERVER_MESSAGE_TYPES } from "./generated/server-messages.js";
import type { ErrorCode, ServerMessage, UpdateMessage } from "./generated/server-messages.js";

export type {
  ClientMessage,
  DeleteMessage,
  DeployMessage,
  OpenMessage,
  Path,
  PathSegment,
  PingMessage,
  ReadMessage,
  RequestId,
  Seq,
  SendMessage,
  TrackMessage,
  UntrackMessage,
} from "./generated/client-messages.js";
export type {
  AckMessage,
  ChallengeMessage,
  DeployedMessage,
  ErrorCode,
  ErrorMessage,
  OpenedAccess,
  OpenedMessage,
  PongMessage,
  ServerMessage,
  UpdateMessage,
  ValueMessage,
} from "./generated/server-messages.js";
export type { GrantBody, GrantView, CreateBody, SpaceView, OperatorError } from "./generated/operator.js";
export { CLIENT_MESSAGE_TYPES, ERROR_CODE_VALUES, SERVER_MESSAGE_TYPES };

/** The protocol this client speaks, as the server's challenge names it. */
export const PROTOCOL = CHALLENGE_PROTOCOL;

/** A pushed update: a tracked value as of commit `seq`. */
export type Update = Omit<UpdateMessage, "type">;

/** A client message without its `id` (the session assigns one). */
export type Request = ClientMessage extends infer M ? (M extends { id: RequestId } ? Omit<M, "id"> : never) : never;

/** The shapes `ServerMessage`'s schema promises, checked on the fields a
 * client acts on; a newer server's extra fields are let through. */
export function parseServerMessage(text: string): ServerMessage {
  const m = JSON.parse(text) as unknown;
  if (typeof m !== "object" || m === null || Array.isArray(m)) throw new Error("not a JSON object");
  const msg = m as Record<string, unknown>;
  if (!(SERVER_MESSAGE_TYPES as readonly unknown[]).includes(msg.type)) throw new Error(`unknown message type ${JSON.stringify(msg.type)}`);
  const need = (field: string, ok: (v: unknown) => boolean) => {
    if (!ok(msg[field])) throw new Error(`\`${msg.type}\` has a bad \`${field}\`: ${JSON.stringify(msg[field])}`);
  };
  const str = (v: unknown) => typeof v === "string";
  const seq = (v: unknown) => Number.isInteger(v) && (v as number) >= 0;
  const id = (v: unknown) => str(v) || Number.isInteger(v);
  switch (msg.type) {
    case "challenge":
      need("nonce", str);
      need("protocol", str);
      break;
    case "opened":
      need("session", str);
      need("space", str);
      need("access", (v) => v === "read" || v === "write" || v === "owner");
      need("headSeq", seq);
      break;
    case "update":
      need("seq", seq);
      need("piece", str);
      need("path", Array.isArray);
      break;
    case "error":
      need("code", str);
      need("message", str);
      if (msg.id !== undefined) need("id", id);
      break;
    default:
      need("id", id);
  }
  return msg as unknown as ServerMessage;
}

/** Whether `code` is one the schema lists (a newer server may send others). */
export function isKnownErrorCode(code: string): code is ErrorCode {
  return (ERROR_CODE_VALUES as readonly string[]).includes(code);
}

/** `"items.0.title"` or `["items", 0, "title"]` as a wire path. */
export function toPath(path: string | Path | undefined): Path {
  if (path === undefined || path === "") return [];
  if (Array.isArray(path)) return path;
  return path.split(".").map((s): PathSegment => (/^[0-9]+$/.test(s) ? Number(s) : s));
}

export function isClientMessageType(t: string): boolean {
  return (CLIENT_MESSAGE_TYPES as readonly string[]).includes(t);
}
