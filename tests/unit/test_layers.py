"""The layering holds, checked on the source (every import, at any depth of a module,
``TYPE_CHECKING`` ones included):

    storage  ←  orchestrator  ←  tasks (the worker: task bodies, runner, runtime, lease, hooks)

and inside ``orchestrator``, from the ground up (:data:`LAYERS`):

    gateway ← core ← deliberation ← briefing ← plan ← logs ← metrics ← tracing ← control ← webhooks
            ← fleet ← client ← evaluation ← api ← cli

- ``storage`` imports nothing of ours outside ``storage``;
- ``orchestrator.gateway`` (the model gateway) is a leaf: nothing of ours outside it;
- a layer of ``orchestrator`` imports only the layers below it, and ``storage`` — never
  task code (Celery imports the task modules named in the app's ``include``);
- ``import orchestrator`` loads nothing eagerly: its names are handed on lazily;
- no import cycle between our modules (importing ``a.b`` counts as importing ``a`` too).
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("storage", "tasks", "orchestrator")
#: orchestrator's layers, from the ground up: each imports only those before it.
LAYERS = ("gateway", "core", "deliberation", "briefing", "plan", "logs", "metrics", "tracing", "control", "webhooks",
          "fleet", "client", "evaluation", "api", "cli")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _ours(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def _resolve(name: str) -> str:
    """The module an imported name lives in (``from storage import plans`` → storage.plans)."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


@functools.cache
def _imports(module: str) -> tuple[str, ...]:
    """What ``module`` imports of ours (parsed once per test process: every layer's test reads it)."""
    return tuple(_parse_imports(module))


def _parse_imports(module: str) -> Iterator[str]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            if _ours(target):
                yield _resolve(target)


def _edges(module: str) -> set[str]:
    """What loading ``module`` loads of ours: its imports and their parent packages."""
    out: set[str] = set()
    for target in _imports(module):
        parts = target.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    # its own packages are loading already (Python imports them first): not an edge
    parts = module.split(".")
    out -= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return {m for m in out if m in MODULES}


GRAPH = {m: _edges(m) for m in MODULES}


def _violations(layer: str, allowed: tuple[str, ...]) -> list[str]:
    def inside(name: str, prefix: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    return [f"{m} imports {t}" for m in MODULES if inside(m, layer)
            for t in sorted(set(_imports(m))) if not any(inside(t, a) for a in allowed)]


def test_the_walker_sees_imports_at_any_depth() -> None:
    assert "tasks.runner" in GRAPH["tasks.phase"] or "tasks.runtime" in GRAPH["tasks.phase"]
    assert "orchestrator.gateway.types" in GRAPH["orchestrator.plan.prompts"]
    assert "orchestrator.fleet.embedded" in GRAPH["orchestrator.client.local"]  # imported inside a method


def test_storage_imports_only_storage() -> None:
    assert _violations("storage", ("storage",)) == []


def test_the_model_gateway_is_a_leaf() -> None:
    assert _violations("orchestrator.gateway", ("orchestrator.gateway",)) == []


def test_the_control_plane_imports_no_task_code() -> None:
    assert _violations("orchestrator", ("orchestrator", "storage")) == []


def test_every_module_of_the_control_plane_is_in_a_layer() -> None:
    tops = {m.split(".")[1] for m in MODULES if m.startswith("orchestrator.")}
    assert tops == set(LAYERS)


def test_each_layer_imports_only_the_layers_below_it() -> None:
    wrong = []
    for i, layer in enumerate(LAYERS):
        below = tuple(f"orchestrator.{name}" for name in LAYERS[: i + 1])
        wrong += _violations(f"orchestrator.{layer}", (*below, "storage"))
    assert wrong == []


def test_the_plan_model_loads_without_celery_or_the_client() -> None:
    """``orchestrator/__init__`` hands its names on lazily: reading a plan loads no broker."""
    code = ("import sys; from orchestrator.plan.schema import load_plan; import orchestrator; "
            "print(sorted(m for m in ('celery', 'kombu', 'orchestrator.client', 'fastapi') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_there_is_no_import_cycle() -> None:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(GRAPH[m]):
            if state.get(t) == 1:
                cycles.append([*stack[stack.index(t):], t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)
    assert cycles == []


def test_no_two_modules_share_a_name() -> None:
    """A name says which module it is: ``views.py`` twice, or a ``fleet.py`` beside a
    ``fleet/`` package, makes a reader ask which one is meant."""
    by_name: dict[str, list[str]] = {}
    for module in MODULES:
        by_name.setdefault(module.rsplit(".", 1)[-1], []).append(module)
    assert {name: found for name, found in by_name.items() if len(found) > 1} == {}


def _layout_folders(doc: str, heading: str) -> list[str]:
    """The folders the first column of the table under ``heading`` names, in its order
    (``orchestrator/logs/``, ``metrics/``, ``tracing/`` are three layers of orchestrator)."""
    text = (ROOT / doc).read_text().split(f"\n{heading}\n", 1)[1]
    rows = [line for line in text.split("\n\n| folder", 1)[1].splitlines()[2:] if line.startswith("|")] \
        if "\n\n| folder" in text else []
    found: list[str] = []
    for row in rows:
        names = [n.rstrip("/") for n in re.findall(r"`([a-z_/]+/)`", row.split("|")[1])]
        # `orchestrator/logs/`, `metrics/`, `tracing/`: the later ones are orchestrator's too
        parent = names[0].rpartition("/")[0] if names else ""
        found += [n if "/" in n or not parent else f"{parent}/{n}" for n in names]
    return found


def test_the_layout_tables_name_every_folder_in_layer_order() -> None:
    """README's layout table and DESIGN's folder table name each layer of ``orchestrator``
    in the order test_each_layer_imports_only_the_layers_below_it enforces, and only
    folders that exist."""
    for doc, heading in (("README.md", "## Layout"), ("DESIGN.md", "## Layers")):
        folders = _layout_folders(doc, heading)
        assert [f.split("/", 1)[1] for f in folders if f.startswith("orchestrator/")] == list(LAYERS), doc
        assert all((ROOT / f).is_dir() for f in folders), (doc, [f for f in folders if not (ROOT / f).is_dir()])
        assert {"storage", "tasks"} <= set(folders), doc


def test_the_package_docstring_names_every_layer() -> None:
    import orchestrator

    named = re.findall(r"^    ([a-z][a-z, ]+?)\s{2,}", orchestrator.__doc__ or "", re.MULTILINE)
    layers = [name.strip() for line in named for name in line.split(",")]
    assert layers == list(LAYERS)
