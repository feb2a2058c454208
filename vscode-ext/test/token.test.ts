import assert from "node:assert/strict";
import { test } from "node:test";
import { addressKey } from "../src/settings";
import { resolveToken, TokenSources } from "../src/token";
import { migrateLegacySecrets, secretKey } from "../src/tokenStore";

function files(map: Record<string, string>) {
  return (p: string) => (p in map ? Promise.resolve(map[p]) : Promise.reject(Object.assign(new Error("ENOENT"), { code: "ENOENT" })));
}

// Every token source at once: a test names what it expects to win, and what must not leak.
const ALL = { "/t": "file", "/h/.raydbg/tokens/gw_8266": "headtok", "/h/.ray/auth_token": "raytok", "/p": "pathtok" };
const ENV = { RAYDBG_TOKEN: "envtok", RAY_AUTH_TOKEN: "rayenv", RAY_AUTH_TOKEN_PATH: "/p" };
const resolve = (over: Partial<TokenSources>) => resolveToken({ address: "gw:8266", env: ENV, home: "/h", read: files(ALL), ...over });
const token = (r: Awaited<ReturnType<typeof resolveToken>>) => ("token" in r ? r.token : `error: ${r.error}`);

test("addresses normalise to host:port, the identity a token belongs to", () => {
  assert.equal(addressKey("GW:8266"), "gw:8266");
  assert.equal(addressKey("http://gw:8266/prefix/"), "gw:8266");
  assert.equal(addressKey("http://gw"), "gw:80");
  assert.equal(addressKey("https://gw"), "gw:443");
  assert.equal(addressKey("[::1]:9000"), "[::1]:9000");
  assert.notEqual(addressKey("gw:8266"), addressKey("gw:8267"));
  assert.equal(addressKey("nope"), null);
  assert.equal(secretKey("http://GW:8266"), "raydbg.token@gw:8266");
});

test("the token stored for the address wins, then the cluster's tokenFile", async () => {
  assert.deepEqual(await resolve({ secret: " tok ", tokenFile: "/t", tokenFromEnv: true, localGateway: "gw:8266" }), { token: "tok", source: "secret storage" });
  assert.deepEqual(await resolve({ tokenFile: "/t", tokenFromEnv: true, localGateway: "gw:8266" }), { token: "file", source: "/t" });
  assert.deepEqual(await resolve({ tokenFile: "~/.raydbg/tokens/gw_8266" }), { token: "headtok", source: "/h/.raydbg/tokens/gw_8266" });
  // An explicitly configured file that cannot be read is an error, not a reason to guess.
  assert.deepEqual(await resolve({ tokenFile: "/missing", tokenFromEnv: true, localGateway: "gw:8266" }), { error: "cannot read a token from tokenFile /missing" });
});

test("RAYDBG_TOKEN goes only to a cluster that opts in with tokenFromEnv", async () => {
  assert.deepEqual(await resolve({ tokenFromEnv: true }), { token: "envtok", source: "RAYDBG_TOKEN" });
  const r = await resolve({});
  assert.ok("error" in r, token(r));
  assert.match(r.error, /^no token for gw:8266: .*RAYDBG_TOKEN is set, but is only sent to clusters with "tokenFromEnv": true/);
  assert.match(token(await resolve({ tokenFromEnv: true, env: {} })), /tokenFromEnv" is set but RAYDBG_TOKEN is empty/);
});

test("Ray's token and the head's token file go only to the local Ray session's gateway", async () => {
  // Same order as the CLI (raydbg/auth.py client_token): the head's ~/.raydbg/tokens/<host_port>, then Ray's.
  assert.deepEqual(await resolve({ localGateway: "gw:8266" }), { token: "headtok", source: "/h/.raydbg/tokens/gw_8266" });
  const noHead = files({ "/h/.ray/auth_token": "raytok", "/p": "pathtok" });
  assert.equal(token(await resolve({ localGateway: "gw:8266", read: noHead })), "rayenv");
  assert.equal(token(await resolve({ localGateway: "gw:8266", read: noHead, env: { RAY_AUTH_TOKEN_PATH: "/p" } })), "pathtok");
  assert.equal(token(await resolve({ localGateway: "gw:8266", read: noHead, env: {} })), "raytok");
  assert.match(token(await resolve({ localGateway: "gw:8266", read: noHead, env: { RAY_AUTH_MODE: "disabled" } })), /^error: no token/);
  // Any other gateway, loopback included (another local user can listen there), gets none.
  for (const address of ["evil:8266", "gw:8267", "127.0.0.1:8266", "localhost:8266"]) {
    const r = await resolve({ address, localGateway: "gw:8266", env: { RAY_AUTH_TOKEN: "rayenv" } });
    assert.ok("error" in r, `${address} got ${token(r)}`);
  }
  assert.ok("error" in (await resolve({ localGateway: null })));
  assert.ok("error" in (await resolve({ address: null, localGateway: "gw:8266", tokenFromEnv: true })));
});

test("name-keyed tokens of earlier builds move to their cluster's address", async () => {
  const m = new Map([["raydbg.token.prod", "p"], ["raydbg.token.dev", "d"], ["raydbg.token@dev:1", "newer"], ["raydbg.token.gone", "g"]]);
  const store = {
    get: (k: string) => Promise.resolve(m.get(k)),
    store: (k: string, v: string) => Promise.resolve(void m.set(k, v)),
    delete: (k: string) => Promise.resolve(void m.delete(k)),
  };
  const moved = await migrateLegacySecrets(store, [{ name: "prod", address: "http://Prod:8266" }, { name: "dev", address: "dev:1" }]);
  assert.equal(moved, 1);
  assert.deepEqual(Object.fromEntries(m), { "raydbg.token@prod:8266": "p", "raydbg.token@dev:1": "newer", "raydbg.token.gone": "g" });
});
