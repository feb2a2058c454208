/**
 * A stand-in for the `vscode` module, enough for extension.ts and its glue, recording
 * what the extension asks of VS Code. Installed into node's module cache so
 * `require("vscode")` in the compiled extension gets it.
 */
import Module from "node:module";

type Listener<T> = (e: T) => unknown;

export class EventEmitter<T> {
  private listeners = new Set<Listener<T>>();
  readonly event = (l: Listener<T>) => {
    this.listeners.add(l);
    return { dispose: () => this.listeners.delete(l) };
  };
  fire(e: T): void {
    for (const l of [...this.listeners]) l(e);
  }
  dispose(): void {
    this.listeners.clear();
  }
}

export class TreeItem {
  id?: string;
  description?: string;
  tooltip?: string;
  contextValue?: string;
  iconPath?: unknown;
  constructor(
    public label: string,
    public collapsibleState: number,
  ) {}
}

export class ThemeIcon {
  constructor(public id: string) {}
}

/** vscode.DebugAdapterInlineImplementation: VS Code runs `implementation` in-process. */
export class DebugAdapterInlineImplementation {
  constructor(public implementation: unknown) {}
}

interface AdapterFactory {
  createDebugAdapterDescriptor(session: { id: string; type: string; name: string; configuration: Record<string, unknown> }): unknown;
}

/** A debug session the extension started, with what its adapter factory gave for it (as VS Code asks it). */
export interface StartedSession {
  folder: unknown;
  config: Record<string, unknown>;
  descriptor?: unknown;
  /** The factory threw: VS Code shows this and startDebugging gives false. */
  factoryError?: string;
}

export interface Recorded {
  commands: Map<string, (...args: unknown[]) => unknown>;
  executed: unknown[][];
  views: { id: string; options: { treeDataProvider: unknown } }[];
  started: StartedSession[];
  messages: { level: string; text: string; items: string[] }[];
  inputs: (string | undefined)[];
  configUpdates: { key: string; value: unknown; target: number }[];
  clipboard: string[];
  /** Documents shown (showTextDocument), with the text their content provider gave. */
  documents: { uri: string; text: string }[];
  statusBar: { text: string; visible: boolean; command?: string };
}

/**
 * `config` is user settings, `workspaceConfig` a workspace's `.vscode/settings.json`.
 * `get` merges them the way VS Code does for a window-scoped setting (workspace wins),
 * deliberately ignoring package.json's `scope`, so a test sees what the extension itself
 * trusts; package.json's scopes are checked on their own.
 */
