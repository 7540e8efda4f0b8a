"""The testbed (docs/testbed.md): the committed real-engine runs against serQ, with no vLLM here.

- every calibration workload's schedule, as the whole real vLLM engine ran it on the step clock,
  is identical to what serQ's vLLM model gives;
- `serq fit` of the committed calibration steps reproduces the committed profile;
- docs/validation.md is what the committed measurements give (tools/vllm_testbed/validate.py);
- the workload tools and the step features.
Live tests (`-m testbed`) run the real engine when tools/vllm_testbed/.venv exists.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "vectors" / "testbed"
TOOLS = ROOT / "tools" / "vllm_testbed"
sys.path.insert(0, str(TOOLS))


def _tool(name: str):
    """tools/vllm_testbed/NAME.py by its path: tools/vllm_oracle has a driver.py too, and
    whichever folder another test put first on sys.path would win an `import driver`."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"vllm_testbed_{name}", TOOLS / f"{name}.py")
    if spec.name in sys.modules:
        return sys.modules[spec.name]
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while it is executed
    spec.loader.exec_module(mod)
    return mod


wl = _tool("workload")
from serq_vllm.compare import compare_traces  # noqa: E402
from serq_vllm.model import run_scenario  # noqa: E402
from serq_vllm.scenario import load_scenario  # noqa: E402

CALIBRATION = sorted(DATA.glob("cal_*.scenario.json"))


def real_trace(scenario: Path) -> dict:
    return json.loads(gzip.decompress(scenario.with_name(scenario.name.replace(".scenario.json", ".trace.json.gz")).read_bytes()))


def test_there_are_three_calibration_workloads_with_hits_and_preemptions():
    assert len(CALIBRATION) >= 3
    hits = preempt = 0
    for sc in CALIBRATION:
        reqs = real_trace(sc)["requests"].values()
        hits += sum(1 for r in reqs if (r["cached_tokens_at_admission"] or 0) > 0)
        preempt += sum(r["num_preemptions"] for r in reqs)
    assert hits > 0 and preempt > 0


@pytest.mark.parametrize("scenario", CALIBRATION, ids=lambda p: p.name.split(".")[0])
def test_real_engine_schedule_is_serq_models(scenario):
    real = real_trace(scenario)
    mine = run_scenario(load_scenario(scenario), "fast")
    assert compare_traces(real, mine) == []
    # the comparison is not vacuous: one token more in a late step, or one preemption less, diverges
    bad = copy.deepcopy(real)
    bad["steps"][-5]["scheduled"][0]["tokens"] += 1
    assert compare_traces(bad, mine)
    bad = copy.deepcopy(real)
    rid = next(iter(bad["requests"]))
    bad["requests"][rid]["cached_tokens_at_admission"] = (bad["requests"][rid]["cached_tokens_at_admission"] or 0) + 32
    assert compare_traces(bad, mine)


def test_fit_of_calibration_steps_reproduces_the_committed_profile(tmp_path):
    steps = sorted(str(p) for p in DATA.glob("cal_*.steps.csv"))
    out = tmp_path / "p.json"
    MODEL = _tool("report").MODEL

    rc = subprocess.run([sys.executable, "-m", "serq.cli", "fit", *steps, "--target", "wall_s", "--model", MODEL,
                         "--name", "testbed-cpu-llama-20m", "-o", str(out)],
                        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "python")},
                        capture_output=True, text=True)
    assert rc.returncode == 0, rc.stderr
    got, want = json.loads(out.read_text()), json.loads((DATA / "profile.json").read_text())
    assert set(got["coefficients"]) == set(want["coefficients"])
    for name, c in want["coefficients"].items():
        assert got["coefficients"][name]["value"] == pytest.approx(c["value"], rel=1e-9, abs=1e-15)
    assert got["fit"]["mape_heldout"] == pytest.approx(want["fit"]["mape_heldout"], rel=1e-9)


