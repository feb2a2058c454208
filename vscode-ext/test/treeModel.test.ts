import assert from "node:assert/strict";
import { test } from "node:test";
import { newSessions, parseSessionList, parseSessionRecord, SessionRecord } from "../src/records";
import { buildTree, clusterItem, ClusterState, CTX, pausedCount, ViewItem } from "../src/treeModel";
import { record } from "./helpers/fakeGateway";

const cluster = { name: "prod", address: "head:8266" };
const NOW = 1_700_000_090_000;

function ok(payload: unknown): ClusterState {
  const parsed = parseSessionList(payload);
  if (typeof parsed === "string") assert.fail(parsed);
  return { kind: "ok", sessions: parsed.sessions, bad: parsed.bad, live: true };
}

function children(item: ViewItem): ViewItem[] {
  assert.ok(item.children, `${item.label} has no children`);
  return item.children;
}

test("sessions are grouped by job, one group per job", () => {
  const item = clusterItem(cluster, ok([
    record({ id: "s1", job_id: "01000000" }),
    record({ id: "s2", job_id: "02000000" }),
    record({ id: "s3", job_id: "01000000", task_name: "other" }),
  ]), NOW);
  const jobs = children(item);
  assert.deepEqual(jobs.map((j) => j.label), ["Job 01000000", "Job 02000000"]);
  assert.deepEqual(jobs.map((j) => j.description), ["2 paused", "1 paused"]);
  assert.deepEqual(children(jobs[0]).map((s) => s.session?.id).sort(), ["s1", "s3"]);
  assert.equal(jobs[0].contextValue, CTX.job);
  assert.equal(item.description, "head:8266 · 3 paused");
});

test("labels name the task, the actor method and the Train rank", () => {
  const item = clusterItem(cluster, ok([
    record({ id: "t", task_name: "preprocess" }),
    record({ id: "a", task_name: null, actor_name: "Trainer", function: "step" }),
    record({ id: "r1", task_name: "RayTrainWorker.train_fn", train_rank: 1, since: 5 }),
    record({ id: "r0", task_name: "RayTrainWorker.train_fn", train_rank: 0, since: 4 }),
  ]), NOW);
  const sessions = children(children(item)[0]);
  const byId = new Map(sessions.map((s) => [s.session?.id, s]));
  assert.equal(byId.get("t")?.label, "preprocess");
  assert.equal(byId.get("a")?.label, "Trainer.step");
  assert.equal(byId.get("r1")?.label, "RayTrainWorker.train_fn [rank 1]");
  // Train ranks read in rank order even when rank 1 paused later.
  const ranks = sessions.filter((s) => s.session?.train_rank !== null).map((s) => s.session?.train_rank);
  assert.deepEqual(ranks, [0, 1]);
});

test("description is file:line and reason; exceptions show their type", () => {
  const item = clusterItem(cluster, ok([
    record({ id: "b", file: "/w/app/train.py", line: 17 }),
    record({ id: "e", reason: "exception", exception: { type: "ZeroDivisionError", message: "division by zero", traceback: "..." }, file: "C:\\w\\m.py", line: 3 }),
    record({ id: "s", state: "starting", attachable: false }),
  ]), NOW);
  const byId = new Map(children(children(item)[0]).map((s) => [s.session?.id, s]));
  assert.equal(byId.get("b")?.description, "train.py:17 · breakpoint");
  assert.equal(byId.get("e")?.description, "m.py:3 · ZeroDivisionError");
  assert.equal(byId.get("s")?.description, "train.py:17 · breakpoint (starting)");
  assert.equal(byId.get("b")?.contextValue, CTX.attachable);
  assert.equal(byId.get("s")?.contextValue, CTX.starting);
  assert.equal(byId.get("e")?.icon, "error");
});

test("tooltip carries the rest: ids, node, pid, cwd, exception, age", () => {
  const item = clusterItem(cluster, ok([record({ reason: "exception", exception: { type: "KeyError", message: "'x'" }, actor_id: "ab12", actor_name: "Loader", train_rank: 3 })]), NOW);
  const tip = children(children(item)[0])[0].tooltip ?? "";
  for (const part of ["KeyError: 'x'", "session a1b2c3d4e5f6", "job 01000000", "node 10.0.0.5", "pid 4242", "cwd /home/ray/app", "actor Loader (ab12)", "Ray Train rank 3", "/home/ray/app/train.py:17 in train_step", "paused 1 min ago"]) {
    assert.ok(tip.includes(part), `tooltip lacks ${JSON.stringify(part)}:\n${tip}`);
  }
});

