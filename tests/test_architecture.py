"""The import rules of docs/architecture.md, checked by walking every module's imports.

The layers, bottom up: the model (plain data) imports nothing of preflight; pure helpers
(preflight.lib) import the model and each other; a check module imports the registry, the
model and pure helpers only; a renderer imports the model, pure helpers and its sibling
renderers only; nothing imports the runner but the two front doors, the CLI and the API.
Imports under TYPE_CHECKING count.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Source folder -> the import package it installs as (pyproject.toml's package-dir).
PACKAGES = {"preflight": "preflight"}
CHECK_ID = re.compile(r"^[A-Z]{2,6}\d{3}$")


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def imports_of(path: Path, name: str) -> set[str]:
    """The preflight modules a file imports (relative imports resolved)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".")[: -node.level if path.name != "__init__.py" else len(name.split("."))]
                base = ".".join([*package, base]) if base else ".".join(package)
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
    known = modules()
    return {n for n in names if n in known and n != name}


def within(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


RULES = [
    # (layer, what it may import, beyond itself)
    ("preflight.model", ()),
    ("preflight.lib", ("preflight.model",)),
    ("preflight.checks", ("preflight.registry", "preflight.model", "preflight.lib")),
    ("preflight.reports", ("preflight.model", "preflight.lib")),
    # The history library (schema, store, record, judge, queries): data in and out of the database.
    # The run's use of it (steps/history.py) and its renderings (reports/) sit above it.
    ("preflight.history", ("preflight.model", "preflight.lib")),
    # The registry imports the checks package only to discover it (load_builtin_checks).
    ("preflight.registry", ("preflight.model", "preflight.lib", "preflight.checks")),
]


@pytest.mark.parametrize(("layer", "allowed"), RULES, ids=[r[0] for r in RULES])
def test_layer_imports_only_what_its_rule_allows(layer: str, allowed: tuple[str, ...]) -> None:
    broken = []
    for name, path in sorted(modules().items()):
        if not within(name, layer):
            continue
        for target in sorted(imports_of(path, name)):
            if not within(target, layer, *allowed) and target != "preflight":
                broken.append(f"{name} imports {target}")
    assert not broken, "\n".join(broken)


def test_nothing_but_the_two_front_doors_imports_the_runner() -> None:
    """The CLI (`preflight`) and the in-job API (`preflight.check`, preflight/api.py) run the steps; nothing else."""
    importers = sorted(name for name, path in modules().items() if "preflight.runner" in imports_of(path, name))
    assert importers == ["preflight.api", "preflight.commands.cli"]


def test_options_and_history_do_not_import_each_other_in_a_cycle() -> None:
    """The options check a --history URL with the history's store; the history reaches nothing of the
    options, the steps, the runner or the commands (the runner's glue moved to steps/history.py)."""
    assert "preflight.history.store" in reachable_from("preflight.options")
    upward = sorted(target for name in modules() if within(name, "preflight.history")
                    for target in reachable_from(name)
                    if within(target, "preflight.options", "preflight.options_history", "preflight.steps",
                              "preflight.runner", "preflight.commands", "preflight.checks", "preflight.reports"))
    assert not upward, upward


def reachable_from(start: str) -> set[str]:
    """Every preflight module `start` imports, directly or through others (the bare package excepted:
    its __init__ loads the API lazily, on first use of preflight.check)."""
    known, seen, todo = modules(), set(), [start]
    while todo:
        name = todo.pop()
        for target in imports_of(known[name], name):
            if target not in seen and target != "preflight":
                seen.add(target)
                todo.append(target)
    return seen


@pytest.mark.parametrize(("door", "other"), [("preflight.api", "preflight.commands"),
                                             ("preflight.commands.cli", "preflight.api")])
def test_neither_front_door_imports_the_other(door: str, other: str) -> None:
    """The CLI and preflight.check share RunOptions (preflight/options/run.py), never each other's code."""
    crossing = sorted(name for name in reachable_from(door) if within(name, other))
    assert not crossing, f"{door} imports {crossing}"


def test_both_front_doors_build_the_one_run_options() -> None:
    """The walk reaches through modules: both doors arrive at preflight.options (and the API's
    groups type sits in the model, where both can use it)."""
    assert "preflight.options" in reachable_from("preflight.api")
    assert "preflight.options" in reachable_from("preflight.commands.cli")
    assert "preflight.model.job_groups" in reachable_from("preflight.api")


def test_the_engine_names_no_check_id_as_a_string() -> None:
    """The engine raises checks by reference (SPEC.report(...)), never by a string id."""
    offenders = []
    for name, path in sorted(modules().items()):
        if within(name, "preflight.checks", "preflight.reports", "preflight.commands"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and CHECK_ID.match(node.value):
                offenders.append(f"{name}:{node.lineno} {node.value!r}")
    assert not offenders, "\n".join(offenders)


def test_the_rule_walker_sees_a_violation() -> None:
    """The walker itself: a planted import of the runner from a check module is caught."""
    planted = ROOT / "preflight" / "checks" / "_planted_for_test.py"
    planted.write_text("from preflight.runner import run\n")
    try:
        assert "preflight.runner" in imports_of(planted, "preflight.checks._planted_for_test")
    finally:
        planted.unlink()


STORE_METHODS = {"set", "get", "add", "multi_get", "multi_set", "compare_set", "wait", "check", "append",
                 "delete_key", "num_keys"}


def store_touches(source: str) -> list[tuple[int, str]]:
    """Calls of a c10d store's methods (`store.set(...)`, `self.store.get(...)`, `session.store.add(...)`),
    and json.loads / int() around anything read from a store, in one module's source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        on_store = isinstance(func, ast.Attribute) and "store" in ast.unparse(func.value).lower()
        if on_store and isinstance(func, ast.Attribute) and func.attr in STORE_METHODS:
            found.append((node.lineno, ast.unparse(node)[:80]))
        elif ast.unparse(func) in ("json.loads", "int") and any(
                "store" in ast.unparse(arg).lower() for arg in node.args):
            found.append((node.lineno, ast.unparse(node)[:80]))
    return found


def scan(walker: Callable[[str], list[tuple[int, str]]], *exempt: str) -> list[str]:
    """What `walker` finds in every module of the package but those within `exempt`, as `module:line text`."""
    return [f"{name}:{line} {text}" for name, path in sorted(modules().items()) if not within(name, *exempt)
            for line, text in walker(path.read_text())]


def test_nothing_outside_the_channel_touches_the_store_or_decodes_a_store_value() -> None:
    """Every value that crosses the store goes through preflight/channel/ (board.py: typed, bounded,
    a bad value names its rank): no other module calls a store's methods or decodes what one holds."""
    offenders = scan(store_touches, "preflight.channel")
    assert not offenders, "\n".join(offenders)


def test_the_store_walker_sees_a_touch() -> None:
    """The walker itself: a raw read, a json.loads of one and an int() of a counter are all caught."""
    planted = ("def f(session, store):\n    session.store.set('k', '1')\n"
               "    json.loads(store.get('k'))\n    int(self.store.add('n', 0))\n")
    assert sorted(line for line, _ in store_touches(planted)) == [2, 3, 3, 4, 4]


def test_the_probes_and_the_steps_do_not_import_each_other_in_a_cycle() -> None:
    """The steps (step 8 runs the probes) sit on the probes, both on the channel: the probes import no step."""
    broken = [f"{name} imports {target}" for name, path in sorted(modules().items())
              if within(name, "preflight.probes", "preflight.channel")
              for target in sorted(imports_of(path, name)) if within(target, "preflight.steps", "preflight.runner")]
    broken += [f"{name} imports {target}" for name, path in sorted(modules().items())
               if within(name, "preflight.channel")
               for target in sorted(imports_of(path, name)) if within(target, "preflight.probes")]
    assert not broken, "\n".join(broken)


# -- the store's keys: one table (channel/keys.py) ------------------------------------------------------------
STORE_CALLS = STORE_METHODS | {"put", "read", "has", "has_all", "count", "fetch", "agree", "announce", "wait_for",
                               "write_value", "read_value", "decode_value", "fetch_raw", "append_rank",
                               "listed_ranks", "listed", "present"}


def called(node: ast.Call) -> str:
    """The name a call calls: `f` of `f(...)`, `m` of `x.m(...)`."""
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def key_strings(source: str) -> list[tuple[int, str]]:
    """Key strings written outside the table: a constant or f-string that starts with a family's pattern
    (`f"reach/claim/{host}"`, `"res/1"`, `"reach/roster"`), or a bare fixed key (`"verdict"`) handed to
    a store, board or exchange call or named as a key (`KEY_NAME = "secret-key"`)."""
    from preflight.channel import keys

    heads = tuple(row.head for row in keys.TABLE if "{" in row.pattern or "/" in row.pattern)
    fixed = {row.pattern for row in keys.TABLE if "{" not in row.pattern}
    tree = ast.parse(source)
    handed = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call) and called(node) in STORE_CALLS
              for arg in node.args}
    handed |= {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)  # NONCE_KEY = "nonce"
               and any(isinstance(t, ast.Name) and "KEY" in t.id.upper() for t in node.targets)}
    inside = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            text = str(node.values[0].value)
            if text.startswith(heads):
                found.append((node.lineno, ast.unparse(node)[:80]))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in inside:
            if node.value.startswith(heads) or (node.value in fixed and id(node) in handed):
                found.append((node.lineno, repr(node.value)[:80]))
    return found


