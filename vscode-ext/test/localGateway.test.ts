/**
 * Local gateway discovery on real files, dirs and processes: the one record that is
 * believed, and each thing that makes it unbelievable.
 */
import assert from "node:assert/strict";
import { ChildProcess, spawn, spawnSync } from "node:child_process";
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { checkLocalGateway, LocalGatewayOptions, localGatewayFile, readLocalGateway, runtimeDir, startTimeOf } from "../src/localGateway";

const uid = process.getuid?.() ?? -1;
const isRoot = uid === 0;
const NOT_ROOT = "needs root to make files and processes of another user (CI runs as root)";
const bootId = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
const startTime = (pid: number) => startTimeOf(readFileSync(`/proc/${pid}/stat`, "utf8"));
const NAME = "session_2026-12-06_10-00-00_123456_4242";

const root = mkdtempSync(join(tmpdir(), "raydbg-localgw-"));
const children: ChildProcess[] = [];
after(() => {
  for (const c of children) c.kill();
  rmSync(root, { recursive: true, force: true });
});

function privateDir(path: string): string {
  mkdirSync(path);
  chmodSync(path, 0o700); // whatever the umask
  return path;
}

/** What the head agent writes, for a live process of ours (this test's own, unless `over` says). */
const record = (over: Record<string, unknown> = {}) => ({
  address: "10.0.0.5:8266",
  gcs_address: "10.0.0.5:6379",
  node_id: "n1",
  pid: process.pid,
  uid,
  start_time: startTime(process.pid),
  boot_id: bootId,
  ...over,
});

/** A fresh, trusted layout: our runtime dir in its own tmpdir, and a Ray session_latest link. */
function layout(rec: object = record()) {
  const base = mkdtempSync(join(root, "t-"));
  const tmp = privateDir(join(base, "tmp"));
  const runtime = privateDir(runtimeDir(uid, tmp));
  const sessions = privateDir(join(runtime, "sessions"));
  const session = privateDir(join(sessions, NAME));
  const file = localGatewayFile(runtime, NAME);
  writeFileSync(file, JSON.stringify(rec), { mode: 0o600 });
  const ray = privateDir(join(base, "ray"));
  const link = join(ray, "session_latest");
  symlinkSync(`/tmp/ray/${NAME}`, link);
  const opts: LocalGatewayOptions = { uid, tmpdir: tmp, sessionLatest: link };
  return { base, tmp, runtime, sessions, session, file, ray, link, opts };
}

async function untrusted(opts: LocalGatewayOptions): Promise<string> {
  const r = await checkLocalGateway(opts);
  assert.ok("untrusted" in r, `trusted: ${JSON.stringify(r)}`);
  assert.equal(await readLocalGateway(opts), null);
  return r.untrusted;
}

