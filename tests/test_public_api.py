"""Every public name resolves and carries a docstring."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = [
    "neuromanifold",
    "neuromanifold.linear",
    "neuromanifold.singular",
    "neuromanifold.singular.detectors",
    "neuromanifold.cells",
    "neuromanifold.zoo",
    "neuromanifold.report",
]


@pytest.mark.parametrize("package", PACKAGES)
def test_public_names_resolve_and_are_documented(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__doc__, f"{package} has no module docstring"
    for name in module.__all__:
        if name.startswith("__"):
            continue
        obj = getattr(module, name)  # raises AttributeError if the name does not resolve
        assert getattr(obj, "__doc__", None), f"{package}.{name} has no docstring"
        assert isinstance(name, str) and "." not in name, "__all__ lists names, not module paths"


def test_cli_version_runs() -> None:
    from typer.testing import CliRunner

    from neuromanifold import __version__
    from neuromanifold.cli import app

    result = CliRunner().invoke(app, ["version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == __version__
