"""compose.yaml and the Dockerfile (issue 43): one image, built once and shared by the five kefu
services under kefu:<version>; exact base images; the dependencies installed from the lock file;
examples/ in the image; Flower's login set from the environment."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
DOCKERFILE = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
KEFU_SERVICES = ("worker", "beat", "listener", "console", "flower")
EXACT_TAG = re.compile(r"^[\w./-]+:\d+\.\d+\.\d+(-[a-z0-9.]+)?(@sha256:[0-9a-f]{64})?$|^[\w./-]+@sha256:[0-9a-f]{64}$")


def _instructions(keyword: str) -> list[str]:
    return [line.split(None, 1)[1] for line in DOCKERFILE if line.split(None, 1)[:1] == [keyword]]


def test_one_build_makes_the_image_every_kefu_service_runs():
    services = COMPOSE["services"]
    built = [name for name, spec in services.items() if "build" in spec]
    assert built == ["worker"]
    image = f"kefu:{PYPROJECT['project']['version']}"
    assert {services[name]["image"] for name in KEFU_SERVICES} == {image}
    # The others never look for kefu:<version> on a registry: they run the worker's build.
    assert all(services[name]["pull_policy"] == "never" for name in KEFU_SERVICES if name != "worker")
    assert services["worker"]["pull_policy"] == "build"


def test_no_floating_image_tags():
    images = [spec["image"] for name, spec in COMPOSE["services"].items() if name not in KEFU_SERVICES]
    bases = _instructions("FROM")
    assert images and bases
    for image in (*images, *bases):
        assert EXACT_TAG.match(image), f"{image} is not pinned to an exact release or digest"
    assert not EXACT_TAG.match("redis:7-alpine") and not EXACT_TAG.match("python:3.11-slim")


def test_the_image_installs_the_locked_dependencies():
    lock = (ROOT / "requirements.lock").read_text().splitlines()
    rows = [line.partition("==") for line in lock if line and not line.startswith("#")]
    pins = {canonicalize_name(name): version for name, _, version in rows}
    assert all(pins.values()), "every line of the lock pins one version (name==version)"
    for dependency in PYPROJECT["project"]["dependencies"]:
        requirement = Requirement(dependency)
        assert requirement.specifier.contains(pins[canonicalize_name(requirement.name)]), dependency
    assert "kefu" not in pins
    env = _instructions("ENV")
    assert "PIP_CONSTRAINT=/app/requirements.lock" in env  # `pip install .` stays within the lock
    assert "requirements.lock ./" in _instructions("COPY")
    runs = _instructions("RUN")
    locked = runs.index("pip install --no-cache-dir -r requirements.lock")
    assert locked < runs.index("pip install --no-cache-dir .")
    assert DOCKERFILE.index("ENV PIP_CONSTRAINT=/app/requirements.lock") < DOCKERFILE.index(
        "RUN pip install --no-cache-dir -r requirements.lock"
    )


def test_the_image_holds_the_examples():
    assert "examples examples" in _instructions("COPY")
    assert (ROOT / "examples" / "simulation").is_dir()


def test_flowers_login_comes_from_the_environment():
    flower = COMPOSE["services"]["flower"]
    environment = flower["environment"]
    assert environment["FLOWER_BASIC_AUTH"].startswith("${FLOWER_BASIC_AUTH:?")
    assert "FLOWER_UNAUTHENTICATED_API" not in environment
    # The flower service keeps the environment every kefu service has.
    assert environment.items() >= COMPOSE["services"]["worker"]["environment"].items()
    readme = (ROOT / "README.md").read_text()
    assert "FLOWER_BASIC_AUTH" in readme and "FLOWER_UNAUTHENTICATED_API" in readme
