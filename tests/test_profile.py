"""Step-cost profiles: the catalog, the roofline, the profile file format, `serq profile` and
`--profile` (docs/profiles.md)."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from serq.cli import main
from serq.errors import SerqError
from serq.linker import setting_value
from serq.profilefile import profile_text, read_profile, resolve_profile, shipped_profiles, write_profile
from serq.roofline import Setup, check_catalog, load_catalog, model_params, roofline

ROOT = Path(__file__).resolve().parents[1]
VLLM = str(ROOT / "examples" / "multi-turn" / "vllm.sq")
REPLAY = str(ROOT / "examples" / "replay" / "vllm_replay.sq")
CATALOG = load_catalog()
PAIRS = [(g, m) for g in CATALOG["gpus"] for m in CATALOG["models"]]
# The default run simulates one pair per GPU and per model (tp 1 and 2, dense and MoE); the
# rest of the cross product, a second each, is marked slow.
COVER = set(zip(CATALOG["gpus"], CATALOG["models"]))
RUN_PAIRS = [pytest.param(g, m, marks=() if (g, m) in COVER else pytest.mark.slow) for g, m in PAIRS]
SEED = {"c": 13.9e-3, "d": 41e-6, "e": 0.138e-6, "a": 51.5e-6, "b": 4.02e-9}  # seed 000


# ------------------------------------------------------------------ the catalog and the roofline

def test_catalog_entries_name_known_sources():
    broken = copy.deepcopy(CATALOG)
    broken["gpus"]["a100-80g"]["source"] = "nowhere"
    with pytest.raises(SerqError, match="not in `sources`"):
        check_catalog(broken)
    broken = copy.deepcopy(CATALOG)
    broken["models"]["qwen3-8b"]["kv_heads"] = 0
    with pytest.raises(SerqError, match="kv_heads"):
        check_catalog(broken)


@pytest.mark.parametrize("mid", list(CATALOG["models"]))
def test_parameter_counts_match_the_published_ones(mid):
    """The architecture fields give the parameter counts the model cards publish (rounded)."""
    m = CATALOG["models"][mid]
    p = model_params(m)
    assert abs(p.total / 1e9 - m["params_published_B"]) / m["params_published_B"] < 0.02, p
    if "active_published_B" in m:
        assert abs(p.active / 1e9 - m["active_published_B"]) / m["active_published_B"] < 0.03, p
    else:
        assert p.active == p.total


@pytest.mark.parametrize("gpu,model", PAIRS)
def test_every_catalog_pair_gives_finite_positive_constants(gpu, model):
    prof = roofline(Setup(gpu, model), CATALOG)
    for name in ("a", "b", "c", "d", "e"):
        v = prof["coefficients"][name]["value"]
        assert math.isfinite(v) and v > 0, (name, v)
    tp = prof["derived"]["inputs"]["tp"]
    assert (prof["coefficients"]["comm"]["value"] > 0) == (tp > 1)
    for name, text in prof["set"].items():
        v = setting_value(text)
        assert v >= 0 and v != math.inf, (name, text)
    assert int(prof["set"]["blocks"]) >= 1
    assert prof["name"] == f"{gpu}/{model}/bf16/tp{tp}"


def test_a100_qwen3_8b_a_is_within_10_percent_of_the_seed_fit():
    prof = roofline(Setup("a100-80g", "qwen3-8b", tp=1), CATALOG)
    a = prof["coefficients"]["a"]["value"]
    assert abs(a - SEED["a"]) / SEED["a"] < 0.10, a
    # 2 x 8.19e9 parameters at 312 TFLOP/s
    assert a == pytest.approx(2 * 8_190_726_144 / 312e12, rel=1e-5)


def test_kv_blocks_follow_the_gpu_memory_utilization_rule():
    """(memory x utilization - weights - reserve) / (block x 2 x layers x kv_heads x head_dim x
    bytes), less vLLM's null block; halving the block size doubles the blocks."""
    p = roofline(Setup("a100-80g", "qwen3-8b", tp=1), CATALOG)
    weights = 8_190_726_144 * 2
    per_token = 2 * 36 * 8 * 128 * 2
    expect = math.floor((math.ceil(80 * 2**30 * 0.9) - weights - 2**30) / (16 * per_token)) - 1
    assert p["derived"]["kv_blocks"] == expect == int(p["set"]["blocks"])
    q = roofline(Setup("a100-80g", "qwen3-8b", tp=1, block_size=8), CATALOG)
    assert q["derived"]["kv_blocks"] in (2 * expect + 1, 2 * expect + 2)
    r = roofline(Setup("a100-80g", "qwen3-8b", tp=1, gpu_memory_utilization=0.5), CATALOG)
    assert r["derived"]["kv_blocks"] < expect


