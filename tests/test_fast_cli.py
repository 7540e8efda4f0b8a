"""`serq run`: report schema (docs/report.md), determinism, records, --arrivals, error exits."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from serq.cli import main

ROOT = Path(__file__).resolve().parents[1]
VLLM = str(ROOT / "examples" / "multi-turn" / "vllm.sq")
MM1 = str(ROOT / "examples" / "single-turn" / "mm1.sq")

RUN_KEYS = {"horizon", "end", "warmup", "seed", "events", "arrivals", "turns", "ended", "mean_live"}
STAT_KEYS = {"count", "mean", "ci", "p50", "p90", "p99"}
STAGE_KEYS = {"name", "utilization", "mean_number", "throughput", "completed", "mean_wait", "mean_service", "iterations"}
POOL_KEYS = {"name", "mean_used", "mean_cached", "mean_queue", "admissions", "evicted_units", "preemptions", "rejected",
             "stuck", "over_cap"}
GAUGE_KEYS = {"mean", "ci", "min", "max"}


def _run(capsys, *argv):
    rc = main(["run", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_json_schema_and_determinism(capsys):
    rc, out, err = _run(capsys, VLLM, "--horizon", "40", "--json", "--seed", "5")
    assert rc == 0, err
    rep = json.loads(out)
    assert list(rep) == ["run", "client", "observe", "gauges", "claims", "stages", "pools"]
    assert set(rep["run"]) == RUN_KEYS
    assert set(rep["client"]) == {"ttft", "tpot", "response"}
    for v in rep["client"].values():
        assert set(v) == STAT_KEYS
    for v in rep["observe"].values():
        assert set(v) == STAT_KEYS | {"cv2"}
    assert all(set(s) == STAGE_KEYS for s in rep["stages"])
    assert all(set(p) == POOL_KEYS for p in rep["pools"])
    assert rep["gauges"] == {}  # vllm.sq declares none (tests/test_report_gauges.py)
    assert all(p["stuck"] == 0 and p["over_cap"] == [] for p in rep["pools"])
    assert rep["run"]["warmup"] == 4.0  # default: 10 % of the horizon
    rc, out2, _ = _run(capsys, VLLM, "--horizon", "40", "--json", "--seed", "5")
    assert out2 == out


def test_text_report(capsys):
    rc, out, err = _run(capsys, MM1, "--horizon", "200")
    assert rc == 0 and out.startswith("run:") and "sojourn" in out and "desk" in out


def test_records_csv(capsys, tmp_path):
    path = tmp_path / "r.csv"
    rc, out, err = _run(capsys, VLLM, "--horizon", "40", "--warmup", "0", "--records", str(path), "--json")
    assert rc == 0, err
    rows = list(csv.DictReader(path.open()))
    rep = json.loads(out)
    assert len(rows) == rep["client"]["response"]["count"] > 0
    r = rows[0]
    assert set(r) == {"session", "turn", "submit", "first_token", "completion", "ttft", "response",
                      "prompt", "output", "hit"}
    assert float(r["completion"]) - float(r["submit"]) == pytest.approx(float(r["response"]))


def test_arrivals_drain(capsys):
    rc, out, err = _run(capsys, MM1, "--arrivals", "50", "--horizon", "10000", "--warmup", "0", "--json")
    assert rc == 0, err
    run = json.loads(out)["run"]
    assert run["arrivals"] == 50 and run["ended"] == 50 and run["end"] < 10000


@pytest.mark.parametrize("argv,needle", [
    ([VLLM, "--set", "nope=3"], "nope"),
    ([VLLM, "--horizon", "-5"], "horizon"),
    ([VLLM, "--horizon", "10", "--warmup", "20"], "warmup"),
    ([MM1, "--arrivals", "100000", "--horizon", "10"], "drained"),
    ([str(ROOT / "examples" / "multi-turn" / "closed.sq"), "--arrivals", "5"], "arrivals"),
])
def test_bad_input_exit_2(capsys, argv, needle):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2
    assert needle in err and "Traceback" not in err


def test_runtime_guard_exit_2(capsys, tmp_path):
    prog = tmp_path / "guard.sq"
    prog.write_text("""
fn main() {
  stage s : fifo(1);
  workload { arrive poisson(1); }
  server { set x = ~uniform(0, 3); branch (floor(x)) { run s (1); } }
}
""")
    rc, out, err = _run(capsys, str(prog), "--horizon", "100")
    assert rc == 2
    assert "guard" in err and "Traceback" not in err


def test_records_parquet(capsys, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "r.parquet"
    rc, out, err = _run(capsys, VLLM, "--horizon", "30", "--warmup", "0", "--records", str(path))
    assert rc == 0, err
    t = pq.read_table(str(path))
    assert t.column_names == ["session", "turn", "submit", "first_token", "completion", "ttft",
                              "response", "prompt", "output", "hit"]
    assert t.num_rows > 0


def test_records_parquet_without_pyarrow(capsys, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    rc, out, err = _run(capsys, VLLM, "--horizon", "30", "--records", str(tmp_path / "r.parquet"))
    assert rc == 2 and "pyarrow" in err and out == ""


def test_default_warmup_is_zero_for_a_batch_workload(capsys):
    # A batch workload starts every session at time 0: the default warm-up (10 % of the horizon)
    # would discard it (the replay example reported 0 turns); open workloads keep the 10 %.
    rc = main(["run", str(ROOT / "examples/replay/vllm_replay.sq"), "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert rc == 0 and rep["run"]["warmup"] == 0 and rep["run"]["turns"] > 0
    rc = main(["run", str(ROOT / "examples/single-turn/mm1.sq"), "--horizon", "200", "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert rc == 0 and rep["run"]["warmup"] == 20
    rc = main(["run", str(ROOT / "examples/replay/vllm_replay.sq"), "--warmup", "60", "--json"])
    assert json.loads(capsys.readouterr().out)["run"]["warmup"] == 60   # an explicit one is kept
