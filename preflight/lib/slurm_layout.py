"""Slurm's task layout: SLURM_TASKS_PER_NODE's compressed counts, and which node runs each task.

Pure functions over the launcher's variables (steps/launchers.py reads them): the counts are
bounded before they are expanded, so a hostile `1(x99999999)` is one BadInput line.
"""

from __future__ import annotations

import re

from preflight.lib.errors import BadInput
from preflight.lib.hostlist import MAX_HOSTS
from preflight.lib.numbers import shown


def parse_tasks_per_node(text: str) -> list[int]:
    """Slurm's `2(x3),1` -> [2, 2, 2, 1]; counted before it is expanded (at most MAX_HOSTS nodes)."""
    if len(text) > 100_000:
        raise BadInput(f"SLURM tasks-per-node {shown(text)} is too long")
    items: list[tuple[int, int]] = []
    for item in text.split(","):
        match = re.fullmatch(r"\s*([0-9]{1,9})(?:\(x([0-9]{1,9})\))?\s*", item)
        if not match:
            raise BadInput(f"SLURM tasks-per-node {shown(text)} does not parse")
        items.append((int(match.group(1)), int(match.group(2) or 1)))
    if sum(repeat for _, repeat in items) > MAX_HOSTS:
        raise BadInput(f"SLURM tasks-per-node {shown(text)} names more than {MAX_HOSTS} nodes")
    return [count for count, repeat in items for _ in range(repeat)]


def slurm_rank_hosts(nodes: list[str], tasks_per_node: list[int], distribution: str) -> dict[int, str]:
    """Where Slurm places each task: block (default) fills node by node, cyclic deals round-robin."""
    placement: dict[int, str] = {}
    if distribution.startswith("cyclic"):
        remaining = list(tasks_per_node)
        rank = 0
        while any(remaining):
            for index, node in enumerate(nodes):
                if remaining[index] > 0:
                    placement[rank] = node
                    remaining[index] -= 1
                    rank += 1
        return placement
    rank = 0
    for node, count in zip(nodes, tasks_per_node):
        for _ in range(count):
            placement[rank] = node
            rank += 1
    return placement
