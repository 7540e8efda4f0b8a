"""Client metrics per turn (docs/report.md "client"): every turn records a `response` — its engine
call's, or, for a turn whose server makes no engine call, the end of the server block − the time
`turn;` ran — and a turn's metrics count iff the turn counts in `turns` (its `turn;` ran after the
warm-up), so `turns` and the client counts agree at the warm-up boundary. In serq_fast (`serq run`)
and in serq_spec (its observation records)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from serq.cli import main

ROOT = Path(__file__).resolve().parents[1]
VLLM = str(ROOT / "examples" / "multi-turn" / "vllm.sq")
MM1 = str(ROOT / "examples" / "single-turn" / "mm1.sq")
CLOSED = str(ROOT / "examples" / "multi-turn" / "closed.sq")


def run_json(capsys, *argv):
    rc = main(["run", *argv, "--json"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    return json.loads(cap.out)


def test_non_engine_turn_response_is_the_sojourn(capsys, tmp_path):
    # mm1's server: `set t_in = now; … run desk; observe sojourn = now - t_in;` — the turn's response
    # is exactly the sojourn, sample for sample (no warm-up: an observation counts by the time it is
    # recorded, a turn's metrics by the time the turn began); one --records row per turn, with no
    # engine fields.
    path = tmp_path / "r.csv"
    rep = run_json(capsys, MM1, "--horizon", "3000", "--warmup", "0", "--records", str(path))
    resp, soj = rep["client"]["response"], rep["observe"]["sojourn"]
    assert resp["count"] == soj["count"] > 1000
    for k in ("mean", "ci", "p50", "p99"):
        assert abs(resp[k] - soj[k]) <= 1e-9 * max(1.0, abs(soj[k])), k
    assert rep["client"]["ttft"]["count"] == rep["client"]["tpot"]["count"] == 0
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == resp["count"]
    r = rows[0]
    assert r["first_token"] == r["ttft"] == r["prompt"] == r["output"] == r["hit"] == ""
    assert abs(float(r["completion"]) - float(r["submit"]) - float(r["response"])) < 1e-9


def test_closed_turns_have_a_response(capsys):
    # closed.sq: `loop { tool; turn; }` with a server `run cpu`: a response for every finished turn
    rep = run_json(capsys, CLOSED, "--horizon", "2000")
    n = rep["client"]["response"]["count"]
    assert rep["run"]["turns"] - 10 <= n <= rep["run"]["turns"]  # at most N = 10 turns in flight


def test_turns_and_client_counts_agree_at_the_warm_up(capsys):
    # Drained runs (--arrivals): every counted turn finishes, so each client count equals `turns`
    # exactly, whatever turn the warm-up cuts. (Recording by the time a value becomes known, a
    # turn submitted before the warm-up and answered after it was counted in `client` only.)
    for warm in ("100", "137.3", "211.1"):
        rep = run_json(capsys, MM1, "--arrivals", "400", "--horizon", "1e6", "--warmup", warm)
        assert rep["client"]["response"]["count"] == rep["run"]["turns"], warm
    for warm in ("30", "41.7", "55.5"):
        rep = run_json(capsys, VLLM, "--arrivals", "40", "--horizon", "1e6", "--warmup", warm, "--seed", "3")
        turns = rep["run"]["turns"]
        assert rep["client"]["ttft"]["count"] == rep["client"]["response"]["count"] == turns > 0, warm


SPEC = """
fn main() {
  stage desk : fifo(1);
  workload { arrive renewal(1); }
  server { run desk (1.5); }
}
"""


def test_spec_records_turn_responses_of_counted_turns(capsys, tmp_path):
    # turns at 1, 2, 3 (service 1.5, one server) end at 2.5, 4, 5.5; the warm-up at 2.5 counts the
    # third turn only: one response, 5.5 − 3 (the second, submitted at 2, ends after the warm-up but
    # does not count).
    prog = tmp_path / "p.sq"
    prog.write_text(SPEC)
    sessions = tmp_path / "s.json"
    assert main(["sample", str(prog), "--seed", "1", "--sessions", "3", "-o", str(sessions)]) == 0
    capsys.readouterr()
    assert main(["spec", str(prog), "--sessions", str(sessions), "--warmup", "2.5"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    resp = [o for x in lines for o in x["records"]["observations"] if o[0] == "response"]
    assert resp == [["response", 2, 1, "11/2", "5/2"]]
    assert main(["spec", str(prog), "--sessions", str(sessions)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    resp = [o[4] for x in lines for o in x["records"]["observations"] if o[0] == "response"]
    assert resp == ["3/2", "2", "5/2"]
