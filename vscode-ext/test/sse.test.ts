import assert from "node:assert/strict";
import { test } from "node:test";
import { SseParser } from "../src/sse";

test("events split across chunks at any byte are reassembled", () => {
  const stream = 'event: sessions\ndata: [{"id":"a"}]\n\n: keep-alive\n\nevent: sessions\r\ndata: []\r\n\r\n';
  for (let cut = 1; cut < stream.length; cut++) {
    const p = new SseParser();
    const evs = [...p.feed(stream.slice(0, cut)), ...p.feed(stream.slice(cut))];
    assert.deepEqual(evs, [{ event: "sessions", data: '[{"id":"a"}]' }, { event: "sessions", data: "[]" }], `cut at ${cut}`);
  }
});

test("multi-line data, default event name, id, and comments", () => {
  const p = new SseParser();
  assert.deepEqual(p.feed("id: 7\ndata: a\ndata:b\n\n:only a comment\n\n"), [{ event: "message", data: "a\nb", id: "7" }]);
});

test("an unfinished event is held until its blank line", () => {
  const p = new SseParser();
  assert.deepEqual(p.feed("event: sessions\ndata: [1]\n"), []);
  assert.deepEqual(p.feed("\n"), [{ event: "sessions", data: "[1]" }]);
});