def test_no_key_string_outside_the_table() -> None:
    """Every key of the store is named by its row of preflight/channel/keys.py (`keys.VERDICT.key`,
    `keys.RESULT.at(rank)`), which carries its message type: no module spells a key itself."""
    offenders = scan(key_strings, "preflight.channel.keys")
    assert not offenders, "\n".join(offenders)


def test_the_key_walker_sees_a_key_string() -> None:
    planted = ("def f(board, store, host, rank):\n    board.count(f'reach/claim/{host}')\n"
               "    store.set('verdict', '[1]')\n    x = 'reach/roster'\n    y = {'verdict': 1}\n"
               "    z = f'xid_after/{rank}'\nKEY_NAME = 'secret-key'\n")
    assert sorted(line for line, _ in key_strings(planted)) == [2, 3, 4, 6, 7]


# Calls whose result is a value decoded from the store (typed: a model type, a BadValue or None): a
# board's reads, the exchange's waits for rank 0's decisions, the probes' session.kept(...) of a read,
# and the channel's own read functions.
BOARD_READS = {"read", "wait", "fetch"}
DECISION_READS = {"wait_for", "read_report", "_read_published", "kept"}
FUNCTION_READS = {"read_value", "decode_value", "read_mark", "read_decision", "read_dead"}