def test_tensor_parallelism_splits_the_terms_and_adds_an_all_reduce():
    one = roofline(Setup("h100-sxm", "llama-3.1-8b", tp=1), CATALOG)["coefficients"]
    two = roofline(Setup("h100-sxm", "llama-3.1-8b", tp=2), CATALOG)["coefficients"]
    for name in ("a", "b", "c", "e"):
        assert two[name]["value"] == pytest.approx(one[name]["value"] / 2, rel=1e-5)
    # 2 all-reduces per layer x 32 layers, ring factor 2(2-1)/2, 4096 x 2 bytes, 450 GB/s one way
    assert two["comm"]["value"] == pytest.approx(2 * 32 * 1 * 4096 * 2 / 450e9, rel=1e-5)
    assert two["d"]["value"] == pytest.approx(two["a"]["value"] + two["comm"]["value"], rel=1e-5)


def test_efficiency_factors_scale_the_terms():
    base = roofline(Setup("a100-80g", "qwen3-8b", tp=1), CATALOG)["coefficients"]
    slow = roofline(Setup("a100-80g", "qwen3-8b", tp=1, compute_eff=0.5, memory_eff=0.8), CATALOG)["coefficients"]
    assert slow["a"]["value"] == pytest.approx(base["a"]["value"] / 0.5, rel=1e-5)
    assert slow["c"]["value"] == pytest.approx(base["c"]["value"] / 0.8, rel=1e-5)


def test_a_model_that_does_not_fit_is_refused_with_the_tp_that_fits():
    with pytest.raises(SerqError, match=r"leaves no KV blocks.*--tp 4 fits"):
        roofline(Setup("l40s", "llama-3.1-70b", tp=1), CATALOG)
    assert roofline(Setup("l40s", "llama-3.1-70b"), CATALOG)["derived"]["inputs"]["tp"] == 4
    with pytest.raises(SerqError, match="no fp8 figure"):
        roofline(Setup("a100-80g", "qwen3-8b", dtype="fp8"), CATALOG)


# ------------------------------------------------------------------ serq profile

