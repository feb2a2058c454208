/** Activates the real extension against a stubbed `vscode` (tests of the whole extension). */
import type { RaydbgApi } from "../../src/extension";
import { installVscode, makeVscodeStub } from "./vscodeStub";

export async function activateExtension(
  opts: Parameters<typeof makeVscodeStub>[0],
): Promise<{ stub: ReturnType<typeof makeVscodeStub>; api: RaydbgApi }> {
  const stub = makeVscodeStub(opts);
  installVscode(stub.vscode);
  const ext = await import("../../src/extension");
  return { stub, api: ext.activate(stub.context as never) };
}