def test_validation_document_is_what_the_data_gives():
    rc = subprocess.run([sys.executable, str(TOOLS / "validate.py"), "report", "--check"],
                        cwd=ROOT, capture_output=True, text=True)
    assert rc.returncode == 0, rc.stderr


def _passes(tmp_path: Path, walls: list[list[float]], tokens_of_pass2: int = 1) -> None:
    """Synthetic passes NAME-rK of a two-step step-clock workload, as the driver writes them."""
    for k, wall in enumerate(walls, start=1):
        steps = [{"step": i, "time": 0.1 * k + i, "scheduled": [{"id": "a", "tokens": tokens_of_pass2 if (k == 2 and i == 1) else 1}],
                  "measured": {"wall_s": w, "cpu_s": w}} for i, w in enumerate(wall)]
        trace = {"scenario": "w", "steps": steps, "requests": {"a": {"arrival_time": 0.01 * k, "prompt_len": 5}},
                 "timing": {"build_s": k}}
        (tmp_path / f"w-r{k}.trace.json").write_text(json.dumps(trace))
        rows = "\n".join(f"{i},{i}.5,{w},{w},0,decode,1" for i, w in enumerate(wall))
        (tmp_path / f"w-r{k}.steps.csv").write_text("step,start_s,wall_s,cpu_s,gap_s,kind,decoders\n" + rows + "\n")


def test_calibration_passes_are_averaged_and_must_schedule_alike(tmp_path):
    validate = _tool("validate")
    _passes(tmp_path, [[0.010, 0.020], [0.012, 0.026], [0.011, 0.023]])
    trace, text = validate.combine_passes(tmp_path, "w", 3)
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(text)))
    assert [float(r["wall_s"]) for r in rows] == pytest.approx([0.011, 0.023])
    assert [float(r["cpu_s_2"]) for r in rows] == [0.012, 0.026]
    assert trace["steps"][1]["measured"] == {"wall_s": 0.023, "cpu_s": 0.023, "passes": 3}
    # a pass that scheduled one step differently is refused: its times would measure another step
    _passes(tmp_path, [[0.010, 0.020], [0.012, 0.026], [0.011, 0.023]], tokens_of_pass2=2)
    with pytest.raises(SystemExit, match="pass 2 scheduled differently"):
        validate.combine_passes(tmp_path, "w", 3)


def test_trace_to_workload_round_trip(tmp_path):
    rows = wl.generate(5, 4, (2, 4), (50, 90), (5, 20), (3, 9), (0.1, 0.5))
    assert rows == wl.generate(5, 4, (2, 4), (50, 90), (5, 20), (3, 9), (0.1, 0.5))
    path = tmp_path / "t.csv"
    path.write_text(wl.trace_text(rows, "test"))
    assert wl.read_trace(path) == rows
    cfg = {"block_size": 32, "num_gpu_blocks": 64, "max_model_len": 1024}
    sc = wl.scenario(rows, name="t", clock="wall", config=cfg, spacing=1.5, spacing_steps=0, step_s=0)
    first = [r for r in sc["requests"] if r["_turn"] == 1]
    assert [r["arrival_time"] for r in first] == [0, 1.5, 3.0, 4.5]
    # a later turn extends its predecessor after the predecessor's think time
    by_id = {r["id"]: r for r in sc["requests"]}
    for r in sc["requests"]:
        if r["_turn"] > 1:
            prev = next(x for x in rows if x.session == r["_session"] and x.turn == r["_turn"] - 1)
            assert r["prompt_from"] == r["after"] and by_id[r["after"]]["_session"] == r["_session"]
            assert r["_think_s"] == prev.think
    from serq import testbed

    (tmp_path / "w.json").write_text(json.dumps(sc))
    work = testbed.read_workload(tmp_path / "w.json")
    assert [(s, t, n, o, th) for s, t, n, o, th in work.rows] == [(r.session, r.turn, r.new, r.out, r.think) for r in rows]
    assert work.settings["spacing"] == "3/2" and work.settings["blocks"] == "63"


