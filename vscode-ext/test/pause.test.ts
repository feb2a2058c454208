/**
 * Issue 31 part 3 in VS Code, without vscode: the gateway's pause answer parsed, a
 * snapshot written out, and Pause and attach's flow against a fake client: attach at
 * once, a snapshot shown and attached once back in Python, the gateway's one-line errors.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { GatewayError } from "../src/gatewayClient";
import { parsePauseAnswer, pauseAndAttach, PauseDeps, pauseError, PendingAttaches, snapshotText, UNLISTED_MS } from "../src/pause";
import { parseSessionRecord, SessionRecord, sessionName } from "../src/records";
import { PauseTarget } from "../src/viewItems";
import { record } from "./helpers/fakeGateway";

const JOB = "02000000";
const NODE = "n".repeat(56);
const T: PauseTarget = { cluster: "prod", job: JOB, run: "sd-train", rank: 2 };

const frames = [
  { function: "all_reduce", file: "/venv/torch/distributed/distributed_c10d.py", line: 2501, locals: { tensor: "tensor([1., 2.])", group: "None" } },
  { function: "train_step", file: "/home/ray/app/train_loop.py", line: 104, locals: { step: "7", batch: "{'x': <Tensor 32x3x64x64>,\n 'y': ...}" } },
];

const pausedRank = (over: Record<string, unknown> = {}) =>
  record({ id: "p2", job_id: JOB, node_id: NODE, pid: 4202, train_run: "sd-train", train_rank: 2, reason: "pause", since: 1_700_000_100, ...over });

const answer = (session: unknown) => ({ target: "sd-train:2", node_id: NODE, pid: 4202, train_run: "sd-train", world_rank: 2, thread: "TrainingThread(train_fn)", session });

function rec(raw: Record<string, unknown>): SessionRecord {
  const r = parseSessionRecord(raw);
  assert.ok(typeof r !== "string", r as string);
  return r;
}

/** Deps recording what the flow did; `reply` is what the gateway does with the POST. */
function fake(reply: (target: string, job: string | null) => Promise<unknown>, attachResult = true) {
  const seen = { posts: [] as [string, string | null][], attached: [] as SessionRecord[], snapshots: [] as SessionRecord[], info: [] as string[], errors: [] as string[] };
  const pending = new PendingAttaches();
  const deps: PauseDeps = {
    pause: (target, job) => {
      seen.posts.push([target, job]);
      return reply(target, job);
    },
    attach: (s) => {
      seen.attached.push(s);
      return Promise.resolve(attachResult);
    },
    showSnapshot: (s) => void seen.snapshots.push(s),
    info: (t) => void seen.info.push(t),
    error: (t) => void seen.errors.push(t),
    pending,
    nowMs: () => 1_700_000_100_000,
  };
  return { deps, seen, pending };
}

test("the pause answer: its fields, a session record, a snapshot's frames with locals", () => {
  const a = parsePauseAnswer(answer(pausedRank({ state: "snapshot", attachable: false, frames })), "sd-train:2");
  assert.ok(typeof a !== "string", a as string);
  assert.deepEqual([a.target, a.node_id, a.pid, a.train_run, a.world_rank, a.thread], ["sd-train:2", NODE, 4202, "sd-train", 2, "TrainingThread(train_fn)"]);
  assert.equal(a.session?.state, "snapshot");
  assert.equal(a.session?.attachable, false);
  assert.deepEqual(a.session?.frames, frames);
  const none = parsePauseAnswer(answer(null), "sd-train:2");
  assert.ok(typeof none !== "string");
  assert.equal(none.session, null);
});

test("odd pause answers are one-line messages; odd frames parse to what can be read", () => {
  for (const bad of [null, [], "ok", 3]) assert.match(parsePauseAnswer(bad, "r:1") as string, /answer to pause r:1 is not an object/);
  assert.match(parsePauseAnswer(answer({ state: "waiting" }), "r:1") as string, /unreadable session: record has no session id/);
  const odd = rec(pausedRank({ state: "snapshot", frames: [null, { line: "x", locals: { n: 3, s: "'a'" } }] }));
  assert.deepEqual(odd.frames, [{ function: "?", file: "?", line: null, locals: { n: "3", s: "'a'" } }]);
  // A snapshot without the attachable field is not attachable; a normal record's frames are null.
  assert.equal(rec({ id: "x", state: "snapshot" }).attachable, false);
  assert.equal(rec(record()).frames, null);
});