def run_cli(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("flag,kind", [("--gpu", "gpus"), ("--model", "models")])
def test_bad_names_exit_2_listing_the_known_ones(flag, kind, capsys):
    argv = ["profile", "--gpu", "a100-80g", "--model", "qwen3-8b"]
    argv[argv.index(flag) + 1] = "no-such-thing"
    rc, out, err = run_cli(argv, capsys)
    assert rc == 2 and out == ""
    assert "no-such-thing" in err and "Traceback" not in err
    for known in CATALOG[kind]:
        assert known in err


def test_profile_prints_writes_and_gives_set_args(tmp_path, capsys):
    rc, out, _ = run_cli(["profile", "--gpu", "a100-80g", "--model", "qwen3-8b"], capsys)
    assert rc == 0
    prof = json.loads(out)
    assert out == profile_text(prof)
    path = tmp_path / "p.json"
    rc, out2, _ = run_cli(["profile", "--gpu", "a100-80g", "--model", "qwen3-8b", "-o", str(path)], capsys)
    assert rc == 0 and out2 == "" and path.read_text() == out
    assert read_profile(str(path)) == prof
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # no temporary file left behind
    rc, words, _ = run_cli(["profile", "--gpu", "a100-80g", "--model", "qwen3-8b", "--set-args"], capsys)
    assert words.split() == [w for k, v in sorted(prof["set"].items()) for w in ("--set", f"{k}={v}")]
    rc, _, err = run_cli(["profile", "--gpu", "a100-80g", "--model", "qwen3-8b", "-o",
                          str(tmp_path / "missing" / "p.json")], capsys)
    assert rc == 2 and "cannot write the profile" in err


# ------------------------------------------------------------------ the file format

def valid_profile() -> dict:
    return roofline(Setup("a100-80g", "qwen3-8b", tp=1), CATALOG)


def _drop(key):
    def f(p):
        del p[key]
    return f


def _set(path, value):
    def f(p):
        d = p
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return f


REJECTIONS = {
    "missing set": (_drop("set"), "set: missing"),
    "missing name": (_drop("name"), "name: missing"),
    "unknown field": (_set(["extra"], 1), "extra: unknown field"),
    "version": (_set(["serq_profile"], 2), "serq_profile: must be 1"),
    "version true": (_set(["serq_profile"], True), "serq_profile: must be 1"),
    "empty name": (_set(["name"], " "), "name: must be a non-empty string"),
    "source not text": (_set(["source"], 3), "source: must be a non-empty string"),
    "kind": (_set(["kind"], "guess"), "kind: must be one of"),
    "coefficients list": (_set(["coefficients"], []), "coefficients: must be a JSON object"),
    "coefficient value text": (_set(["coefficients", "a", "value"], "5e-5"), "coefficients.a.value: must be a finite"),
    "coefficient value bool": (_set(["coefficients", "a", "value"], True), "coefficients.a.value: must be a finite"),
    "coefficient unit": (_set(["coefficients", "a", "unit"], ""), "coefficients.a.unit: must be a non-empty"),
    "coefficient ci95 missing": (lambda p: p["coefficients"]["a"].pop("ci95"), "coefficients.a.ci95: missing"),
    "coefficient ci95 shape": (_set(["coefficients", "a", "ci95"], [1]), "coefficients.a.ci95: must be [lo, hi]"),
    "coefficient ci95 order": (_set(["coefficients", "a", "ci95"], [2, 1]), "coefficients.a.ci95: lo must not"),
    "coefficient extra": (_set(["coefficients", "a", "stderr"], 1), "coefficients.a.stderr: unknown field"),
    "coefficient not object": (_set(["coefficients", "a"], 5e-5), "coefficients.a: must be a JSON object"),
    "set list": (_set(["set"], ["a=1"]), "set: must be a JSON object"),
    "set value number": (_set(["set", "a"], 5e-5), "set.a: must be the number as a JSON string"),
    "set value text": (_set(["set", "a"], "fast"), "set.a: not a number"),
    "set name": (_set(["set", "a-b"], "1"), "set.a-b: a setting is the name"),
    "derived list": (_set(["derived"], []), "derived: must be a JSON object"),
}


@pytest.mark.parametrize("case", list(REJECTIONS))
def test_read_profile_rejects_a_malformed_file(case, tmp_path):
    mutate, message = REJECTIONS[case]
    p = valid_profile()
    mutate(p)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(p))
    with pytest.raises(SerqError) as info:
        read_profile(str(path))
    assert info.value.file == str(path)
    assert "malformed profile" in info.value.message
    assert message in info.value.message, info.value.message


@pytest.mark.parametrize("text,message", [("{", "not JSON"), ('{"serq_profile": NaN}', "not JSON"),
                                          (b"\xff\xfe", "not UTF-8"), ("[1]", "a profile is a JSON object")])
def test_read_profile_rejects_what_is_not_json(text, message, tmp_path):
    path = tmp_path / "bad.json"
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    with pytest.raises(SerqError, match=message):
        read_profile(str(path))


def test_the_valid_profile_and_the_shipped_ones_are_accepted(tmp_path):
    path = tmp_path / "ok.json"
    write_profile(str(path), valid_profile())
    read_profile(str(path))
    assert "a100-qwen3-8b-seed" in shipped_profiles()
    for name in shipped_profiles():
        resolve_profile(name)
    with pytest.raises(SerqError, match="a100-qwen3-8b-seed"):
        resolve_profile("no-such-profile")
    with pytest.raises(SerqError, match="refusing to write"):
        write_profile(str(tmp_path / "x.json"), {"serq_profile": 1})
    assert not (tmp_path / "x.json").exists()


def test_the_seed_profile_is_the_seed_fit_and_the_replay_defaults():
    seed = resolve_profile("a100-qwen3-8b-seed")
    assert seed["kind"] == "published-fit"
    for name, v in SEED.items():
        assert seed["coefficients"][name]["value"] == pytest.approx(v, rel=1e-12)
    from serq.frontend import load_program
    defaults = load_program(REPLAY)["inputs"]
    for name, text in seed["set"].items():
        assert Fraction(defaults[name]) == setting_value(text), name


# ------------------------------------------------------------------ --profile in the commands

def ir_inputs(argv, capsys):
    rc, out, err = run_cli(["ir", *argv], capsys)
    assert rc == 0, err
    return json.loads(out)["inputs"]