def is_store_read(node: ast.AST) -> bool:
    """Whether `node` is a call that returns a value read from the store."""
    if not isinstance(node, ast.Call):
        return False
    name = called(node)
    if isinstance(node.func, ast.Attribute) and name in BOARD_READS:
        return "board" in ast.unparse(node.func.value).lower()
    return name in DECISION_READS | FUNCTION_READS


def loose_reads(source: str) -> list[tuple[int, str]]:
    """`.get(...)`, `int(...)` or `[...]` with a string on a value read from the store: the raw-dict
    reading (`decision.get("go")`, `int(verdict["exit_code"])`) a typed message makes needless."""
    found = []
    for scope in ast.walk(ast.parse(source)):
        if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        read = {target.id for node in ast.walk(scope) if isinstance(node, (ast.Assign, ast.NamedExpr))
                and any(is_store_read(sub) for sub in ast.walk(node.value))
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(target, ast.Name)}
        read |= {target.id for node in ast.walk(scope) if isinstance(node, (ast.For, ast.comprehension))
                 and any(is_store_read(sub) for sub in ast.walk(node.iter))
                 for target in ast.walk(node.target) if isinstance(target, ast.Name)}
        found += [(node.lineno, ast.unparse(node)[:80]) for node in ast.walk(scope) if picks_apart(node, read)]
    return sorted(set(found))


