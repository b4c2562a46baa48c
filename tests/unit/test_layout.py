"""The layout is the architecture: the layers import one way, runtime is a few stage packages,
and the README's module map names each of them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["config", "runtime", "transports", "worker"]  # each may import only those before it
NO_NETWORK_NO_BROKER = {"celery", "kombu", "redis", "httpx", "openai", "dingtalk_stream", "uvicorn", "starlette"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_imports_only_the_layers_below_it(layer: str) -> None:
    above = set(LAYERS[LAYERS.index(layer) + 1 :])
    upward = {
        str(path.relative_to(ROOT)): sorted(_imports(path) & above) for path in sorted((ROOT / layer).rglob("*.py"))
    }
    assert {path: names for path, names in upward.items() if names} == {}


def test_runtime_reaches_no_broker_and_no_network() -> None:
    reaching = {
        str(path.relative_to(ROOT)): sorted(_imports(path) & NO_NETWORK_NO_BROKER)
        for path in sorted((ROOT / "runtime").rglob("*.py"))
    }
    assert {path: names for path, names in reaching.items() if names} == {}


def _runtime_entries() -> list[str]:
    return sorted(p.name for p in (ROOT / "runtime").iterdir() if p.name != "__pycache__")


def test_runtime_is_a_few_stage_packages() -> None:
    assert len(_runtime_entries()) <= 15, _runtime_entries()


def test_the_readme_module_map_names_every_runtime_package_and_no_other() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    mapped = set(re.findall(r"^\| `runtime/(\w+)/` \|", readme, flags=re.M))
    packages = {p.name for p in (ROOT / "runtime").iterdir() if (p / "__init__.py").exists()}
    assert mapped == packages
    for package in packages:  # a package says what its modules do
        assert ast.get_docstring(ast.parse((ROOT / "runtime" / package / "__init__.py").read_text(encoding="utf-8")))


def test_no_function_is_longer_than_a_screenful() -> None:
    """80 lines: a function past that does several things, and reads better as their names."""
    long = [
        f"{path.relative_to(ROOT)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for layer in LAYERS
        for path in sorted((ROOT / layer).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (node.end_lineno or 0) - node.lineno >= 80
    ]
    assert long == []
