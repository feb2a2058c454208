/**
 * The gateway the local Ray session names: the only address Ray's token is sent to.
 *
 * The head's agent writes `<tmpdir>/raydbg-<uid>/sessions/<session>/gateway.json`
 * (raydbg/gateway_file.py). Ray's /tmp/ray is writable by every local user, so only the
 * session's name is taken from it (the `session_latest` link, read, never followed); the
 * file lives in our own private dirs, and it is believed only when everything it says
 * can be checked: the dirs and the file are ours and private, the record's uid is ours,
 * its boot id is this boot's, and its pid is a live process of ours started when it says.
 * Anything else: not trusted (null), so no token goes to that address.
 */
import { constants } from "node:fs";
import { lstat, open, readFile, readlink, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { addressKey } from "./settings";

export interface LocalGatewayOptions {
  uid?: number;
  /** Where the per-user runtime dir lives; os.tmpdir() (TMPDIR), as Python's tempfile.gettempdir(). */
  tmpdir?: string;
  /** Ray's link to its newest session dir. */
  sessionLatest?: string;
  proc?: string;
  bootIdFile?: string;
}

// Bigger than any real gateway.json by far; a huge file is not ours.
const MAX_BYTES = 64 * 1024;
// Ray names its session dirs session_<date>_<time>_<pid>; nothing else becomes a path part.
const SESSION_NAME = /^session_[A-Za-z0-9_.-]+$/;

/** `<tmpdir>/raydbg-<uid>`: this user's runtime dir (raydbg/gateway_file.py makes it). */
export function runtimeDir(uid: number, dir: string = tmpdir()): string {
  return join(dir, `raydbg-${uid}`);
}

/** Where the head's agent of the Ray session `sessionName` leaves its gateway's address. */
export function localGatewayFile(runtime: string, sessionName: string): string {
  return join(runtime, "sessions", sessionName, "gateway.json");
}

class Untrusted extends Error {}

const refuse = (why: string): never => {
  throw new Untrusted(why);
};

/** A dir only we can enter or change: a real dir (not a link), ours, mode 0700 or stricter. */
async function checkPrivateDir(path: string, uid: number): Promise<void> {
  const st = await lstat(path).catch(() => refuse(`${path} does not exist`));
  if (!st.isDirectory()) refuse(`${path} is not a directory (a link?)`);
  if (st.uid !== uid) refuse(`${path} belongs to uid ${st.uid}, not ${uid}`);
  if (st.mode & 0o077) refuse(`${path} is open to others (mode ${(st.mode & 0o777).toString(8)})`);
}

/** The runtime dir's parent must not let others rename our dir: sticky, or owned by us or
 * root and writable by nobody else (raydbg/private_dir.py check_base). */
async function checkParent(path: string, uid: number): Promise<void> {
  const st = await stat(path).catch(() => refuse(`${path} does not exist`));
  if (st.mode & 0o1000) return;
  if (st.mode & 0o022) refuse(`${path} is writable by others without the sticky bit`);
  if (st.uid !== 0 && st.uid !== uid) refuse(`${path} belongs to uid ${st.uid}, who could rename our folder in it`);
}

/** The name of Ray's newest session, from its link (the target is never opened). */
async function sessionName(link: string): Promise<string> {
  const target = await readlink(link).catch(() => refuse(`${link} is not a link to a Ray session`));
  const name = basename(target);
  if (!SESSION_NAME.test(name)) refuse(`${link} points at ${JSON.stringify(target)}, not a Ray session name`);
  return name;
}

/** The record in `path`: a regular file of ours that others cannot write, opened without following links. */
async function readRecord(path: string, uid: number): Promise<Record<string, unknown>> {
  const fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK).catch((e: NodeJS.ErrnoException) => refuse(`cannot open ${path} (${e.code ?? e.message})`));
  try {
    const st = await fh.stat();
    if (!st.isFile()) refuse(`${path} is not a regular file`);
    if (st.uid !== uid) refuse(`${path} belongs to uid ${st.uid}, not ${uid}`);
    if (st.mode & 0o022) refuse(`${path} is writable by others (mode ${(st.mode & 0o777).toString(8)})`);
    if (st.size > MAX_BYTES) refuse(`${path} is over ${MAX_BYTES} bytes`);
    let v: unknown;
    try {
      v = JSON.parse(await fh.readFile("utf8"));
    } catch {
      refuse(`${path} is not JSON`);
    }
    if (typeof v !== "object" || v === null || Array.isArray(v)) refuse(`${path} is not a JSON object`);
    return v as Record<string, unknown>;
  } finally {
    await fh.close();
  }
}

