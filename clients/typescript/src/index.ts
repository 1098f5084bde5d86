// @spacewake/client: sessions on a spacewake server from a browser or Node.

export { connect, Session } from "./session.js";
export type { ConnectOptions, DeployOptions, ReadResult, SendResult, SessionState, StateDetail } from "./session.js";
export { Tracker } from "./tracker.js";
export type { TrackOptions } from "./tracker.js";
export { Identity, didFromPublicKey, publicKeyFromDid } from "./identity.js";
export { OperatorClient, httpBase } from "./operator.js";
export type { OperatorOptions } from "./operator.js";
export type { ReconnectOptions } from "./reconnect.js";
export type { WebSocketConstructor, WebSocketLike } from "./connection.js";
export { openMessage, operatorMessage, ingestMessage, signOpen } from "./auth.js";
export { base58btcDecode, base58btcEncode, base64urlEncode } from "./encoding.js";
export * from "./errors.js";
export * from "./messages.js";
