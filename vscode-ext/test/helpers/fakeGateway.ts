/**
 * A small real gateway for tests: node http + ws speaking the wire contract of
 * docs/architecture.md (bearer auth, sessions JSON, SSE stream, DAP relay upgrade).
 * The relay side echoes or scripts bytes, standing in for debugpy behind the agent.
 */
import * as http from "node:http";
import * as net from "node:net";
import { AddressInfo } from "node:net";
import WebSocket, { WebSocketServer } from "ws";
import { DapFrameReader, DapMessage, encodeDap } from "../../src/dapFraming";

export interface UpgradeSeen {
  url: string;
  headers: http.IncomingHttpHeaders;
}

export interface FakeGatewayOptions {
  token?: string;
  /** Body of GET /api/v1/sessions, sent verbatim when a string. */
  sessions?: unknown;
  /** false: /api/v1/stream answers 404 (an older gateway). */
  stream?: boolean;
  /**
   * Answer for GET /api/v1/stacks: a body (JSON-encoded), or a function of the query
   * returning [status, body]. Undefined: 404, as a gateway without stacks.
   */
  stacks?: unknown;
  /** Answer for GET /api/v1/steps, like `stacks`. Undefined: 404, as a gateway without steps. */
  steps?: unknown;
  /** Answer for POST /api/v1/pause: a function of the body returning [status, body]. Undefined: 404. */
  pause?: (body: unknown) => [number, unknown];
  /** Serve the breakpoints API (issue 18) from an in-memory store (`FakeGateway.bps`). */
  breakpoints?: boolean;
  /** Called for each relayed WebSocket once the upgrade is accepted. */
  onRelay?: (ws: WebSocket, seen: UpgradeSeen) => void;
}

export class FakeGateway {
  readonly server: http.Server;
  readonly wss = new WebSocketServer({ noServer: true, perMessageDeflate: false });
  readonly upgrades: UpgradeSeen[] = [];
  readonly requests: UpgradeSeen[] = [];
  private streams = new Set<http.ServerResponse>();
  token: string;
  sessions: unknown;
  stream: boolean;
  stacks: unknown;
  steps: unknown;
  pause?: (body: unknown) => [number, unknown];
  /** POST /api/v1/pause bodies as received. */
  pauses: unknown[] = [];
  onRelay: (ws: WebSocket, seen: UpgradeSeen) => void;
  breakpoints: boolean;
  /** The armed breakpoints, as the gateway keeps them. */
  bps: Record<string, unknown>[] = [];
  /** PUT bodies as received, with their query. */
  puts: { owner: string | null; job: string | null; body: unknown }[] = [];
  /** When set, PUT answers this status with `{"error": putError}`. */
  putError?: { status: number; error: string };
  private nextId = 1;

  constructor(opts: FakeGatewayOptions = {}) {
    this.token = opts.token ?? "s3cret";
    this.sessions = opts.sessions ?? [];
    this.stream = opts.stream ?? true;
    this.stacks = opts.stacks;
    this.steps = opts.steps;
    this.pause = opts.pause;
    this.breakpoints = opts.breakpoints ?? false;
    this.onRelay = opts.onRelay ?? ((ws) => ws.on("message", (d: Buffer) => ws.send(d, { binary: true })));
    this.server = http.createServer((req, res) => this.handle(req, res));
    this.server.on("upgrade", (req: http.IncomingMessage, sock: import("node:stream").Duplex, head: Buffer) => this.upgrade(req, sock, head));
  }

  async listen(): Promise<this> {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    return this;
  }

