import assert from "node:assert/strict";
import * as net from "node:net";
import { after, before, test } from "node:test";
import { GatewayClient, GatewayError } from "../src/gatewayClient";
import { ParsedSessions } from "../src/records";
import { FakeGateway, record, refusedAddress } from "./helpers/fakeGateway";

let gw: FakeGateway;
before(async () => {
  gw = await new FakeGateway({ sessions: [record({ id: "s1" })] }).listen();
});
after(() => gw.close());

async function rejects(p: Promise<unknown>, reason: string, re: RegExp): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof GatewayError, String(e));
    assert.equal(e.reason, reason);
    assert.match(e.message, re);
    return true;
  });
}

test("lists sessions with the bearer token", async () => {
  const c = new GatewayClient({ address: gw.address, token: "s3cret" });
  const parsed = await c.sessions();
  assert.deepEqual(parsed.sessions.map((s) => s.id), ["s1"]);
  const req = gw.requests.at(-1);
  assert.equal(req?.url, "/api/v1/sessions");
  assert.equal(req?.headers.authorization, "Bearer s3cret");
  assert.equal(c.dapUrl("s1"), `ws://${gw.address}/api/v1/sessions/s1/dap`);
});

test("wrong token: an 'auth' error telling the user what to do", async () => {
  const c = new GatewayClient({ address: gw.address, token: "nope" });
  await rejects(c.sessions(), "auth", /rejected the token \(HTTP 401\); set the right one with 'Ray: Set Cluster Token'/);
});

test("nothing listening: an 'unreachable' error naming the address", async () => {
  const down = await refusedAddress();
  try {
    const c = new GatewayClient({ address: down.address, token: "t" });
    await rejects(c.sessions(), "unreachable", new RegExp(`cannot reach the raydbg gateway at ${down.address.replace(/\./g, "\\.")} \\(ECONNREFUSED\\)`));
  } finally {
    await down.release();
  }
});

test("a server that never answers times out as 'unreachable'", async () => {
  const silent = net.createServer(() => {});
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
  const port = (silent.address() as net.AddressInfo).port;
  try {
    await rejects(new GatewayClient({ address: `127.0.0.1:${port}`, token: "t", timeoutMs: 200 }).sessions(), "unreachable", /ETIMEDOUT/);
  } finally {
    silent.close();
  }
});

test("malformed bodies are 'protocol' errors", async () => {
  const c = new GatewayClient({ address: gw.address, token: "s3cret" });
  gw.sessions = "[{";
  await rejects(c.sessions(), "protocol", /invalid JSON/);
  gw.sessions = { error: "oops" };
  await rejects(c.sessions(), "protocol", /where a list of sessions was expected/);
  gw.sessions = [record({ id: "s1" })];
  await rejects(c.getJson("/api/v1/nope"), "notFound", /HTTP 404\): not found/);
});

test("an invalid address is refused at construction", () => {
  assert.throws(() => new GatewayClient({ address: "no port", token: "t" }), GatewayError);
});

test("SSE stream delivers the list now and on every change", async () => {
  const c = new GatewayClient({ address: gw.address, token: "s3cret" });
  const got: (ParsedSessions | string)[] = [];
  let waiter: (() => void) | undefined;
  const h = c.stream({
    onSessions: (p) => {
      got.push(p);
      waiter?.();
    },
    onClose: () => {},
  });
  const next = (n: number) => new Promise<void>((r) => (waiter = () => got.length >= n && r()));
  await next(1);
  gw.setSessions([record({ id: "s1" }), record({ id: "s2" })]);
  await next(2);
  h.close();
  assert.deepEqual(got.map((p) => (typeof p === "string" ? p : p.sessions.map((s) => s.id))), [["s1"], ["s1", "s2"]]);
  gw.setSessions([record({ id: "s1" })]);
});

test("SSE stream: 404 -> notFound, 401 -> auth, dropped -> unreachable", async () => {
  const closeReason = (c: GatewayClient) => new Promise<GatewayError>((r) => c.stream({ onSessions: () => gw.dropStreams(), onClose: r }));
  const good = new GatewayClient({ address: gw.address, token: "s3cret" });
  assert.equal((await closeReason(good)).reason, "unreachable");
  assert.equal((await closeReason(new GatewayClient({ address: gw.address, token: "bad" }))).reason, "auth");
  gw.stream = false;
  try {
    assert.equal((await closeReason(good)).reason, "notFound");
  } finally {
    gw.stream = true;
  }
});

test("a silent stream is declared dead after streamIdleMs", async () => {
  const c = new GatewayClient({ address: gw.address, token: "s3cret", streamIdleMs: 150 });
  const t0 = Date.now();
  const err = await new Promise<GatewayError>((r) => c.stream({ onSessions: () => {}, onClose: r }));
  assert.equal(err.reason, "unreachable");
  assert.match(err.message, /no data/);
  assert.ok(Date.now() - t0 >= 140);
});
