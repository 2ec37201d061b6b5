"""The layering of the README's Layout section (pure layers below runtime/), checked on the source.

A table says which packages of `shoal` each package may import; every import of `shoal.X`
(absolute, or relative and resolved against the importing module's package) is checked against
it. Top-level modules count as packages by their name (errors, job, config, ...). Pure layers
import no torch, only a few import torch.distributed, and no function in src/ is over 80 lines.
"""

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "shoal"

# Package -> the packages it may import (besides itself). `None`: anything.
ALLOWED: dict[str, set[str] | None] = {
    "plan": {"errors"},
    "perf": {"plan", "errors"},
    "cluster": {"perf", "errors", "digits"},
    "control": {"perf", "plan", "cluster", "errors", "digits"},
    "sim": {"control", "perf", "plan", "cluster", "errors", "json_input", "digits"},
    "runtime": {"control", "perf", "plan", "errors", "job", "config", "metrics", "console"},
    "launcher": {
        "runtime",
        "sim",
        "control",
        "perf",
        "plan",
        "cluster",
        "errors",
        "job",
        "config",
        "metrics",
        "console",
        "cli",
    },  # fmt: skip
    "report": {"metrics", "perf", "plan", "errors"},
    "tune": {"schedule", "models", "errors"},
    "models": {"schedule"},
    "schedule": {"errors"},
    "config": {"errors", "digits"},
    "metrics": {"errors", "json_input"},
    "job": {"errors"},
    "errors": set(),
    "digits": set(),  # numbers in a user's text: ASCII digits only
    "json_input": set(),  # JSON from a user's file, every refusal a ValueError
    "console": set(),
    "data": set(),
    "cli": None,
    "worker": {"launcher"},
    "__init__": {"job", "launcher"},
    "__main__": {"cli"},
}
NO_TORCH = ["plan", "perf", "cluster", "control", "sim", "config", "metrics", "json_input"]
DISTRIBUTED_OK = {"runtime", "schedule", "tune"}  # schedule: its sharding ops are collectives
MAX_FUNCTION_LINES = 80


def _package(path: pathlib.Path) -> str:
    """The package a source file belongs to: its folder under shoal/, or its module name."""
    rel = path.relative_to(SRC).parts
    return rel[0] if len(rel) > 1 else path.stem


def _module_parts(path: pathlib.Path) -> list[str]:
    """`src/shoal/a/b.py` -> ["shoal", "a", "b"]; a package's __init__ is the package."""
    parts = ["shoal", *path.relative_to(SRC).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imports(path: pathlib.Path) -> set[str]:
    """Every module name `path` imports, relative imports resolved to absolute names."""
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                # Level 1 is the module's own package; a package's __init__ is its own package.
                here = _module_parts(path) if is_package else _module_parts(path)[:-1]
                up = here[: len(here) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            names.add(base)
            # `from shoal.perf import step_time` may import the module shoal.perf.step_time
            names.update(f"{base}.{alias.name}" for alias in node.names if base)
    return names


def _shoal_targets(path: pathlib.Path) -> set[str]:
    """The shoal packages `path` imports (first name after `shoal.`)."""
    out = set()
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] == "shoal" and len(parts) > 1:
            out.add(parts[1])
    return out


def _sources() -> list[pathlib.Path]:
    return sorted(SRC.rglob("*.py"))


def test_relative_imports_are_resolved(tmp_path, monkeypatch):
    pkg = tmp_path / "shoal" / "sim"
    pkg.mkdir(parents=True)
    mod = pkg / "run.py"
    mod.write_text("from ..control import rebalance\nfrom . import engine\nfrom .. import plan\n")
    init = pkg / "__init__.py"
    init.write_text("from .run import simulate\nfrom ..perf.kinds import KINDS\n")
    monkeypatch.setattr(f"{__name__}.SRC", tmp_path / "shoal")
    assert _imports(mod) == {
        "shoal.control",
        "shoal.control.rebalance",
        "shoal.sim",
        "shoal.sim.engine",
        "shoal",
        "shoal.plan",
    }
    assert _shoal_targets(mod) == {"control", "sim", "plan"}
    assert _imports(init) == {
        "shoal.sim.run",
        "shoal.sim.run.simulate",
        "shoal.perf.kinds",
        "shoal.perf.kinds.KINDS",
    }


def test_every_package_is_in_the_table():
    unknown = {_package(p) for p in _sources()} - set(ALLOWED)
    assert not unknown, f"packages missing from the dependency table: {sorted(unknown)}"


def test_every_import_of_shoal_follows_the_table():
    bad = []
    for path in _sources():
        pkg = _package(path)
        allowed = ALLOWED.get(pkg)
        if allowed is None:
            continue
        for target in _shoal_targets(path) - {pkg}:
            if target not in allowed:
                bad.append(f"{path.relative_to(SRC)} ({pkg}) imports shoal.{target}")
    assert not bad, "imports against the dependency table:\n" + "\n".join(bad)


def _reachable(paths: list[pathlib.Path]) -> set[str]:
    """Every `shoal` module that `paths` import, directly or through other shoal modules."""
    by_name = {".".join(_module_parts(p)): p for p in _sources()}
    seen: set[str] = set()
    todo = [".".join(_module_parts(p)) for p in paths]
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        for imported in _imports(by_name[name]):
            todo += [imported] if imported.startswith("shoal") else []
    return seen


def test_the_simulator_plans_with_control_and_plan():
    # The simulator must run the same controller and split as the live runtime, not a copy:
    # its policies import control/ and reach plan/'s split (through the shared step-time model)
    sim = sorted((SRC / "sim").rglob("*.py"))
    direct = set().union(*(_shoal_targets(p) for p in sim))
    assert "control" in direct, f"sim/ imports only {sorted(direct)}"
    reached = _reachable(sim)
    assert "shoal.plan.assign" in reached, "sim/ never reaches plan/'s micro-batch split"
    assert "shoal.perf.step_time" in reached, "sim/ never reaches the shared step-time model"


@pytest.mark.parametrize("layer", NO_TORCH)
def test_pure_layers_import_no_torch(layer):
    paths = sorted((SRC / layer).rglob("*.py")) or [SRC / f"{layer}.py"]
    if not paths[0].exists():
        pytest.skip(f"shoal.{layer} does not exist in this tree")
    for path in paths:
        for name in _imports(path):
            assert not name.startswith("torch"), f"{path} imports {name}"


def test_sim_and_runtime_never_import_each_other():
    for path in _sources():
        pkg, targets = _package(path), _shoal_targets(path)
        assert not (pkg == "sim" and "runtime" in targets), path
        assert not (pkg == "runtime" and "sim" in targets), path


def test_only_runtime_schedule_and_tune_use_torch_distributed():
    for path in _sources():
        if _package(path) in DISTRIBUTED_OK:
            continue
        for name in _imports(path):
            assert not name.startswith("torch.distributed"), f"{path} imports {name}"


def test_no_function_is_over_80_lines():
    long = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                lines = node.end_lineno - first + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(SRC)}:{node.name} ({lines} lines)")
    assert not long, "functions over 80 lines:\n" + "\n".join(long)
