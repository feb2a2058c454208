/**
 * The inline debug adapter against a real WebSocket gateway (FakeGateway on loopback):
 * DAP both ways, the gateway's refusals in words, and VS Code never left waiting.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, test } from "node:test";
import WebSocket from "ws";
import { DapFrameReader, DapMessage, encodeDap } from "../src/dapFraming";
import { DapRelay } from "../src/dapRelay";
import { closeCodeError, RelayError } from "../src/relayErrors";
import { FakeGateway, fakeDebugpy, refusedAddress, waitFor } from "./helpers/fakeGateway";

let gw: FakeGateway;
before(async () => {
  gw = await new FakeGateway().listen();
});
after(() => gw.close());

const url = (id = "abc123abc123") => `ws://${gw.address}/api/v1/sessions/${id}/dap`;
const request = (seq: number, command: string, args: object = {}): DapMessage => ({ seq, type: "request", command, arguments: args });

/** A relay as VS Code holds it, with what it said and what went wrong. */
function start(token = "s3cret", target = url()) {
  const errors: RelayError[] = [];
  const got: DapMessage[] = [];
  const relay = new DapRelay({ url: target, token, onError: (e) => errors.push(e) });
  relay.onDidSendMessage((m) => got.push(m));
  return { relay, errors, got };
}

/** The relay's own answers and events, once it has ended. */
const answers = (got: DapMessage[]) => got.filter((m) => m.type === "response");
const events = (got: DapMessage[]) => got.filter((m) => m.type === "event").map((m) => m.event);

test("nothing is opened before VS Code's first message; then the session's relay path with the bearer token", async () => {
  const seen: DapMessage[] = [];
  gw.onRelay = fakeDebugpy(seen);
  const before = gw.upgrades.length;
  const { relay, got } = start();
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(relay.status, "idle");
  assert.equal(gw.upgrades.length, before);
  relay.handleMessage(request(1, "initialize", { adapterID: "raydbg" }));
  await waitFor(() => got.length === 1, 3000, "initialize answered");
  assert.equal(gw.upgrades.length, before + 1);
  assert.equal(gw.upgrades.at(-1)?.url, "/api/v1/sessions/abc123abc123/dap");
  assert.equal(gw.upgrades.at(-1)?.headers.authorization, "Bearer s3cret");
  relay.dispose();
});

test("VS Code's messages reach debugpy unchanged and in order, the ones sent before the relay opened too", async () => {
  const seen: DapMessage[] = [];
  gw.onRelay = fakeDebugpy(seen);
  const { relay, got, errors } = start();
  const attachArgs = {
    type: "raydbg",
    request: "attach",
    name: "Ray: train_step (abc123abc123)",
    pathMappings: [{ localRoot: "/home/me/proj", remoteRoot: "/srv/job" }],
    justMyCode: false,
    raydbgSessionId: "abc123abc123",
    raydbgCluster: "local",
    __sessionId: "4f1c",
  };
  const sent = [request(1, "initialize", { clientID: "vscode", adapterID: "raydbg", linesStartAt1: true }), request(2, "attach", attachArgs), request(3, "configurationDone")];
  for (const m of sent) relay.handleMessage(m); // all while the WebSocket is still connecting
  assert.equal(relay.status, "connecting");
  await waitFor(() => seen.length === 3, 3000, "three requests at debugpy");
  assert.deepEqual(seen, sent);
  await waitFor(() => got.length === 4, 3000, "three answers and an event");
  assert.deepEqual(got.map((m) => [m.type, m.command ?? m.event, m.request_seq]), [
    ["response", "initialize", 1],
    ["response", "attach", 2],
    ["event", "initialized", undefined],
    ["response", "configurationDone", 3],
  ]);
  assert.deepEqual(errors, []);
  relay.dispose();
});

