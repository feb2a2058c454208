"""Variables pane: the frame's scopes as a lazy tree (children fetched on expand)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from raydbg.dap.types import Scope, Variable
from raydbg.tui.format import truncate

MAX_CHILDREN = 500
VALUE_CHARS = 160


@dataclass
class VarRef:
    """What a node stands for: a DAP variablesReference, fetched at most once."""

    reference: int
    name: str
    loaded: bool = False


def variable_label(var: Variable) -> Text:
    label = Text(str(var.get("name", "?")), style="bold")
    if var.get("type"):
        label.append(f": {var['type']}", style="dim")
    label.append(" = ")
    label.append(truncate(str(var.get("value", "")), VALUE_CHARS))
    return label


class VariablesView(Tree[VarRef]):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("variables", **kwargs)
        self.show_root = False
        self.border_title = "Variables"

    def show_scopes(self, scopes: list[tuple[Scope, list[Variable] | None]]) -> None:
        """Scopes; those given with variables are filled and open, the rest load on expand."""
        self.clear()
        for scope, variables in scopes:
            ref = VarRef(int(scope.get("variablesReference", 0)), str(scope.get("name")))
            node = self.root.add(
                str(scope.get("name", "?")),
                data=ref,
                expand=variables is not None,
                allow_expand=ref.reference > 0,
            )
            if variables is not None:
                self.add_variables(node, variables)

    def add_variables(self, node: TreeNode[VarRef], variables: list[Variable]) -> None:
        for var in variables[:MAX_CHILDREN]:
            reference = int(var.get("variablesReference", 0))
            node.add(
                variable_label(var),
                data=VarRef(reference, str(var.get("name"))),
                allow_expand=reference > 0,
            )
        if len(variables) > MAX_CHILDREN:
            node.add_leaf(Text(f"… {len(variables) - MAX_CHILDREN} more not shown", "dim"))
        if node.data is not None:
            node.data.loaded = True

    def find(self, name: str) -> TreeNode[VarRef] | None:
        """The first loaded node whose variable is called ``name`` (tests, key lookups)."""
        stack = list(self.root.children)
        while stack:
            node = stack.pop(0)
            if node.data is not None and node.data.name == name and node.parent is not self.root:
                return node
            stack.extend(node.children)
        return None
