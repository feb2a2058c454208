/**
 * Local DAP forwarder: a TCP port on 127.0.0.1 that VS Code's debugpy attaches to as if
 * it were debugpy, carrying each connection over raydbg's authenticated WebSocket relay.
 *
 * The relay (docs/architecture.md, "DAP relay") is a WebSocket upgrade of
 * `/api/v1/sessions/{id}/dap` with `Authorization: Bearer <token>`, then raw DAP bytes in
 * binary messages both ways. Close codes 4401/4404/4502 say why the gateway hung up.
 */
import * as net from "node:net";
import WebSocket from "ws";

export type ForwarderErrorReason = "auth" | "notFound" | "busy" | "debuggee" | "unreachable" | "protocol";

export class ForwarderError extends Error {
  constructor(
    message: string,
    readonly reason: ForwarderErrorReason,
  ) {
    super(message);
    this.name = "ForwarderError";
  }
}

export interface ForwarderOptions {
  /** `ws(s)://gateway/api/v1/sessions/{id}/dap`. */
  url: string;
  token: string;
  /** Local port; 0 (default) lets the OS choose. */
  port?: number;
  handshakeTimeoutMs?: number;
  /** A connection could not be relayed; its TCP peer has been disconnected. */
  onError?: (err: ForwarderError) => void;
}

/** Relay close codes (docs/architecture.md) -> what the user should be told. */
export function closeCodeError(code: number, reason: string, url: string): ForwarderError | null {
  const why = reason ? `: ${reason}` : "";
  switch (code) {
    case 4401:
      return new ForwarderError(`raydbg gateway rejected the token for ${url}${why}; set the right token with 'Ray: Set Cluster Token'`, "auth");
    case 4404:
      return new ForwarderError(`raydbg has no such paused session (${url})${why}; it may have resumed or ended`, "notFound");
    case 4409:
      return new ForwarderError(`another debugger is already attached to this paused worker${why}`, "busy");
    case 4502:
      return new ForwarderError(`the paused worker cannot be reached from its node's raydbg agent${why}`, "debuggee");
    default:
      return null;
  }
}

/** The gateway refused the upgrade with an HTTP status and (usually) `{"error": ...}`. */
export function upgradeError(status: number, body: string, url: string): ForwarderError {
  let detail = body.trim().slice(0, 300);
  try {
    const v = JSON.parse(body) as { error?: unknown };
    if (typeof v.error === "string") detail = v.error;
  } catch {
    /* plain-text body: keep it */
  }
  const why = detail ? ` (${detail})` : "";
  if (status === 401 || status === 403) {
    return new ForwarderError(`raydbg gateway rejected the token (HTTP ${status}) for ${url}${why}; set the right token with 'Ray: Set Cluster Token'`, "auth");
  }
  if (status === 404) return new ForwarderError(`raydbg gateway has no such session (HTTP 404) for ${url}${why}; it may have resumed`, "notFound");
  if (status === 409) return new ForwarderError(`raydbg cannot attach yet (HTTP 409)${why}`, "busy");
  return new ForwarderError(`raydbg gateway refused the DAP relay for ${url} (HTTP ${status})${why}`, "protocol");
}

// Pause the TCP side while this much is queued toward the gateway.
const HIGH_WATER = 1 << 20;

export class Forwarder {
  private readonly pairs = new Set<{ sock: net.Socket; ws: WebSocket }>();
  private closing = false;

  private constructor(
    private readonly server: net.Server,
    private readonly opts: ForwarderOptions,
  ) {}

  /** Listen on 127.0.0.1 and relay every accepted connection. */
  static start(opts: ForwarderOptions): Promise<Forwarder> {
    const server = net.createServer();
    const fwd = new Forwarder(server, opts);
    server.on("connection", (sock) => fwd.relay(sock));
    return new Promise((resolve, reject) => {
      server.once("error", reject);
      server.listen(opts.port ?? 0, "127.0.0.1", () => {
        server.off("error", reject);
        fwd.port = (server.address() as net.AddressInfo).port;
        resolve(fwd);
      });
    });
  }

