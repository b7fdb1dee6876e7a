"""LangGraph's own conformance suite (``langgraph-checkpoint-conformance``)
run against CairnSaver with every capability it knows, base and extended,
on a directory store and on a SQLite store."""

from __future__ import annotations

import asyncio
import tempfile
from typing import AsyncGenerator, Callable

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from cairn.langgraph import CairnSaver


def run_suite(location_of: Callable[[str], str]) -> None:
    @checkpointer_test(name="CairnSaver")
    async def cairn_saver() -> AsyncGenerator[CairnSaver, None]:
        with tempfile.TemporaryDirectory() as d:
            saver = CairnSaver(location_of(d))
            try:
                yield saver
            finally:
                saver.close()

    report = asyncio.run(validate(cairn_saver))
    for cap in ALL_CAPABILITIES:
        result = report.results[cap.value]
        assert result.detected, f"capability {cap.value} not detected"
        assert result.passed, f"{cap.value}: {result.failures}"
        assert result.tests_passed > 0 and result.tests_failed == 0, cap.value
    print(
        "conformance:",
        ", ".join(f"{c}: {r.tests_passed} passed" for c, r in sorted(report.results.items())),
    )


@pytest.mark.parametrize("kind", ["dir", "sqlite"])
def test_conformance_every_capability_passes(kind: str) -> None:
    if kind == "dir":
        run_suite(lambda d: d)
    else:
        run_suite(lambda d: f"sqlite:{d}/store.db")
