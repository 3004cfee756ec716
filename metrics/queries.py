"""The PromQL of deploy/monitoring (Grafana dashboards, alert rules) read back for the checks that
keep it true: which metric names an expression reads, and which aggregation first takes each one
across scrape targets (a sum over gateway replicas multiplies a database gauge by their number).

A reader for the expressions written here, not a full PromQL parser: strings, label matchers and
range selectors are skipped, `by`/`without` clauses are read, everything else is a name, a function
or an operator.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DASHBOARDS = Path(__file__).resolve().parents[1] / "deploy" / "monitoring" / "grafana" / "dashboards"
AGGREGATIONS = frozenset({"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                          "bottomk", "topk", "quantile", "limitk", "limit_ratio"})
# Aggregations whose answer over N equal values is that value: a replica's copy counts once.
IDEMPOTENT = frozenset({"min", "max", "avg", "group", "quantile", "bottomk", "topk", "limitk", "limit_ratio"})
# Labels that tell one scrape target (replica) from another.
TARGET_LABELS = frozenset({"instance", "pod"})
_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
                       "unless", "offset", "inf", "nan", "atan2"})
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|\{[^}]*\}|\[[^\]]*\]|\$\{?\w+\}?|'
                    r"[A-Za-z_:][A-Za-z0-9_:]*|\d+(?:\.\d+)?(?:e[+-]?\d+)?|[()]|,|[^\s\w(),]+")
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


@dataclass(frozen=True)
class Use:
    """A metric name in an expression and the first aggregation over it (None: none at all)."""

    name: str
    aggregation: str | None
    keeps_targets: bool  # that aggregation keeps instance/pod apart (`by (instance)`, `without (le)`)


def _tokens(expr: str) -> list[str]:
    return [t for t in _TOKEN.findall(expr) if not t.startswith(("{", "[", '"', "'", "$"))]


def uses(expr: str) -> list[Use]:
    """Every metric name `expr` reads, each with the innermost aggregation around it."""
    tokens = _tokens(expr)
    found: list[Use] = []

    def labels(i: int) -> tuple[set[str], int]:  # tokens[i] == "(": the label list and the index after it
        end = tokens.index(")", i)
        return {t for t in tokens[i + 1:end] if _NAME.fullmatch(t)}, end + 1

    def group(i: int, around: tuple[str | None, bool]) -> int:  # tokens[i] == "(": index after its ")"
        i += 1
        while i < len(tokens) and tokens[i] != ")":
            i = item(i, around)
        return i + 1

    def item(i: int, around: tuple[str | None, bool]) -> int:
        token = tokens[i]
        following = tokens[i + 1] if i + 1 < len(tokens) else ""
        if token in ("by", "without", "on", "ignoring", "group_left", "group_right") and following == "(":
            return labels(i + 1)[1]
        if token == "(":
            return group(i, around)
        if not _NAME.fullmatch(token) or token.lower() in _KEYWORDS:
            return i + 1
        if token in AGGREGATIONS and following in ("(", "by", "without"):
            j, clause = i + 1, None
            if tokens[j] in ("by", "without"):
                clause = (tokens[j], labels(j + 1)[0])
                j = labels(j + 1)[1]
            body_start, end = j, _closing(tokens, j)
            if end < len(tokens) and tokens[end] in ("by", "without"):
                clause = (tokens[end], labels(end + 1)[0])
                after = labels(end + 1)[1]
            else:
                after = end
            keeps = clause is not None and (
                (clause[0] == "by" and bool(clause[1] & TARGET_LABELS))
                or (clause[0] == "without" and not clause[1] & TARGET_LABELS))
            group(body_start, (token, keeps))
            return after
        if following == "(":  # a function: its arguments are read in the same surroundings
            return group(i + 1, around)
        found.append(Use(token, around[0], around[1]))
        return i + 1

    i = 0
    while i < len(tokens):
        i = item(i, (None, True))
    return found


def _closing(tokens: list[str], i: int) -> int:
    """tokens[i] == "(": the index after its matching ")"."""
    depth = 0
    for j in range(i, len(tokens)):
        depth += {"(": 1, ")": -1}.get(tokens[j], 0)
        if depth == 0:
            return j + 1
    raise ValueError(f"unbalanced parentheses: {' '.join(tokens)}")


def names(expr: str) -> set[str]:
    """The metric names `expr` reads."""
    return {use.name for use in uses(expr)}


@dataclass(frozen=True)
class Panel:
    dashboard: str
    id: int
    title: str
    exprs: tuple[str, ...]


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS.glob("*.json"))


def panels(path: Path) -> Iterator[Panel]:
    """The panels of one dashboard file that query (rows left out), each with its expressions."""
    board = json.loads(path.read_text())
    for panel in board["panels"]:
        if panel["type"] != "row":
            yield Panel(path.name, panel["id"], panel["title"],
                        tuple(t["expr"] for t in panel.get("targets", [])))