/** Field 22 of /proc/<pid>/stat (start time in clock ticks); the comm before it may hold spaces and ')'. */
export function startTimeOf(statText: string): number | null {
  const fields = statText.slice(statText.lastIndexOf(")") + 1).trim().split(/\s+/);
  // After the comm come field 3 (state) onwards: field 22 is the 20th.
  const v = fields[19];
  return v !== undefined && /^\d+$/.test(v) ? Number(v) : null;
}

/** The record's pid is a live process of ours that started when the record says. */
async function checkProcess(rec: Record<string, unknown>, uid: number, proc: string): Promise<void> {
  const { pid, start_time: started } = rec;
  if (!Number.isSafeInteger(pid) || (pid as number) <= 0) refuse(`pid ${JSON.stringify(pid)} is not a process id`);
  if (!Number.isSafeInteger(started) || (started as number) < 0) refuse(`start_time ${JSON.stringify(started)} is not a tick count`);
  const dir = join(proc, String(pid));
  const st = await stat(dir).catch(() => refuse(`the head agent (pid ${String(pid)}) is not running`));
  if (st.uid !== uid) refuse(`pid ${String(pid)} belongs to uid ${st.uid}, not ${uid}`);
  const text = await readFile(join(dir, "stat"), "utf8").catch(() => refuse(`pid ${String(pid)} ended while it was checked`));
  const now = startTimeOf(text);
  if (now !== started) refuse(`pid ${String(pid)} started at tick ${String(now)}, not ${String(started)}: another process has that pid now`);
}

/** The local gateway's normalised address (settings.addressKey), or why it is not trusted. */
export async function checkLocalGateway(opts: LocalGatewayOptions = {}): Promise<{ address: string } | { untrusted: string }> {
  const uid = opts.uid ?? process.getuid?.();
  if (uid === undefined) return { untrusted: "no user id to check owners against (not a POSIX system)" };
  const proc = opts.proc ?? "/proc";
  try {
    const parent = opts.tmpdir ?? tmpdir();
    const runtime = runtimeDir(uid, parent);
    await checkParent(parent, uid);
    await checkPrivateDir(runtime, uid);
    const name = await sessionName(opts.sessionLatest ?? "/tmp/ray/session_latest");
    await checkPrivateDir(join(runtime, "sessions"), uid);
    await checkPrivateDir(join(runtime, "sessions", name), uid);
    const rec = await readRecord(localGatewayFile(runtime, name), uid);
    if (rec.uid !== uid) refuse(`the record is for uid ${JSON.stringify(rec.uid)}, not ${uid}`);
    const boot = (await readFile(opts.bootIdFile ?? join(proc, "sys/kernel/random/boot_id"), "utf8").catch(() => refuse("cannot read this machine's boot id"))).trim();
    if (rec.boot_id !== boot) refuse(`the record is from another boot (${JSON.stringify(rec.boot_id)})`);
    await checkProcess(rec, uid, proc);
    const address = typeof rec.address === "string" ? addressKey(rec.address) : null;
    return address === null ? { untrusted: `the record's address ${JSON.stringify(rec.address)} is not host:port` } : { address };
  } catch (e) {
    if (e instanceof Untrusted) return { untrusted: e.message };
    throw e;
  }
}

/** The normalised address of the local Ray session's gateway, or null when it cannot be trusted. */
export async function readLocalGateway(opts: LocalGatewayOptions = {}): Promise<string | null> {
  const r = await checkLocalGateway(opts).catch(() => ({ untrusted: "unexpected error" }));
  return "address" in r ? r.address : null;
}
