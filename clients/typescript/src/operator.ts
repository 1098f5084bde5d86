// The operator API (spec/operators.md): signed HTTP requests for what the
// protocol has no message for yet, such as granting access to a space.
// Only the host's own key (DATA/host.key) and the dids `serve` was started
// with as `--operator` may call it.

import { operatorMessage } from "./auth.js";
import { base64urlEncode, utf8 } from "./encoding.js";
import { ProtocolError, refusal } from "./errors.js";
import type { Identity } from "./identity.js";
import type { CreateBody, GrantBody, GrantView, SpaceView } from "./generated/operator.js";

export interface OperatorOptions {
  /** The server's HTTP address: `http://127.0.0.1:8080` (a `ws://…/ws`
   * URL or a bare `host:port` names the same server). */
  server: string;
  /** An operator's identity: the host's key or an `--operator` did's. */
  identity: Identity;
  /** A `fetch` (default: the global one). */
  fetch?: typeof fetch;
}

/** The base URL of a server named as `host:port`, `http(s)://…` or `ws(s)://…`. */
export function httpBase(server: string): string {
  const m = /^(?:(https?|wss?):\/\/)?([^/]+)/.exec(server);
  if (!m || !m[2]) throw new Error(`${JSON.stringify(server)} is not host:port, http(s)://host:port or ws(s)://host:port`);
  const secure = m[1] === "https" || m[1] === "wss";
  return `${secure ? "https" : "http"}://${m[2]}`;
}

export class OperatorClient {
  private readonly base: string;
  private readonly fetch: typeof fetch;

  constructor(private readonly options: OperatorOptions) {
    this.base = httpBase(options.server);
    const f = options.fetch ?? globalThis.fetch;
    if (!f) throw new Error("no fetch on this platform; pass one as `fetch`");
    this.fetch = f;
  }

  /** Grants `did` `read` or `write` access to `space`, or revokes it
   * (`none`). Open sessions of that did learn of it within 100 ms. */
  grant(space: string, did: string, access: GrantBody["access"]): Promise<GrantView> {
    const body: GrantBody = { did, access };
    return this.call("POST", `/api/operator/spaces/${encodeURIComponent(space)}/grants`, body);
  }

  /** Creates a space owned by `owner` (default: the signing operator). */
  createSpace(space: string, owner?: string): Promise<SpaceView> {
    const body: CreateBody = { space };
    if (owner !== undefined) body.owner = owner;
    return this.call("POST", "/api/operator/spaces", body);
  }

  /** Any operator route: signs `method`, `pathAndQuery` and the JSON body
   * with the current time; a refusal rejects with its error class
   * (`status` set to the HTTP status). */
  async call<T>(method: string, pathAndQuery: string, body?: unknown): Promise<T> {
    const bytes = body === undefined ? new Uint8Array() : utf8(JSON.stringify(body));
    const time = Date.now();
    const signature = base64urlEncode(await this.options.identity.sign(operatorMessage(time, method, pathAndQuery, bytes)));
    const headers: Record<string, string> = {
      "x-spacewake-did": this.options.identity.did,
      "x-spacewake-time": String(time),
      "x-spacewake-signature": signature,
    };
    if (body !== undefined) headers["content-type"] = "application/json";
    const response = await this.fetch(this.base + pathAndQuery, {
      method,
      headers,
      body: body === undefined ? undefined : bytes,
    });
    const text = await response.text();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new ProtocolError(`${method} ${pathAndQuery}: HTTP ${response.status}, not JSON: ${text.slice(0, 200)}`);
    }
    if (!response.ok) {
      const e = (json as { error?: { code?: string; message?: string; details?: Record<string, unknown> } }).error;
      throw refusal(e?.code ?? "internal", e?.message ?? `HTTP ${response.status}`, e?.details, response.status);
    }
    return json as T;
  }
}
