"""examples/single-turn/pd_disagg.sq: the check its header states. 1P1D and 2P2D disaggregated
serving (a prefill engine, a `transfer` of the KV over the decode GPU's link, a decode engine,
docs/language.md §11.15) against colocated engines on as many GPUs, on the same requests: at low
load the disaggregated TTFT is the prefill time, every transferred token is reused by the decode
engine, and a request takes longer end to end by the transfer time."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from serq import api

PROGRAM = Path(__file__).resolve().parent.parent / "examples" / "single-turn" / "pd_disagg.sq"
C0, C1, X = 5e-3, 1e-4, 1.05e-5   # the program's defaults: iteration cost, link seconds per token


def observed(R: int, disagg: int, **settings) -> dict:
    r = api.load(str(PROGRAM), R=R, disagg=disagg, **settings).run(seed=1, horizon=math.inf, arrivals=200,
                                                                    records=False)
    return r.report


@pytest.fixture(scope="module", params=[1, 2], ids=["1P1D", "2P2D"])
def low_load(request):
    """R and the (disaggregated, colocated) reports at lambda = 0.05, where requests hardly ever
    overlap."""
    return request.param, observed(request.param, 1, **{"lambda": 0.05}), observed(request.param, 0, **{"lambda": 0.05})


def test_disaggregated_ttft_is_the_prefill_time(low_load):
    _, dis, _ = low_load
    obs = dis["observe"]
    assert obs["ttft"]["count"] == obs["e2e"]["count"] == 200
    prefill = C0 + C1 * obs["prompt"]["mean"]
    assert abs(obs["ttft"]["mean"] - prefill) <= 0.01 * prefill, (obs["ttft"]["mean"], prefill)


def test_every_transferred_token_is_reused(low_load):
    """The landing hold caches the p tokens the transfer loaded; the decode request reuses them all."""
    obs = low_load[1]["observe"]
    assert obs["reused"]["count"] == 200
    assert obs["reused"]["mean"] == obs["prompt"]["mean"]


def test_end_to_end_exceeds_colocated_by_the_transfer_time(low_load):
    _, dis, col = low_load
    assert dis["observe"]["prompt"]["mean"] == col["observe"]["prompt"]["mean"]   # the same requests
    extra = dis["observe"]["e2e"]["mean"] - col["observe"]["e2e"]["mean"]
    transfer = X * dis["observe"]["prompt"]["mean"]
    assert abs(extra - transfer) <= 0.1 * transfer, (extra, transfer)


def test_a_copy_over_both_nics_takes_the_link_time_at_low_load(low_load):
    """`nics = 1`: the copy is one flow over the prefill GPU's sending NIC and the decode GPU's
    receiving NIC (`transfer nic_out[i], nic_in[k] (…)`, docs/language.md §11.15); alone on them it
    runs at rate 1, so at this load every request ends when it does over the fifo link."""
    R, dis, _ = low_load
    nics = observed(R, 1, nics=1, **{"lambda": 0.05})
    assert nics["observe"]["e2e"] == dis["observe"]["e2e"]
    assert nics["observe"]["ttft"] == dis["observe"]["ttft"]


@pytest.mark.slow
@pytest.mark.parametrize("R", [1, 2], ids=["1P1D", "2P2D"])
def test_at_load_decodes_keep_their_pace_and_prefills_queue(R):
    """The header's figures at lambda = 8R, 2000 arrivals (about 10 s): no prefill shares a decode's
    iteration when disaggregated, so the time per output token stays near c0 + c1 * decodes, well
    under the colocated one, while the R prefill engines queue and the TTFT grows past it."""
    settings = {"lambda": 8 * R}
    dis = api.load(str(PROGRAM), R=R, disagg=1, **settings).run(seed=1, horizon=math.inf, arrivals=2000, records=False)
    col = api.load(str(PROGRAM), R=R, disagg=0, **settings).run(seed=1, horizon=math.inf, arrivals=2000, records=False)
    assert dis.report["client"]["tpot"]["mean"] < 0.6 * col.report["client"]["tpot"]["mean"]
    assert dis.report["observe"]["ttft"]["mean"] > 1.5 * col.report["client"]["ttft"]["mean"]
