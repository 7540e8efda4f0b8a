"""serq_spec on `share content` pools (docs/content.md §3, §5): the invariant checker catches each
seeded corruption of the block pool, run-time guards stop bad contents, and random programs of the
vLLM fragment with a content pool keep every invariant (tests/strategies.py, `content=True`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from conftest import compile_ok
from serq.frontend import compile_source
from serq_spec.errors import SpecError
from serq_spec.invariants import check_invariants
from serq_spec.program import Program
from serq_spec.sample import sample
from serq_spec.step import run
from serq_spec.trace import state_line
from serq_spec.workload import Workload

from strategies import vllm_programs

from test_spec_invariants import program as vector_program

LONG = bool(os.environ.get("SERQ_LONG"))


def program():
    return vector_program("content_shared_prefix")


def mid_run(steps=2):
    """`content_shared_prefix` after its t = 1 admission: blocks 0, 1 shared (refs 2), 2, 3, 4 held once."""
    cfg = run(program(), max_steps=steps)
    assert check_invariants(cfg) == []
    cs = cfg.pools[0].content
    assert cs.refs[:5] == [2, 2, 1, 1, 1] and cs.free_queue == [5, 6, 7]
    return cfg


def problems(cfg) -> str:
    return " | ".join(check_invariants(cfg))


def test_a_reference_count_that_no_hold_list_explains():
    cfg = mid_run()
    cfg.pools[0].content.refs[0] = 3
    assert "reference counts" in problems(cfg)


def test_a_referenced_block_in_the_free_queue():
    cfg = mid_run()
    cfg.pools[0].content.free_queue.append(2)
    assert "not the blocks with no reference" in problems(cfg)


def test_a_free_block_missing_from_the_free_queue():
    cfg = mid_run()
    cfg.pools[0].content.free_queue.remove(6)
    assert "not the blocks with no reference" in problems(cfg)


def test_a_block_twice_in_the_free_queue():
    cfg = mid_run()
    cfg.pools[0].content.free_queue.append(5)
    assert "appears twice in the free queue" in problems(cfg)


def test_an_unidentified_free_block_behind_an_identified_one():
    """docs/content.md §3 Release: unidentified blocks go to the head, so none sits behind a cached
    one; the former rule (every freed block to the tail) broke this at serial 0's end."""
    cfg = run(program(), max_steps=200)
    cs = cfg.pools[0].content
    assert check_invariants(cfg) == [] and cs.free_queue[0] in (3, 5) and cs.ident[cs.free_queue[0]] is None
    cs.free_queue.append(cs.free_queue.pop(0))   # the order the former rule produced
    assert "follows an identified one" in problems(cfg)


def test_the_identity_map_disagrees_with_a_block():
    cfg = mid_run()
    cfg.pools[0].content.ident[3] = ("h", 0, 3)   # an identity the map does not list
    assert "identity map and the blocks' identities disagree" in problems(cfg)
    cfg = mid_run()
    cfg.pools[0].content.idmap[("p", 1, 1)].append(2)   # block 2 under a second identity
    assert "disagree" in problems(cfg)


def test_used_not_the_referenced_blocks():
    cfg = mid_run()
    cfg.pools[0].used += 4
    assert "block × referenced blocks" in problems(cfg)


def test_used_plus_cached_above_cap():
    cfg = run(program(), max_steps=5)   # the end: 4 identified free blocks, cached 16
    assert check_invariants(cfg) == [] and cfg.pools[0].cached() == 16
    cfg.pools[0].used = 32              # used 32 + cached 16 > cap 32
    assert "used 32 + cached 16 > cap 32" in problems(cfg)


def test_an_allocation_that_is_not_the_block_list():
    cfg = mid_run()
    h = next(h for h in cfg.sessions[1].holds if 0 in h.pools)
    h.alloc[h.pools.index(0)] += 4
    assert "holds 3 blocks but allocation 16" in problems(cfg)


def test_a_release_that_forgets_the_reverse_order_is_caught_by_a_vector(monkeypatch):
    """A seeded fault in the semantics (release in block order) changes the state the vector pins."""
    from serq_spec import content
    import test_spec_vectors as tv

    release = content.release

    def forward(cfg, p, blocks):   # the real release walks its argument backwards
        release(cfg, p, blocks[::-1])
        blocks.clear()
    monkeypatch.setattr(content, "release", forward)
    with pytest.raises(AssertionError):
        tv.test_vector("content_shared_prefix")