def picks_apart(node: ast.AST, read: set[str]) -> bool:
    """`x.get(...)`, `int(x)`, `int(x[...])` or `x["..."]` where x is a value read from the store."""
    def decoded(value: ast.AST) -> bool:
        return (isinstance(value, ast.Name) and value.id in read) or is_store_read(value)

    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return decoded(node.func.value)
    if isinstance(node, ast.Call) and called(node) == "int" and node.args:
        arg = node.args[0]
        return decoded(arg) or (isinstance(arg, ast.Subscript) and decoded(arg.value))
    return (isinstance(node, ast.Subscript) and decoded(node.value) and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str))


def test_no_raw_dict_reading_of_a_store_value_outside_the_model() -> None:
    """A value from the store is its key's model type (channel/keys.py, model/messages.py): read by its
    fields, validated once where it enters (codec.decode), never picked apart as a dict by its readers."""
    offenders = scan(loose_reads, "preflight.model")
    assert not offenders, "\n".join(offenders)


def test_the_read_walker_sees_a_raw_dict_reading() -> None:
    planted = ("def f(exchange, board):\n    decision = exchange.wait_for('go', 1)\n"
               "    if decision.get('go'):\n        pass\n    verdict = exchange.wait_for('verdict', 1)\n"
               "    code = int(verdict['exit_code'])\n    ok = board.read(k, 0).get('x')\n"
               "    fine = verdict.exit_code\n")
    assert [line for line, _ in loose_reads(planted)] == [3, 6, 6, 7]


def test_registering_every_check_imports_no_torch() -> None:
    """The checks register before preflight's own torch import, which defers SIGINT/SIGTERM until torch
    is in (lib/torch_import.py): a check module that pulled torch in (probe_memory through memory_fit
    and ops did) imports it where a signal is lost, and a rank told to stop runs to the end."""
    import subprocess
    import sys

    code = ("import sys; from preflight.registry import all_checks; assert all_checks(); "
            "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


# The model's types are msgspec Structs (docs/architecture.md, "The model"): Python 3.11 compiles each
# dataclass's methods from source on every import (~0.6 ms a class: ~0.1 CPU-s of every rank's first
# step for ~160 of them, docs/performance.md), where a Struct type is made in C. These few hold one
# stage's state (a rank's collect, a check's caches, a listener's thread, a directory checked once where
# it enters), never a value that crosses a wire.
STATE_DATACLASSES = {"preflight.channel.collected.Collected", "preflight.checks.nccl_account.NcclJob",
                     "preflight.steps.tcp_reach.Listener", "preflight.lib.storage_options.StorageOptions"}


def dataclasses_in(tree: ast.AST, module: str) -> set[str]:
    """The classes of a module made by @dataclass, @dataclass(...) or @dataclasses.dataclass(...)."""
    def names(decorator: ast.expr) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return (isinstance(target, ast.Name) and target.id == "dataclass") or (
            isinstance(target, ast.Attribute) and target.attr == "dataclass")
    return {f"{module}.{node.name}" for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and any(map(names, node.decorator_list))}


def test_no_model_type_is_a_dataclass() -> None:
    found = set().union(*(dataclasses_in(ast.parse(path.read_text()), name) for name, path in modules().items()))
    assert found == STATE_DATACLASSES


def test_the_dataclass_walker_sees_a_dataclass() -> None:
    planted = ast.parse("@dataclass(frozen=True)\nclass A:\n    x: int\n\n"
                        "@dataclasses.dataclass\nclass B:\n    y: int\n\n"
                        "@dataclass\nclass C:\n    z: int\n\nclass D(Struct):\n    w: int\n")
    assert dataclasses_in(planted, "m") == {"m.A", "m.B", "m.C"}
