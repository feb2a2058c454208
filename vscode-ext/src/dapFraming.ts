/**
 * DAP wire framing: `Content-Length` headers around JSON bodies on a byte stream, the
 * way debugpy (behind the gateway's relay) reads and writes them.
 */

/** One DAP message (request, response or event), as VS Code hands it to an adapter. */
export interface DapMessage {
  seq: number;
  type: string;
  [key: string]: unknown;
}

// A DAP body larger than this is a broken peer, not a big variable (values are paged);
// the same bound as raydbg/dap/framing.py.
export const MAX_BODY_BYTES = 64 * 1024 * 1024;
// A header block longer than this has no end in sight: the stream is not DAP.
const MAX_HEADER_BYTES = 4096;
const HEADER_END = Buffer.from("\r\n\r\n");

export class DapFramingError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DapFramingError";
  }
}

/** One message with its header, exactly as it goes on the wire. */
export function encodeDap(message: object): Buffer {
  const body = Buffer.from(JSON.stringify(message), "utf8");
  return Buffer.concat([Buffer.from(`Content-Length: ${body.length}\r\n\r\n`, "ascii"), body]);
}

/** The Content-Length of a header block (without its blank line). */
function contentLength(block: string): number {
  let length: number | undefined;
  for (const line of block.split("\r\n")) {
    const colon = line.indexOf(":");
    if (colon < 0) throw new DapFramingError(`malformed DAP header line ${JSON.stringify(line.slice(0, 80))}`);
    // Other headers (Content-Type) are allowed and ignored, as the spec says.
    if (line.slice(0, colon).trim().toLowerCase() !== "content-length") continue;
    const value = line.slice(colon + 1).trim();
    if (!/^\d{1,12}$/.test(value)) throw new DapFramingError(`bad DAP Content-Length ${JSON.stringify(value.slice(0, 40))}`);
    length = Number(value);
  }
  if (length === undefined) throw new DapFramingError("DAP message without a Content-Length header");
  if (length > MAX_BODY_BYTES) throw new DapFramingError(`DAP Content-Length ${length} is over the ${MAX_BODY_BYTES}-byte limit`);
  return length;
}

/**
 * Cuts a byte stream that arrives in arbitrary chunks into DAP messages. After a
 * DapFramingError the stream is unusable (the reader does not resynchronise).
 */
export class DapFrameReader {
  private buffered: Buffer = Buffer.alloc(0);
  private bodyLength: number | null = null;

  /** Feed one chunk; returns the messages it completed, in order. */
  push(chunk: Buffer): DapMessage[] {
    this.buffered = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
    const out: DapMessage[] = [];
    for (;;) {
      if (this.bodyLength === null) {
        const end = this.buffered.indexOf(HEADER_END);
        if (end < 0) {
          if (this.buffered.length > MAX_HEADER_BYTES) throw new DapFramingError(`no end of a DAP header within ${MAX_HEADER_BYTES} bytes`);
          return out;
        }
        this.bodyLength = contentLength(this.buffered.subarray(0, end).toString("latin1"));
        this.buffered = this.buffered.subarray(end + HEADER_END.length);
      }
      if (this.buffered.length < this.bodyLength) return out;
      const body = this.buffered.subarray(0, this.bodyLength);
      this.buffered = this.buffered.subarray(this.bodyLength);
      this.bodyLength = null;
      out.push(parseBody(body));
    }
  }
}

function parseBody(body: Buffer): DapMessage {
  let v: unknown;
  try {
    v = JSON.parse(body.toString("utf8"));
  } catch {
    throw new DapFramingError(`DAP body is not JSON: ${JSON.stringify(body.subarray(0, 80).toString("utf8"))}`);
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new DapFramingError("DAP body is not a JSON object");
  const m = v as Record<string, unknown>;
  if (typeof m.type !== "string" || typeof m.seq !== "number") throw new DapFramingError("DAP message without a string 'type' and a numeric 'seq'");
  return m as DapMessage;
}
