/**
 * Issue 18, armed breakpoints: paths mapped as the attach maps them, the PUT body from
 * the gutter, the gateway's records parsed defensively, the sync (debounce, one request
 * per target at a time, failures) and the view's nodes. Sync runs against a real HTTP
 * gateway speaking the breakpoints contract (helpers/fakeGateway).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ArmedLists, BreakpointArming } from "../src/arming";
import { breakpointsNode } from "../src/breakpointTree";
import { ArmTarget, EditorBreakpoint, ownerFor, parseBreakpointList, specsFor } from "../src/breakpoints";
import { GatewayClient } from "../src/gatewayClient";
import { remoteBreakpointPath } from "../src/launchConfig";
import { parseSessionRecord, SessionRecord } from "../src/records";
import { sessionDescription, sessionTooltip } from "../src/treeModel";
import { FakeGateway, record, waitFor } from "./helpers/fakeGateway";

const WS = "/home/me/proj";

test("paths: the attach's mappings; ${sessionCwd} gives a path relative to each worker's cwd", () => {
  // Default mapping ${workspaceFolder} <-> ${sessionCwd}.
  assert.equal(remoteBreakpointPath(`${WS}/pkg/train.py`, [], WS), "pkg/train.py");
  // Outside every mapping, or no folder open: sent as it is (a cluster on this machine).
  assert.equal(remoteBreakpointPath("/opt/other/x.py", [], WS), "/opt/other/x.py");
  assert.equal(remoteBreakpointPath(`${WS}/train.py`, [], null), `${WS}/train.py`);
  const maps = [
    { localRoot: "${workspaceFolder}", remoteRoot: "/srv/app" },
    { localRoot: "${workspaceFolder}/lib", remoteRoot: "${sessionCwd}/vendored" },
    { localRoot: "/opt/shared/", remoteRoot: "/usr/lib/shared" },
  ];
  assert.equal(remoteBreakpointPath(`${WS}/train.py`, maps, WS), "/srv/app/train.py");
  assert.equal(remoteBreakpointPath(`${WS}/lib/a/b.py`, maps, WS), "vendored/a/b.py", "the longest localRoot wins");
  assert.equal(remoteBreakpointPath("/opt/shared/m.py", maps, WS), "/usr/lib/shared/m.py");
  assert.equal(remoteBreakpointPath(`${WS}-old/train.py`, maps, WS), `${WS}-old/train.py`, "a prefix of a name is not a folder");
  // A Windows editor, POSIX workers.
  assert.equal(remoteBreakpointPath("C:\\work\\proj\\src\\train.py", [{ localRoot: "C:\\work\\proj", remoteRoot: "/srv/app" }], "C:\\work\\proj"), "/srv/app/src/train.py");
});

const gutter = (over: Partial<EditorBreakpoint>[]): EditorBreakpoint[] => over.map((o) => ({ file: `${WS}/train.py`, line: 10, enabled: true, ...o }));

test("the PUT body: enabled source breakpoints once, conditions kept, logpoints and hit counts not sent", () => {
  const specs = specsFor(
    gutter([
      { line: 10, condition: "  step % 100 == 0 " },
      { line: 10, condition: "step % 100 == 0" },
      { line: 11, enabled: false },
      { line: 12, logMessage: "step {step}" },
      { line: 13, hitCondition: ">5" },
      { file: `${WS}/data/load.py`, line: 3 },
    ]),
    [],
    WS,
  );
  assert.deepEqual(specs, [
    { file: "train.py", line: 10, condition: "step % 100 == 0" },
    { file: "train.py", line: 13 },
    { file: "data/load.py", line: 3 },
  ]);
});

test("records from the gateway: bad ones dropped, a body that is not a list is one message", () => {
  const parsed = parseBreakpointList({
    breakpoints: [
      { id: "bp-1", file: "/app/train.py", line: 30, job: "02000000", condition: "x > 1", hit_limit: 3, owner: "cli", created: 1, hits: 7, paused: 1 },
      { id: "bp-2", file: "train.py", line: 4, job: null, error: "SyntaxError: invalid syntax" },
      { id: "bp-3", file: "train.py" },
      "junk",
    ],
  });
  assert.ok(Array.isArray(parsed));
  assert.deepEqual(parsed.map((b) => [b.id, b.job, b.hits, b.paused, b.hit_limit, b.error]), [
    ["bp-1", "02000000", 7, 1, 3, null],
    ["bp-2", null, 0, 0, 0, "SyntaxError: invalid syntax"],
  ]);
  assert.equal(typeof parseBreakpointList([]), "string");
  assert.equal(typeof parseBreakpointList({ error: "x" }), "string");
});

test("owner: one per machine and workspace, stable, an id the gateway accepts", () => {
  const a = ownerFor("m1", "/home/me/proj");
  assert.equal(a, ownerFor("m1", "/home/me/proj"));
  assert.notEqual(a, ownerFor("m1", "/home/me/other"));
  assert.notEqual(a, ownerFor("m2", "/home/me/proj"));
  assert.match(a, /^vscode-[0-9a-f]{12}$/);
});

test("a session paused at an armed breakpoint says which", () => {
  const s = parseSessionRecord(record({ breakpoint_id: "bp-1a2b3c4d" })) as SessionRecord;
  assert.equal(sessionDescription(s), "train.py:17 · breakpoint bp-1a2b3c4d (armed)");
  assert.match(sessionTooltip(s, 0), /armed breakpoint bp-1a2b3c4d/);
  const plain = parseSessionRecord(record()) as SessionRecord;
  assert.equal(plain.breakpoint_id, null);
  assert.equal(sessionDescription(plain), "train.py:17 · breakpoint");
});

let gw: FakeGateway;
before(async () => {
  gw = await new FakeGateway({ breakpoints: true }).listen();
});
after(() => gw.close());

const OWNER = "vscode-0123456789ab";
const A: ArmTarget = { cluster: "prod", job: "02000000" };
const EVERY: ArmTarget = { cluster: "prod", job: null };

function syncer(opts: { specs: () => EditorBreakpoint[]; debounceMs?: number; client?: () => GatewayClient | undefined }) {
  const errors: string[] = [];
  const saved: ArmTarget[][] = [];
  const client = new GatewayClient({ address: gw.address, token: "s3cret" });
  const arming = new BreakpointArming({
    owner: OWNER,
    client: opts.client ?? (() => client),
    specs: () => specsFor(opts.specs(), [], WS),
    onChange: () => {},
    onError: (_t, m) => errors.push(m),
    save: (t) => saved.push(t),
    debounceMs: opts.debounceMs ?? 30,
  });
  return { arming, errors, saved, client };
}

test("arm PUTs this workspace's set for the job; gutter changes are debounced, an unchanged set is not sent", async () => {
  gw.puts = [];
  gw.bps = [];
  let bps = gutter([{ line: 10 }, { line: 20, condition: "loss > 3" }]);
  const { arming, saved } = syncer({ specs: () => bps });
  try {
    const st = await arming.arm(A);
    assert.equal(st.status, "ok");
    assert.equal(st.armed, 2);
    assert.deepEqual(gw.puts, [{ owner: OWNER, job: "02000000", body: { breakpoints: [{ file: "train.py", line: 10 }, { file: "train.py", line: 20, condition: "loss > 3" }] } }]);
    assert.deepEqual(saved.at(-1), [A]);
    await arming.arm(EVERY);
    assert.equal(gw.puts[1].job, null);
    // Three quick edits: one PUT per target after the quiet moment.
    bps = gutter([{ line: 10 }]);
    arming.editorChanged();
    bps = gutter([{ line: 10 }, { line: 30 }]);
    arming.editorChanged();
    arming.editorChanged();
    await waitFor(() => gw.puts.length === 4, 3000, "two PUTs after the edits");
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(gw.puts.length, 4);
    assert.deepEqual(gw.puts.slice(2).map((p) => (p.body as { breakpoints: unknown[] }).breakpoints.length), [2, 2]);
    // A change elsewhere in the gutter that leaves the mapped set the same sends nothing.
    arming.editorChanged();
    await new Promise((r) => setTimeout(r, 150));
    assert.equal(gw.puts.length, 4);
    assert.equal(gw.bps.filter((b) => b.owner === OWNER).length, 4);
    // Disarm: the empty set, then forgotten.
    await arming.disarm(A);
    assert.deepEqual(gw.puts.at(-1), { owner: OWNER, job: "02000000", body: { breakpoints: [] } });
    assert.deepEqual(arming.targets().map((t) => t.target), [EVERY]);
    assert.equal(gw.bps.filter((b) => b.job === "02000000").length, 0);
  } finally {
    arming.dispose();
  }
});

test("a failed PUT says why once and is retried by the next change; a disconnected cluster is an error too", async () => {
  gw.puts = [];
  gw.putError = { status: 400, error: "line must be a positive integer" };
  const { arming, errors } = syncer({ specs: () => gutter([{ line: 5 }]) });
  try {
    await assert.rejects(arming.arm(A), /line must be a positive integer/);
    assert.equal(arming.targets()[0].status, "error");
    arming.editorChanged();
    await waitFor(() => gw.puts.length === 2, 3000, "retry");
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(errors.length, 1, "the same message is not repeated");
    gw.putError = undefined;
    arming.editorChanged();
    await waitFor(() => arming.targets()[0].status === "ok", 3000, "recovered");
    assert.equal(arming.targets()[0].error, undefined);
  } finally {
    gw.putError = undefined;
    arming.dispose();
  }
  const off = syncer({ specs: () => [], client: () => undefined });
  await assert.rejects(off.arming.arm(A), /not connected/);
  await assert.rejects(off.arming.disarm(A), /stay armed/);
  assert.equal(off.arming.targets().length, 1);
  off.arming.dispose();
});

test("one PUT per target at a time: a change meanwhile is sent after it, with the newest set", async () => {
  gw.puts = [];
  let lines = [1];
  let inflight = 0;
  let most = 0;
  const real = new GatewayClient({ address: gw.address, token: "s3cret" });
  const slow = {
    putBreakpoints: async (o: string, j: string | null, s: readonly unknown[]) => {
      inflight++;
      most = Math.max(most, inflight);
      await new Promise((r) => setTimeout(r, 80));
      try {
        return await real.putBreakpoints(o, j, s);
      } finally {
        inflight--;
      }
    },
    breakpoints: () => real.breakpoints(),
  };
  const { arming } = syncer({ specs: () => gutter(lines.map((line) => ({ line }))), client: () => slow as unknown as GatewayClient, debounceMs: 1 });
  try {
    const first = arming.arm(A);
    lines = [1, 2];
    arming.editorChanged();
    await new Promise((r) => setTimeout(r, 20));
    lines = [1, 2, 3];
    arming.editorChanged();
    await first;
    await waitFor(() => gw.puts.length === 2 && inflight === 0, 3000, "the follow-up PUT");
    await new Promise((r) => setTimeout(r, 120));
    assert.equal(most, 1);
    assert.equal(gw.puts.length, 2);
    assert.equal((gw.puts[1].body as { breakpoints: unknown[] }).breakpoints.length, 3);
  } finally {
    arming.dispose();
  }
});

test("the view: a node per job (every job first), this workspace's targets marked, counts and errors", async () => {
  gw.bps = [
    { id: "bp-b", file: "/app/train.py", line: 40, job: "03000000", condition: null, hit_limit: 3, owner: "cli", created: 1, hits: 0, paused: 0 },
    { id: "bp-a", file: "train.py", line: 30, job: "02000000", condition: "step > 2", hit_limit: 3, owner: OWNER, created: 1, hits: 7, paused: 2 },
    { id: "bp-e", file: "data.py", line: 12, job: null, condition: null, hit_limit: 3, owner: "cli", created: 1, hits: 1, paused: 0, error: "NameError: name 'q' is not defined" },
  ];
  const client = new GatewayClient({ address: gw.address, token: "s3cret" });
  let changes = 0;
  const lists = new ArmedLists({ clusters: () => ["prod"], client: () => client, intervalMs: () => 60_000, onChange: () => changes++ });
  await lists.refresh();
  assert.equal(changes, 1);
  await lists.refresh();
  assert.equal(changes, 1, "an unchanged list does not redraw");
  const node = breakpointsNode("prod", lists.get("prod"), [{ target: A, status: "ok", armed: 1 }, { target: { cluster: "prod", job: "04000000" }, status: "error", error: "gateway answered HTTP 500", armed: 0 }], OWNER);
  assert.ok(node);
  assert.equal(node.description, "3 armed · 2 paused");
  assert.deepEqual(node.children?.map((c) => [c.label, c.contextValue]), [
    ["Every job", "raydbg.breakpoints.job"],
    ["Job 02000000", "raydbg.breakpoints.job.armed"],
    ["Job 03000000", "raydbg.breakpoints.job"],
    ["Job 04000000", "raydbg.breakpoints.job.armed"],
  ]);
  const [every, jobA, , jobD] = node.children ?? [];
  assert.deepEqual(jobA.armTarget, A);
  assert.match(jobA.description ?? "", /^synced from this workspace \(1\) · 1 breakpoint · 7 hits · 2 paused$/);
  assert.equal(jobA.children?.[0].label, "train.py:30");
  assert.equal(jobA.children?.[0].description, "hits 7 · paused 2/3 · if step > 2");
  assert.match(jobA.children?.[0].tooltip ?? "", /armed by this workspace/);
  assert.equal(every.children?.[0].icon, "warning");
  assert.match(every.children?.[0].tooltip ?? "", /NameError/);
  assert.match(jobD.description ?? "", /^sync failed/);
  assert.equal(jobD.children?.[0].label, "gateway answered HTTP 500");
  // Nothing armed and nothing listed: no node; an older gateway (404): no node either.
  assert.equal(breakpointsNode("prod", { kind: "ok", breakpoints: [] }, [], OWNER), null);
  const old = await new FakeGateway({}).listen();
  try {
    const oldLists = new ArmedLists({ clusters: () => ["old"], client: () => new GatewayClient({ address: old.address, token: "s3cret" }), intervalMs: () => 60_000, onChange: () => {} });
    await oldLists.refresh();
    assert.deepEqual(oldLists.get("old"), { kind: "unsupported" });
    assert.equal(breakpointsNode("old", oldLists.get("old"), [], OWNER), null);
  } finally {
    await old.close();
  }
  gw.bps = [];
});
