import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { GatewayClient } from "../src/gatewayClient";
import { ClusterState } from "../src/treeModel";
import { backoffDelay, SessionWatcher } from "../src/watcher";
import { FakeGateway, record, refusedAddress, waitFor } from "./helpers/fakeGateway";

let gw: FakeGateway;
before(async () => {
  gw = await new FakeGateway({ sessions: [record({ id: "s1" })] }).listen();
});
after(() => gw.close());

function watch(address: string, opts: { intervalMs: number; maxBackoffMs?: number; hiddenIntervalMs?: number; token?: string }) {
  const states: ClusterState[] = [];
  const w = new SessionWatcher({ client: new GatewayClient({ address, token: opts.token ?? "s3cret", timeoutMs: 1000 }), onState: (s) => states.push(s), ...opts });
  return { w, states, last: () => states[states.length - 1] };
}

const ids = (s: ClusterState | undefined) => (s?.kind === "ok" ? s.sessions.map((x) => x.id) : s?.kind);
const polls = () => gw.requests.filter((r) => r.url === "/api/v1/sessions").length;

test("backoff doubles from the interval up to the cap", () => {
  assert.deepEqual([1, 2, 3, 4, 5, 9].map((n) => backoffDelay(5000, n, 60_000)), [5000, 10_000, 20_000, 40_000, 60_000, 60_000]);
});

test("with a stream: live updates, no polling", async () => {
  const before = polls();
  const { w, states, last } = watch(gw.address, { intervalMs: 20 });
  w.start();
  assert.equal(states[0].kind, "loading");
  await waitFor(() => last()?.kind === "ok", 3000, "first list");
  assert.deepEqual(ids(last()), ["s1"]);
  assert.equal((last() as { live: boolean }).live, true);
  gw.setSessions([record({ id: "s1" }), record({ id: "s2" })]);
  await waitFor(() => ids(last())?.length === 2, 3000, "pushed update");
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(polls(), before, "a live stream must not be polled");
  w.stop();
  await waitFor(() => gw.openStreams === 0, 3000, "stream closed on stop");
  gw.setSessions([record({ id: "s1" })]);
});

test("a dropped stream is reopened", async () => {
  const { w, last } = watch(gw.address, { intervalMs: 20 });
  w.start();
  await waitFor(() => gw.openStreams === 1, 3000, "stream");
  gw.dropStreams();
  gw.setSessions([record({ id: "s9" })]);
  await waitFor(() => gw.openStreams === 1 && ids(last())?.[0] === "s9", 3000, "reconnected stream");
  w.stop();
  gw.setSessions([record({ id: "s1" })]);
});

test("without a stream: polls at the interval, slower when hidden", async () => {
  gw.stream = false;
  try {
    const { w, last } = watch(gw.address, { intervalMs: 30, hiddenIntervalMs: 60_000 });
    const p0 = polls();
    w.start();
    await waitFor(() => last()?.kind === "ok", 3000, "first poll");
    assert.equal(w.currentMode, "poll");
    assert.equal((last() as { live: boolean }).live, false);
    await waitFor(() => polls() - p0 >= 4, 3000, "repeated polls");
    w.setVisible(false);
    await new Promise((r) => setTimeout(r, 60)); // let an in-flight poll land
    const hidden = polls();
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(polls(), hidden, "hidden view must not be polled every interval");
    w.setVisible(true); // back in view: fresh data at once
    await waitFor(() => polls() > hidden, 1000, "poll on becoming visible");
    w.stop();
  } finally {
    gw.stream = true;
  }
});

test("an unreachable gateway backs off instead of spinning", async () => {
  const down = await refusedAddress();
  const { w, states, last } = watch(down.address, { intervalMs: 20, maxBackoffMs: 160 });
  w.start();
  await new Promise((r) => setTimeout(r, 700));
  w.stop();
  await down.release();
  const errors = states.filter((s) => s.kind === "error");
  // 20+40+80+160+160+... ms: about 6 tries in 700 ms; a busy loop would make hundreds.
  assert.ok(errors.length >= 3 && errors.length <= 9, `${errors.length} tries`);
  const l = last();
  assert.ok(l?.kind === "error" && l.reason === "unreachable" && /ECONNREFUSED/.test(l.message));
});

test("a wrong token shows as 'auth' and refresh() retries at once", async () => {
  const { w, last } = watch(gw.address, { intervalMs: 60_000, token: "wrong" });
  w.start();
  await waitFor(() => last()?.kind === "error", 3000, "auth error");
  assert.equal((last() as { reason: string }).reason, "auth");
  const n = gw.requests.length;
  w.refresh();
  await waitFor(() => gw.requests.length > n, 1000, "retry after refresh");
  w.stop();
});