@pytest.mark.parametrize("text, message", [
    ("session,turn,new,out\n", "header must be"),
    ("session,turn,new,out,think\n0,1,10,5,0\n0,3,10,5,0\n", "turn 3 of session 0 follows turn 1"),
    ("session,turn,new,out,think\n1,1,10,5,0\n", "numbered 0, 1"),
    ("session,turn,new,out,think,forced\n0,1,10,5,0,1\n", "forced miss"),
    ("session,turn,new,out,think\n0,1,0,5,0\n", "new >= 1"),
    ("session,turn,new,out,think\n0,1,x,5,0\n", "must be integers"),
])
def test_bad_traces_are_refused(tmp_path, text, message):
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(wl.WorkloadError, match=message):
        wl.read_trace(p)


def test_step_features_follow_serqs_definitions():
    driver = _tool("driver")

    rec = {"total_tokens": 1 + 1 + 40, "scheduled": [
        {"tokens": 1, "computed_before": 100, "blocks": 4, "_prompt": 90},    # decode
        {"tokens": 1, "computed_before": 31, "blocks": 1, "_prompt": 31},     # decode (first output)
        {"tokens": 40, "computed_before": 64, "blocks": 4, "_prompt": 200},   # prefill chunk
    ]}
    f = driver.features(rec, 32)
    assert (f["decoders"], f["kv_decode"], f["ctx_decode"]) == (2, 5 * 32, 101 + 32)
    assert (f["prefilled"], f["prefill_requests"], f["kind"]) == (40, 1, "mixed")
    assert f["attention"] == 40 * (64 + 20)


VENV_PY = TOOLS / ".venv" / "bin" / "python"
MODEL = TOOLS / ".model"


@pytest.mark.testbed
@pytest.mark.skipif(not VENV_PY.is_file() or not MODEL.is_dir(),
                    reason="the testbed is not built (bash tools/vllm_testbed/setup.sh)")
def test_live_engine_agrees_with_model(tmp_path):
    rows = wl.generate(3, 4, (2, 3), (60, 200), (10, 40), (4, 12), (0.1, 0.3))
    cfg = {"block_size": 32, "num_gpu_blocks": 48, "max_num_seqs": 4, "max_num_batched_tokens": 128,
           "max_model_len": 1024}
    sc = wl.scenario(rows, name="live", clock="step", config=cfg, spacing=0, spacing_steps=3, step_s=0.05)
    path = tmp_path / "live.scenario.json"
    path.write_text(json.dumps(sc))
    rc = subprocess.run([str(VENV_PY), str(TOOLS / "driver.py"), str(path), "--model", str(MODEL),
                         "--out-dir", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert rc.returncode == 0, rc.stderr[-3000:]
    real = json.loads((tmp_path / "live.trace.json").read_text())
    assert compare_traces(real, run_scenario(load_scenario(path), "fast")) == []


def test_predict_command_compares_a_committed_run():
    def run(*args):
        return subprocess.run([sys.executable, "-m", "serq.cli", "testbed", "predict", *map(str, args)], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "python")}, capture_output=True, text=True)

    ok = run(DATA / "val_s2.scenario.json", "--measured", DATA / "val_s2-r1.requests.csv",
             "--profile", DATA / "profile.json", "--json")
    assert ok.returncode == 0, ok.stderr
    cmp = json.loads(ok.stdout)
    assert cmp["requests"] == 80 and not cmp["unpredicted"]
    for m in ("ttft", "tpot", "response"):
        assert cmp[m]["n"] > 0 and cmp[m]["predicted"]["mean"] > 0
    # a step-clock workload is refused with the reason, as is a file that is not a profile
    bad = run(DATA / "cal_light.scenario.json", "--measured", DATA / "val_s2-r1.requests.csv",
              "--profile", DATA / "profile.json")
    assert bad.returncode == 2 and "wall-clock" in bad.stderr and "Traceback" not in bad.stderr
    bad = run(DATA / "val_s2.scenario.json", "--measured", DATA / "val_s2-r1.requests.csv",
              "--profile", DATA / "val_s2.scenario.json")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