  get address(): string {
    return `127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  private authorized(req: http.IncomingMessage): boolean {
    return req.headers.authorization === `Bearer ${this.token}`;
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    this.requests.push({ url: req.url ?? "", headers: req.headers });
    if (!this.authorized(req)) {
      res.writeHead(401, { "Content-Type": "application/json" }).end(JSON.stringify({ error: "missing or wrong raydbg token" }));
      return;
    }
    if (this.breakpoints && (req.url ?? "").startsWith("/api/v1/breakpoints")) {
      this.breakpointsApi(req, res);
    } else if (req.url === "/api/v1/sessions") {
      const body = typeof this.sessions === "string" ? this.sessions : JSON.stringify(this.sessions);
      res.writeHead(200, { "Content-Type": "application/json" }).end(body);
    } else if ((req.url ?? "").startsWith("/api/v1/stacks") && this.stacks !== undefined) {
      this.answer(req, res, this.stacks);
    } else if ((req.url ?? "").startsWith("/api/v1/steps") && this.steps !== undefined) {
      this.answer(req, res, this.steps);
    } else if (req.url === "/api/v1/pause" && req.method === "POST" && this.pause !== undefined) {
      const pause = this.pause;
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        let body: unknown = null;
        try {
          body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
        } catch {
          /* the handler sees null */
        }
        this.pauses.push(body);
        const [status, answer] = pause(body);
        res.writeHead(status, { "Content-Type": "application/json" }).end(JSON.stringify(answer));
      });
    } else if (req.url === "/api/v1/stream" && this.stream) {
      res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
      this.streams.add(res);
      res.on("close", () => this.streams.delete(res));
      this.push(res);
    } else {
      res.writeHead(404, { "Content-Type": "application/json" }).end(JSON.stringify({ error: "not found" }));
    }
  }

  /** A GET answer given as a body, or as a function of the query returning [status, body]. */
  private answer(req: http.IncomingMessage, res: http.ServerResponse, given: unknown): void {
    const query = new URL(req.url ?? "", "http://x").searchParams;
    const [status, body] = typeof given === "function" ? (given as (q: URLSearchParams) => [number, unknown])(query) : [200, given];
    res.writeHead(status, { "Content-Type": "application/json" }).end(typeof body === "string" ? body : JSON.stringify(body));
  }

  /** The contract of GET / PUT / DELETE /api/v1/breakpoints (docs/architecture.md). */
  private breakpointsApi(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = new URL(req.url ?? "", "http://x");
    const json = (status: number, body: unknown) => res.writeHead(status, { "Content-Type": "application/json" }).end(JSON.stringify(body));
    const job = url.searchParams.get("job");
    if (req.method === "GET" && url.pathname === "/api/v1/breakpoints") {
      json(200, { breakpoints: this.bps.filter((b) => job === null || b.job === null || b.job === job) });
      return;
    }
    const del = /^\/api\/v1\/breakpoints\/([^/]+)$/.exec(url.pathname);
    if (req.method === "DELETE" && del) {
      const id = decodeURIComponent(del[1]);
      const before = this.bps.length;
      this.bps = this.bps.filter((b) => b.id !== id);
      json(this.bps.length < before ? 200 : 404, this.bps.length < before ? { removed: id } : { error: `no breakpoint ${id}` });
      return;
    }
    if (req.method !== "PUT" || url.pathname !== "/api/v1/breakpoints") {
      json(404, { error: "not found" });
      return;
    }
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const owner = url.searchParams.get("owner");
      let body: unknown;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      } catch {
        json(400, { error: "body is not JSON" });
        return;
      }
      this.puts.push({ owner, job, body });
      if (this.putError) {
        json(this.putError.status, { error: this.putError.error });
        return;
      }
      const items = (body as { breakpoints?: unknown }).breakpoints;
      if (!owner || !Array.isArray(items)) {
        json(400, { error: "PUT needs ?owner= and {\"breakpoints\": [...]}" });
        return;
      }
      this.bps = this.bps.filter((b) => !(b.owner === owner && b.job === job));
      const mine = (items as Record<string, unknown>[]).map((i) => ({
        id: `bp-${String(this.nextId++).padStart(4, "0")}`, file: i.file, line: i.line, job, condition: i.condition ?? null,
        hit_limit: i.hit_limit ?? 3, owner, created: 1_780_000_000, hits: 0, paused: 0,
      }));
      this.bps.push(...mine);
      json(200, { breakpoints: mine });
    });
  }

  private push(res: http.ServerResponse): void {
    const body = typeof this.sessions === "string" ? this.sessions : JSON.stringify(this.sessions);
    res.write(`event: sessions\ndata: ${body}\n\n`);
  }

  /** Replace the session list and tell every open stream, as the gateway does on change. */
  setSessions(sessions: unknown): void {
    this.sessions = sessions;
    for (const res of this.streams) this.push(res);
  }

  /** Drop every open SSE stream (gateway restart). */
  dropStreams(): void {
    for (const res of this.streams) res.destroy();
    this.streams.clear();
  }

  get openStreams(): number {
    return this.streams.size;
  }

  private upgrade(req: http.IncomingMessage, sock: import("node:stream").Duplex, head: Buffer): void {
    const seen = { url: req.url ?? "", headers: req.headers };
    this.upgrades.push(seen);
    if (!this.authorized(req)) {
      const body = JSON.stringify({ error: "missing or wrong raydbg token" });
      sock.end(`HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
      return;
    }
    this.wss.handleUpgrade(req, sock, head, (ws) => this.onRelay(ws, seen));
  }

  async close(): Promise<void> {
    this.dropStreams();
    for (const c of this.wss.clients) c.terminate();
    this.wss.close();
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

/** A gateway-shaped session record with overrides. */
export function record(over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id: "a1b2c3d4e5f6",
    job_id: "01000000",
    task_id: "c2668a65bda616c1ffffffffffffffffffffffff01000000",
    task_name: "train_step",
    actor_id: null,
    actor_name: null,
    train_run: null,
    train_rank: null,
    train_local_rank: null,
    train_world_size: null,
    group: null,
    node_id: "f".repeat(56),
    node_ip: "10.0.0.5",
    pid: 4242,
    thread_id: 140000,
    thread_name: "MainThread",
    file: "/home/ray/app/train.py",
    line: 17,
    function: "train_step",
    reason: "breakpoint",
    exception: null,
    since: 1_700_000_000,
    state: "waiting",
    attachable: true,
    cwd: "/home/ray/app",
    ...over,
  };
}

