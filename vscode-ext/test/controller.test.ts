import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ClusterController } from "../src/controller";
import { SessionRecord } from "../src/records";
import { validateSettings } from "../src/settings";
import { FakeGateway, record, waitFor } from "./helpers/fakeGateway";

let gw: FakeGateway;
before(async () => {
  gw = await new FakeGateway({ sessions: [record({ id: "s1" })] }).listen();
});
after(() => gw.close());

function controller(tokens: Record<string, string>) {
  const fresh: [string, string[]][] = [];
  let changes = 0;
  const c = new ClusterController({
    resolveToken: (cl) => Promise.resolve(tokens[cl.name] ? { token: tokens[cl.name], source: "test" } : { error: "no token: use 'Ray: Set Cluster Token'" }),
    onChange: () => changes++,
    onNewSessions: (cl, ss: SessionRecord[]) => fresh.push([cl, ss.map((s) => s.id)]),
  });
  return { c, fresh, changes: () => changes };
}

test("clusters from settings: listed live, errors per cluster, status-bar count", async () => {
  const { c } = controller({ good: "s3cret", badtoken: "nope" });
  const { settings, errors } = validateSettings({
    clusters: [{ name: "good", address: gw.address }, { name: "badtoken", address: gw.address }, { name: "notoken", address: gw.address }, { name: "typo", address: "x" }],
  });
  c.applySettings(settings, errors);
  try {
    await waitFor(() => c.tree().slice(1).every((t) => t.children?.[0]?.label !== "Connecting…"), 3000, "all clusters answered");
    const [settingsErr, good, bad, none] = c.tree();
    assert.match(settingsErr.label, /Settings: raydbg.clusters\[3\]/);
    assert.equal(good.children?.[0].label, "Job 01000000");
    assert.equal(good.children?.[0].children?.[0].session?.id, "s1");
    assert.match(bad.children?.[0].label ?? "", /rejected the token/);
    assert.match(none.children?.[0].label ?? "", /notoken: no token/);
    assert.equal(c.pausedCount(), 1);
    assert.equal(c.session("good", "s1")?.id, "s1");
    assert.ok(c.client("good"));
  } finally {
    c.dispose();
  }
});

test("new pauses are announced, the first list is not", async () => {
  const { c, fresh } = controller({ good: "s3cret" });
  c.applySettings(validateSettings({ clusters: [{ name: "good", address: gw.address }] }).settings, []);
  try {
    await waitFor(() => c.pausedCount() === 1, 3000, "first list");
    assert.deepEqual(fresh, []);
    gw.setSessions([record({ id: "s1" }), record({ id: "s2" })]);
    await waitFor(() => fresh.length === 1, 3000, "notification");
    assert.deepEqual(fresh, [["good", ["s2"]]]);
    assert.equal(c.pausedCount(), 2);
  } finally {
    c.dispose();
    gw.setSessions([record({ id: "s1" })]);
  }
});

test("settings changes: removed clusters stop, unchanged ones keep their connection", async () => {
  const { c } = controller({ a: "s3cret", b: "s3cret" });
  const two = validateSettings({ clusters: [{ name: "a", address: gw.address }, { name: "b", address: gw.address }] }).settings;
  c.applySettings(two, []);
  try {
    await waitFor(() => gw.openStreams === 2, 3000, "two streams");
    const clientA = c.client("a");
    c.applySettings(validateSettings({ clusters: [{ name: "a", address: gw.address }] }).settings, []);
    await waitFor(() => gw.openStreams === 1, 3000, "b's stream closed");
    assert.equal(c.client("a"), clientA);
    assert.deepEqual(c.tree().map((t) => t.label), ["a"]);
    assert.deepEqual(c.pathMappingsFor("a"), []);
  } finally {
    c.dispose();
  }
  await waitFor(() => gw.openStreams === 0, 3000, "all streams closed on dispose");
});
