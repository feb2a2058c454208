import assert from "node:assert/strict";
import { test } from "node:test";
import { buildAttachConfig, launchSnippet, resolvePathMappings } from "../src/launchConfig";
import { parseSessionRecord, SessionRecord } from "../src/records";
import { record } from "./helpers/fakeGateway";

const session = parseSessionRecord(record({ id: "abc123abc123", cwd: "/tmp/ray/session_1/runtime_resources/working_dir_files/_ray_pkg_9" })) as SessionRecord;

test("attach config is debugpy attach to the local forwarder, justMyCode off", () => {
  const cfg = buildAttachConfig({ session, port: 45123, pathMappings: [], workspaceFolder: "/home/me/proj", cluster: "prod" });
  assert.deepEqual(cfg, {
    type: "debugpy",
    request: "attach",
    name: "Ray: train_step (abc123abc123)",
    connect: { host: "127.0.0.1", port: 45123 },
    pathMappings: [{ localRoot: "/home/me/proj", remoteRoot: "/tmp/ray/session_1/runtime_resources/working_dir_files/_ray_pkg_9" }],
    justMyCode: false,
    raydbgSessionId: "abc123abc123",
    raydbgCluster: "prod",
  });
});

test("default mapping: ${workspaceFolder} <-> the session's cwd", () => {
  // Unknown folder: the variable is left for VS Code / launch.json to resolve.
  assert.deepEqual(resolvePathMappings(session, [], undefined), [{ localRoot: "${workspaceFolder}", remoteRoot: session.cwd }]);
  // No folder open: VS Code would refuse the variable, so there is no mapping.
  assert.deepEqual(resolvePathMappings(session, [], null), []);
  // A worker without cwd: nothing to map to.
  assert.deepEqual(resolvePathMappings({ ...session, cwd: null }, [], "/p"), []);
});

test("configured mappings replace the default; ${sessionCwd} and ${workspaceFolder} are filled in", () => {
  const maps = [
    { localRoot: "${workspaceFolder}/src", remoteRoot: "${sessionCwd}/src" },
    { localRoot: "/opt/lib", remoteRoot: "/usr/lib/python3/site-packages/lib" },
  ];
  assert.deepEqual(resolvePathMappings(session, maps, "/p"), [
    { localRoot: "/p/src", remoteRoot: `${session.cwd}/src` },
    { localRoot: "/opt/lib", remoteRoot: "/usr/lib/python3/site-packages/lib" },
  ]);
  // Without a cwd, the mapping that needs it is skipped rather than sent with a literal ${sessionCwd}.
  assert.deepEqual(resolvePathMappings({ ...session, cwd: null }, maps, "/p"), [maps[1]]);
});

test("a port that is not a TCP port is refused", () => {
  assert.throws(() => buildAttachConfig({ session, port: 0, pathMappings: [] }), RangeError);
  assert.throws(() => buildAttachConfig({ session, port: 70000, pathMappings: [] }), RangeError);
});

test("launch.json snippet: attaches via raydbg forward, valid JSON after the comment", () => {
  const text = launchSnippet({ session, gatewayAddress: "head:8266", pathMappings: [] });
  const [first, ...rest] = text.split("\n");
  assert.equal(first, "// First run: raydbg forward abc123abc123 --port 5678 --address head:8266");
  const cfg = JSON.parse(rest.join("\n")) as Record<string, unknown>;
  assert.deepEqual(cfg.connect, { host: "127.0.0.1", port: 5678 });
  assert.deepEqual(cfg.pathMappings, [{ localRoot: "${workspaceFolder}", remoteRoot: session.cwd }]);
  assert.equal(cfg.raydbgSessionId, undefined);
  assert.equal(cfg.type, "debugpy");
});