export function makeVscodeStub(opts: {
  config: Record<string, unknown>;
  workspaceConfig?: Record<string, unknown>;
  folder?: string;
  secrets?: Record<string, string>;
  startResult?: boolean;
  workspaceState?: Record<string, unknown>;
}) {
  const rec: Recorded = {
    commands: new Map(),
    executed: [],
    views: [],
    started: [],
    messages: [],
    inputs: [],
    configUpdates: [],
    clipboard: [],
    documents: [],
    statusBar: { text: "", visible: false },
  };
  const adapterFactories = new Map<string, AdapterFactory>();
  const providers = new Map<string, { provideTextDocumentContent(uri: { scheme: string; path: string }): string }>();
  const config = { ...opts.config };
  const workspaceConfig = { ...opts.workspaceConfig };
  const configChanged = new EventEmitter<{ affectsConfiguration(s: string): boolean }>();
  const debugTerminated = new EventEmitter<{ configuration: Record<string, unknown> }>();
  const visibility = new EventEmitter<{ visible: boolean }>();
  const expanded = new EventEmitter<{ element: unknown }>();
  const collapsed = new EventEmitter<{ element: unknown }>();
  const secretChanged = new EventEmitter<{ key: string }>();
  const secrets = new Map(Object.entries(opts.secrets ?? {}));
  const breakpointsChanged = new EventEmitter<unknown>();
  const gutter: unknown[] = [];
  const workspaceState = new Map<string, unknown>(Object.entries(opts.workspaceState ?? {}));
  const message = (level: string) => (text: string, ...items: unknown[]) => {
    rec.messages.push({ level, text, items: items.filter((i): i is string => typeof i === "string") });
    return Promise.resolve(undefined);
  };

  const vscode = {
    EventEmitter,
    TreeItem,
    ThemeIcon,
    DebugAdapterInlineImplementation,
    TreeItemCollapsibleState: { None: 0, Collapsed: 1, Expanded: 2 },
    ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
    Uri: {
      from: (c: { scheme: string; path: string }) => ({ scheme: c.scheme, path: c.path, toString: () => `${c.scheme}:${c.path}` }),
    },
    StatusBarAlignment: { Left: 1, Right: 2 },
    ConfigurationTarget: { Global: 1, Workspace: 2, WorkspaceFolder: 3 },
    window: {
      createStatusBarItem: () => ({
        set text(t: string) {
          rec.statusBar.text = t;
        },
        get text() {
          return rec.statusBar.text;
        },
        tooltip: "",
        set command(c: string) {
          rec.statusBar.command = c;
        },
        show: () => (rec.statusBar.visible = true),
        hide: () => (rec.statusBar.visible = false),
        dispose: () => {},
      }),
      createTreeView: (id: string, options: { treeDataProvider: unknown }) => {
        rec.views.push({ id, options });
        return { visible: true, onDidChangeVisibility: visibility.event, onDidExpandElement: expanded.event, onDidCollapseElement: collapsed.event, dispose: () => {} };
      },
      showInformationMessage: message("info"),
      showWarningMessage: message("warning"),
      showErrorMessage: message("error"),
      showInputBox: () => Promise.resolve(rec.inputs.shift()),
      withProgress: <T>(_opts: unknown, task: (p: { report(v: unknown): void }) => Promise<T>) => task({ report: () => {} }),
      showTextDocument: (doc: { uri: { toString(): string }; text: string }) => {
        rec.documents.push({ uri: doc.uri.toString(), text: doc.text });
        return Promise.resolve({});
      },
      showQuickPick: (items: string[]) => Promise.resolve(items[0]),
    },
    workspace: {
      get workspaceFolders() {
        return opts.folder ? [{ uri: { fsPath: opts.folder }, name: "ws", index: 0 }] : undefined;
      },
      getConfiguration: (section: string) => ({
        get: (key: string) => workspaceConfig[`${section}.${key}`] ?? config[`${section}.${key}`],
        inspect: (key: string) => ({ key, globalValue: config[`${section}.${key}`], workspaceValue: workspaceConfig[`${section}.${key}`] }),
        update: (key: string, value: unknown, target: number) => {
          rec.configUpdates.push({ key: `${section}.${key}`, value, target });
          (target === 1 ? config : workspaceConfig)[`${section}.${key}`] = value;
          configChanged.fire({ affectsConfiguration: (s: string) => `${section}.${key}`.startsWith(s) });
          return Promise.resolve();
        },
      }),
      onDidChangeConfiguration: configChanged.event,
      registerTextDocumentContentProvider: (scheme: string, p: { provideTextDocumentContent(uri: { scheme: string; path: string }): string }) => {
        providers.set(scheme, p);
        return { dispose: () => providers.delete(scheme) };
      },
      openTextDocument: (uri: { scheme: string; path: string }) => {
        const p = providers.get(uri.scheme);
        return p ? Promise.resolve({ uri, text: p.provideTextDocumentContent(uri) }) : Promise.reject(new Error(`no provider for ${uri.scheme}`));
      },
    },
    commands: {
      registerCommand: (id: string, fn: (...args: unknown[]) => unknown) => {
        rec.commands.set(id, fn);
        return { dispose: () => rec.commands.delete(id) };
      },
      executeCommand: (...args: unknown[]) => {
        rec.executed.push(args);
        return Promise.resolve();
      },
    },
    debug: {
      // As VS Code: the factory registered for the config's type makes the adapter first.
      startDebugging: async (folder: unknown, config: Record<string, unknown>) => {
        const started: StartedSession = { folder, config };
        rec.started.push(started);
        const factory = adapterFactories.get(String(config.type));
        if (factory) {
          try {
            started.descriptor = await factory.createDebugAdapterDescriptor({ id: `ds${rec.started.length}`, type: String(config.type), name: String(config.name), configuration: config });
          } catch (e) {
            started.factoryError = (e as Error).message;
            return false;
          }
        }
        return opts.startResult ?? true;
      },
      registerDebugAdapterDescriptorFactory: (type: string, factory: AdapterFactory) => {
        if (adapterFactories.has(type)) throw new Error(`a DebugAdapterDescriptorFactory can only be registered once per type (${type})`);
        adapterFactories.set(type, factory);
        return { dispose: () => adapterFactories.delete(type) };
      },
      onDidTerminateDebugSession: debugTerminated.event,
      get breakpoints() {
        return [...gutter];
      },
      onDidChangeBreakpoints: breakpointsChanged.event,
    },
    extensions: { getExtension: (id: string) => (id === "ms-python.debugpy" ? { id } : undefined) },
    env: {
      machineId: "test-machine",
      clipboard: {
        writeText: (t: string) => {
          rec.clipboard.push(t);
          return Promise.resolve();
        },
      },
    },
  };

  const context = {
    subscriptions: [] as { dispose(): unknown }[],
    secrets: {
      get: (k: string) => Promise.resolve(secrets.get(k)),
      store: (k: string, v: string) => {
        secrets.set(k, v);
        secretChanged.fire({ key: k });
        return Promise.resolve();
      },
      delete: (k: string) => {
        secrets.delete(k);
        secretChanged.fire({ key: k });
        return Promise.resolve();
      },
      onDidChange: secretChanged.event,
    },
    workspaceState: {
      get: <T>(k: string) => workspaceState.get(k) as T | undefined,
      update: (k: string, v: unknown) => {
        workspaceState.set(k, v);
        return Promise.resolve();
      },
    },
  };

  /** Set the gutter's breakpoints (SourceBreakpoint-shaped: 0-based lines) and tell the extension, as VS Code does. */
  const setBreakpoints = (bps: { file: string; line: number; enabled?: boolean; condition?: string; hitCondition?: string; logMessage?: string }[]) => {
    gutter.length = 0;
    for (const b of bps) {
      gutter.push({
        enabled: b.enabled ?? true,
        condition: b.condition,
        hitCondition: b.hitCondition,
        logMessage: b.logMessage,
        location: { uri: { scheme: "file", fsPath: b.file }, range: { start: { line: b.line - 1, character: 0 } } },
      });
    }
    breakpointsChanged.fire({});
  };

  /** Edit a settings file by hand (user or workspace) and tell the extension, as VS Code does. */
  const editSettings = (where: "user" | "workspace", key: string, value: unknown) => {
    (where === "user" ? config : workspaceConfig)[key] = value;
    configChanged.fire({ affectsConfiguration: (s: string) => key.startsWith(s) });
  };

  /** End a started debug session as VS Code does: dispose its inline adapter, then tell the extensions. */
  const endDebugSession = (started: StartedSession) => {
    const impl = (started.descriptor as DebugAdapterInlineImplementation | undefined)?.implementation as { dispose?(): void } | undefined;
    impl?.dispose?.();
    debugTerminated.fire({ configuration: started.config });
  };

  return { vscode, context, rec, secrets, debugTerminated, endDebugSession, visibility, expanded, collapsed, config, workspaceConfig, editSettings, setBreakpoints, workspaceState };
}

/** Make `require("vscode")` return `stub` for modules loaded after this call. */
export function installVscode(stub: unknown): void {
  const M = Module as unknown as { _resolveFilename: (req: string, ...rest: unknown[]) => string };
  const orig = M._resolveFilename;
  M._resolveFilename = function (this: unknown, req: string, ...rest: unknown[]) {
    return req === "vscode" ? "vscode" : orig.call(this, req, ...rest);
  };
  require.cache.vscode = { id: "vscode", filename: "vscode", loaded: true, exports: stub } as unknown as NodeJS.Module;
}