test("a snapshot reads as a document: what it is, frames innermost first, each with its locals", () => {
  const text = snapshotText(rec(pausedRank({ state: "snapshot", frames, thread_name: "TrainingThread(train_fn)" })));
  const lines = text.split("\n");
  assert.match(lines[0], /^# snapshot p2: thread TrainingThread\(train_fn\) of rank 2 \(run sd-train\) is blocked in C/);
  assert.equal(lines[1], "# train_step · pid 4202 on node 10.0.0.5 (nnnnnnnnnnnn) · job 02000000");
  // A Train worker's record may have an empty task name (seen on a real cluster): no stray separator.
  assert.match(snapshotText(rec(pausedRank({ state: "snapshot", task_name: "" }))).split("\n")[1], /^# pid 4202 on node/);
  assert.match(text, /returns to Python/);
  const body = lines.slice(lines.indexOf("") + 1);
  assert.deepEqual(body.slice(0, 7), [
    "all_reduce  /venv/torch/distributed/distributed_c10d.py:2501",
    "    tensor = tensor([1., 2.])",
    "    group = None",
    "train_step  /home/ray/app/train_loop.py:104",
    "    step = 7",
    "    batch = {'x': <Tensor 32x3x64x64>,",
    "       'y': ...}",
  ]);
  assert.match(snapshotText(rec(pausedRank({ state: "snapshot" }))), /\(the worker sent no frames\)/);
});

test("errors: the gateway's own line (403 another user's, 404, 409); a wrong token says so", () => {
  const own = new GatewayError("gateway h:1 rejected the token (HTTP 403)", "auth", 403, "pid 4202 runs as bob: raydbg pauses only its own user's workers (me)");
  assert.equal(pauseError("sd-train:2", own), "Ray: pause sd-train:2: pid 4202 runs as bob: raydbg pauses only its own user's workers (me)");
  const token = new GatewayError("gateway h:1 rejected the token (HTTP 401); set the right one with 'Ray: Set Cluster Token'", "auth", 401, "missing or wrong raydbg token");
  assert.match(pauseError("sd-train:2", token), /rejected the token \(HTTP 401\)/);
  assert.equal(pauseError("x", new GatewayError("cannot reach", "unreachable")), "Ray: pause x: cannot reach");
});

test("an attachable answer attaches through the given attach path, at once", async () => {
  const { deps, seen, pending } = fake(() => Promise.resolve(answer(pausedRank())));
  assert.equal(await pauseAndAttach(deps, T), "attached");
  assert.deepEqual(seen.posts, [["sd-train:2", JOB]]);
  assert.deepEqual(seen.attached.map((s) => s.id), ["p2"]);
  assert.equal(pending.size, 0);
  assert.deepEqual([seen.errors, seen.snapshots], [[], []]);
  // A job the view does not know goes unnamed: the gateway finds the run.
  const other = fake(() => Promise.resolve(answer(pausedRank())));
  await pauseAndAttach(other.deps, { ...T, job: null });
  assert.deepEqual(other.seen.posts, [["sd-train:2", null]]);
  // An attach that fails (the relay, VS Code) is a failure.
  assert.equal(await pauseAndAttach(fake(() => Promise.resolve(answer(pausedRank())), false).deps, T), "failed");
});

test("a snapshot: shown, said, and attached once the same id is listed attachable; not while starting", async () => {
  const { deps, seen, pending } = fake(() => Promise.resolve(answer(pausedRank({ state: "snapshot", attachable: false, frames }))));
  assert.equal(await pauseAndAttach(deps, T), "snapshot");
  assert.deepEqual(seen.snapshots.map((s) => s.id), ["p2"]);
  assert.deepEqual(seen.attached, []);
  assert.match(seen.info[0], /rank 2 of run sd-train is blocked in C \(snapshot p2\).*attaches when the thread returns to Python/);
  assert.equal(pending.has("prod", "p2"), true);
  const still = pending.update("prod", [rec(pausedRank({ state: "snapshot", attachable: false }))]);
  assert.deepEqual([still.attach, still.gone], [[], []]);
  assert.deepEqual(pending.update("prod", [rec(pausedRank({ state: "starting", attachable: false }))]).attach, []);
  // Another cluster's list says nothing of it.
  assert.deepEqual(pending.update("other", []), { attach: [], gone: [] });
  const ready = pending.update("prod", [rec(pausedRank({ state: "waiting", attachable: true }))]);
  assert.deepEqual(ready.attach.map((s) => [s.id, s.state]), [["p2", "waiting"]]);
  assert.equal(pending.size, 0);
});

test("a snapshot continued (dropped) before it returns is reported gone, not attached", async () => {
  const { deps, pending } = fake(() => Promise.resolve(answer(pausedRank({ state: "snapshot", attachable: false }))));
  await pauseAndAttach(deps, T);
  pending.update("prod", [rec(pausedRank({ state: "snapshot", attachable: false }))]);
  const { attach, gone } = pending.update("prod", []);
  assert.deepEqual(attach, []);
  assert.deepEqual(gone.map((p) => [p.label, p.seen]), [["rank 2 of run sd-train", true]]);
});

test("no session within wait_s: found later by node, pid and reason; never listed: given up after a while", async () => {
  const { deps, seen, pending } = fake(() => Promise.resolve(answer(null)));
  assert.equal(await pauseAndAttach(deps, T), "waiting");
  assert.match(seen.info[0], /rank 2 of run sd-train \(pid 4202\) was asked to pause in thread TrainingThread\(train_fn\); its session is not listed yet/);
  // An older session of the same pid (a breakpoint) or another pid is not it.
  const older = rec(pausedRank({ id: "old", reason: "breakpoint" }));
  const otherPid = rec(pausedRank({ id: "o", pid: 1 }));
  assert.deepEqual(pending.update("prod", [older, otherPid], 1_700_000_101_000).attach, []);
  const later = pending.update("prod", [older, rec(pausedRank({ id: "new" }))], 1_700_000_102_000);
  assert.deepEqual(later.attach.map((s) => s.id), ["new"]);

  const never = fake(() => Promise.resolve(answer(null)));
  await pauseAndAttach(never.deps, T);
  assert.deepEqual(never.pending.update("prod", [], 1_700_000_100_000 + UNLISTED_MS - 1).gone, []);
  assert.deepEqual(never.pending.update("prod", [], 1_700_000_100_000 + UNLISTED_MS + 1).gone.map((p) => p.seen), [false]);
});

test("the gateway refusing (or a bad answer): its line in an error, nothing attached or pending", async () => {
  const refused = fake(() => Promise.reject(new GatewayError("gateway h:1 answered HTTP 409: x", "protocol", 409, "pid 4202 is not a raydbg-activated worker (no stacks thread): run the job with RAY_DEBUG=1")));
  assert.equal(await pauseAndAttach(refused.deps, T), "failed");
  assert.deepEqual(refused.seen.errors, ["Ray: pause sd-train:2: pid 4202 is not a raydbg-activated worker (no stacks thread): run the job with RAY_DEBUG=1"]);
  assert.deepEqual([refused.seen.attached, refused.pending.size], [[], 0]);
  const odd = fake(() => Promise.resolve([]));
  assert.equal(await pauseAndAttach(odd.deps, T), "failed");
  assert.deepEqual(odd.seen.errors, ["Ray: the gateway's answer to pause sd-train:2 is not an object"]);
});

test("pauses of a cluster no longer configured are forgotten", async () => {
  const { deps, pending } = fake(() => Promise.resolve(answer(null)));
  await pauseAndAttach(deps, T);
  pending.keepClusters(["prod"]);
  assert.equal(pending.size, 1);
  pending.keepClusters(["other"]);
  assert.equal(pending.size, 0);
});

test("a session listed while its pause is asked, or pending, is this window's (no 'paused' notification)", async () => {
  let seenWhileAsking = false;
  const pending = new PendingAttaches();
  const mine = rec(pausedRank());
  const deps: PauseDeps = {
    pause: () => {
      seenWhileAsking = pending.ours("prod", mine);
      return Promise.resolve(answer(pausedRank({ state: "snapshot", attachable: false })));
    },
    attach: () => Promise.resolve(true),
    showSnapshot: () => {},
    info: () => {},
    error: () => {},
    pending,
  };
  assert.equal(pending.ours("prod", mine), false);
  await pauseAndAttach(deps, T);
  assert.equal(seenWhileAsking, true);
  assert.equal(pending.ours("prod", mine), true, "pending by id");
  assert.equal(pending.ours("prod", rec(pausedRank({ id: "x", train_rank: 1 }))), false);
  assert.equal(pending.ours("other", rec(pausedRank({ id: "x" }))), false);
});

test("a record with an empty task name is named by its function, not an empty string", () => {
  assert.equal(sessionName(rec(pausedRank({ task_name: "", function: "train_fn" }))), "train_fn [rank 2]");
});
