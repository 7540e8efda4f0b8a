"""Capacity search (serq.capacity, `serq capacity`) against the M/M/1 closed form: with mean
service 1 s, the mean response 1 / (1 - lambda) stays below 2 s exactly while lambda < 0.5."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serq.capacity import Search, _next_value, capacity
from serq.cli import main
from serq.errors import SerqError
from serq.metrics import Slo, metric_column

pytest.importorskip("pandas")

ROOT = Path(__file__).resolve().parents[1]
MM1 = str(ROOT / "examples" / "single-turn" / "mm1.sq")
VLLM = str(ROOT / "examples" / "multi-turn" / "vllm.sq")


def test_mm1_capacity_is_the_closed_form():
    res = capacity(MM1, "lambda", "e2el.mean<2", reps=3, horizon=3000, rel_tol=0.01, jobs=1, progress=False)
    assert res.capacity == pytest.approx(0.5, abs=0.04)
    assert res.ci is not None and abs(res.capacity - 0.5) < res.ci + 0.01
    for lo, hi in res.brackets:
        assert hi - lo <= 0.01 * lo
    # every run below a replication's capacity met the SLO, every run above it failed
    for x, rep, _seed, met, _m in res.evaluations:
        assert met == (x <= res.per_rep[rep])


def test_cli_capacity_json(capsys):
    rc = main(["capacity", MM1, "--vary", "lambda", "--slo", "e2el.mean<2", "--reps", "2",
               "--horizon", "1000", "--jobs", "1", "--lo", "0.1", "--hi", "0.9", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["slo"] == ["e2el.mean<2"] and len(out["per_rep"]) == 2
    assert 0.4 < out["capacity"] < 0.6
    assert all(0.1 <= lo < hi <= 0.9 for lo, hi in out["brackets"])


def test_bracketing_and_integer_bisection():
    s = Search(0, 1)
    assert _next_value(s, 1.0, False, 0.02, None, None) == 1.0
    s.lo = 1.0
    assert _next_value(s, 1.0, False, 0.02, None, None) == 2.0
    s.hi = 2.0
    assert _next_value(s, 1.0, False, 0.02, None, None) == 1.5
    s = Search(0, 1, lo=8.0, hi=10.0)
    assert _next_value(s, 1.0, True, 0.02, None, None) == 9.0
    s.lo = 9.0
    assert _next_value(s, 1.0, True, 0.02, None, None) is None
    s = Search(0, 1, hi=3.0)
    assert _next_value(s, 1.0, True, 0.02, None, None) == 1.0


@pytest.mark.parametrize("argv, message", [
    (["--slo", "e2el.mean<2", "--lo", "0.9", "--hi", "0.95"], "fails already at the smallest value allowed"),
    (["--slo", "e2el.mean<2", "--lo", "0.05", "--hi", "0.1"], "still holds at the largest value allowed"),
    (["--slo", "e2el.mean=2"], "expected METRIC<NUMBER"),
    (["--slo", "ttft.p42<2"], "no metric 'ttft_p42'"),
    (["--slo", "e2el.mean<2", "--lo", "0.5", "--hi", "0.4"], "--lo must be below --hi"),
])
def test_cli_capacity_bad_input_exits_2(capsys, argv, message):
    rc = main(["capacity", MM1, "--vary", "lambda", "--reps", "1", "--horizon", "300", "--jobs", "1", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


def test_slo_and_metric_names():
    assert metric_column("ttft.p99") == "ttft_p99"
    assert metric_column("ttft.p50") == metric_column("ttft_median") == "ttft_median"
    slo = Slo("e2el.mean <= 10")
    assert slo.met(10.0) and not slo.met(10.5) and not slo.met(None) and not slo.met(float("nan"))
    with pytest.raises(SerqError):
        Slo("ttft.p99", columns=["ttft_p99"])
