import assert from "node:assert/strict";
import { test } from "node:test";
import { buildAttachConfig, launchSnippet, resolvePathMappings } from "../src/launchConfig";
import { parseSessionRecord, SessionRecord } from "../src/records";
import { record } from "./helpers/fakeGateway";

const session = parseSessionRecord(record({ id: "abc123abc123", cwd: "/tmp/ray/session_1/runtime_resources/working_dir_files/_ray_pkg_9" })) as SessionRecord;

test("attach config is the extension's own type naming cluster and session, no host or port, justMyCode off", () => {
  const cfg = buildAttachConfig({ session, pathMappings: [], workspaceFolder: "/home/me/proj", cluster: "prod" });
  assert.deepEqual(cfg, {
    type: "raydbg",
    request: "attach",
    name: "Ray: train_step (abc123abc123)",
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

test("launch.json snippet: the extension's own attach (no port), valid JSON after the comment", () => {
  const text = launchSnippet({ session, cluster: "prod", pathMappings: [] });
  const [first, ...rest] = text.split("\n");
  assert.match(first, /^\/\/ Ray attach, no local port: "raydbgCluster" is a cluster of your user settings/);
  const cfg = JSON.parse(rest.join("\n")) as Record<string, unknown>;
  assert.deepEqual(cfg, {
    type: "raydbg",
    request: "attach",
    name: "Ray: train_step (abc123abc123)",
    // ${workspaceFolder} is left for VS Code to resolve when the launch.json runs.
    pathMappings: [{ localRoot: "${workspaceFolder}", remoteRoot: session.cwd }],
    justMyCode: false,
    raydbgSessionId: "abc123abc123",
    raydbgCluster: "prod",
  });
  assert.doesNotMatch(text, /"port"|127\.0\.0\.1|raydbg forward/);
});
