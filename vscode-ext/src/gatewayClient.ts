/**
 * HTTP client for the raydbg gateway (docs/architecture.md, "Gateway HTTP API").
 *
 * Uses node's http/https rather than fetch: the extension host's fetch varies with the
 * VS Code version, and the SSE stream needs a raw, long-lived response.
 */
import * as http from "node:http";
import * as https from "node:https";
import { ParsedSessions, parseSessionList } from "./records";
import { parseGatewayAddress, GatewayAddress } from "./settings";
import { SseParser } from "./sse";

export type GatewayErrorReason = "auth" | "unreachable" | "protocol" | "notFound";

export class GatewayError extends Error {
  constructor(
    message: string,
    readonly reason: GatewayErrorReason,
    readonly status?: number,
    /** The gateway's own one-line `{"error": ...}`, when it sent one. */
    readonly detail?: string,
  ) {
    super(message);
    this.name = "GatewayError";
  }
}

export interface StreamHandlers {
  onSessions(parsed: ParsedSessions | string): void;
  /** The stream ended or failed; the caller decides whether to reconnect or poll. */
  onClose(err: GatewayError): void;
}

export interface StreamHandle {
  close(): void;
}

export interface GatewayClientOptions {
  address: string;
  token: string;
  timeoutMs?: number;
  /** The stream is considered dead after this long without bytes (the gateway pings every 15 s). */
  streamIdleMs?: number;
}

/** The `{"error": ...}` line the gateway sends with failures, if the body is one. */
function gatewayError(body: string): string | undefined {
  try {
    const v = JSON.parse(body) as unknown;
    if (typeof v === "object" && v !== null && typeof (v as { error?: unknown }).error === "string") return (v as { error: string }).error;
  } catch {
    /* not JSON */
  }
  return undefined;
}

export class GatewayClient {
  readonly base: GatewayAddress;
  private readonly timeoutMs: number;
  private readonly streamIdleMs: number;

  constructor(private readonly opts: GatewayClientOptions) {
    const base = parseGatewayAddress(opts.address);
    if (typeof base === "string") throw new GatewayError(base, "protocol");
    this.base = base;
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.streamIdleMs = opts.streamIdleMs ?? 45_000;
  }

  get address(): string {
    return this.opts.address;
  }

  /** The bearer token, for the DAP relay's handshake (dapRelay.ts). */
  get token(): string {
    return this.opts.token;
  }

