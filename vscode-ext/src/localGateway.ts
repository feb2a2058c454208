/**
 * The gateway the local Ray session names: the only address Ray's token is sent to.
 *
 * The head's agent writes `<session dir>/raydbg-<uid>/gateway.json` (`{"address": "ip:port"}`);
 * `raydbg` finds the gateway there too (raydbg/client.py find_gateway). /tmp/ray is shared
 * by every user of the machine, so the file counts only when it is a regular file owned
 * by us and writable by nobody else; it is checked on the open descriptor (no race).
 */
import { constants } from "node:fs";
import { open } from "node:fs/promises";
import { addressKey } from "./settings";

/** Where the head's agent of a cluster run by `uid` leaves its address (raydbg/gateway_file.py). */
export function localGatewayFile(uid: number | undefined = process.getuid?.()): string {
  return `/tmp/ray/session_latest/raydbg-${uid ?? "unknown"}/gateway.json`;
}

// Bigger than any real gateway.json by far; a huge file is not ours.
const MAX_BYTES = 64 * 1024;

/** The normalised address (settings.addressKey) in `path`, or null when it cannot be trusted. */
export async function readLocalGateway(path?: string, uid: number | undefined = process.getuid?.()): Promise<string | null> {
  if (uid === undefined) return null; // no owner to check against (Windows): trust nothing
  let fh;
  try {
    fh = await open(path ?? localGatewayFile(uid), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    const st = await fh.stat();
    if (!st.isFile() || st.uid !== uid || st.mode & 0o022 || st.size > MAX_BYTES) return null;
    const v = JSON.parse(await fh.readFile("utf8")) as unknown;
    const address = typeof v === "object" && v !== null ? (v as { address?: unknown }).address : undefined;
    return typeof address === "string" ? addressKey(address) : null;
  } catch {
    return null;
  } finally {
    await fh.close();
  }
}
