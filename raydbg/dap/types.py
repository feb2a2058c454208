"""Typed shapes of the DAP bodies raydbg reads (a subset of the DAP spec)."""

from __future__ import annotations

from typing import Any, TypedDict


class Source(TypedDict, total=False):
    name: str
    path: str
    sourceReference: int


class StackFrame(TypedDict, total=False):
    id: int
    name: str
    source: Source
    line: int
    column: int
    presentationHint: str


class Scope(TypedDict, total=False):
    name: str
    variablesReference: int
    expensive: bool
    presentationHint: str


class Variable(TypedDict, total=False):
    name: str
    value: str
    type: str
    variablesReference: int
    evaluateName: str
    namedVariables: int
    indexedVariables: int


class Thread(TypedDict):
    id: int
    name: str


class EvaluateResult(TypedDict, total=False):
    result: str
    type: str
    variablesReference: int


Capabilities = dict[str, Any]
