// What can go wrong, as classes an app can `instanceof`: the server's
// refusals (one class per error code that carries details or calls for a
// different reaction), and the client's own failures (a connection that
// closed, a request that timed out or was lost with its connection).

import type { ErrorCode } from "./generated/server-messages.js";

/** Base of every error this client throws. */
export class SpacewakeError extends Error {
  override name = "SpacewakeError";
}

type Details = Record<string, unknown>;

const num = (v: unknown): number | undefined => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);

/**
 * The server refused a request (an `error` frame, or an HTTP error body).
 * `code` is the protocol's stable error code; `details` its details
 * object (`{}` when it sent none); `status` the HTTP status for an HTTP
 * route.
 */
export class RefusedError extends SpacewakeError {
  override name = "RefusedError";
  readonly details: Details;

  constructor(
    readonly code: ErrorCode | (string & {}),
    message: string,
    details?: Details,
    readonly status?: number,
  ) {
    super(`${code}: ${message}`);
    this.details = details ?? {};
  }

  /** Whether the same request may succeed later without any change
   * (the space is busy elsewhere, backing off, the host full or
   * restarting); the session's reconnect waits these out. */
  get retryable(): boolean {
    return RETRYABLE.has(this.code);
  }

  /** How long the server says to wait before trying again, if it said. */
  get retryInMs(): number | undefined {
    return num(this.details.retryInMs);
  }
}

const RETRYABLE = new Set<string>(["heldElsewhere", "backingOff", "overloaded", "unavailable", "internal"]);

/** `open` named a space that does not exist (and did not ask to create it),
 * or an invalid space id. */
export class UnknownSpaceError extends RefusedError {
  override name = "UnknownSpaceError";
  get space(): string | undefined {
    return str(this.details.space);
  }
}

/** Another host holds the space's lease and cannot be reached; its lease
 * can expire in `retryInMs`. */
export class HeldElsewhereError extends RefusedError {
  override name = "HeldElsewhereError";
  get holder(): string | undefined {
    return str(this.details.holder);
  }
}

/** The space failed to activate and is retried with back-off. */
export class BackingOffError extends RefusedError {
  override name = "BackingOffError";
  get failures(): number | undefined {
    return num(this.details.failures);
  }
}

/** The host is at its limit of active spaces; retry shortly. */
export class OverloadedError extends RefusedError {
  override name = "OverloadedError";
  get limit(): number | undefined {
    return num(this.details.limit);
  }
}

/** The space's server stopped before answering, or the host is shutting down. */
export class UnavailableError extends RefusedError {
  override name = "UnavailableError";
}

/** The server failed; the request may be retried. */
export class InternalError extends RefusedError {
  override name = "InternalError";
}

/** The session's access does not allow the request, the did has no grant,
 * or its grant was revoked. */
export class ForbiddenError extends RefusedError {
  override name = "ForbiddenError";
  /** The access the request needs (`"write"`, `"owner"`), when said. */
  get required(): string | undefined {
    return str(this.details.required);
  }
  /** The access the session has, when said. */
  get granted(): string | undefined {
    return str(this.details.granted);
  }
}

/** The open (or HTTP) signature was malformed or did not verify:
 * `reason` is `malformedDid`, `malformedSignature`, `signatureMismatch`
 * (and for operator requests `malformedTime`, `stale`, `replayed`). */
export class BadSignatureError extends RefusedError {
  override name = "BadSignatureError";
  get reason(): string | undefined {
    return str(this.details.reason);
  }
}

/** A host quota: `quota` is `spacesPerIdentity`, `creationRate` or `spaceBytes`. */
export class QuotaExceededError extends RefusedError {
  override name = "QuotaExceededError";
  get quota(): string | undefined {
    return str(this.details.quota);
  }
}

export class UnknownPieceError extends RefusedError {
  override name = "UnknownPieceError";
}

export class UnknownStreamError extends RefusedError {
  override name = "UnknownStreamError";
}

/** A deploy's sources did not compile, or the piece failed when first run. */
export class InvalidPatternError extends RefusedError {
  override name = "InvalidPatternError";
  /** The compiler's report: one `file:line:col` line per problem. */
  get diagnostics(): string {
    return str(this.details.diagnostics) ?? "";
  }
}

/** A deploy's argument does not fit the pattern's argument type. */
export class InvalidArgumentError extends RefusedError {
  override name = "InvalidArgumentError";
  get path(): string | undefined {
    return str(this.details.path);
  }
  get expected(): string | undefined {
    return str(this.details.expected);
  }
  get got(): string | undefined {
    return str(this.details.got);
  }
}

/** A message the server could not take as written (`details.field` names
 * the field); also `badJson`, `unknownType`, `frameTooLarge`, …, which a
 * correct client never provokes. */
export class BadMessageError extends RefusedError {
  override name = "BadMessageError";
  get field(): string | undefined {
    return str(this.details.field);
  }
}

type RefusalClass = new (code: string, message: string, details?: Details, status?: number) => RefusedError;

// Every code the schema lists must be mapped: a code added to the schema
// fails the build here until it is.
const BY_CODE: Record<ErrorCode, RefusalClass> = {
  binaryFrame: BadMessageError,
  frameTooLarge: BadMessageError,
  badJson: BadMessageError,
  unknownType: BadMessageError,
  badMessage: BadMessageError,
  notOpen: BadMessageError,
  alreadyOpen: BadMessageError,
  badSignature: BadSignatureError,
  forbidden: ForbiddenError,
  unknownPiece: UnknownPieceError,
  unknownStream: UnknownStreamError,
  invalidPattern: InvalidPatternError,
  invalidArgument: InvalidArgumentError,
  unknownSpace: UnknownSpaceError,
  internal: InternalError,
  overloaded: OverloadedError,
  backingOff: BackingOffError,
  heldElsewhere: HeldElsewhereError,
  unavailable: UnavailableError,
  quotaExceeded: QuotaExceededError,
};

/** The error class for a refusal with `code` (`RefusedError` for a code
 * this client does not know). */
export function refusal(code: string, message: string, details?: Details, status?: number): RefusedError {
  const Class = (BY_CODE as Record<string, RefusalClass>)[code] ?? RefusedError;
  return new Class(code, message, details, status);
}

/** The connection closed (or could not be made). `code` and `reason` are
 * the WebSocket close frame's (1006: no close frame, the network or the
 * process went away). */
export class ConnectionClosedError extends SpacewakeError {
  override name = "ConnectionClosedError";
  constructor(
    message: string,
    readonly code?: number,
    readonly reason?: string,
  ) {
    super(message);
  }
}

/** A request that is not safe to repeat (`deploy`, `delete`) was in flight
 * when its connection dropped: the server may or may not have done it. */
export class ConnectionLostError extends SpacewakeError {
  override name = "ConnectionLostError";
}

/** No answer within the request timeout. For a `send`, `eventId` is the
 * event's idempotency key: sending again with it is safe. */
export class TimeoutError extends SpacewakeError {
  override name = "TimeoutError";
  constructor(
    message: string,
    readonly eventId?: string,
  ) {
    super(message);
  }
}

/** A request on a session that was closed (by `close()`, or because it
 * could not be reopened: `cause` says why). */
export class SessionClosedError extends SpacewakeError {
  override name = "SessionClosedError";
}

/** The server said something that is not the protocol this client speaks. */
export class ProtocolError extends SpacewakeError {
  override name = "ProtocolError";
}
