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


# The one connection type (runtime.store.connection.Connection) and what runs under it.
SQLITE_DOOR = {
    "runtime/store/connection.py",
    "runtime/store/engine.py",
    "runtime/store/fence.py",
    "runtime/store/failures.py",
}


def _sources() -> list[Path]:
    return [path for layer in LAYERS for path in sorted((ROOT / layer).rglob("*.py"))]


def test_sqlite_is_reached_through_one_connection_type() -> None:
    importing = {str(path.relative_to(ROOT)) for path in _sources() if "sqlite3" in _imports(path)}
    assert importing <= SQLITE_DOOR


def test_every_sqlite_file_gets_its_schema_by_one_migration_method() -> None:
    """Only runtime.store.migrate stamps a schema version; nothing runs a DDL script of its own."""
    stamping = {
        str(path.relative_to(ROOT))
        for path in _sources()
        if re.search(r"PRAGMA user_version\s*=|executescript\(", path.read_text(encoding="utf-8"))
    }
    assert stamping == {"runtime/store/migrate.py"}


def _tables_created(paths: list[Path]) -> set[str]:
    text = "".join(path.read_text(encoding="utf-8") for path in paths)
    return set(re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", text))


def _package_of(path: Path) -> str:
    return "/".join(path.relative_to(ROOT).with_suffix("").parts[:2])


# Each SQLite file kefu keeps, by the package that owns it (and is the only one to name its tables).
DATABASES = {
    "runtime/store": ["runtime/store/migrations.py"],  # the delivery store
    "runtime/memory": ["runtime/memory/store.py"],
    "worker/coordination": ["worker/coordination.py"],  # the shards' coordination file
    "transports/simulator": ["transports/simulator/platform.py"],  # a simulated platform's ledger
}


def test_each_table_is_named_in_sql_by_one_package() -> None:
    """A table's statements live with its owner (the delivery store's in runtime.store.queries),
    so a schema change touches one package; other stages call them by name. Two files may
    each have a table of one name (`lease`): the owner of a file names its own."""
    owners: dict[str, set[str]] = {}
    for owner, files in DATABASES.items():
        for table in _tables_created([ROOT / f for f in files]):
            owners.setdefault(table, set()).add(owner)
    named = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE|EXISTS)\s+(" + "|".join(sorted(owners)) + r")\b")
    strays: dict[str, set[str]] = {}
    for path in _sources():
        package = _package_of(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for table in named.findall(node.value):
                    if package not in owners[table]:
                        strays.setdefault(table, set()).add(package)
    assert strays == {}
