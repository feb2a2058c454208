import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import * as net from "node:net";
import { after, before, test } from "node:test";
import WebSocket from "ws";
import { closeCodeError, Forwarder, ForwarderError } from "../src/forwarder";
import { FakeGateway, refusedAddress, waitFor } from "./helpers/fakeGateway";

let gw: FakeGateway;
before(async () => {
  gw = await new FakeGateway().listen();
});
after(() => gw.close());

const url = (id = "abc123abc123") => `ws://${gw.address}/api/v1/sessions/${id}/dap`;
const echo = (ws: WebSocket) => ws.on("message", (d: Buffer) => ws.send(d, { binary: true }));

async function start(token = "s3cret", target = url()) {
  const errors: ForwarderError[] = [];
  const fwd = await Forwarder.start({ url: target, token, onError: (e) => errors.push(e) });
  return { fwd, errors };
}

function connect(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, "127.0.0.1", () => resolve(s));
    s.on("error", reject);
  });
}

/** Everything the socket receives until the peer ends it. */
function readAll(s: net.Socket): Promise<Buffer> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    s.on("data", (c: Buffer) => chunks.push(c));
    s.on("close", () => resolve(Buffer.concat(chunks)));
  });
}

function readN(s: net.Socket, n: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let got = 0;
    const onData = (c: Buffer) => {
      chunks.push(c);
      got += c.length;
      if (got >= n) {
        s.off("data", onData);
        resolve(Buffer.concat(chunks));
      }
    };
    s.on("data", onData);
    s.on("close", () => reject(new Error(`closed after ${got} of ${n} bytes`)));
  });
}

const dap = (body: object) => {
  const json = JSON.stringify(body);
  return Buffer.from(`Content-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`);
};

test("listens on 127.0.0.1 only, on a port the OS chose", async () => {
  const { fwd } = await start();
  try {
    assert.ok(fwd.port > 0);
    const addr = (fwd as unknown as { server: net.Server }).server.address() as net.AddressInfo;
    assert.equal(addr.address, "127.0.0.1");
  } finally {
    await fwd.close();
  }
});

test("handshake: the session's relay path with the bearer token; bytes sent early are not lost", async () => {
  gw.onRelay = echo;
  const { fwd, errors } = await start();
  try {
    const s = await connect(fwd.port);
    const hello = dap({ seq: 1, type: "request", command: "initialize", arguments: { adapterID: "debugpy" } });
    s.write(hello); // before the WebSocket is open
    const back = await readN(s, hello.length);
    assert.deepEqual(back, hello);
    const up = gw.upgrades.at(-1);
    assert.equal(up?.url, "/api/v1/sessions/abc123abc123/dap");
    assert.equal(up?.headers.authorization, "Bearer s3cret");
    s.destroy();
    assert.deepEqual(errors, []);
  } finally {
    await fwd.close();
  }
});

test("pipes bytes both ways unchanged, including megabytes (backpressure)", async () => {
  const big = randomBytes(3 * 1024 * 1024 + 17);
  let serverGot = 0;
  gw.onRelay = (ws) => {
    ws.on("message", (d: Buffer) => {
      serverGot += d.length;
      if (serverGot === big.length) ws.send(big, { binary: true });
    });
  };
  const { fwd, errors } = await start();
  try {
    const s = await connect(fwd.port);
    const reply = readN(s, big.length);
    s.write(big);
    assert.ok((await reply).equals(big), "bytes changed in transit");
    s.destroy();
    assert.deepEqual(errors, []);
  } finally {
    await fwd.close();
  }
});

test("wrong token (HTTP 401 on upgrade): a clear error and the client is disconnected", async () => {
  gw.onRelay = echo;
  const { fwd, errors } = await start("wrong");
  try {
    const s = await connect(fwd.port);
    const all = readAll(s);
    s.write(dap({ seq: 1, type: "request", command: "initialize" }));
    assert.equal((await all).length, 0);
    await waitFor(() => errors.length === 1, 3000, "error report");
    assert.equal(errors[0].reason, "auth");
    assert.match(errors[0].message, /rejected the token \(HTTP 401\).*\(missing or wrong raydbg token\); set the right token with 'Ray: Set Cluster Token'/);
    assert.equal(fwd.connections, 0);
  } finally {
    await fwd.close();
  }
});

