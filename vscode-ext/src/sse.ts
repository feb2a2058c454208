/**
 * Incremental Server-Sent Events parser (the WHATWG event-stream format).
 *
 * Chunks from the socket split lines and events anywhere, so the parser keeps the
 * unfinished tail between calls.
 */

export interface SseEvent {
  event: string;
  data: string;
  id?: string;
}

export class SseParser {
  private buffer = "";
  private event = "";
  private data: string[] = [];
  private id: string | undefined;
  private sawCr = false;

  /** Feed decoded text; returns the events completed by it. */
  feed(chunk: string): SseEvent[] {
    let text = chunk;
    // A "\r\n" split across chunks: the "\r" already ended the line, skip the "\n".
    if (this.sawCr && text.startsWith("\n")) text = text.slice(1);
    this.sawCr = text.endsWith("\r");
    this.buffer += text;
    const out: SseEvent[] = [];
    const lines = this.buffer.split(/\r\n|\r|\n/);
    this.buffer = lines.pop() ?? "";
    for (const line of lines) {
      const ev = this.line(line);
      if (ev) out.push(ev);
    }
    return out;
  }

  private line(line: string): SseEvent | null {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return null; // comment, used as keep-alive
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id") this.id = value;
    return null;
  }

  private dispatch(): SseEvent | null {
    const hadData = this.data.length > 0;
    const ev: SseEvent = { event: this.event || "message", data: this.data.join("\n") };
    if (this.id !== undefined) ev.id = this.id;
    this.event = "";
    this.data = [];
    return hadData ? ev : null;
  }
}
