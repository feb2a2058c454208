/**
 * Issue 39 in VS Code: a run node shows who waits for whom (the gateway's wait-for chain,
 * one hop a line, the culprit last) and its verdict; a deadlock says its cycle; each rank's
 * collectives name their group by label.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { parseSessionList } from "../src/records";
import { runKey } from "../src/runStacks";
import { collectiveText, parseRunStacks, RunStacks } from "../src/stacks";
import { parseSteps } from "../src/steps";
import { clusterItem, ClusterState, CTX, ViewItem } from "../src/treeModel";

const cluster = { name: "prod", address: "head:8266" };
const NOW = 1_700_000_090_000;
const JOB = "02000000";
const CHAIN = [
  "ranks 0,1 wait in all_reduce #2 (world) for 2,3",
  "rank 2 waits in all_reduce #1 (group [2,3]) for 3",
  "rank 3 is in load_batch train.py:88",
];

/** GET /api/v1/stacks?run=tp: subgroups {0,1} and {2,3}, rank 3 stuck (raydbg/gang/wait_for shapes). */
function stacksBody(over: Record<string, unknown> = {}) {
  const coll = (r: number) => ({
    "0": { label: "world", started: { seq: r < 2 ? 2 : 1, op: "all_reduce" }, completed: { seq: 1 } },
    [r < 2 ? "1" : "2"]: { label: r < 2 ? "group [0,1]" : "group [2,3]", started: { seq: r === 3 ? 0 : 1, op: r === 3 ? null : "all_reduce" }, completed: r === 2 ? null : { seq: r === 3 ? 0 : 1 } },
  });
  return {
    classes: [{ id: "c-ar", summary: "all_reduce <- step train.py:40" }, { id: "c-ld", summary: "load_batch train.py:88" }],
    runs: [{
      run: "tp", job_id: JOB, world_size: 4, held_by: [], waiting: [0, 1, 2], not_waiting: [3], culprits: [3], deadlocks: [], chain: CHAIN,
      ranks: [0, 1, 2, 3].map((r) => ({ world_rank: r, local_rank: r, node_id: "n".repeat(56), pid: 100 + r, state: "running", class_id: r === 3 ? "c-ld" : "c-ar", last_progress_s: 3, collectives: coll(r) })),
      ...over,
    }],
  };
}

function ok(): ClusterState {
  const parsed = parseSessionList([]);
  if (typeof parsed === "string") assert.fail(parsed);
  return { kind: "ok", sessions: parsed.sessions, bad: parsed.bad, live: true };
}

function runNode(body: unknown): ViewItem {
  const stacks = parseRunStacks(body, "tp", JOB);
  assert.ok(stacks && typeof stacks === "object", JSON.stringify(stacks));
  const steps = parseSteps({ runs: [{ job_id: JOB, train_run: "tp", ranks: [] }] });
  assert.ok(typeof steps !== "string");
  const [run] = clusterItem(cluster, ok(), NOW, { stacks: new Map<string, RunStacks>([[runKey(JOB, "tp"), stacks]]), steps }).children ?? [];
  assert.ok(run?.children);
  return run;
}

test("the run node: who waits for whom first, one hop a line, the culprit's place last", () => {
  const run = runNode(stacksBody());
  assert.equal(run.description, `job ${JOB} · culprit: rank 3`);
  const [waits, ...ranks] = run.children ?? [];
  assert.deepEqual([waits.label, waits.description, waits.contextValue], ["who waits for whom", "culprit: rank 3", CTX.info]);
  assert.deepEqual(waits.children?.map((c) => [c.label, c.icon]), [
    [CHAIN[0], "arrow-right"], [CHAIN[1], "arrow-right"], [CHAIN[2], "debug-stackframe"]]);
  assert.match(waits.tooltip ?? "", /one hop a line:\nranks 0,1 wait in all_reduce #2 \(world\) for 2,3\n/);
  assert.deepEqual(ranks.map((r) => r.label), ["rank 0", "rank 1", "rank 2", "rank 3"]);
  assert.equal(ranks[2].description, "in collective · after all_reduce #1, in all_reduce #1 (group [2,3])");
  assert.equal(ranks[3].description, "running · after all_reduce #1 · behind");  // its group [2,3] entry has no collective yet
  assert.equal(ranks[2].description?.includes("behind"), false);  // it waits itself: not a culprit
});

test("a deadlock names its cycle; a run where nobody waits has no such node", () => {
  const cycle = ["rank 0 waits in all_reduce #1 (group [0,1]) for 1", "ranks 1-3 wait in all_reduce #1 (world) for 0",
    "deadlock: ranks 0 -> 1 -> 0 wait on each other (a cycle: none of them can go on)"];
  const run = runNode(stacksBody({ culprits: [], deadlocks: [{ ranks: [0, 1], hops: [0, 1], all: [0, 1] }], chain: cycle }));
  const waits = run.children?.[0];
  assert.deepEqual([waits?.description, waits?.icon], ["deadlock: 0 → 1 → 0", "warning"]);
  assert.equal(waits?.children?.[2].icon, "warning");
  const calm = runNode(stacksBody({ culprits: [], chain: [] }));
  assert.deepEqual(calm.children?.map((c) => c.label), ["rank 0", "rank 1", "rank 2", "rank 3"]);
  assert.equal(calm.description, `job ${JOB}`);
});

test("collectives by group label; odd chain and deadlock fields are dropped, not fatal", () => {
  assert.equal(collectiveText({ "0": { label: "world", started: { seq: 4, op: "all_reduce" }, completed: { seq: 4 } },
    "3": { label: "group mesh_shard [2,3]", started: { seq: 2, op: "reduce_scatter" }, completed: { seq: 1 } },
    "5": { label: "group pp [4,6]", started: { seq: 0, op: null }, completed: null } }), "after all_reduce #4, in reduce_scatter #2 (group mesh_shard [2,3])");
  const odd = parseRunStacks(stacksBody({ chain: ["x", 3, null], deadlocks: [null, { ranks: [1, "2"] }, { ranks: [] }] }), "tp", JOB) as RunStacks;
  assert.deepEqual([odd.chain, odd.deadlocks], [["x"], [[1]]]);
});
