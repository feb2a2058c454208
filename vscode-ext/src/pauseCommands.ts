/**
 * vscode glue for `Pause and attach` (a rank of a Train run) and `Show Snapshot`: the
 * flow is pause.ts's; here are the notifications, the snapshot documents and the
 * attaches that happen once a paused thread is back in Python.
 */
import * as vscode from "vscode";
import { attach, CommandServices } from "./commands";
import { pauseAndAttach, PendingAttaches, snapshotText } from "./pause";
import { SessionRecord } from "./records";
import { ViewItem } from "./viewItems";

export const SNAPSHOT_SCHEME = "raydbg-snapshot";

export interface PauseGlue {
  /** Call on every controller change: attaches the pauses whose session became attachable. */
  controllerChanged(): void;
  pending: PendingAttaches;
  disposables: vscode.Disposable[];
}

export function setupPause(s: CommandServices): PauseGlue {
  const pending = new PendingAttaches();
  // Snapshot documents by uri path (`/CLUSTER/ID.txt`), kept while their session is listed.
  const docs = new Map<string, string>();
  const changed = new vscode.EventEmitter<vscode.Uri>();
  const uriOf = (cluster: string, id: string) => vscode.Uri.from({ scheme: SNAPSHOT_SCHEME, path: `/${cluster}/${id}.txt` });
  const showSnapshot = async (cluster: string, rec: SessionRecord) => {
    const uri = uriOf(cluster, rec.id);
    docs.set(uri.path, snapshotText(rec));
    changed.fire(uri);
    await vscode.window.showTextDocument(await vscode.workspace.openTextDocument(uri), { preview: true });
  };
  const pauseCommand = async (item?: ViewItem) => {
    const t = item?.pauseTarget;
    if (!t) return undefined;
    const client = s.controller.client(t.cluster);
    if (!client) {
      void vscode.window.showErrorMessage(`Ray: cluster "${t.cluster}" is not connected; check its address and token.`);
      return "failed";
    }
    return vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: `Ray: pausing rank ${t.rank} of run ${t.run}…` }, () =>
      pauseAndAttach(
        {
          pause: (target, job) => client.pause(target, job),
          attach: (rec) => attach(s, { cluster: t.cluster, session: rec }),
          showSnapshot: (rec) => showSnapshot(t.cluster, rec),
          info: (text) => void vscode.window.showInformationMessage(text),
          error: (text) => void vscode.window.showErrorMessage(text),
          pending,
        },
        t,
      ),
    );
  };
  const showCommand = async (item?: ViewItem) => {
    if (!item?.cluster || !item.session) return;
    await showSnapshot(item.cluster, s.controller.session(item.cluster, item.session.id) ?? item.session);
  };
  const controllerChanged = () => {
    const names = s.controller.current.clusters.map((c) => c.name);
    pending.keepClusters(names);
    if (pending.size === 0) return;
    for (const name of names) {
      const listed = s.controller.listed(name);
      if (listed === null) continue; // a cluster between answers says nothing of its pauses
      const { attach: ready, gone } = pending.update(name, listed);
      // Attached by hand from the tree meanwhile: nothing left to do.
      for (const rec of ready) if (!s.attached.has(rec.id)) void attach(s, { cluster: name, session: rec });
      for (const p of gone) void vscode.window.showWarningMessage(`Ray: ${p.label} ${p.seen ? "is no longer paused (continued or dropped)" : "was not listed as paused"}; nothing to attach.`);
    }
  };
  return {
    controllerChanged,
    pending,
    disposables: [
      changed,
      vscode.workspace.registerTextDocumentContentProvider(SNAPSHOT_SCHEME, {
        onDidChange: changed.event,
        provideTextDocumentContent: (uri) => docs.get(uri.path) ?? "This snapshot is no longer listed: its thread went on or returned to Python.\n",
      }),
      vscode.commands.registerCommand("raydbg.pauseAndAttach", pauseCommand),
      vscode.commands.registerCommand("raydbg.showSnapshot", showCommand),
    ],
  };
}
