"""Every committed vector through serQ's model and the comparison: `serq oracle agreement [DIR]`
(the command itself, its arguments and printing, is in `cli`).

For each `<name>.scenario.json` beside a `<name>.trace.json` or `.trace.json.gz` (vectors/vllm/
by default), `model.run_scenario` and compare with the vLLM trace under the oracle rule
(docs/oracle.md). Each vector ends in one of:

- ``agree``     — the traces agree exactly;
- ``diverge``   — the model ran but the traces differ (first difference given);
- ``refused:<feature>`` — the scenario needs a feature the model refuses (plan.FEATURES);
- ``error``     — the model failed.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from serq_vllm.compare import compare_traces, load_trace, vector_trace_path
from serq_vllm.engine import ModelError
from serq_vllm.model import run_scenario
from serq_vllm.plan import Unsupported
from serq_vllm.scenario import ScenarioError, load_scenario


def vector_names(directory: Path) -> list[str]:
    """The names of the vectors in `directory`: each scenario that has a trace beside it."""
    return sorted(p.name[: -len(".scenario.json")] for p in directory.glob("*.scenario.json")
                  if vector_trace_path(directory, p.name[: -len(".scenario.json")]).exists())


def check_vector(directory: Path, name: str, engine: str = "auto", force: bool = False) -> dict:
    """One vector's row: name, status, detail, seconds (and `needs` / `forced` for a refusal;
    `forced` only with `force`: the refused features approximated, agree or the divergence)."""
    t0 = time.perf_counter()
    row = {"name": name}
    try:
        sc = load_scenario(directory / f"{name}.scenario.json")
        ours = run_scenario(sc, engine)
    except Unsupported as exc:
        row.update(status=f"refused:{exc.feature}", detail=exc.detail,
                   needs=[f for f, _ in exc.needs])
        if force:  # what the refusal protects against: approximate the features and compare
            try:
                forced = run_scenario(sc, engine, force=True)
            except Unsupported:
                row["forced"] = "not forceable"
            except Exception as exc2:
                row["forced"] = f"error: {exc2}"
            else:
                d = compare_traces(forced, load_trace(vector_trace_path(directory, name)), limit=1)
                row["forced"] = f"diverge: {d[0].describe('serQ', 'vLLM')}" if d else "agree"
    except (ModelError, ScenarioError) as exc:
        row.update(status="error", detail=str(exc))
    except Exception as exc:  # an engine crash: report it, go on with the next vector
        row.update(status="error", detail=f"{type(exc).__name__}: {exc}")
    else:
        ref = load_trace(vector_trace_path(directory, name))
        diffs = compare_traces(ours, ref, limit=1)
        if diffs:
            row.update(status="diverge", detail=diffs[0].describe("serQ", "vLLM"))
        else:
            row.update(status="agree", detail=f"{len(ref['steps'])} steps")
    row["seconds"] = round(time.perf_counter() - t0, 3)
    return row


def status_counts(rows: list[dict]) -> Counter:
    """How many rows end in each status."""
    return Counter(r["status"] for r in rows)


def forced_counts(rows: list[dict]) -> Counter:
    """For the refused rows run with `force`: (status, what forcing gave) -> count."""
    return Counter((r["status"], r["forced"].split(":")[0]) for r in rows if "forced" in r)


def all_agree(rows: list[dict]) -> bool:
    """Nothing diverged or errored (refusals are not failures)."""
    counts = status_counts(rows)
    return counts.get("diverge", 0) + counts.get("error", 0) == 0
