/**
 * The debug adapter VS Code runs inline for a Ray session: it carries the session's DAP
 * messages over raydbg's authenticated WebSocket relay to debugpy in the paused worker
 * (the real adapter). Nothing listens anywhere: VS Code hands messages to handleMessage
 * and takes debugpy's from onDidSendMessage, inside the extension host.
 *
 * The relay (docs/architecture.md, "DAP relay") is a WebSocket upgrade of
 * `/api/v1/sessions/{id}/dap` with `Authorization: Bearer <token>`, then raw DAP bytes in
 * binary messages both ways. This module has VS Code's DebugAdapter shape without
 * importing vscode, so it is tested in plain node.
 */
import WebSocket from "ws";
import { DapFrameReader, DapMessage, encodeDap } from "./dapFraming";
import { closeCodeError, RelayError, upgradeError } from "./relayErrors";

export interface Disposable {
  dispose(): void;
}

/** vscode.DebugAdapter, structurally: what DebugAdapterInlineImplementation takes. */
export interface InlineDebugAdapter extends Disposable {
  readonly onDidSendMessage: (listener: (message: DapMessage) => void) => Disposable;
  handleMessage(message: DapMessage): void;
}

export interface DapRelayOptions {
  /** `ws(s)://gateway/api/v1/sessions/{id}/dap`. */
  url: string;
  token: string;
  handshakeTimeoutMs?: number;
  /** The relay failed (refused, dropped, garbled); VS Code's requests are answered too. */
  onError?: (err: RelayError) => void;
}

type State = "idle" | "connecting" | "open" | "closed";

const asBuffer = (data: WebSocket.RawData): Buffer => (Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data));

export class DapRelay implements InlineDebugAdapter {
  private readonly listeners = new Set<(message: DapMessage) => void>();
  private readonly frames = new DapFrameReader();
  // Messages VS Code sent before the relay opened; nothing may be lost or reordered.
  private readonly queued: Buffer[] = [];
  // Requests debugpy has not answered yet (seq -> command): answered here if the relay ends.
  private readonly unanswered = new Map<number, string>();
  private ws: WebSocket | null = null;
  private state: State = "idle";
  private disposed = false;
  // Our own messages (answers, events) continue debugpy's numbering.
  private lastSeq = 0;
  // Why the relay ended, for the requests answered after it; shown by VS Code only when
  // onError has not told the user already.
  private endedBecause = "";
  private showUser = true;

  constructor(private readonly opts: DapRelayOptions) {}

  readonly onDidSendMessage = (listener: (message: DapMessage) => void): Disposable => {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  };

  /** idle until VS Code's first message, then connecting, open, and closed for good. */
  get status(): State {
    return this.state;
  }

  /** A message from VS Code: to debugpy, unchanged (the first one opens the relay). */
  handleMessage(message: DapMessage): void {
    if (this.disposed) return;
    if (this.state === "closed") {
      if (message.type === "request") this.emit(this.answer(message.seq, String(message.command)));
      return;
    }
    if (message.type === "request") this.unanswered.set(message.seq, String(message.command));
    const bytes = encodeDap(message);
    if (this.state === "open" && this.ws) {
      this.ws.send(bytes, { binary: true });
      return;
    }
    this.queued.push(bytes);
    if (this.state === "idle") this.connect();
  }

  /** VS Code ended the session: close the relay, so the gateway detaches from the worker. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.listeners.clear();
    this.state = "closed";
    const ws = this.ws;
    if (ws?.readyState === WebSocket.OPEN) ws.close(1000, "client closed");
    else if (ws?.readyState === WebSocket.CONNECTING) ws.terminate();
  }

  private connect(): void {
    const { url } = this.opts;
    this.state = "connecting";
    const ws = new WebSocket(url, {
      headers: { Authorization: `Bearer ${this.opts.token}` },
      handshakeTimeout: this.opts.handshakeTimeoutMs ?? 10_000,
      perMessageDeflate: false,
    });
    this.ws = ws;
    ws.on("unexpected-response", (req, res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      const done = () => {
        this.end(upgradeError(res.statusCode ?? 0, Buffer.concat(chunks).toString("utf8"), url));
        req.destroy();
      };
      res.on("data", (c: Buffer) => {
        size += c.length;
        if (size <= 4096) chunks.push(c);
      });
      res.on("end", done);
      res.on("error", done);
    });
    ws.on("open", () => {
      if (this.state !== "connecting") return;
      this.state = "open";
      for (const bytes of this.queued) ws.send(bytes, { binary: true });
      this.queued.length = 0;
    });
    ws.on("message", (data: WebSocket.RawData) => this.received(asBuffer(data)));
    ws.on("close", (code: number, reason: Buffer) => {
      // 1006: gone without a close frame (gateway or network down); other codes: its word.
      const lost = code === 1006 ? new RelayError(`the raydbg gateway dropped the DAP relay ${url} (connection lost, no close frame)`, "unreachable") : null;
      this.end(closeCodeError(code, reason.toString("utf8"), url) ?? lost);
    });
    ws.on("error", (e: Error & { code?: string }) => {
      const what = this.state === "open" ? `the DAP relay ${url} failed` : `cannot open the DAP relay ${url}`;
      this.end(new RelayError(`${what}: ${e.code ?? e.message}`, "unreachable"));
    });
  }

  /** Bytes from debugpy (any chunking): whole messages to VS Code. */
  private received(chunk: Buffer): void {
    if (this.state !== "open") return;
    let messages: DapMessage[];
    try {
      messages = this.frames.push(chunk);
    } catch (e) {
      this.end(new RelayError(`the DAP relay ${this.opts.url} sent something that is not DAP: ${(e as Error).message}`, "protocol"));
      this.ws?.terminate();
      return;
    }
    for (const m of messages) {
      if (m.seq > this.lastSeq) this.lastSeq = m.seq;
      if (m.type === "response" && typeof m.request_seq === "number") this.unanswered.delete(m.request_seq);
      this.emit(m);
    }
  }

  /** The relay is over: say why once, answer what debugpy never will, end the session. */
  private end(err: RelayError | null): void {
    if (this.state === "closed") return;
    this.state = "closed";
    this.queued.length = 0;
    this.endedBecause = err?.message ?? `the raydbg DAP relay ${this.opts.url} closed`;
    this.showUser = err === null;
    if (err) {
      this.opts.onError?.(err);
      this.emit({ seq: ++this.lastSeq, type: "event", event: "output", body: { category: "stderr", output: `raydbg: ${err.message}\n` } });
    }
    for (const [seq, command] of this.unanswered) this.emit(this.answer(seq, command));
    this.unanswered.clear();
    this.emit({ seq: ++this.lastSeq, type: "event", event: "terminated" });
  }

  /** The answer to a request the relay cannot carry. */
  private answer(requestSeq: number, command: string): DapMessage {
    const base = { seq: ++this.lastSeq, type: "response", request_seq: requestSeq, command };
    // Ending a session whose relay is gone leaves nothing to do: that succeeds.
    if (command === "disconnect" || command === "terminate") return { ...base, success: true };
    const text = this.endedBecause;
    return { ...base, success: false, message: text, body: { error: { id: 1, format: text, showUser: this.showUser } } };
  }

  private emit(message: DapMessage): void {
    for (const l of [...this.listeners]) {
      if (this.disposed) return;
      l(message);
    }
  }
}
