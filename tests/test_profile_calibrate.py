"""`serq profile --calibrate FIT`: a roofline corrected term by term by a measured fit."""

from __future__ import annotations

import pytest

from serq.errors import SerqError
from serq.profilefile import resolve_profile
from serq.roofline import Setup, calibrate, load_catalog, roofline

CAT = load_catalog()
SEED = resolve_profile("a100-qwen3-8b-seed")


def test_calibrating_the_measured_setup_gives_the_fit_back():
    roof = roofline(Setup("a100-80g", "qwen3-8b", tp=1), CAT)
    cal = calibrate(roof, roof, SEED)
    for name in ("c", "d", "e", "a", "b"):
        assert cal["coefficients"][name]["value"] == pytest.approx(SEED["coefficients"][name]["value"], rel=1e-5)
    # the replay's step cost c_fit + c_it + … is the fit's
    s = cal["set"]
    assert float(s["c_fit"]) + float(s["c_it"]) == pytest.approx(SEED["coefficients"]["c"]["value"]
                                                                + float(SEED["set"]["c_it"]), rel=1e-5)
    for setting in ("d_dec", "e_kv", "a_pre", "b_att"):
        assert float(s[setting]) == pytest.approx(float(SEED["set"][setting]), rel=1e-5)


def test_another_model_keeps_the_factors():
    src = roofline(Setup("a100-80g", "qwen3-8b", tp=1), CAT)
    big = roofline(Setup("a100-80g", "llama-3.1-70b"), CAT)
    cal = calibrate(big, src, SEED)
    f = cal["derived"]["calibration"]["factors_fit_over_roofline"]
    for name in ("a", "b", "d", "e"):
        assert cal["coefficients"][name]["value"] == pytest.approx(big["coefficients"][name]["value"] * f[name], rel=1e-5)
    # the seed's intercept is below the weight read at its KV bandwidth: no fixed overhead, and
    # the intercept scales with the weights read per GPU
    assert cal["derived"]["calibration"]["fixed_overhead_s"] == 0
    ratio = big["coefficients"]["c"]["value"] / src["coefficients"]["c"]["value"]
    assert cal["coefficients"]["c"]["value"] == pytest.approx(SEED["coefficients"]["c"]["value"] * ratio, rel=1e-5)


def test_a_fit_above_the_weight_read_keeps_a_fixed_overhead():
    roof = roofline(Setup("a100-80g", "qwen3-8b", tp=1), CAT)
    fit = {**SEED, "coefficients": {**SEED["coefficients"], "c": {"value": 0.030, "unit": "s", "ci95": None}}}
    cal = calibrate(roof, roof, fit)
    over = cal["derived"]["calibration"]["fixed_overhead_s"]
    assert over > 0
    assert cal["coefficients"]["c"]["value"] == pytest.approx(0.030, rel=1e-5)
    big = calibrate(roofline(Setup("a100-80g", "llama-3.1-70b"), CAT), roof, fit)
    assert big["derived"]["calibration"]["fixed_overhead_s"] == pytest.approx(over)


def test_a_fit_without_the_terms_is_refused():
    roof = roofline(Setup("a100-80g", "qwen3-8b", tp=1), CAT)
    fit = {**SEED, "coefficients": {k: v for k, v in SEED["coefficients"].items() if k != "b"}}
    with pytest.raises(SerqError, match="no coefficient b"):
        calibrate(roof, roof, fit)


def test_cli_refuses_a_roofline_as_the_measurement(tmp_path, capsys):
    from serq.cli import main

    prof = tmp_path / "r.json"
    assert main(["profile", "--gpu", "a100-80g", "--model", "qwen3-8b", "-o", str(prof)]) == 0
    rc = main(["profile", "--gpu", "a100-80g", "--model", "qwen3-8b", "--calibrate", str(prof)])
    assert rc == 2 and "not a measurement" in capsys.readouterr().err
    rc = main(["profile", "--gpu", "h100-sxm", "--model", "llama-3.1-70b", "--calibrate", "a100-qwen3-8b-seed",
               "--calibrate-model", "qwen3-8b", "--calibrate-gpu", "a100-80g", "--set-args"])
    assert rc == 0