test("debugpy's bytes in any chunking come back as whole messages, megabytes included", async () => {
  const big = randomBytes(3 * 1024 * 1024).toString("base64");
  const out = [
    { seq: 1, type: "response", request_seq: 1, command: "evaluate", success: true, body: { result: big } },
    { seq: 2, type: "event", event: "output", body: { output: "héllo\n" } },
    { seq: 3, type: "event", event: "stopped", body: { threadId: 1, reason: "breakpoint" } },
  ];
  const wire = Buffer.concat(out.map((m) => encodeDap(m)));
  // Cut mid-header (the first is 27 bytes), mid-body, and in 64 KiB pieces across messages.
  const cuts = [0, 1, 7, 20, 21];
  for (let at = 30; at < wire.length; at += 65536) cuts.push(at);
  cuts.push(wire.length);
  gw.onRelay = (ws) =>
    ws.once("message", () => {
      for (let i = 0; i + 1 < cuts.length; i++) ws.send(wire.subarray(cuts[i], cuts[i + 1]), { binary: true });
    });
  const { relay, got, errors } = start();
  relay.handleMessage(request(1, "evaluate", { expression: "x" }));
  await waitFor(() => got.length === 3, 10_000, "three messages");
  assert.deepEqual(got, out);
  assert.deepEqual(errors, []);
  relay.dispose();
});

test("a big request goes out as one framed message", async () => {
  const chunks: Buffer[] = [];
  gw.onRelay = (ws) => ws.on("message", (d: Buffer) => chunks.push(d));
  const { relay } = start();
  const m = request(1, "setVariable", { value: "x".repeat(2 * 1024 * 1024) });
  relay.handleMessage(m);
  await waitFor(() => chunks.reduce((n, c) => n + c.length, 0) >= encodeDap(m).length, 5000, "all bytes at the gateway");
  assert.deepEqual(new DapFrameReader().push(Buffer.concat(chunks)), [m]);
  relay.dispose();
});

test("wrong token (HTTP 401 on upgrade): one clear error; VS Code's request is answered, the session ends", async () => {
  gw.onRelay = fakeDebugpy([]);
  const { relay, got, errors } = start("wrong");
  relay.handleMessage(request(1, "initialize"));
  await waitFor(() => events(got).includes("terminated"), 3000, "terminated");
  assert.equal(errors.length, 1);
  assert.equal(errors[0].reason, "auth");
  assert.match(errors[0].message, /rejected the token \(HTTP 401\).*\(missing or wrong raydbg token\); set the right token with 'Ray: Set Cluster Token'/);
  // The failed answer carries the same words; VS Code is told not to show them again.
  assert.deepEqual(answers(got), [
    { seq: 2, type: "response", request_seq: 1, command: "initialize", success: false, message: errors[0].message, body: { error: { id: 1, format: errors[0].message, showUser: false } } },
  ]);
  assert.deepEqual(events(got), ["output", "terminated"]);
  assert.equal(got[0].body && (got[0].body as { category: string }).category, "stderr");
  // Later requests are answered at once; ending the session succeeds.
  relay.handleMessage(request(2, "threads"));
  relay.handleMessage(request(3, "disconnect"));
  assert.deepEqual(answers(got).slice(1).map((m) => [m.command, m.success]), [["threads", false], ["disconnect", true]]);
  assert.equal(relay.status, "closed");
  assert.equal(errors.length, 1);
  relay.dispose();
});

for (const [code, reason, re] of [
  [4401, "auth", /rejected the token/],
  [4404, "notFound", /no such paused session.*it may have resumed/],
  [4409, "busy", /already attached/],
  [4502, "debuggee", /cannot be reached/],
] as const) {
  test(`relay close code ${code} is reported as '${reason}', the pending request answered`, async () => {
    gw.onRelay = (ws) => ws.close(code, "why not");
    const { relay, got, errors } = start();
    relay.handleMessage(request(1, "initialize"));
    await waitFor(() => events(got).includes("terminated"), 3000, "terminated");
    assert.equal(errors.length, 1);
    assert.equal(errors[0].reason, reason);
    assert.match(errors[0].message, re);
    assert.match(errors[0].message, /why not/);
    assert.deepEqual(answers(got).map((m) => [m.request_seq, m.success, m.message]), [[1, false, errors[0].message]]);
    relay.dispose();
  });
}