  /** The local port (kept after close() so callers can still log it). */
  port = 0;

  /** Connections currently relayed. */
  get connections(): number {
    return this.pairs.size;
  }

  private relay(sock: net.Socket): void {
    if (this.closing) {
      sock.destroy();
      return;
    }
    // Hold DAP bytes the client sends before the relay is open; nothing may be lost.
    sock.pause();
    sock.setNoDelay(true);
    const url = this.opts.url;
    const ws = new WebSocket(url, {
      headers: { Authorization: `Bearer ${this.opts.token}` },
      handshakeTimeout: this.opts.handshakeTimeoutMs ?? 10_000,
      perMessageDeflate: false,
    });
    const pair = { sock, ws };
    this.pairs.add(pair);
    let reported = false;
    let clientGone = false;
    const report = (err: ForwarderError) => {
      // A client that hung up first caused the failure; that is not worth a message.
      if (reported || clientGone || this.closing) return;
      reported = true;
      this.opts.onError?.(err);
    };

    ws.on("unexpected-response", (req, res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      const done = () => {
        report(upgradeError(res.statusCode ?? 0, Buffer.concat(chunks).toString("utf8"), url));
        req.destroy();
        sock.destroy();
        this.pairs.delete(pair);
      };
      res.on("data", (c: Buffer) => {
        size += c.length;
        if (size <= 4096) chunks.push(c);
      });
      res.on("end", done);
      res.on("error", done);
    });
    ws.on("open", () => {
      sock.on("data", (chunk: Buffer) => {
        ws.send(chunk, { binary: true }, () => {
          if (sock.isPaused() && ws.bufferedAmount < HIGH_WATER / 2) sock.resume();
        });
        if (ws.bufferedAmount > HIGH_WATER) sock.pause();
      });
      sock.resume();
    });
    ws.on("message", (data: WebSocket.RawData) => {
      const buf = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
      if (!sock.write(buf)) {
        ws.pause();
        sock.once("drain", () => ws.resume());
      }
    });
    ws.on("close", (code: number, reason: Buffer) => {
      const err = closeCodeError(code, reason.toString("utf8"), url);
      if (err) report(err);
      // 1006: the connection went without a close frame (gateway or network gone). After
      // an error that was reported already; after our own hang-up it is not news.
      else if (code === 1006 && !sockGone) report(new ForwarderError(`the raydbg gateway dropped the DAP relay ${url} (connection lost, no close frame)`, "unreachable"));
      // end(), not destroy(): let DAP bytes already queued (e.g. the last events) reach the client.
      sock.end();
      this.pairs.delete(pair);
    });
    ws.on("error", (e: Error & { code?: string }) => {
      report(new ForwarderError(`cannot open the DAP relay ${url}: ${e.code ?? e.message}`, "unreachable"));
      sock.destroy();
      this.pairs.delete(pair);
    });

    let sockGone = false;
    sock.on("error", () => {
      sockGone = true;
      ws.terminate();
    });
    sock.on("close", () => {
      sockGone = true;
      if (ws.readyState === WebSocket.CONNECTING) clientGone = true;
      this.pairs.delete(pair);
      // The debug client went away: tell the gateway, which detaches from the worker.
      if (ws.readyState === WebSocket.OPEN) ws.close(1000, "client closed");
      else if (ws.readyState === WebSocket.CONNECTING) ws.terminate();
    });
  }

  /** Stop listening and drop every relayed connection. */
  close(): Promise<void> {
    this.closing = true;
    for (const { sock, ws } of this.pairs) {
      if (ws.readyState === WebSocket.OPEN) ws.close(1000, "forwarder stopped");
      else ws.terminate();
      sock.destroy();
    }
    this.pairs.clear();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