test("invalid JSON from the gateway becomes an error item, not a crash", () => {
  const parsed = parseSessionList('[{"id": "x",');
  assert.equal(typeof parsed, "string");
  assert.match(parsed as string, /invalid JSON/);
  const item = clusterItem(cluster, { kind: "error", message: parsed as string, reason: "protocol" });
  const [err] = children(item);
  assert.equal(err.contextValue, CTX.error);
  assert.match(err.label, /invalid JSON/);
  assert.equal(item.contextValue, CTX.clusterError);
});

test("a non-list body is an error; partial records keep the good ones", () => {
  assert.match(parseSessionList({ error: "boom" }) as string, /an object where a list of sessions was expected/);
  const item = clusterItem(cluster, ok([record({ id: "good" }), { job_id: "01" }, 42, null, { id: "partial" }]), NOW);
  const kids = children(item);
  const labels = kids.map((k) => k.label);
  assert.deepEqual(labels.filter((l) => l.startsWith("Unreadable")), ["Unreadable session record #1", "Unreadable session record #2", "Unreadable session record #3"]);
  assert.equal(kids.find((k) => k.label === "Unreadable session record #2")?.tooltip, "expected an object, got a number");
  // {id: "partial"} alone is still listed, with defaults rather than "undefined" text.
  const partial = kids.flatMap((k) => k.children ?? []).find((s) => s.session?.id === "partial");
  assert.ok(partial);
  assert.equal(partial.label, "partial");
  assert.equal(partial.description, "unknown location · breakpoint");
  assert.doesNotMatch(partial.tooltip ?? "", /undefined|NaN/);
});

test("wrong-typed fields are ignored rather than trusted", () => {
  const rec = parseSessionRecord(record({ line: "17", train_rank: "0", exception: "boom", attachable: "yes", state: "starting" })) as SessionRecord;
  assert.equal(rec.line, null);
  assert.equal(rec.train_rank, null);
  assert.equal(rec.exception, null);
  assert.equal(rec.attachable, false); // falls back to state != starting
});

test("cluster states: loading, empty, unreachable, token rejected", () => {
  assert.equal(children(clusterItem(cluster, { kind: "loading" }))[0].label, "Connecting…");
  assert.equal(children(clusterItem(cluster, ok([])))[0].label, "No paused sessions");
  const down = clusterItem(cluster, { kind: "error", message: "cannot reach the raydbg gateway at head:8266 (ECONNREFUSED)", reason: "unreachable" });
  assert.equal(down.description, "head:8266 · unreachable");
  const auth = clusterItem(cluster, { kind: "error", message: "rejected the token", reason: "auth" });
  assert.equal(auth.description, "head:8266 · token rejected");
  assert.equal(children(auth)[0].label, "rejected the token");
});

test("buildTree: settings errors first, one item per cluster, unique ids", () => {
  const states = new Map<string, ClusterState>([["a", ok([record({ id: "x" })])], ["b", ok([record({ id: "x" })])]]);
  const tree = buildTree([{ name: "a", address: "a:1" }, { name: "b", address: "b:1" }], states, ["raydbg.clusters[2]: bad"], NOW);
  assert.deepEqual(tree.map((t) => t.label), ["Settings: raydbg.clusters[2]: bad", "a", "b"]);
  const ids: string[] = [];
  const walk = (items: ViewItem[]) => items.forEach((i) => (ids.push(i.id), walk(i.children ?? [])));
  walk(tree);
  assert.equal(new Set(ids).size, ids.length, `duplicate ids: ${ids.join(", ")}`);
  assert.equal(pausedCount(states.values()), 2);
});

test("newSessions finds only sessions not seen before", () => {
  const p = parseSessionList([record({ id: "a" }), record({ id: "b" })]) as Exclude<ReturnType<typeof parseSessionList>, string>;
  assert.deepEqual(newSessions(new Set(["a"]), p.sessions).map((s) => s.id), ["b"]);
});
