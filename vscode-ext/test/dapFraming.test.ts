import assert from "node:assert/strict";
import { test } from "node:test";
import { DapFrameReader, DapFramingError, encodeDap, MAX_BODY_BYTES } from "../src/dapFraming";

const msg = (seq: number, extra: object = {}) => ({ seq, type: "event", event: "output", ...extra });

test("encode: Content-Length counts bytes, not characters", () => {
  const bytes = encodeDap({ seq: 1, type: "event", body: { output: "é→" } });
  const body = '{"seq":1,"type":"event","body":{"output":"é→"}}';
  assert.equal(bytes.toString("utf8"), `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  assert.notEqual(Buffer.byteLength(body), body.length);
});

test("reader: messages fed one byte at a time come out whole and in order", () => {
  const wire = Buffer.concat([encodeDap(msg(1, { body: { output: "ü" } })), encodeDap(msg(2))]);
  const r = new DapFrameReader();
  const out = [];
  for (let i = 0; i < wire.length; i++) out.push(...r.push(wire.subarray(i, i + 1)));
  assert.deepEqual(out, [msg(1, { body: { output: "ü" } }), msg(2)]);
});

test("reader: several messages in one chunk; other headers are ignored", () => {
  const body = JSON.stringify(msg(3));
  const extra = Buffer.from(`Content-Type: application/vscode-jsonrpc; charset=utf-8\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
  const r = new DapFrameReader();
  assert.deepEqual(r.push(Buffer.concat([encodeDap(msg(1)), encodeDap(msg(2)), extra])), [msg(1), msg(2), msg(3)]);
  assert.deepEqual(r.push(Buffer.alloc(0)), []);
});

for (const [what, wire, re] of [
  ["no Content-Length", "Content-Type: x\r\n\r\n{}", /without a Content-Length/],
  ["a header line without a colon", "Content-Length 2\r\n\r\n{}", /malformed DAP header line/],
  ["a Content-Length that is not a number", "Content-Length: 2a\r\n\r\n{}", /bad DAP Content-Length "2a"/],
  ["a Content-Length over the limit", `Content-Length: ${MAX_BODY_BYTES + 1}\r\n\r\n`, /over the \d+-byte limit/],
  ["a header with no end", "X".repeat(5000), /no end of a DAP header/],
  ["a body that is not JSON", "Content-Length: 3\r\n\r\n{x}", /not JSON/],
  ["a JSON array", "Content-Length: 2\r\n\r\n[]", /not a JSON object/],
  ["a message without seq", 'Content-Length: 16\r\n\r\n{"type":"event"}', /numeric 'seq'/],
] as const) {
  test(`reader refuses ${what}`, () => {
    assert.throws(() => new DapFrameReader().push(Buffer.from(wire)), (e: Error) => e instanceof DapFramingError && re.test(e.message));
  });
}
