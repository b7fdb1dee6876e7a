"""Shared fixtures: a fresh store per test, on each backend where it matters."""

from __future__ import annotations

from pathlib import Path

import pytest

import cairn


@pytest.fixture
def home(tmp_path: Path) -> str:
    return str(tmp_path / "store")


@pytest.fixture
def store(home: str) -> cairn.Store:
    return cairn.Store(home)


@pytest.fixture(params=["dir", "sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> cairn.Store:
    if request.param == "dir":
        return cairn.Store(str(tmp_path / "store"))
    return cairn.Store(f"sqlite:{tmp_path / 'store.db'}")