/**
 * An address where connections are refused ("gateway down") for as long as it is held.
 *
 * Binding a port and releasing it (the old freePort) is a race: any process on the
 * machine may bind that port before the test dials it. Another test file's fake gateway
 * (same default token) took one once: the relay opened, ended with 1006 when that file
 * closed its gateway, and "gateway down" waited in vain for an ECONNREFUSED report.
 * Here the port stays bound on 127.0.0.1, which keeps every wildcard and 127.0.0.1 bind
 * off it, and the test dials 127.0.0.2, where nothing listens: refused, every time.
 * Other systems may not route 127.0.0.2; there the old, racy way is all there is.
 */
export async function refusedAddress(): Promise<{ address: string; release(): Promise<void> }> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as AddressInfo).port;
  const release = () => new Promise<void>((r) => s.close(() => r()));
  if (process.platform === "linux") return { address: `127.0.0.2:${port}`, release };
  await release();
  return { address: `127.0.0.1:${port}`, release: () => Promise.resolve() };
}

/** Resolve when `cond()` holds, polling every 5 ms; reject after `ms`. */
export async function waitFor(cond: () => boolean, ms = 3000, what = "condition"): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * A relay handler that plays debugpy behind the gateway: every request it gets is kept
 * in `requests` and answered with success (initialize with capabilities), and attach is
 * followed by the `initialized` event, as debugpy does.
 */
export function fakeDebugpy(requests: DapMessage[]): (ws: WebSocket) => void {
  return (ws) => {
    const frames = new DapFrameReader();
    let seq = 0;
    const send = (m: object) => ws.send(encodeDap({ seq: ++seq, ...m }), { binary: true });
    ws.on("message", (data: Buffer) => {
      for (const m of frames.push(data)) {
        if (m.type !== "request") continue;
        requests.push(m);
        const body = m.command === "initialize" ? { supportsConfigurationDoneRequest: true } : {};
        send({ type: "response", request_seq: m.seq, command: m.command, success: true, body });
        if (m.command === "attach") send({ type: "event", event: "initialized" });
      }
    });
  };
}