def test_the_state_line_has_the_content_keys_only_on_a_content_pool():
    cfg = run(program(), max_steps=2)
    kv, reqs = state_line(cfg, cfg.records, 2)["pools"]
    assert kv["entries"] == [] and kv["held"] == [[0, [0, 1, 2, 3]], [1, [0, 1, 4]]]
    assert set(kv) - set(reqs) == {"free_queue", "blocks", "idmap", "held"}


GUARD = """
fn main() {{
  prefix 3 (8);
  pool kv {{ cap 32; block 4; share content; }}
  stage s : delay;
  workload {{ arrive batch(1); }}
  server {{ set q = {p}; set m = {n}; hold kv (4) content (q, m, serial) {{ observe seen = cachedin(kv); run s (1); }} }}
}}
"""


def run_text(text):
    prog = Program(compile_ok(text), "t.sq")
    prog.workload_data = Workload.replay({"arrivals": [], "format": "serq-sessions/1", "inputs": {}, "machine": [],
                                          "program": "t.sq", "seed": 0, "trace_picks": [],
                                          "sessions": [{"init": [], "serial": 0, "session": [], "turns": [[]]}]})
    obs = []
    cfg = run(prog, on_step=lambda c, r, k: obs.extend(r["observations"]), check=True)
    return cfg, obs


@pytest.mark.parametrize("p,n,message", [(2, 0, "`content`: prefix 2.0 is not declared"),
                                         (3, 9, "`content`: 9.0 shared tokens is not a whole number from 0 to 8.0"),
                                         (0, 1, "`content`: 1.0 shared tokens is not a whole number from 0 to 0.0"),
                                         (3, "1/2", "`content`: 0.5 shared tokens")])
def test_a_bad_content_at_run_time_stops_the_run_located(p, n, message):
    with pytest.raises(SpecError) as e:
        run_text(GUARD.format(p=p, n=n))
    assert message in str(e.value) and "t.sq:" in str(e.value)


def test_cachedin_outside_an_attempt_is_zero():
    cfg, obs = run_text(GUARD.format(p=3, n=8))
    assert [o[-1] for o in obs if o[0] == "seen"] == [0]   # read in the body, after the attempt


PROFILE = dict(max_examples=300 if LONG else 25, deadline=None, derandomize=not LONG,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
MAX_STEPS = 4000


@settings(**PROFILE)
@given(vllm_programs(content=True))
def test_content_programs_keep_invariants(case):
    """Random vLLM-fragment programs on a `share content` pool: every invariant after every step,
    a Config that round-trips, and a run that ends when every request fits and preemption can
    free room."""
    ir = compile_source(case.text, case.name, {})
    data = sample(ir, case.seed, case.sessions, case.name, max_steps=MAX_STEPS)
    prog = Program(ir, case.name, workload=Workload.replay(data))
    cfg = run(prog, max_steps=MAX_STEPS, check=True)
    if "preempt lifo" in case.text and "granule" not in case.text and not cfg.events:
        assert all(s.status[0] == "ended" for s in cfg.sessions), case


def test_the_shared_prompt_example_samples_and_runs_in_the_spec(tmp_path):
    """`serq sample` then `serq spec` on examples/multi-turn/shared_prompt.sq (a small cache so the
    lines stay short): every first turn after the very first hits the 62 shared blocks (992
    tokens), and every line of a content pool carries the docs/content.md §5 keys."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root / "python"))
    prog = str(root / "examples" / "multi-turn" / "shared_prompt.sq")
    sets = ["--set", "blocks=400", "--set", "Lambda=2"]
    sessions = tmp_path / "s.json"
    cli = [sys.executable, "-m", "serq.cli"]
    done = subprocess.run(cli + ["sample", prog, *sets, "--seed", "3", "--sessions", "3", "-o", str(sessions)],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    done = subprocess.run(cli + ["spec", prog, *sets, "--sessions", str(sessions)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    first = [(o[1], o[4]) for x in lines for o in x["records"]["observations"] if o[0] == "hit_tokens" and o[2] == 1]
    assert first == [(0, "0"), (1, "992"), (2, "992")]
    assert all({"free_queue", "blocks", "idmap", "held"} <= set(x["pools"][0]) for x in lines)
