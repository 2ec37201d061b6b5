"""The dependency arrows of STYLE.md, checked on the source: pure layers import no torch."""

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "shoal"
PURE = ["plan", "cluster", "control", "sim"]


def _imports(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(layer: str) -> list[pathlib.Path]:
    return sorted((SRC / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", PURE)
def test_pure_layers_import_no_torch_and_no_runtime(layer):
    for path in _modules(layer):
        for name in _imports(path):
            assert not name.startswith("torch"), f"{path} imports {name}"
            assert not name.startswith("shoal.runtime"), f"{path} imports {name}"
            assert not name.startswith("shoal.launch"), f"{path} imports {name}"


def test_sim_and_runtime_never_import_each_other():
    for path in _modules("sim"):
        assert not any(n.startswith("shoal.runtime") for n in _imports(path)), path
    for path in _modules("runtime"):
        assert not any(n.startswith("shoal.sim") for n in _imports(path)), path


def test_only_runtime_uses_torch_distributed():
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).parts
        if rel[0] in ("runtime", "schedule", "tune"):
            continue  # schedule/ is the Slapo-compatible layer: its sharding ops are collectives
        for name in _imports(path):
            assert not name.startswith("torch.distributed"), f"{path} imports {name}"
