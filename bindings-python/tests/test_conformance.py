"""Replays EVERY scenario of tests/conformance/ through the Python package, in six modes
(runner.MODES: the memory store through the blocking and the asyncio API, and pure-Python
store objects, blocking and asyncio, taking dicts or JSON text). Each replay must pass the
scenario's expectations and equal the native Rust replay (``heart_fleet_core::conformance``
over the core's HeartFleet): every step's result, the receipts, the counters, the final
rows and how often each effect fired."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from heart_fleet import _native

from runner import MODES, replay

DIR = Path(__file__).resolve().parents[2] / "tests" / "conformance"
FILES = sorted(DIR.glob("*.json"))

#: Scenarios this runner does not run, with the reason (printed). Empty: every scenario runs.
SKIPPED_SCENARIOS: dict[str, str] = {}


def test_the_scenario_folder_is_not_empty() -> None:
    assert len(FILES) >= 60, f"found only {len(FILES)} scenarios in {DIR}"
    print(f"conformance: {len(FILES)} scenarios x {len(MODES)} modes; skip list: {SKIPPED_SCENARIOS or '(none)'}")


def without_messages(v: Any) -> Any:
    """Drops error messages (the binding re-raises the effect's own exception)."""
    if isinstance(v, list):
        return [without_messages(x) for x in v]
    if isinstance(v, dict):
        return {k: without_messages(x) for k, x in v.items() if not (k == "message" and isinstance(v.get("error"), str))}
    return v


def contains(want: Any, got: Any, path: str) -> None:
    """Native ⊆ binding: every key the native result has, the binding's has with the same value."""
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{path}: expected {want!r}, got {got!r}"
        for k, w in want.items():
            contains(w, got.get(k), f"{path}.{k}")
        return
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{path}: expected {want!r}, got {got!r}"
        for i, w in enumerate(want):
            contains(w, got[i], f"{path}[{i}]")
        return
    assert got == want and isinstance(got, bool) == isinstance(want, bool), f"{path}: expected {want!r}, got {got!r}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario(path: Path, mode: str) -> None:
    text = path.read_text(encoding="utf-8")
    name = json.loads(text)["name"]
    if name in SKIPPED_SCENARIOS:
        pytest.skip(SKIPPED_SCENARIOS[name])
    py = asyncio.run(replay(text, mode))
    assert py["failure"] is None, f"scenario {name} failed in the Python binding ({mode}): {py['failure']}"
    rust = json.loads(_native.native_replay(text))
    assert rust["failure"] is None, f"the native replay of {name} failed: {rust['failure']}"
    assert len(py["steps"]) == len(rust["steps"]), "steps replayed"
    for i, s in enumerate(rust["steps"]):
        assert py["steps"][i]["op"] == s["op"]
        contains(without_messages(s["result"]), without_messages(py["steps"][i]["result"]), f"step {i} ({s['op']})")
    assert py["receipts"] == rust["receipts"], "receipts"
    assert py["metrics"] == rust["metrics"], "metrics"
    assert py["runs"] == rust["runs"], "runs"
    assert py["intents"] == rust["intents"], "intents"
    assert py["dispatch_log"] == rust["dispatch_log"], "dispatch log"
    assert py["instances"] == rust["instances"], "instances"
    assert py["fired"] == rust["fired"], "fired"
    if not mode.startswith("memory"):
        # Every store request really went through the Python store object.
        assert py["store_calls"] == py["memory_requests"]
        assert py["store_calls"] > 0 or py["memory_requests"] == 0
