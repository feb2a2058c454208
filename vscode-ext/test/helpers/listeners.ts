/**
 * The listening sockets this process holds, read from /proc (Linux): TCP over IPv4 and
 * IPv6, and unix sockets. A test compares them before and during an attach to prove the
 * extension opens no port, whatever library would have opened it.
 */
import { readdirSync, readFileSync, readlinkSync } from "node:fs";

/** Inodes of the sockets among this process's file descriptors. */
function ownSocketInodes(): Set<string> {
  const out = new Set<string>();
  for (const fd of readdirSync("/proc/self/fd")) {
    let target: string;
    try {
      target = readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      continue; // closed while we looked (the readdir's own fd, say)
    }
    const m = /^socket:\[(\d+)\]$/.exec(target);
    if (m) out.add(m[1]);
  }
  return out;
}

const rows = (file: string) => readFileSync(file, "utf8").trim().split("\n").slice(1).map((l) => l.trim().split(/\s+/));

/** e.g. `tcp 0100007F:41234 (inode 812)`, `unix /tmp/x.sock (inode 813)`: one line per listening socket of ours. */
export function listeningSockets(): string[] {
  const ours = ownSocketInodes();
  const out: string[] = [];
  for (const proto of ["tcp", "tcp6"]) {
    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode; st 0A is LISTEN.
    for (const [, local, , st, , , , , , inode] of rows(`/proc/net/${proto}`)) {
      if (st !== "0A" || !ours.has(inode)) continue;
      const [addr, port] = local.split(":");
      out.push(`${proto} ${addr}:${parseInt(port, 16)} (inode ${inode})`);
    }
  }
  // Num RefCount Protocol Flags Type St Inode [Path]; flag 00010000 is __SO_ACCEPTCON (listening).
  for (const [, , , flags, , , inode, path] of rows("/proc/net/unix")) {
    if ((parseInt(flags, 16) & 0x10000) !== 0 && ours.has(inode)) out.push(`unix ${path ?? "(unnamed)"} (inode ${inode})`);
  }
  return out.sort();
}

/** What listens now and did not in `before`. */
export function newListeners(before: readonly string[]): string[] {
  return listeningSockets().filter((l) => !before.includes(l));
}