for (const [code, reason, re] of [
  [4401, "auth", /rejected the token/],
  [4404, "notFound", /no such paused session.*it may have resumed/],
  [4409, "busy", /already attached/],
  [4502, "debuggee", /cannot be reached/],
] as const) {
  test(`relay close code ${code} is reported as '${reason}'`, async () => {
    gw.onRelay = (ws) => ws.close(code, "why not");
    const { fwd, errors } = await start();
    try {
      const s = await connect(fwd.port);
      await readAll(s);
      await waitFor(() => errors.length === 1, 3000, "error report");
      assert.equal(errors[0].reason, reason);
      assert.match(errors[0].message, re);
      assert.match(errors[0].message, /why not/);
    } finally {
      await fwd.close();
    }
  });
}

test("gateway closing normally: the client gets the last bytes, then EOF, and no error", async () => {
  const bye = dap({ seq: 9, type: "event", event: "terminated" });
  gw.onRelay = (ws) => ws.on("message", () => {
    ws.send(bye, { binary: true });
    ws.close(1000, "done");
  });
  const { fwd, errors } = await start();
  try {
    const s = await connect(fwd.port);
    const all = readAll(s);
    s.write(dap({ seq: 1, type: "request", command: "disconnect" }));
    assert.deepEqual(await all, bye);
    await waitFor(() => fwd.connections === 0, 3000, "pair released");
    assert.deepEqual(errors, []);
    assert.equal(closeCodeError(1000, "", "x"), null);
  } finally {
    await fwd.close();
  }
});

test("gateway dropping the relay without a close frame: the client is cut off and told why", async () => {
  gw.onRelay = (ws) => ws.on("message", () => ws.terminate());
  const { fwd, errors } = await start();
  try {
    const s = await connect(fwd.port);
    const all = readAll(s);
    s.write(dap({ seq: 1, type: "request", command: "threads" }));
    await all;
    await waitFor(() => errors.length > 0, 3000, "error report");
    assert.equal(errors.length, 1);
    assert.equal(errors[0].reason, "unreachable");
    assert.match(errors[0].message, /dropped the DAP relay .* \(connection lost, no close frame\)/);
  } finally {
    await fwd.close();
  }
});

test("client closing: the relay WebSocket is closed normally", async () => {
  let closed: { code: number } | undefined;
  gw.onRelay = (ws) => {
    echo(ws);
    ws.on("close", (code: number) => (closed = { code }));
  };
  const { fwd, errors } = await start();
  try {
    const s = await connect(fwd.port);
    s.write(dap({ seq: 1, type: "request", command: "threads" }));
    await readN(s, 1);
    s.end();
    await waitFor(() => closed !== undefined, 3000, "relay close");
    assert.equal(closed?.code, 1000);
    assert.deepEqual(errors, []);
  } finally {
    await fwd.close();
  }
});

test("each connection gets its own relay", async () => {
  gw.onRelay = echo;
  const { fwd } = await start();
  try {
    const before = gw.upgrades.length;
    const [a, b] = await Promise.all([connect(fwd.port), connect(fwd.port)]);
    a.write("aaaa");
    b.write("bbbb");
    assert.equal((await readN(a, 4)).toString(), "aaaa");
    assert.equal((await readN(b, 4)).toString(), "bbbb");
    assert.equal(gw.upgrades.length - before, 2);
    assert.equal(fwd.connections, 2);
    a.destroy();
    b.destroy();
  } finally {
    await fwd.close();
  }
});

test("gateway down: an 'unreachable' error and the client is disconnected", async () => {
  const down = await refusedAddress();
  const { fwd, errors } = await start("s3cret", `ws://${down.address}/api/v1/sessions/x/dap`);
  try {
    const s = await connect(fwd.port);
    await readAll(s);
    await waitFor(() => errors.length === 1, 3000, "error report");
    assert.equal(errors[0].reason, "unreachable");
    assert.match(errors[0].message, /ECONNREFUSED/);
  } finally {
    await fwd.close();
    await down.release();
  }
});

test("close() drops relayed connections and stops listening", async () => {
  gw.onRelay = echo;
  const { fwd, errors } = await start();
  const s = await connect(fwd.port);
  s.write("x");
  await readN(s, 1);
  const ended = readAll(s);
  await fwd.close();
  await ended;
  await assert.rejects(connect(fwd.port), /ECONNREFUSED/);
  assert.deepEqual(errors, []);
});
