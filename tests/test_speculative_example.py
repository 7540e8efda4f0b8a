"""examples/single-turn/vllm_speculative.sq: the check its header states. A decode step with k
drafts of per-draft acceptance alpha yields mu = (1 - alpha^(k+1)) / (1 - alpha) tokens on average,
so at low load the TPOT is the step time T(k) over mu, plus the last step's overshoot (the renewal
theorem's second term). The acceptance counts are drawn by `accept (q_out, alpha);`
(docs/language.md §7.3). Fast engine, seed 1; the default test at horizon 5000 (about 75
requests), the header's own figures at horizon 100000 behind `-m slow`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from serq import api

PROGRAM = Path(__file__).resolve().parent.parent / "examples" / "single-turn" / "vllm_speculative.sq"


def closed_form_tpot(k: int, alpha: float, t_fixed: float = 0.01, per_token: float = 5e-5,
                     t_draft: float = 0.001) -> float:
    """The header's E[TPOT] = T(k) (1 / mu + (E[X^2] - mu) / (2 mu^2) E[1 / m]) for a request alone,
    X = 1 + min(A, k) the outputs of one step, m = Q - 1 uniform on 200 .. 399."""
    p = [(1 - alpha) * alpha ** j for j in range(k)] + [alpha ** k]   # P(X = 1 + j)
    mu = sum((j + 1) * q for j, q in enumerate(p))
    ex2 = sum((j + 1) ** 2 * q for j, q in enumerate(p))
    inv_m = sum(1 / m for m in range(200, 400)) / 200
    step = t_fixed + per_token * (1 + k) + k * t_draft
    return step * (1 / mu + (ex2 - mu) / (2 * mu * mu) * inv_m)


def tpot(horizon: float, **settings) -> tuple[dict, int]:
    r = api.load(str(PROGRAM), **settings).run(seed=1, horizon=horizon, records=False)
    return r.report["client"]["tpot"], r.report["run"]["turns"]


def test_the_closed_forms_are_the_headers():
    """The numbers the header derives by hand."""
    assert closed_form_tpot(0, 0.7) == pytest.approx(0.010050, abs=5e-7)
    assert closed_form_tpot(2, 0.7) == pytest.approx(0.0055627, abs=5e-8)
    assert closed_form_tpot(4, 0.7) == pytest.approx(0.0051623, abs=5e-8)
    assert closed_form_tpot(4, 0.3) == pytest.approx(0.010014, abs=5e-7)


def test_speculation_divides_the_tpot_as_derived():
    """k = 0 and k = 4 at alpha 0.7 on the same requests: each mean TPOT within its 95 % CI plus
    0.5 % (the few shared iterations) of the closed form, so k = 4 is about 1.95 times faster
    (seeded fault: accept_count's ln(alpha) taken as ln(alpha / 2), fewer drafts accepted: fails)."""
    t0, n0 = tpot(5000, k=0)
    t4, n4 = tpot(5000, k=4)
    assert n0 == n4 > 50
    for got, k in ((t0, 0), (t4, 4)):
        want = closed_form_tpot(k, 0.7)
        assert abs(got["mean"] - want) < got["ci"] + 0.005 * want, (k, got, want)
    assert t0["mean"] / t4["mean"] == pytest.approx(1.947, rel=0.02)


HEADER_RUNS = {"k = 0": {"k": 0}, "k = 2, alpha 0.7": {"k": 2}, "k = 4, alpha 0.7": {"k": 4},
               "k = 4, alpha 0.3": {"k": 4, "alpha": 0.3}}


def header_figures() -> dict:
    """The MEASURED block of the header: label -> (mean TPOT, its CI) in ms."""
    text = PROGRAM.read_text().split("// MEASURED", 1)[1].split("//   Each within", 1)[0]
    rows = re.findall(r"//\s+(k = \d(?:, alpha 0\.\d)?)\s+([\d.]+) ms \(([\d.]+)\)", text)
    return {label: (float(mean), float(ci)) for label, mean, ci in rows}


def test_the_header_lists_every_measured_run():
    assert set(header_figures()) == set(HEADER_RUNS)


@pytest.mark.slow
@pytest.mark.parametrize("label", sorted(HEADER_RUNS))
def test_the_headers_measured_figures(label):
    """The header's command for each run (about 10 to 25 s each): the mean TPOT and its CI as
    printed there, to their last digit."""
    mean, ci = header_figures()[label]
    got, turns = tpot(100000, **HEADER_RUNS[label])
    assert turns == 1840
    assert round(got["mean"] * 1000, 4) == mean and round(got["ci"] * 1000, 4) == ci, (label, got)
