import assert from "node:assert/strict";
import { test } from "node:test";
import { adapterForConfig, AttachRegistry, attachTarget, prepareAttach } from "../src/attach";
import { DapRelay } from "../src/dapRelay";
import { parseSessionRecord, SessionRecord } from "../src/records";
import { record } from "./helpers/fakeGateway";

const client = { token: "t", dapUrl: (id: string) => `ws://gw:8266/api/v1/sessions/${id}/dap` };
const relay = () => new DapRelay({ url: client.dapUrl("x"), token: "t" });

test("prepareAttach: the config names cluster and session; the relay waits for VS Code's first message", () => {
  const session = parseSessionRecord(record({ id: "s1", cwd: "/srv/job" })) as SessionRecord;
  const { config, relay } = prepareAttach({ client, session, cluster: "prod", pathMappings: [], workspaceFolder: "/p" });
  assert.deepEqual([config.type, config.raydbgCluster, config.raydbgSessionId, config.pathMappings], ["raydbg", "prod", "s1", [{ localRoot: "/p", remoteRoot: "/srv/job" }]]);
  assert.equal(relay.status, "idle");
});

test("attachTarget: cluster and session from a debug configuration, else one line saying what is missing", () => {
  assert.deepEqual(attachTarget({ raydbgCluster: "prod", raydbgSessionId: "a1b2.c3-d_4" }), { cluster: "prod", sessionId: "a1b2.c3-d_4" });
  assert.match(attachTarget({ raydbgSessionId: "s1" }) as string, /^a raydbg attach configuration needs "raydbgCluster", the name of a cluster in raydbg.clusters/);
  for (const bad of [undefined, "", "..", ".", "a/b", "a b", "x".repeat(129), 5]) {
    const why = attachTarget({ raydbgCluster: "prod", raydbgSessionId: bad });
    assert.equal(typeof why, "string", String(bad));
    assert.match(why as string, /needs "raydbgSessionId".*; got /);
    assert.doesNotMatch(why as string, /\n/);
  }
});

test("registry: the relay an Attach made goes to its debug session once; a restart or a launch.json gets a new one", () => {
  const reg = new AttachRegistry();
  const made = relay();
  reg.add("s1", "prod", made);
  let calls = 0;
  const make = () => (calls++, relay());
  assert.equal(reg.adapterFor({ cluster: "prod", sessionId: "s1" }, make), made);
  assert.equal(calls, 0);
  // The same session started again (a restart): a fresh relay; the old one is closed.
  const again = reg.adapterFor({ cluster: "prod", sessionId: "s1" }, make);
  assert.notEqual(again, made);
  assert.equal(made.status, "closed");
  // A relay kept for another cluster's session of that id is not handed over.
  const other = relay();
  reg.add("s2", "prod", other);
  assert.notEqual(reg.adapterFor({ cluster: "staging", sessionId: "s2" }, make), other);
  assert.equal(calls, 2);
  reg.stop("s1");
  assert.equal(again.status, "closed");
  assert.deepEqual([reg.has("s1"), reg.has("s2"), reg.size], [false, true, 1]);
  reg.stopAll();
  assert.equal(reg.size, 0);
});

test("adapterForConfig: an unknown cluster or a bad configuration throws its one line; nothing is kept", () => {
  const registry = new AttachRegistry();
  const deps = { registry, client: (c: string) => (c === "prod" ? client : undefined) };
  assert.throws(() => adapterForConfig({ raydbgCluster: "nope", raydbgSessionId: "s1" }, deps), /^Error: cluster "nope" is not configured or not connected/);
  assert.throws(() => adapterForConfig({ raydbgCluster: "prod" }, deps), /needs "raydbgSessionId"/);
  assert.equal(registry.size, 0);
  const r = adapterForConfig({ raydbgCluster: "prod", raydbgSessionId: "s1" }, deps);
  assert.ok(registry.has("s1"));
  r.dispose();
});
