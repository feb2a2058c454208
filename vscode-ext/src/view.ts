/**
 * vscode glue for the Ray view: renders treeModel's ViewItems as TreeItems.
 */
import * as vscode from "vscode";
import { ViewItem } from "./treeModel";

export class RayTreeProvider implements vscode.TreeDataProvider<ViewItem> {
  private readonly emitter = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.emitter.event;
  private roots: ViewItem[] = [];

  constructor(private readonly build: () => ViewItem[]) {}

  /** Rebuild from the model and tell VS Code to redraw. */
  update(): void {
    this.roots = this.build();
    this.emitter.fire();
  }

  get items(): readonly ViewItem[] {
    return this.roots;
  }

  getTreeItem(item: ViewItem): vscode.TreeItem {
    const { Collapsed, Expanded, None } = vscode.TreeItemCollapsibleState;
    // VS Code keeps the user's expand / collapse of an item by its id; this is the first look.
    const state = item.children ? (item.collapsed ? Collapsed : Expanded) : None;
    const t = new vscode.TreeItem(item.label, state);
    t.id = item.id;
    t.description = item.description;
    t.tooltip = item.tooltip;
    t.contextValue = item.contextValue;
    t.iconPath = new vscode.ThemeIcon(item.icon);
    return t;
  }

  getChildren(item?: ViewItem): ViewItem[] {
    return item ? (item.children ?? []) : this.roots;
  }

  dispose(): void {
    this.emitter.dispose();
  }
}