def test_profile_applies_and_an_explicit_set_wins(tmp_path, capsys):
    path = tmp_path / "p.json"
    write_profile(str(path), roofline(Setup("h100-sxm", "llama-3.1-70b", tp=2), CATALOG))
    prof = read_profile(str(path))
    inputs = ir_inputs([VLLM, "--profile", str(path)], capsys)
    for name in ("a", "omega", "beta", "comm", "c_it", "blocks", "bs"):
        assert Fraction(inputs[name]) == setting_value(prof["set"][name]), name
    assert inputs["max_seqs"] == "16"  # not in the profile: the program's default
    inputs = ir_inputs([VLLM, "--profile", str(path), "--set", "a=1e-5", "--set", "blocks=77"], capsys)
    assert inputs["a"] == "1/100000" and inputs["blocks"] == "77"
    assert Fraction(inputs["omega"]) == setting_value(prof["set"]["omega"])
    inputs = ir_inputs([REPLAY, "--profile", str(path)], capsys)
    for name in ("c_fit", "d_dec", "e_kv", "a_pre", "b_att", "c_it", "blocks", "bs"):
        assert Fraction(inputs[name]) == setting_value(prof["set"][name]), name
    assert inputs["c0"] == "1/25"  # the replay's per-request overhead is not a roofline term


def test_profile_errors_exit_2(tmp_path, capsys):
    rc, _, err = run_cli(["run", VLLM, "--profile", "no-such-profile"], capsys)
    assert rc == 2 and "shipped: a100-qwen3-8b-seed" in err
    mm1 = str(ROOT / "examples" / "single-turn" / "mm1.sq")
    rc, _, err = run_cli(["check", mm1, "--profile", "a100-qwen3-8b-seed"], capsys)
    assert rc == 2 and "none of its settings" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    rc, _, err = run_cli(["sample", VLLM, "--seed", "1", "--sessions", "1", "--profile", str(bad)], capsys)
    assert rc == 2 and "malformed profile" in err and str(bad) in err
    ir = tmp_path / "p.ir.json"
    ir.write_text(json.dumps({}))
    rc, _, err = run_cli(["run", str(ir), "--profile", "a100-qwen3-8b-seed"], capsys)
    assert rc == 2 and "--profile applies to a .sq program" in err


def test_lockstep_and_spec_take_a_profile(tmp_path, capsys):
    path = tmp_path / "p.json"
    write_profile(str(path), roofline(Setup("b200", "mixtral-8x7b"), CATALOG))
    rc, out, err = run_cli(["lockstep", VLLM, "--profile", str(path), "--sessions", "1", "--max-steps", "80"], capsys)
    assert rc == 0, out + err
    sessions = tmp_path / "s.json"
    rc, _, err = run_cli(["sample", VLLM, "--profile", str(path), "--seed", "3", "--sessions", "1",
                          "-o", str(sessions)], capsys)
    assert rc == 0, err
    rc, out, err = run_cli(["spec", VLLM, "--profile", str(path), "--sessions", str(sessions),
                            "--max-steps", "30"], capsys)
    assert rc == 0 and out.count("\n") == 31, err


@pytest.mark.parametrize("gpu,model", RUN_PAIRS)
def test_the_vllm_example_runs_on_every_catalog_pair(gpu, model, tmp_path, capsys, request):
    if (gpu, model) not in COVER and "slow" not in (request.config.getoption("-m") or ""):
        pytest.skip("the rest of the catalog's cross product: select with -m slow")
    path = tmp_path / "p.json"
    write_profile(str(path), roofline(Setup(gpu, model), CATALOG))
    rc, out, err = run_cli(["run", VLLM, "--profile", str(path), "--horizon", "20", "--json"], capsys)
    assert rc == 0, err
    rep = json.loads(out)
    assert rep["client"]["ttft"]["count"] > 0
    rc, out, err = run_cli(["run", REPLAY, "--profile", str(path), "--json"], capsys)
    assert rc == 0, err
    assert json.loads(out)["client"]["ttft"]["count"] == 17  # the shipped trace's 17 turns


def test_the_validation_table_is_current():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "roofline_table.py"), "--check"],
                            capture_output=True, text=True, timeout=60, env={**os.environ})
    assert result.returncode == 0, result.stderr


def test_docs_list_every_catalog_entry():
    text = (ROOT / "docs" / "profiles.md").read_text(encoding="utf-8")
    for name in [*CATALOG["gpus"], *CATALOG["models"], *shipped_profiles()]:
        assert f"`{name}`" in text, name


def test_list_shows_the_catalog_with_sources(capsys):
    rc, out, _ = run_cli(["profile", "--list"], capsys)
    assert rc == 0
    for name in [*CATALOG["gpus"], *CATALOG["models"], *CATALOG["sources"]]:
        assert name in out, name
    rc, out, err = run_cli(["profile", "--model", "qwen3-8b"], capsys)
    assert rc == 2 and "give --gpu NAME" in err and "a100-80g" in err
