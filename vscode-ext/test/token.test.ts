import assert from "node:assert/strict";
import { test } from "node:test";
import { isLoopbackHost, resolveToken } from "../src/token";

function files(map: Record<string, string>) {
  return (p: string) => (p in map ? Promise.resolve(map[p]) : Promise.reject(Object.assign(new Error("ENOENT"), { code: "ENOENT" })));
}

test("secret storage wins over everything", async () => {
  const r = await resolveToken({ secret: " tok ", tokenFile: "/t", gatewayHost: "h", env: { RAYDBG_TOKEN: "env" }, home: "/h", read: files({ "/t": "file" }) });
  assert.deepEqual(r, { token: "tok", source: "secret storage" });
});

test("tokenFile is read (with ~), and an unreadable one is an error, not a guess", async () => {
  assert.deepEqual(await resolveToken({ tokenFile: "~/tok", gatewayHost: "h", env: {}, home: "/h", read: files({ "/h/tok": "abc\n" }) }), { token: "abc", source: "/h/tok" });
  const r = await resolveToken({ tokenFile: "/missing", gatewayHost: "127.0.0.1", env: { RAYDBG_TOKEN: "env" }, home: "/h", read: files({}) });
  assert.deepEqual(r, { error: "cannot read a token from tokenFile /missing" });
});

test("then RAYDBG_TOKEN, RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH", async () => {
  const read = files({ "/p": "pathtok" });
  assert.equal(((await resolveToken({ gatewayHost: "h", env: { RAYDBG_TOKEN: "a", RAY_AUTH_TOKEN: "b" }, read })) as { token: string }).token, "a");
  assert.equal(((await resolveToken({ gatewayHost: "h", env: { RAY_AUTH_TOKEN: "b" }, read })) as { token: string }).token, "b");
  assert.equal(((await resolveToken({ gatewayHost: "h", env: { RAY_AUTH_TOKEN_PATH: "/p" }, read })) as { token: string }).token, "pathtok");
});

test("default token files only for a gateway on this machine", async () => {
  const read = files({ "/h/.raydbg/token": "local" });
  assert.deepEqual(await resolveToken({ gatewayHost: "127.0.0.1", env: {}, home: "/h", read }), { token: "local", source: "/h/.raydbg/token" });
  const remote = await resolveToken({ gatewayHost: "gw.example.com", env: {}, home: "/h", read });
  assert.ok("error" in remote && /Set Cluster Token/.test(remote.error));
});

test("loopback hosts", () => {
  for (const h of ["localhost", "127.0.0.1", "127.1.2.3", "[::1]", "::1"]) assert.ok(isLoopbackHost(h), h);
  for (const h of ["10.0.0.1", "head", "128.0.0.1", "localhost.evil.com"]) assert.ok(!isLoopbackHost(h), h);
});
