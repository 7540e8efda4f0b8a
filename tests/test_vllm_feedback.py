"""The feedback rules of serq_vllm.feedback: each one names its vLLM source rule and the committed
vectors that need it, and (behind `-m slow`) each of those vectors diverges without the rule.

A rule is a public function of serq_vllm.feedback (but the combinations); its docstring has a
"Source rule:" paragraph and names only vectors that need it. `NEUTRAL` gives each a stand-in
that feeds nothing back (the first run's inputs, or the input without the rule's refinement),
which the slow test puts in its place: each named vector then diverges, or its derived inputs
never settle (a ModelError).
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from serq_vllm import feedback  # noqa: E402
from serq_vllm.compare import compare_traces, load_trace, vector_trace_path  # noqa: E402
from serq_vllm.engine import ModelError  # noqa: E402
from serq_vllm.model import run_scenario  # noqa: E402
from serq_vllm.scenario import load_scenario  # noqa: E402

VECTORS = ROOT / "vectors" / "vllm"
VECTOR_NAME = re.compile(r"\b(?:c\d+_\d+|h_[a-z0-9_]+)\b")

#: rule -> a stand-in that feeds nothing back (same signature)
NEUTRAL = {
    "seconds_add_times": lambda plan, col, thinks: dict(thinks),
    "unit_fanout_add_times": lambda plan, col, requests, thinks: dict(thinks),
    "call_order": lambda sc, join_call: {r.id: r.index for r in sc.requests},
    "async_call_keys": lambda plan, col: dict(col.join_call),
    "fanout_joins_siblings": lambda plan, col, keys: keys,
    "idle_joins_after_ends": lambda col, keys: keys,
    "engine_instant": lambda col, t: t,
    "fanout_idle": lambda plan, col, thinks: set(),
    "seconds_idle_added": lambda plan, col, thinks, with_fanout: set(),
    "cache_victims": lambda col: set(),
}
#: public functions of feedback that combine rules and are no rule themselves
COMBINATIONS = {"fcfs_order"}


def rules() -> dict[str, str]:
    """Rule name -> docstring."""
    return {name: inspect.getdoc(f) or "" for name, f in inspect.getmembers(feedback, inspect.isfunction)
            if f.__module__ == feedback.__name__ and not name.startswith("_") and name not in COMBINATIONS}


def cited_vectors(doc: str) -> list[str]:
    return sorted(set(VECTOR_NAME.findall(doc)))


def test_every_rule_names_its_source_rule_and_vectors():
    found = rules()
    assert set(found) == set(NEUTRAL), "a feedback rule without a NEUTRAL stand-in here, or a stale one"
    for name, doc in found.items():
        assert "Source rule:" in doc, f"feedback.{name}: no 'Source rule:' paragraph"
        source = doc[doc.index("Source rule:"):]
        assert re.search(r"vllm/v1/|AsyncScheduler|Scheduler\.|tools/vllm_oracle/driver\.py|_Run\.", source), \
            f"feedback.{name}: the source rule names no vLLM (or oracle driver) place"
        vecs = cited_vectors(doc)
        assert vecs, f"feedback.{name}: cites no committed vector"
        missing = [v for v in vecs if not (VECTORS / f"{v}.scenario.json").is_file()]
        assert not missing, f"feedback.{name} cites vectors that are not under vectors/vllm: {missing}"


@pytest.mark.parametrize("doc,message", [
    ("Source rule: vllm/v1/core/sched/scheduler.py. Without it nothing diverges.", "cites no committed vector"),
    ("Source rule: vllm/v1/core/sched/scheduler.py. Without it c1_99999 diverges.", "not under vectors/vllm"),
    ("Without it caps diverges.", "no 'Source rule:' paragraph"),
])
def test_a_seeded_badly_documented_rule_is_caught(monkeypatch, doc, message):
    def new_rule(plan, col):
        pass

    new_rule.__doc__ = doc
    new_rule.__module__ = feedback.__name__
    monkeypatch.setattr(feedback, "new_rule", new_rule, raising=False)
    monkeypatch.setitem(NEUTRAL, "new_rule", lambda plan, col: None)
    with pytest.raises(AssertionError, match=message):
        test_every_rule_names_its_source_rule_and_vectors()


def _outcome(name: str) -> str:
    try:
        ours = run_scenario(load_scenario(VECTORS / f"{name}.scenario.json"))
    except ModelError as exc:
        return f"error: {exc}"
    diffs = compare_traces(ours, load_trace(vector_trace_path(VECTORS, name)), limit=1)
    return diffs[0].describe("serQ", "vLLM") if diffs else "agree"


@pytest.mark.slow
@pytest.mark.parametrize("rule,vector", [(r, v) for r, doc in sorted(rules().items()) for v in cited_vectors(doc)])
def test_each_cited_vector_needs_its_rule(monkeypatch, rule, vector):
    assert _outcome(vector) == "agree"
    monkeypatch.setattr(feedback, rule, NEUTRAL[rule])
    assert _outcome(vector) != "agree", f"{vector} agrees without feedback.{rule}: it does not exercise it"
