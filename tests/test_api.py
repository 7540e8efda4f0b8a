"""The Python API (docs/api.md): serq.load / Program.run / Result, against the command line."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

import serq
from serq.cli import main
from serq.errors import SerqError

pd = pytest.importorskip("pandas")

ROOT = Path(__file__).resolve().parents[1]
VLLM = str(ROOT / "examples" / "multi-turn" / "vllm.sq")
MM1 = str(ROOT / "examples" / "single-turn" / "mm1.sq")


def cli(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_run_report_is_the_cli_json_and_records_are_the_cli_records(capsys, tmp_path):
    rec = tmp_path / "r.csv"
    rc, out, _ = cli(capsys, "run", VLLM, "--set", "Lambda=0.5", "--seed", "3", "--horizon", "20",
                     "--json", "--records", str(rec))
    assert rc == 0
    res = serq.load(VLLM, Lambda=0.5).run(seed=3, horizon=20)
    assert res.report == json.loads(out)
    with open(rec, newline="") as fh:
        rows = list(csv.DictReader(fh))
    df = res.records
    assert list(df.columns) == list(rows[0])
    assert len(df) == len(rows) > 20
    for got, want in zip(df.itertuples(index=False), rows):
        assert got.session == int(want["session"]) and got.turn == int(want["turn"])
        assert got.ttft == pytest.approx(float(want["ttft"]), rel=1e-12)
        assert got.prompt == float(want["prompt"])


def test_summary_renames_the_report_and_derives_itl_from_records():
    res = serq.load(VLLM).run(seed=2, horizon=40)
    s = res.summary
    assert len(s) == 1
    c = res.report["client"]
    assert s["ttft_mean"][0] == c["ttft"]["mean"]
    assert s["ttft_median"][0] == c["ttft"]["p50"]
    assert s["ttft_p90"][0] == c["ttft"]["p90"]
    assert s["e2el_p99"][0] == c["response"]["p99"]
    assert s["tpot_count"][0] == c["tpot"]["count"]
    r = res.records
    d = r[r["output"] > 1]
    # the mean over every token gap of every request, computed here from the records directly
    assert s["itl_mean"][0] == pytest.approx(((d["completion"] - d["first_token"]).sum()) / (d["output"] - 1).sum())
    span = res.report["run"]["end"] - res.report["run"]["warmup"]
    assert s["output_throughput"][0] == pytest.approx(r["output"].sum() / span)
    assert s["request_throughput"][0] == pytest.approx(c["response"]["count"] / span)
    assert s["observe_hit_mean"][0] == res.report["observe"]["hit"]["mean"]
    assert "pool_kv_mean_used" in s.columns and "stage_vllm_utilization" in s.columns


def test_p90_lies_between_median_and_p99():
    c = serq.load(MM1).run(seed=1, horizon=200).report["client"]["response"]
    assert c["p50"] <= c["p90"] <= c["p99"]


def test_errors_are_the_cli_messages(capsys):
    rc, _, err = cli(capsys, "run", VLLM, "--set", "nope=1")
    assert rc == 2
    with pytest.raises(SerqError) as info:
        serq.load(VLLM, nope=1)
    assert info.value.render() == err.strip()
    prog = serq.load(VLLM)
    for kwargs, argv in (({"horizon": -1}, ["--horizon", "-1"]), ({"warmup": 700}, ["--warmup", "700"]),
                         ({"seed": -1}, ["--seed", "-1"])):
        rc, _, err = cli(capsys, "run", VLLM, *argv)
        assert rc == 2
        with pytest.raises(SerqError) as info:
            prog.run(**kwargs)
        assert info.value.render() == err.strip()
    rc, _, err = cli(capsys, "run", str(ROOT / "nowhere.sq"))
    with pytest.raises(SerqError) as info:
        serq.load(ROOT / "nowhere.sq")
    assert rc == 2 and info.value.render() == err.strip()
    with pytest.raises(SerqError, match="a setting is a number"):
        serq.load(VLLM, Lambda=[1, 2])


def test_sample_and_spec_are_the_cli(capsys, tmp_path):
    prog = serq.load(MM1, service=0.5)
    out = tmp_path / "s.json"
    assert cli(capsys, "sample", MM1, "--set", "service=0.5", "--seed", "4", "--sessions", "3", "-o", str(out))[0] == 0
    data = prog.sample(seed=4, sessions=3)
    assert data == json.loads(out.read_text())
    rc, text, _ = cli(capsys, "spec", MM1, "--set", "service=0.5", "--sessions", str(out), "--max-steps", "30")
    assert rc == 0
    steps = prog.spec(data, max_steps=30)
    assert steps == [json.loads(line) for line in text.splitlines()]
    # a replay of the sample in the fast simulator runs from the same dict
    res = prog.run(replay=data)
    assert res.report["run"]["arrivals"] == 3 and math.isfinite(res.report["run"]["end"])


def test_with_settings_and_no_records():
    a = serq.load(VLLM, Lambda=0.3)
    b = a.with_settings(Lambda=0.6, max_seqs=4)
    assert b.settings == {"Lambda": "0.6", "max_seqs": "4"} and a.settings == {"Lambda": "0.3"}
    res = b.run(seed=1, horizon=30, records=False)
    assert res.metrics["itl_mean"] is None and res.report["run"]["turns"] > 0
    with pytest.raises(SerqError, match="kept no records"):
        res.records