  /** `ws(s)://.../api/v1/sessions/{id}/dap`, the DAP relay for one session. */
  dapUrl(sessionId: string): string {
    return `${this.base.wsBase}/api/v1/sessions/${encodeURIComponent(sessionId)}/dap`;
  }

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    return { Authorization: `Bearer ${this.opts.token}`, Accept: "application/json", ...extra };
  }

  private request(path: string, headers: Record<string, string>, method = "GET", body?: string, timeoutMs = this.timeoutMs): Promise<http.IncomingMessage> & { req?: http.ClientRequest } {
    const url = new URL(this.base.httpBase + path);
    const mod = url.protocol === "https:" ? https : http;
    let req: http.ClientRequest | undefined;
    const p = new Promise<http.IncomingMessage>((resolve, reject) => {
      const sent = body === undefined ? headers : { ...headers, "Content-Type": "application/json", "Content-Length": String(Buffer.byteLength(body)) };
      req = mod.request(url, { method, headers: sent }, resolve);
      req.on("error", (e: NodeJS.ErrnoException) => reject(this.connectError(e)));
      req.setTimeout(timeoutMs, () => req?.destroy(Object.assign(new Error("timed out"), { code: "ETIMEDOUT" })));
      req.end(body);
    });
    return Object.assign(p, { req });
  }

  private connectError(e: NodeJS.ErrnoException): GatewayError {
    const code = e.code ?? e.message;
    return new GatewayError(`cannot reach the raydbg gateway at ${this.opts.address} (${code}); is the cluster up and raydbg started?`, "unreachable");
  }

  private statusError(status: number, body: string): GatewayError {
    const own = gatewayError(body);
    const detail = own ?? body.trim().slice(0, 200);
    if (status === 401 || status === 403) {
      return new GatewayError(`gateway ${this.opts.address} rejected the token (HTTP ${status}); set the right one with 'Ray: Set Cluster Token'`, "auth", status, own);
    }
    if (status === 404) return new GatewayError(`gateway ${this.opts.address}: not found (HTTP 404)${detail ? `: ${detail}` : ""}`, "notFound", status, own);
    return new GatewayError(`gateway ${this.opts.address} answered HTTP ${status}${detail ? `: ${detail}` : ""}`, "protocol", status, own);
  }

  private static readBody(res: http.IncomingMessage): Promise<string> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
      res.on("error", reject);
    });
  }

  /** GET a JSON document; non-2xx and undecodable bodies become GatewayErrors. */
  getJson(path: string): Promise<unknown> {
    return this.call("GET", path);
  }

  /** One JSON call (`body` sent as JSON when given); non-2xx and undecodable answers become GatewayErrors. */
  async call(method: string, path: string, payload?: unknown, timeoutMs?: number): Promise<unknown> {
    const res = await this.request(path, this.headers(), method, payload === undefined ? undefined : JSON.stringify(payload), timeoutMs);
    let body: string;
    try {
      body = await GatewayClient.readBody(res);
    } catch (e) {
      throw this.connectError(e as NodeJS.ErrnoException);
    }
    const status = res.statusCode ?? 0;
    if (status < 200 || status >= 300) throw this.statusError(status, body);
    try {
      return JSON.parse(body) as unknown;
    } catch {
      throw new GatewayError(`gateway ${this.opts.address} sent invalid JSON for ${path}`, "protocol", status);
    }
  }

  status(): Promise<unknown> {
    return this.getJson("/api/v1/status");
  }

  /** `GET /api/v1/stacks` for a job and/or Train run (the body as sent; stacks.ts parses it). */
  stacks(query: { job?: string; run?: string }): Promise<unknown> {
    const q = new URLSearchParams();
    if (query.job) q.set("job", query.job);
    if (query.run) q.set("run", query.run);
    const qs = q.toString();
    return this.getJson(`/api/v1/stacks${qs ? `?${qs}` : ""}`);
  }

  /** `GET /api/v1/steps[?job=&run=]`: each Train run's ranks with their recent step times (raw; steps.ts parses it). */
  steps(query: { job?: string; run?: string } = {}): Promise<unknown> {
    const q = new URLSearchParams();
    if (query.job) q.set("job", query.job);
    if (query.run) q.set("run", query.run);
    const qs = q.toString();
    return this.getJson(`/api/v1/steps${qs ? `?${qs}` : ""}`);
  }

  /**
   * `POST /api/v1/pause` (raydbg pause): stop the worker `target` names (RUN:RANK, PID,
   * NODE:PID or a stack class id); the gateway answers once its session is listed or after
   * `waitS` (raw; pause.ts parses it). Its wait and the node's answer may take a while.
   */
  pause(target: string, job: string | null, waitS = 5): Promise<unknown> {
    const body: Record<string, unknown> = { target, wait_s: waitS };
    if (job !== null) body.job = job;
    return this.call("POST", "/api/v1/pause", body, Math.max(this.timeoutMs, (waitS + 30) * 1000));
  }

  /** `GET /api/v1/breakpoints[?job=]`: the armed breakpoints (raw; breakpoints.ts parses them). */
  breakpoints(job?: string): Promise<unknown> {
    return this.getJson(`/api/v1/breakpoints${job ? `?${new URLSearchParams({ job }).toString()}` : ""}`);
  }

  /** `PUT /api/v1/breakpoints?owner=&job=`: replace what `owner` armed for `job` (null: every job) with `specs`. */
  putBreakpoints(owner: string, job: string | null, specs: readonly unknown[]): Promise<unknown> {
    const q = new URLSearchParams({ owner });
    if (job !== null) q.set("job", job);
    return this.call("PUT", `/api/v1/breakpoints?${q.toString()}`, { breakpoints: specs });
  }

  /** `DELETE /api/v1/breakpoints/{id}`. */
  deleteBreakpoint(id: string): Promise<unknown> {
    return this.call("DELETE", `/api/v1/breakpoints/${encodeURIComponent(id)}`);
  }

  /** Paused sessions; a body that is not a list becomes a GatewayError, bad records are returned in `bad`. */
  async sessions(): Promise<ParsedSessions> {
    const parsed = parseSessionList(await this.getJson("/api/v1/sessions"));
    if (typeof parsed === "string") throw new GatewayError(parsed, "protocol");
    return parsed;
  }

  /**
   * Subscribe to `GET /api/v1/stream`. `onClose` fires exactly once: with reason
   * "notFound" when the gateway has no stream (poll instead), else the failure.
   */
  stream(handlers: StreamHandlers): StreamHandle {
    let closed = false;
    let idle: NodeJS.Timeout | undefined;
    const p = this.request("/api/v1/stream", this.headers({ Accept: "text/event-stream" }));
    const req = p.req;
    const finish = (err: GatewayError) => {
      if (closed) return;
      closed = true;
      if (idle) clearTimeout(idle);
      req?.destroy();
      handlers.onClose(err);
    };
    const armIdle = () => {
      if (idle) clearTimeout(idle);
      idle = setTimeout(() => finish(new GatewayError(`no data from ${this.opts.address} for ${this.streamIdleMs / 1000} s`, "unreachable")), this.streamIdleMs);
    };
    armIdle();
    p.then(
      (res) => {
        const status = res.statusCode ?? 0;
        if (status < 200 || status >= 300) {
          void GatewayClient.readBody(res).then(
            (body) => finish(this.statusError(status, body)),
            () => finish(this.statusError(status, "")),
          );
          return;
        }
        if (!String(res.headers["content-type"] ?? "").startsWith("text/event-stream")) {
          res.destroy();
          finish(new GatewayError(`gateway ${this.opts.address} has no event stream`, "notFound", status));
          return;
        }
        // The connect timeout must not cut a healthy, quiet stream; the idle timer takes over.
        req?.setTimeout(0);
        const parser = new SseParser();
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          armIdle();
          for (const ev of parser.feed(chunk)) {
            if (!closed && ev.event === "sessions") handlers.onSessions(parseSessionList(ev.data));
          }
        });
        res.on("end", () => finish(new GatewayError(`gateway ${this.opts.address} closed the event stream`, "unreachable")));
        res.on("error", (e: NodeJS.ErrnoException) => finish(this.connectError(e)));
      },
      (e: unknown) => finish(e instanceof GatewayError ? e : this.connectError(e as NodeJS.ErrnoException)),
    );
    return {
      close: () => {
        closed = true;
        if (idle) clearTimeout(idle);
        req?.destroy();
      },
    };
  }
}