test("paths: <tmpdir>/raydbg-<uid>/sessions/<session>/gateway.json", () => {
  assert.equal(runtimeDir(1000, "/tmp"), "/tmp/raydbg-1000");
  assert.equal(localGatewayFile("/tmp/raydbg-1000", NAME), `/tmp/raydbg-1000/sessions/${NAME}/gateway.json`);
  const prev = process.env.TMPDIR;
  process.env.TMPDIR = "/var/tmp/mine";
  try {
    assert.equal(runtimeDir(1000), "/var/tmp/mine/raydbg-1000", "TMPDIR is respected");
  } finally {
    if (prev === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = prev;
  }
});

test("start time: field 22 of /proc/PID/stat, counted after the comm's last ')'", () => {
  const rest = Array.from({ length: 50 }, (_, i) => String(i + 3)); // fields 3.. as their own numbers
  assert.equal(startTimeOf(`42 (a) b) c) ${rest.join(" ")}`), 22);
  assert.equal(startTimeOf("42 (short) S 1"), null);
  assert.ok((startTime(process.pid) ?? 0) > 0);
});

test("the record of a live process of ours, in private dirs, is trusted", async () => {
  const l = layout();
  assert.deepEqual(await checkLocalGateway(l.opts), { address: "10.0.0.5:8266" });
  assert.equal(await readLocalGateway(l.opts), "10.0.0.5:8266");
});

test("only the session's name is taken from Ray's link: its target is never opened", async () => {
  const l = layout();
  // Another user planted a session dir (with a gateway of theirs) where the link points.
  const planted = privateDir(join(l.ray, NAME));
  writeFileSync(join(planted, "gateway.json"), JSON.stringify(record({ address: "6.6.6.6:8266" })), { mode: 0o600 });
  rmSync(l.link);
  symlinkSync(planted, l.link);
  assert.deepEqual(await checkLocalGateway(l.opts), { address: "10.0.0.5:8266" });
});

for (const [what, over, re] of [
  ["another boot's record", { boot_id: "00000000-0000-0000-0000-000000000000" }, /from another boot/],
  ["a live pid that started at another time (pid reused)", { start_time: (startTime(process.pid) ?? 0) + 1 }, /started at tick \d+, not \d+: another process has that pid now/],
  ["a dead pid", { pid: spawnSync("true").pid }, /the head agent \(pid \d+\) is not running/],
  ["a record for another uid", { uid: uid + 1 }, /the record is for uid \d+, not \d+/],
  ["a pid that is not a number", { pid: String(process.pid) }, /pid "\d+" is not a process id/],
  ["no start time", { start_time: null }, /start_time null is not a tick count/],
  ["an address that is not host:port", { address: "http://[nope" }, /address "http:\/\/\[nope" is not host:port/],
] as const) {
  test(`refused: ${what}`, async () => {
    assert.match(await untrusted(layout(record(over)).opts), re);
  });
}

test("refused: a live pid of another user", async () => {
  let pid = 1; // init: root's, when we are not root
  if (isRoot) {
    const child = spawn("setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "60"], { stdio: "ignore" });
    children.push(child);
    pid = child.pid ?? -1;
    await new Promise((r) => setTimeout(r, 200)); // setpriv has switched user by then
  }
  const l = layout(record({ pid, start_time: startTime(pid) }));
  assert.match(await untrusted(l.opts), new RegExp(`pid ${pid} belongs to uid \\d+, not ${uid}`));
});

test("refused: a private dir open to others, at each level", async () => {
  for (const which of ["runtime", "sessions", "session"] as const) {
    const l = layout();
    chmodSync(l[which], which === "runtime" ? 0o755 : which === "sessions" ? 0o750 : 0o701);
    assert.match(await untrusted(l.opts), /is open to others \(mode 7(55|50|01)\)/, which);
  }
});

test("refused: a private dir replaced by a link to one, at each level", async () => {
  for (const which of ["runtime", "sessions", "session"] as const) {
    const l = layout();
    renameSync(l[which], `${l[which]}.real`);
    symlinkSync(`${l[which]}.real`, l[which]);
    assert.match(await untrusted(l.opts), /is not a directory \(a link\?\)/, which);
  }
});

test("the runtime dir's parent: refused when others may write it without the sticky bit; sticky is fine", async () => {
  const l = layout();
  chmodSync(l.tmp, 0o777);
  assert.match(await untrusted(l.opts), /is writable by others without the sticky bit/);
  chmodSync(l.tmp, 0o1777); // as /tmp
  assert.deepEqual(await checkLocalGateway(l.opts), { address: "10.0.0.5:8266" });
});

test("refused: no runtime dir, no Ray session, or a link whose name is not a session's", async () => {
  const l = layout();
  const missing = await untrusted({ ...l.opts, tmpdir: join(l.base, "nowhere") });
  assert.match(missing, /does not exist/);
  assert.match(await untrusted({ ...l.opts, sessionLatest: join(l.ray, "absent") }), /is not a link to a Ray session/);
  assert.match(await untrusted({ ...l.opts, sessionLatest: l.ray }), /is not a link to a Ray session/, "a dir, not a link");
  for (const target of ["/tmp/ray/session_x/..", `${NAME}/../../../etc`, "..", "/tmp/ray/session_", "/tmp/ray/session_a b", "/tmp/ray/not_a_session"]) {
    rmSync(l.link);
    symlinkSync(target, l.link);
    assert.match(await untrusted(l.opts), /points at .*, not a Ray session name/, target);
  }
});

test("refused: a gateway file that is a link, writable by others, too big, not JSON, or not a file", async () => {
  const cases: [string, (file: string) => void, RegExp][] = [
    ["a link", (f) => (renameSync(f, `${f}.real`), symlinkSync(`${f}.real`, f)), /cannot open .* \(ELOOP\)/],
    ["group-writable", (f) => chmodSync(f, 0o620), /is writable by others \(mode 620\)/],
    ["world-writable", (f) => chmodSync(f, 0o602), /is writable by others \(mode 602\)/],
    ["too big", (f) => writeFileSync(f, JSON.stringify(record({ pad: "x".repeat(70_000) }))), /is over 65536 bytes/],
    ["not JSON", (f) => writeFileSync(f, "{not json"), /is not JSON/],
    ["a JSON list", (f) => writeFileSync(f, "[]"), /is not a JSON object/],
    ["a fifo (would block a plain open)", (f) => (rmSync(f), spawnSync("mkfifo", ["-m", "600", f])), /is not a regular file/],
    ["missing", (f) => rmSync(f), /cannot open .* \(ENOENT\)/],
  ];
  for (const [what, spoil, re] of cases) {
    const l = layout();
    spoil(l.file);
    assert.match(await untrusted(l.opts), re, what);
  }
});

test("refused: a parent owned by another user, who could rename our folder in it", { skip: isRoot ? false : NOT_ROOT }, async () => {
  const l = layout();
  chmodSync(l.tmp, 0o755);
  chownSync(l.tmp, 65534, 65534);
  assert.match(await untrusted(l.opts), /belongs to uid 65534, who could rename our folder in it/);
});

test("refused: a dir or file of another user", { skip: isRoot ? false : NOT_ROOT }, async () => {
  for (const which of ["runtime", "sessions", "session", "file"] as const) {
    const l = layout();
    chownSync(l[which], 65534, 65534);
    assert.match(await untrusted(l.opts), /belongs to uid 65534, not 0/, which);
  }
});
