"""`serq fit`: recovery of known coefficients, the held-out error, and every bad input (exit 2)."""

from __future__ import annotations

import csv
import json
import math
import re

import numpy as np
import pytest

from serq.cli import main
from serq.fit import DEFAULT_MODEL, FitError, fit_steps, parse_model

TRUE = {"c": 0.010, "d": 0.0008, "e": 2e-7, "a": 2.5e-4, "b": 3e-9}


def synthetic(path, n=400, noise=0.03, seed=1, outliers=0):
    """Steps of the three kinds with the default model's cost and multiplicative noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        kind = ("decode", "prefill", "mixed")[i % 3]
        dec = int(rng.integers(1, 16)) if kind != "prefill" else 0
        kvd = dec * int(rng.integers(100, 2000))
        pre = int(rng.integers(16, 256)) if kind != "decode" else 0
        k = int(rng.integers(0, 1500))
        att = pre * (k + pre / 2)
        cost = TRUE["c"] + TRUE["d"] * dec + TRUE["e"] * kvd + TRUE["a"] * pre + TRUE["b"] * att
        y = cost * (1 + noise * rng.standard_normal())
        if i < outliers:
            y *= 5
        rows.append({"cpu_s": y, "decoders": dec, "kv_decode": kvd, "prefilled": pre, "attention": att,
                     "kind": kind})
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_recovers_known_coefficients_within_their_intervals(tmp_path):
    fit = fit_steps(synthetic(tmp_path / "s.csv"), target="cpu_s")
    for name, value in TRUE.items():
        lo, hi = fit.ci95[name]
        assert lo <= value <= hi, (name, value, lo, hi)
    for name in ("c", "d", "a"):       # the well-determined ones (e and b have wide intervals here)
        assert fit.coef[name] == pytest.approx(TRUE[name], rel=0.1)
    # the held-out error is the noise level (3 % multiplicative: mean |e| ≈ 2.4 %)
    for kind in ("decode", "prefill", "mixed"):
        assert fit.mape[kind] == pytest.approx(0.024, abs=0.012)
    assert fit.test_rows == 80 and fit.train_rows == 320


def test_robust_fit_resists_outliers(tmp_path):
    path = synthetic(tmp_path / "o.csv", outliers=20)
    plain = fit_steps(path, target="cpu_s")
    robust = fit_steps(path, target="cpu_s", robust=True)
    assert abs(robust.coef["c"] - TRUE["c"]) < abs(plain.coef["c"] - TRUE["c"])
    assert robust.coef["a"] == pytest.approx(TRUE["a"], rel=0.05)


def test_same_seed_same_split_and_coefficients(tmp_path):
    path = synthetic(tmp_path / "s.csv")
    a, b = fit_steps(path, target="cpu_s", seed=3), fit_steps(path, target="cpu_s", seed=3)
    assert a.coef == b.coef and a.mape == b.mape


def test_model_expression_forms():
    cols = ["decoders", "kv_decode", "prefilled", "attention"]
    terms = parse_model(DEFAULT_MODEL, cols)
    assert [t.coef for t in terms] == ["c", "d", "e", "a", "b"]
    assert parse_model("k0 + k2*prefilled**2 + k1*decoders*prefilled", cols)[1].factors == (("prefilled", 2),)
    for bad, what in [("c + decoders", "does not start with a coefficient"),
                      ("c + d*e*decoders", "missing column(s) e"),
                      ("c + d*log(decoders)", "not a column or column**N"), ("c + c*decoders", "two terms"),
                      ("c + 2*decoders", "does not start with a coefficient"), ("c +", "not an expression")]:
        with pytest.raises(FitError, match=re.escape(what)):
            parse_model(bad, cols)


def _cli(capsys, *argv):
    rc = main(["fit", *map(str, argv)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_table_profile_and_set_args(tmp_path, capsys):
    path = synthetic(tmp_path / "s.csv")
    rc, out, err = _cli(capsys, path)
    assert rc == 0 and "MAPE (held out)" in out and "decode:" in out, err
    prof = tmp_path / "p.json"
    rc, out, _ = _cli(capsys, path, "-o", prof, "--set-args")
    assert rc == 0
    data = json.loads(prof.read_text())
    assert data["serq_profile"] == 1 and data["kind"] == "fit" and data["cost_model"] == DEFAULT_MODEL
    assert set(data["set"]) == {"c_fit", "d_dec", "e_kv", "a_pre", "b_att"}
    assert float(data["set"]["a_pre"]) == pytest.approx(TRUE["a"], rel=0.25)
    assert out.split() == [w for k, v in sorted(data["set"].items()) for w in ("--set", f"{k}={v}")]


@pytest.mark.parametrize("edit, message", [
    (lambda rows: [{k: v for k, v in r.items() if k != "attention"} for r in rows], "missing column(s) attention"),
    (lambda rows: [dict(r, prefilled="nan") if i == 5 else r for i, r in enumerate(rows)], "row 7, column prefilled"),
    (lambda rows: [dict(r, cpu_s="fast") if i == 2 else r for i, r in enumerate(rows)], "not a number: 'fast'"),
    (lambda rows: rows[:5], "training rows for 5 coefficients"),
    (lambda rows: [dict(r, attention=0) for r in rows], "singular: coefficient(s) b"),
    (lambda rows: [dict(r, kv_decode=3 * float(r["decoders"])) for r in rows], "linearly dependent"),
    (lambda rows: [{k: v for k, v in r.items() if k != "cpu_s"} for r in rows], "no column 'cpu_s'"),
])
def test_bad_input_is_a_clear_error_exit_2(tmp_path, capsys, edit, message):
    src = synthetic(tmp_path / "s.csv", n=60)
    with open(src, newline="") as f:
        rows = edit(list(csv.DictReader(f)))
    bad = tmp_path / "bad.csv"
    with open(bad, "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    rc, out, err = _cli(capsys, bad)
    assert rc == 2 and out == ""
    assert err.startswith("serq fit: error: ") and message in err and "Traceback" not in err


def test_unreadable_inputs(tmp_path, capsys):
    for path, message in [(tmp_path / "nope.csv", "no such file"), (tmp_path, "not a file")]:
        rc, _, err = _cli(capsys, path)
        assert rc == 2 and message in err
    empty = tmp_path / "e.csv"
    empty.write_text("")
    assert _cli(capsys, empty)[0] == 2
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe\x00x")
    rc, _, err = _cli(capsys, binary)
    assert rc == 2 and "UTF-8" in err
    rc, _, err = _cli(capsys, synthetic(tmp_path / "s.csv", n=40), "--holdout", "1.5")
    assert rc == 2 and "--holdout" in err


def test_intervals_are_finite_and_ordered(tmp_path):
    fit = fit_steps(synthetic(tmp_path / "s.csv", n=90), target="cpu_s")
    for lo, hi in fit.ci95.values():
        assert math.isfinite(lo) and math.isfinite(hi) and lo < hi
