/**
 * Issue 13, held ranks from the gateway: when stacks are asked for (paused set changed,
 * expand, refresh), one request per run at a time, and failures that leave the tree as
 * it was. The last tests run the controller against a real (fake) gateway.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ClusterController } from "../src/controller";
import { parseSessionList, SessionRecord } from "../src/records";
import { RunRef, runKey, RunStacksCache } from "../src/runStacks";
import { validateSettings } from "../src/settings";
import { ViewItem } from "../src/treeModel";
import { FakeGateway, record, waitFor } from "./helpers/fakeGateway";

const JOB = "02000000";
const rank = (r: number, over: Record<string, unknown> = {}) =>
  record({ id: `r${r}`, job_id: JOB, train_run: "sd-train", train_rank: r, train_world_size: 4, ...over });

function sessions(...raw: Record<string, unknown>[]): SessionRecord[] {
  const p = parseSessionList(raw);
  if (typeof p === "string") assert.fail(p);
  return p.sessions;
}

const body = (heldSummary = "all_reduce <- train_step train_loop.py:104") => ({
  classes: [{ id: "c1", summary: heldSummary }],
  runs: [{ run: "sd-train", job_id: JOB, world_size: 4, held_by: [0], ranks: [0, 1, 2, 3].map((r) => ({ world_rank: r, state: r === 0 ? "paused" : "held", class_id: "c1" })) }],
});

/** A fetch the test answers by hand. */
function manual() {
  const calls: { ref: RunRef; resolve: (v: unknown) => void; reject: (e: Error) => void }[] = [];
  let changes = 0;
  const cache = new RunStacksCache({
    fetch: (ref) => new Promise((resolve, reject) => calls.push({ ref, resolve, reject })),
    onChange: () => changes++,
  });
  return { cache, calls, changes: () => changes };
}

const tick = () => new Promise((r) => setImmediate(r));
const KEY = runKey(JOB, "sd-train");

test("asked once per change of a run's paused sessions, never for sessions without a run", async () => {
  const { cache, calls } = manual();
  cache.sync(sessions(record({ id: "plain" })));
  assert.equal(calls.length, 0);
  cache.sync(sessions(rank(0)));
  cache.sync(sessions(rank(0), record({ id: "plain2" })));
  assert.deepEqual(calls.map((c) => c.ref), [{ job: JOB, run: "sd-train" }]);
  calls[0].resolve(body());
  await tick();
  assert.equal(cache.get(KEY)?.ranks.length, 4);
  cache.sync(sessions(rank(0), rank(1)));
  assert.equal(calls.length, 2);
});

test("one request per run at a time; a change meanwhile asks once more afterwards", async () => {
  const { cache, calls } = manual();
  cache.sync(sessions(rank(0)));
  cache.refresh();
  cache.expand({ job: JOB, run: "sd-train" });
  assert.equal(calls.length, 1);
  calls[0].resolve(body("first"));
  await tick();
  assert.equal(calls.length, 2);
  calls[1].resolve(body("second"));
  await tick();
  assert.equal(calls.length, 2);
  assert.equal(cache.get(KEY)?.ranks[1].summary, "second");
  cache.collapse({ job: JOB, run: "sd-train" });
  assert.ok(cache.get(KEY), "a run with a paused rank stays when its node collapses");
});

test("a failure or an odd body drops what was shown; a run that resumed takes no late answer", async () => {
  const { cache, calls, changes } = manual();
  cache.sync(sessions(rank(0)));
  calls[0].resolve(body());
  await tick();
  assert.ok(cache.get(KEY));
  cache.refresh();
  calls[1].reject(new Error("gateway answered HTTP 500"));
  await tick();
  assert.equal(cache.get(KEY), undefined);
  cache.refresh();
  calls[2].resolve({ runs: "nope" });
  await tick();
  assert.equal(cache.get(KEY), undefined);
  const before = changes();
  cache.refresh();
  cache.sync(sessions(record({ id: "plain" })));
  assert.equal(changes(), before + 1, "dropping the run redraws");
  calls[3].resolve(body());
  await tick();
  assert.equal(cache.get(KEY), undefined);
  assert.equal(cache.snapshot().size, 0);
});

let gw: FakeGateway;
before(async () => {
  gw = await new FakeGateway({ sessions: [rank(0), record({ id: "plain" })] }).listen();
});
after(() => gw.close());

function runNode(c: ClusterController): ViewItem | undefined {
  return c.tree()[0]?.children?.find((i) => i.run);
}

async function withController(fn: (c: ClusterController) => Promise<void>): Promise<void> {
  const c = new ClusterController({ resolveToken: () => Promise.resolve({ token: "s3cret", source: "test" }), onChange: () => {} });
  const { settings, errors } = validateSettings({ clusters: [{ name: "prod", address: gw.address }], refreshInterval: 1 });
  c.applySettings(settings, errors);
  try {
    await fn(c);
  } finally {
    c.dispose();
  }
}

const stacksRequests = () => gw.requests.filter((r) => r.url.startsWith("/api/v1/stacks"));

test("fake gateway: a run with a paused rank shows the ranks it holds; expand and refresh ask again", async () => {
  gw.stacks = body();
  const before = stacksRequests().length;
  await withController(async (c) => {
    await waitFor(() => (runNode(c)?.children?.length ?? 0) === 4, 5000, "held ranks in the tree");
    const labels = runNode(c)?.children?.map((i) => i.label);
    assert.deepEqual(labels, ["rank 0", ...[1, 2, 3].map((r) => `rank ${r} — held by rank 0: all_reduce <- train_step train_loop.py:104`)]);
    const asked = stacksRequests().slice(before);
    assert.deepEqual(asked.map((r) => r.url), [`/api/v1/stacks?job=${JOB}&run=sd-train`]);
    assert.equal(asked[0].headers.authorization, "Bearer s3cret");
    c.expandRun("prod", { job: JOB, run: "sd-train" });
    await waitFor(() => stacksRequests().length === before + 2, 3000, "stacks asked again on expand");
    c.refresh("prod");
    await waitFor(() => stacksRequests().length === before + 3, 3000, "stacks asked again on refresh");
  });
});

test("fake gateway: stacks failing (500, 404, bad JSON) leave the tree as it would be without them", async () => {
  for (const answer of [() => [500, { error: "boom" }], undefined, () => [200, "{not json"]]) {
    gw.stacks = answer;
    const before = stacksRequests().length;
    await withController(async (c) => {
      await waitFor(() => stacksRequests().length > before || answer === undefined, 3000, "stacks asked");
      await waitFor(() => runNode(c) !== undefined, 3000, "run node");
      await new Promise((r) => setTimeout(r, 100));
      const tree = c.tree();
      assert.deepEqual(runNode(c)?.children?.map((i) => i.label), ["rank 0"]);
      assert.deepEqual(tree[0].children?.map((i) => i.label), ["run sd-train (1/4 ranks paused)", "Job 01000000"]);
      assert.equal(tree[0].contextValue, "raydbg.cluster");
    });
  }
});