test("the gateway dropping the relay mid-session (no close frame): 'unreachable', and the session ends", async () => {
  gw.onRelay = (ws) => {
    ws.once("message", () => ws.send(encodeDap({ seq: 1, type: "response", request_seq: 1, command: "initialize", success: true }), { binary: true }));
    ws.on("message", (d: Buffer) => d.includes("threads") && ws.terminate());
  };
  const { relay, got, errors } = start();
  relay.handleMessage(request(1, "initialize"));
  await waitFor(() => got.length === 1, 3000, "initialize answered");
  relay.handleMessage(request(2, "threads"));
  await waitFor(() => events(got).includes("terminated"), 3000, "terminated");
  assert.equal(errors.length, 1);
  assert.equal(errors[0].reason, "unreachable");
  assert.match(errors[0].message, /dropped the DAP relay .* \(connection lost, no close frame\)/);
  assert.deepEqual(answers(got).map((m) => [m.command, m.success]), [["initialize", true], ["threads", false]]);
});

test("gateway down: 'unreachable' with the cause", async () => {
  const down = await refusedAddress();
  try {
    const { relay, got, errors } = start("s3cret", `ws://${down.address}/api/v1/sessions/x/dap`);
    relay.handleMessage(request(1, "initialize"));
    await waitFor(() => events(got).includes("terminated"), 3000, "terminated");
    assert.equal(errors.length, 1);
    assert.equal(errors[0].reason, "unreachable");
    assert.match(errors[0].message, /cannot open the DAP relay .*ECONNREFUSED/);
  } finally {
    await down.release();
  }
});

test("something that is not DAP from the gateway: 'protocol', and the relay is cut", async () => {
  let closed = false;
  gw.onRelay = (ws) => {
    ws.once("message", () => ws.send(Buffer.from("HTTP/1.1 200 OK\r\n\r\n"), { binary: true }));
    ws.on("close", () => (closed = true));
  };
  const { relay, got, errors } = start();
  relay.handleMessage(request(1, "initialize"));
  await waitFor(() => events(got).includes("terminated"), 3000, "terminated");
  assert.equal(errors[0]?.reason, "protocol");
  assert.match(errors[0].message, /sent something that is not DAP: malformed DAP header line "HTTP\/1.1 200 OK"/);
  await waitFor(() => closed, 3000, "relay cut at the gateway");
});

test("the gateway closing normally: no error; a request left unanswered is answered for VS Code to show", async () => {
  gw.onRelay = (ws) => ws.once("message", () => ws.close(1000, "done"));
  const { relay, got, errors } = start();
  relay.handleMessage(request(1, "initialize"));
  await waitFor(() => events(got).includes("terminated"), 3000, "terminated");
  assert.deepEqual(errors, []);
  assert.equal(closeCodeError(1000, "", "x"), null);
  assert.deepEqual(events(got), ["terminated"]);
  const [a] = answers(got);
  assert.equal(a.success, false);
  assert.match(String(a.message), /DAP relay .* closed/);
  assert.equal((a.body as { error: { showUser: boolean } }).error.showUser, true);
});

test("dispose (VS Code ended the session): the relay closes normally, nothing is reported or sent after", async () => {
  let closed: number | undefined;
  const seen: DapMessage[] = [];
  gw.onRelay = (ws) => {
    fakeDebugpy(seen)(ws);
    ws.on("close", (code: number) => (closed = code));
  };
  const { relay, got, errors } = start();
  relay.handleMessage(request(1, "initialize"));
  await waitFor(() => got.length === 1, 3000, "initialize answered");
  relay.dispose();
  await waitFor(() => closed !== undefined, 3000, "relay closed at the gateway");
  assert.equal(closed, 1000);
  relay.handleMessage(request(2, "threads"));
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(got.length, 1);
  assert.deepEqual(errors, []);
});

test("dispose while the relay is still opening: it is dropped, nothing reported", async () => {
  gw.onRelay = fakeDebugpy([]);
  const { relay, got, errors } = start();
  relay.handleMessage(request(1, "initialize"));
  relay.dispose();
  await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual([got, errors], [[], []]);
  for (const c of gw.wss.clients) assert.notEqual(c.readyState, WebSocket.OPEN, "a relay left open at the gateway");
});
