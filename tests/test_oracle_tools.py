"""The oracle tools' own logic, without vLLM: setup.sh's version choice and regen.py's verdicts.

setup.sh is run only up to its version handling (an unknown version, --dry-run), with a stub
interpreter that records being called, so no venv is built. regen.py is run against a stub
"venv" whose python plays the driver: it writes the committed traces back, altered as a test
asks, which is how regen.py sees a trace from another vLLM version.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools" / "vllm_oracle"
SETUP = TOOLS / "setup.sh"
VECTORS = ROOT / "vectors" / "vllm"
sys.path.insert(0, str(TOOLS))

import regen  # noqa: E402

SUPPORTED = ["0.31.0", "0.33.0"]


def run_setup(tmp_path, *args, env_extra=None):
    marker = tmp_path / "python-was-run"
    stub = tmp_path / "stub-python"
    stub.write_text(f"#!/bin/sh\ntouch {marker}\necho 3.11\n")
    stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERQ_VLLM")}
    env["SERQ_VLLM_PYTHON"] = str(stub)
    env.update(env_extra or {})
    r = subprocess.run(["bash", str(SETUP), *args], capture_output=True, text=True, env=env, timeout=30)
    return r, marker.exists()


@pytest.mark.parametrize("how", ["argument", "env"])
def test_setup_refuses_an_unknown_version_and_lists_the_supported_ones(tmp_path, how):
    if how == "argument":
        r, ran_python = run_setup(tmp_path, "0.32.0")
    else:
        r, ran_python = run_setup(tmp_path, env_extra={"SERQ_VLLM_VERSION": "0.32.0"})
    assert r.returncode == 1
    assert "unsupported vLLM version '0.32.0'" in r.stderr
    for v in SUPPORTED:
        assert v in r.stderr
    assert not ran_python, "the version must be checked before anything is run or built"


def test_setup_refuses_conflicting_versions(tmp_path):
    r, ran_python = run_setup(tmp_path, "0.31.0", env_extra={"SERQ_VLLM_VERSION": "0.33.0"})
    assert r.returncode == 1 and "SERQ_VLLM_VERSION=0.33.0" in r.stderr and not ran_python


def dry_run(tmp_path, *args, env_extra=None) -> dict:
    r, ran_python = run_setup(tmp_path, "--dry-run", *args, env_extra=env_extra)
    assert r.returncode == 0, r.stderr
    assert not ran_python
    return dict(line.split(" ", 1) for line in r.stdout.splitlines())


def test_setup_dry_run_plans_each_supported_version_with_its_own_lock_and_venv(tmp_path):
    plans = {v: dry_run(tmp_path, v) for v in SUPPORTED}
    assert dry_run(tmp_path) == plans["0.31.0"], "0.31.0 is the default"
    assert dry_run(tmp_path, env_extra={"SERQ_VLLM_VERSION": "0.33.0"}) == plans["0.33.0"]
    assert plans["0.31.0"]["venv"] == str(TOOLS / ".venv")
    assert plans["0.33.0"]["venv"] == str(TOOLS / ".venv-0.33.0")
    assert plans["0.31.0"]["pins"] == "vllm==0.31.0 xgrammar==0.2.7 apache-tvm-ffi==0.1.11"
    assert plans["0.33.0"]["pins"] == "vllm==0.33.0 xgrammar==0.2.8 apache-tvm-ffi==0.1.11"
    for v, plan in plans.items():
        assert plan["vllm"] == v and plan["torch"] == "2.13.0+cpu"
        lock = Path(plan["lock"])
        assert lock == TOOLS / f"requirements-vllm-{v}.txt" and lock.is_file()
        pins = [ln for ln in lock.read_text().splitlines() if ln and not ln.startswith("#")]
        names = {ln.split("==")[0].lower() for ln in pins}
        assert all("==" in ln for ln in pins), f"{lock.name}: every line pins a version"
        # installed separately (torch from disk, the rest with --no-deps)
        assert not names & {"torch", "vllm", "xgrammar", "apache-tvm-ffi"}, lock.name
    custom = dry_run(tmp_path, "0.33.0", env_extra={"SERQ_VLLM_VENV": str(tmp_path / "v")})
    assert custom["venv"] == str(tmp_path / "v")


# ------------------------------------------------------------------ regen.py with a stub driver

NAMES = ["caps", "preempt", "r0001"]

STUB = """#!{python}
# stands in for `venv/bin/python driver.py --quiet --out-dir DIR SCENARIO...`
import json, sys
sys.path.insert(0, {python_dir!r})
from serq_vllm.compare import load_trace, vector_trace_path
args = sys.argv[1:]
out = args[args.index("--out-dir") + 1]
for sc in [a for a in args if a.endswith(".scenario.json")]:
    name = sc.rsplit("/", 1)[1][: -len(".scenario.json")]
    t = load_trace(vector_trace_path({vectors!r}, name))
    t["vllm_version"] = {version!r}
    t["timing"] = {{"build_s": 0.5}}
    if name == {fields_name!r}:
        t["steps"][0]["num_running"] += 100      # not compared by the rule
    if name == {drift_name!r}:
        t["steps"][0]["scheduled"][0]["tokens"] += 1   # compared by the rule
    open(out + "/" + name + ".trace.json", "w").write(json.dumps(t))
