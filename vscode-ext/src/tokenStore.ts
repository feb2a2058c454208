/**
 * Where stored tokens live in VS Code's SecretStorage: one per gateway address.
 *
 * Keys are `raydbg.token@host:port` (settings.addressKey), so a token stored for one
 * gateway is never looked up for another, whatever the cluster entry is called.
 * Earlier builds keyed tokens by cluster name (`raydbg.token.NAME`); those move
 * once to the address their name has in user settings.
 */
import { addressKey, ClusterConfig } from "./settings";

export const SECRET_PREFIX = "raydbg.token@";
const LEGACY_PREFIX = "raydbg.token.";

/** The subset of vscode.SecretStorage used here. */
export interface SecretStore {
  get(key: string): PromiseLike<string | undefined>;
  store(key: string, value: string): PromiseLike<void>;
  delete(key: string): PromiseLike<void>;
}

/** The SecretStorage key for a gateway address, or null for an address that does not parse. */
export function secretKey(address: string): string | null {
  const key = addressKey(address);
  return key === null ? null : SECRET_PREFIX + key;
}

/** The normalised address a SecretStorage key belongs to, if it is one of ours. */
export function addressOfSecret(key: string): string | null {
  return key.startsWith(SECRET_PREFIX) ? key.slice(SECRET_PREFIX.length) : null;
}

/** Move name-keyed tokens to their cluster's address (user-settings clusters only). */
export async function migrateLegacySecrets(store: SecretStore, clusters: readonly ClusterConfig[]): Promise<number> {
  let moved = 0;
  for (const c of clusters) {
    const old = await store.get(LEGACY_PREFIX + c.name);
    if (old === undefined) continue;
    const key = secretKey(c.address);
    if (key !== null && (await store.get(key)) === undefined) {
      await store.store(key, old);
      moved += 1;
    }
    await store.delete(LEGACY_PREFIX + c.name);
  }
  return moved;
}
