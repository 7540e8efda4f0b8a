"""Trace import (serq.traces, `serq import`): the committed samples become sessions files that
examples/multi-turn/vllm.sq replays request for request."""

from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path

import pytest

import serq
from serq.cli import main
from serq.errors import SerqError
from serq.traces import estimate_tokens, import_trace, read_sharegpt

ROOT = Path(__file__).resolve().parents[1]
VLLM = str(ROOT / "examples" / "multi-turn" / "vllm.sq")
AZURE = str(ROOT / "examples" / "replay" / "data" / "azure_sample.csv")
SHAREGPT = str(ROOT / "examples" / "replay" / "data" / "sharegpt_sample.json")


def _azure_rows():
    with open(AZURE, newline="") as fh:
        rows = list(csv.DictReader(fh))
    t = [datetime.fromisoformat(r["TIMESTAMP"][:26]).timestamp() for r in rows]
    return [(x - t[0], int(r["ContextTokens"]), int(r["GeneratedTokens"])) for x, r in zip(t, rows)]


def test_azure_requests_are_replayed_at_their_times_with_their_lengths(tmp_path, capsys):
    out = tmp_path / "az.json"
    assert main(["import", "azure", AZURE, "-o", str(out)]) == 0
    assert "40 session(s), 40 request(s)" in capsys.readouterr().err
    res = serq.load(VLLM).run(replay=str(out))
    want = _azure_rows()
    assert res.report["run"]["arrivals"] == res.report["run"]["turns"] == 40
    got = sorted(res.record_rows, key=lambda r: r[0])
    for (t, ctx, gen), r in zip(want, got):
        assert r[1] == 1  # one turn per request
        assert r[2] == pytest.approx(t, abs=1e-9)  # submitted at its timestamp
        assert (r[7], r[8]) == (ctx, gen)  # prompt and output tokens


def test_sharegpt_conversations_are_multi_turn_sessions(tmp_path):
    data = import_trace("sharegpt", SHAREGPT, seed=3, rate=2.0, think=1.0)
    assert data == import_trace("sharegpt", SHAREGPT, seed=3, rate=2.0, think=1.0)
    convs = json.loads(Path(SHAREGPT).read_text())
    # conversation 4 ends with an unanswered message: 1 request; the system prompt joins turn 1
    assert [len(s["turns"]) for s in data["sessions"]] == [2, 3, 1, 1]
    msgs = convs[1]["conversations"]
    assert data["sessions"][1]["turns"][0][0] == str(estimate_tokens(msgs[0]["value"]) + estimate_tokens(msgs[1]["value"]))
    res = serq.load(VLLM).run(replay=data)
    assert res.report["run"]["turns"] == 7
    by = {(r[0], r[1]): r for r in res.record_rows}
    first = convs[0]["conversations"]
    assert [by[(0, k)][8] for k in (1, 2)] == [estimate_tokens(first[1]["value"]), estimate_tokens(first[3]["value"])]
    for serial, s in enumerate(data["sessions"]):
        prompt = 0
        for k, (new, out_minus_1, _more) in enumerate(s["turns"], 1):
            want_prompt = prompt + int(new)
            r = by[(serial, k)]
            assert (r[7], r[8]) == (want_prompt, int(out_minus_1) + 1)
            prompt = want_prompt + r[8]  # the next turn resends the conversation and its answer


@pytest.mark.parametrize("text, message", [
    ("time,ctx,gen\n1,2,3\n", "starts with the header TIMESTAMP,ContextTokens,GeneratedTokens"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n1,20,0\n", "t.csv:2:6: error: GeneratedTokens '0'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nnoon,20,3\n", "t.csv:2:1: error: TIMESTAMP 'noon'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "the trace has no request"),
])
def test_bad_azure_trace(tmp_path, capsys, monkeypatch, text, message):
    monkeypatch.chdir(tmp_path)
    Path("t.csv").write_text(text)
    assert main(["import", "azure", "t.csv", "-o", "s.json"]) == 2
    assert message in capsys.readouterr().err
    assert not Path("s.json").exists()


def test_bad_sharegpt(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps([{"conversations": [{"from": "robot", "value": "hi"}]}]))
    with pytest.raises(SerqError, match=r"\[0\]\.conversations\[0\]\.from = 'robot'"):
        read_sharegpt(str(p))
    p.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hi"}]}]))
    with pytest.raises(SerqError, match="no conversation has a"):
        read_sharegpt(str(p))
    with pytest.raises(SerqError, match="--rate must be"):
        import_trace("sharegpt", SHAREGPT, rate=0)


def test_sweep_over_a_replayed_trace(tmp_path, capsys):
    pytest.importorskip("pandas")
    s = tmp_path / "az.json"
    assert main(["import", "azure", AZURE, "-o", str(s), "--limit", "10"]) == 0
    out = tmp_path / "sw.csv"
    assert main(["sweep", VLLM, "--replay", str(s), "--grid", "max_seqs=1,16", "--reps", "1",
                 "--jobs", "1", "-o", str(out)]) == 0
    import pandas as pd

    runs = pd.read_csv(out)
    assert list(runs["turns"]) == [10, 10]
    assert main(["sweep", VLLM, "--replay", str(s), "--grid", "max_seqs=1", "--reps", "2",
                 "-o", str(out)]) == 2
    assert "every replication would be the same run" in capsys.readouterr().err