"""


def stub_venv(tmp_path, vectors, version, fields_name="", drift_name="") -> Path:
    venv = tmp_path / f"venv-{version}"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text(STUB.format(python=sys.executable, python_dir=str(ROOT / "python"), vectors=str(vectors),
                              version=version, fields_name=fields_name, drift_name=drift_name))
    py.chmod(0o755)
    return venv


@pytest.fixture
def vectors(tmp_path):
    d = tmp_path / "vectors"
    d.mkdir()
    for n in NAMES:
        for f in VECTORS.glob(f"{n}.*"):
            shutil.copy(f, d / f.name)
    return d


def committed_version(vectors) -> str:
    return json.loads((vectors / "caps.trace.json").read_text())["vllm_version"]


def test_regen_against_another_version_ignores_only_the_version_field(tmp_path, vectors, capsys):
    venv = stub_venv(tmp_path, vectors, "0.33.0")
    assert regen.main(["--vectors", str(vectors), "--venv", str(venv)]) == 0
    out = capsys.readouterr().out
    assert f"regen: 3 vectors (vLLM 0.33.0 against committed {committed_version(vectors)}): 3 same" in out


def test_regen_reports_fields_and_drift_under_another_version(tmp_path, vectors, capsys):
    venv = stub_venv(tmp_path, vectors, "0.33.0", fields_name="caps", drift_name="preempt")
    assert regen.main(["--vectors", str(vectors), "--venv", str(venv)]) == 1
    out = capsys.readouterr().out
    assert "fields  caps: uncompared fields changed in: steps\n" in out
    assert "DRIFT   preempt: " in out
    assert "1 same, 1 fields, 1 DRIFT" in out


def test_regen_same_version_still_counts_a_version_change(tmp_path, vectors, capsys):
    # a venv of the committed version: every field but timing must match, as before
    venv = stub_venv(tmp_path, vectors, committed_version(vectors))
    assert regen.main(["--vectors", str(vectors), "--venv", str(venv)]) == 0
    assert ": 3 same" in capsys.readouterr().out


def test_regen_update_refuses_to_mix_versions(tmp_path, vectors, capsys):
    before = {p.name: p.read_bytes() for p in vectors.iterdir()}
    venv = stub_venv(tmp_path, vectors, "0.33.0", fields_name="caps", drift_name="preempt")
    assert regen.main(["--vectors", str(vectors), "--venv", str(venv), "--update"]) == 2
    assert "--update refused" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in vectors.iterdir()} == before


def test_regen_venv_option_beats_the_environment(tmp_path, vectors, capsys, monkeypatch):
    monkeypatch.setenv("SERQ_VLLM_VENV", str(tmp_path / "no-such-venv"))
    assert regen.main(["--vectors", str(vectors)]) == 2
    assert "no-such-venv" in capsys.readouterr().err
    venv = stub_venv(tmp_path, vectors, "0.33.0")
    assert regen.main(["--vectors", str(vectors), "--venv", str(venv)]) == 0
