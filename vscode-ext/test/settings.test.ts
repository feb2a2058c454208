import assert from "node:assert/strict";
import { test } from "node:test";
import { checkClusterName, parseGatewayAddress, userClusters, validateSettings } from "../src/settings";

test("gateway addresses: host:port and http(s) URLs", () => {
  assert.deepEqual(parseGatewayAddress("head:8266"), { httpBase: "http://head:8266", wsBase: "ws://head:8266" });
  assert.deepEqual(parseGatewayAddress(" 10.0.0.1:80/ "), { httpBase: "http://10.0.0.1", wsBase: "ws://10.0.0.1" });
  assert.deepEqual(parseGatewayAddress("https://gw.example.com/raydbg/"), { httpBase: "https://gw.example.com/raydbg", wsBase: "wss://gw.example.com/raydbg" });
  assert.deepEqual(parseGatewayAddress("[::1]:9000"), { httpBase: "http://[::1]:9000", wsBase: "ws://[::1]:9000" });
});

test("gateway addresses: clear errors for what cannot work", () => {
  assert.match(parseGatewayAddress("") as string, /empty/);
  assert.match(parseGatewayAddress("head") as string, /must be host:port/);
  assert.match(parseGatewayAddress("ftp://head:21") as string, /http or https, not ftp/);
  assert.match(parseGatewayAddress("http://u:p@head:1") as string, /must not carry/);
  assert.match(parseGatewayAddress("http://head:99999") as string, /not a valid URL/);
});

test("cluster names: required, unique, short", () => {
  assert.equal(checkClusterName("prod", ["dev"]), undefined);
  assert.match(checkClusterName("  ", []) ?? "", /needs a name/);
  assert.match(checkClusterName("dev", ["dev"]) ?? "", /already exists/);
  assert.match(checkClusterName("x".repeat(65), []) ?? "", /under 64/);
});

test("valid settings pass through, defaults fill the gaps", () => {
  const { settings, errors } = validateSettings({
    clusters: [{ name: "local", address: "127.0.0.1:8266", tokenFile: "~/.raydbg/token", pathMappings: [{ localRoot: "${workspaceFolder}/src", remoteRoot: "/app/src" }] }],
    refreshInterval: 2,
    pathMappings: [],
  });
  assert.deepEqual(errors, []);
  assert.deepEqual(settings.clusters, [{ name: "local", address: "127.0.0.1:8266", tokenFile: "~/.raydbg/token", pathMappings: [{ localRoot: "${workspaceFolder}/src", remoteRoot: "/app/src" }] }]);
  assert.equal(settings.refreshIntervalMs, 2000);
  assert.equal(settings.notifyOnPause, true);
  assert.deepEqual(validateSettings({}).settings, { clusters: [], refreshIntervalMs: 5000, pathMappings: [], notifyOnPause: true });
});

test("one bad cluster is reported and dropped, the others kept", () => {
  const { settings, errors } = validateSettings({
    clusters: [
      { name: "a", address: "a:1" },
      { name: "a", address: "b:1" },
      { name: "c" },
      { name: "d", address: "nope" },
      "e:1",
      { name: "f", address: "f:1", tokenFile: 7 },
    ],
  });
  assert.deepEqual(settings.clusters.map((c) => c.name), ["a", "f"]);
  assert.deepEqual(errors, [
    'raydbg.clusters[1]: a cluster named "a" already exists',
    'raydbg.clusters[2] ("c"): "address" must be a string like host:port',
    'raydbg.clusters[3] ("d"): gateway address "nope" must be host:port or http(s)://host:port',
    'raydbg.clusters[4]: expected an object with "name" and "address"',
    'raydbg.clusters[5] ("f"): "tokenFile" must be a non-empty path',
  ]);
});

test("refresh interval is clamped; wrong types fall back to the default", () => {
  let r = validateSettings({ refreshInterval: 0.1 });
  assert.equal(r.settings.refreshIntervalMs, 1000);
  assert.match(r.errors[0], /outside 1..3600 s, using 1/);
  r = validateSettings({ refreshInterval: "fast" });
  assert.equal(r.settings.refreshIntervalMs, 5000);
  assert.match(r.errors[0], /expected a number/);
  assert.equal(validateSettings({ refreshInterval: 1e9 }).settings.refreshIntervalMs, 3_600_000);
});

test("path mappings need both roots", () => {
  const r = validateSettings({ pathMappings: [{ localRoot: "/l", remoteRoot: "/r" }, { localRoot: "/l" }, { localRoot: "", remoteRoot: "/r" }] });
  assert.deepEqual(r.settings.pathMappings, [{ localRoot: "/l", remoteRoot: "/r" }]);
  assert.equal(r.errors.length, 2);
  assert.match(validateSettings({ pathMappings: { localRoot: "/l" } }).errors[0], /expected a list/);
  assert.match(validateSettings({ clusters: "x" }).errors[0], /expected a list of clusters/);
});

test("clusters come from user settings only; workspace entries are noted and ignored", () => {
  const user = [{ name: "prod", address: "prod:8266" }];
  const repo = [{ name: "prod", address: "attacker:80", tokenFile: "~/.ray/auth_token" }];
  const r = userClusters({ globalValue: user, workspaceValue: repo, workspaceFolderValue: repo });
  assert.equal(r.clusters, user);
  assert.equal(r.notes.length, 2);
  assert.match(r.notes[0], /^raydbg.clusters in workspace settings is ignored: clusters come from user settings only/);
  assert.match(r.notes[1], /^raydbg.clusters in workspace folder settings is ignored/);
  assert.deepEqual(userClusters({ globalValue: user, workspaceValue: [] }), { clusters: user, notes: [] });
  assert.deepEqual(userClusters(undefined), { clusters: undefined, notes: [] });
});

test("tokenFromEnv must be a boolean", () => {
  const r = validateSettings({ clusters: [{ name: "a", address: "a:1", tokenFromEnv: true }, { name: "b", address: "b:1", tokenFromEnv: "yes" }] });
  assert.deepEqual(r.settings.clusters, [{ name: "a", address: "a:1", tokenFromEnv: true }, { name: "b", address: "b:1" }]);
  assert.deepEqual(r.errors, ['raydbg.clusters[1] ("b"): "tokenFromEnv" must be true or false']);
});
