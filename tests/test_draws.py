"""The draw streams and laws shared by both engines (python/serq/draws.py, docs/sessions.md)."""

from __future__ import annotations

import math
import re
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from serq import draws

ROOT = Path(__file__).resolve().parents[1]
M64 = (1 << 64) - 1


# ---- stream v2, as docs/sessions.md writes it (an implementation independent of draws.py) -------

def _mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _doc_key(kind, seed, *parts):
    h = int.from_bytes(kind.encode("ascii"), "big")
    limbs = [(seed >> (64 * j)) & M64 for j in range(max(1, (seed.bit_length() + 63) // 64))]
    for w in limbs + list(parts):
        h = _mix(h ^ w)
    return h


def _doc_u(key, i):
    return (_mix((key + (i + 1) * 0x9E3779B97F4A7C15) & M64) >> 11) / 2.0 ** 53


KEYS = [("session", (1, 0)), ("turn", (7, 12, 3)), ("turn", (7, 12, 4)), ("turn", (7, 3, 12)),
        ("arrival", (1,)), ("machine", (2 ** 40,)), ("trace", (0,)), ("session", (2 ** 64 + 5, 9)),
        ("arrival", (2 ** 130 + 1,)), ("session", (1, 0))]


def test_splitmix64_known_answers():
    # SplitMix64 seeded with 1234567 (the reference generator of Steele, Lea and Flood; Vigna's
    # splitmix64.c): its first outputs, so the mixing constants and the increment are the standard ones
    want = [6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431,
            16408922859458223821]
    assert [_mix((1234567 + (i + 1) * draws.GAMMA) & M64) for i in range(5)] == want
    rng = draws.Stream(1234567)
    assert [rng.random() for _ in range(5)] == [(w >> 11) / 2.0 ** 53 for w in want]


def test_stream_keys_and_values_are_the_documented_ones():
    for kind, key in KEYS:
        assert draws.stream_key(kind, *key) == _doc_key(kind, *key), (kind, key)
        rng = draws.make_stream(kind, *key)
        assert [rng.random() for _ in range(50)] == [_doc_u(_doc_key(kind, *key), i) for i in range(50)]


def test_the_worked_example_of_the_doc():
    # docs/sessions.md gives the key and the first U's of one stream, for another implementation
    # to check itself against: they must be this module's
    text = (ROOT / "docs" / "sessions.md").read_text()
    m = re.search(r"seed 7, serial 12, turn 3 has key `(0x[0-9a-f]{16})`; its first three `U`s are "
                  r"`([0-9.e-]+)`, `([0-9.e-]+)` and `([0-9.e-]+)`", text)
    assert m, "the worked example is missing from docs/sessions.md"
    assert f"{draws.stream_key('turn', 7, 12, 3):#018x}" == m.group(1)
    rng = draws.make_stream("turn", 7, 12, 3)
    assert [repr(rng.random()) for _ in range(3)] == [m.group(2), m.group(3), m.group(4)]


def test_streams_of_different_keys_differ():
    firsts = {draws.make_stream(kind, *key).random() for kind, key in KEYS}
    assert len(firsts) == len({(k, key) for k, key in KEYS})
    # the seed's limbs are absorbed in order: a seed of 2^64 + 5 is not seed 5 followed by part 1
    assert draws.stream_key("session", 2 ** 64 + 5, 9) != draws.stream_key("session", 5, 9)


def test_bad_keys_are_refused():
    with pytest.raises(ValueError, match="non-negative"):
        draws.make_stream("arrival", -1)
    with pytest.raises(ValueError, match="key part"):
        draws.make_stream("turn", 1, 2)          # a turn stream needs (serial, turn_no)
    with pytest.raises(ValueError, match="2\\^64"):
        draws.make_stream("session", 1, 2 ** 64)
    with pytest.raises(ValueError, match="unknown stream kind"):
        draws.make_stream("nope", 1)
    with pytest.raises(ValueError, match="non-negative"):
        draws.stream_keys("session", 1, [3, -1])


def test_vectorised_path_gives_the_scalar_values():
    serials = np.arange(0, 3000, 7)
    keys = draws.stream_keys("session", 5, serials)
    assert keys.tolist() == [draws.stream_key("session", 5, int(s)) for s in serials]
    for i in (0, 1, 5):
        u = draws.uniforms(keys, i)
        scalar = []
        for s in serials:
            rng = draws.make_stream("session", 5, int(s))
            for _ in range(i):
                rng.random()
            scalar.append(rng.random())
        assert u.tolist() == scalar
    # turn streams: serials and turns broadcast, every (serial, turn) at once
    tk = draws.stream_keys("turn", 2 ** 70 + 3, np.arange(40)[:, None], np.arange(6)[None, :])
    assert tk.shape == (40, 6)
    assert tk.tolist() == [[draws.stream_key("turn", 2 ** 70 + 3, s, t) for t in range(6)] for s in range(40)]
    # draw indices broadcast too: the first 30 U's of 40 streams in one call
    u = draws.uniforms(tk[:, 2][:, None], np.arange(30)[None, :])
    for s in range(40):
        rng = draws.make_stream("turn", 2 ** 70 + 3, s, 2)
        assert u[s].tolist() == [rng.random() for _ in range(30)]
    # one stream's next n U's, interleaved with scalar draws
    a, b = draws.make_stream("arrival", 9), draws.make_stream("arrival", 9)
    got = [a.random()] + a.uniforms(1000).tolist() + [a.random()] + a.uniforms(0).tolist() + a.uniforms(3).tolist()
    assert got == [b.random() for _ in range(1005)]
    assert draws.uniforms(draws.stream_key("trace", 4), 0).shape == ()
    assert float(draws.uniforms(draws.stream_key("trace", 4), 0)) == draws.make_stream("trace", 4).random()


def test_buffered_stream_gives_the_scalar_values():
    # scalar chunks first, then numpy chunks, the switch inside a chunk or on its edge
    for scalar_first, chunk, n in ((0, 1, 50), (0, 7, 100), (300, 256, 2000), (256, 100, 2000), (8192, 4096, 9000)):
        buf = draws.buffered_stream("arrival", 3, scalar_first=scalar_first, chunk=chunk)
        ref = draws.make_stream("arrival", 3)
        assert [buf.random() for _ in range(n)] == [ref.random() for _ in range(n)]
    # through a law that takes several U's per draw
    buf = draws.buffered_stream("machine", 3, scalar_first=7, chunk=5)
    ref = draws.make_stream("machine", 3)
    assert ([draws.draw_float("erlang", [7.0, 2.0], buf) for _ in range(20)]
            == [draws.draw_float("erlang", [7.0, 2.0], ref) for _ in range(20)])


def test_trace_picks_vectorised_are_the_scalar_formula():
    from serq_spec.sample import trace_picks

    class Prog:
        workload = {"trace": {"ordered": False, "sessions": [None] * 13}}

    rng = draws.make_stream("trace", 11)
    want = [min(12, math.floor(rng.random() * 13)) for _ in range(500)]
    got = trace_picks(Prog(), 11, 500)
    assert got == want and all(type(p) is int for p in got)


def test_exact_values():
    rng = draws.make_stream("session", 1, 0)
    assert draws.draw_exact("det", [Fraction(1, 3)], rng) == Fraction(1, 3)
    assert draws.draw_exact("bernoulli", [Fraction(1)], rng) == 1
    x = draws.draw_exact("exp", [Fraction(2)], draws.make_stream("session", 1, 0))
    assert x == Fraction(format(draws.draw_float("exp", [2.0], draws.make_stream("session", 1, 0)), ".12g"))


@pytest.mark.parametrize("dist, args", [
    ("erlang", [math.inf, 1.0]),        # int(inf) raised OverflowError inside a run
    ("erlang", [1e12, 1.0]),            # a trillion exponentials: the run hung
    ("erlang", [2.0, -1.0]), ("h2", [-1.0, 4.0]), ("exp", [-1.0]),  # negative means
    ("h2", [1.0, math.inf]), ("exp", [math.inf]), ("uniform", [0.0, math.inf]),
    ("uniform", [math.nan, 1.0]),
])
def test_arguments_outside_the_law_are_a_draw_error(dist, args):
    with pytest.raises(draws.DrawError):
        draws.draw_float(dist, args, draws.make_stream("machine", 1))


# ---- the guarantee: a (session, turn) sees the same draws under any deployment -------------------

VLLM = ROOT / "examples" / "multi-turn" / "vllm.sq"
# blocks = 300 rejects long conversations and ends their sessions early, so the two deployments
# consume different numbers of draws; Lambda = 2 makes many sessions overlap
DEPLOYMENTS = [{"Lambda": "2", "blocks": "300"}, {"Lambda": "2", "blocks": "10000", "max_seqs": "4"}]


def _prefix_consistent(a: list, b: list) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def test_sampled_sessions_see_the_same_draws_under_any_deployment():
    from serq.frontend import load_program
    from serq_spec.sample import sample

    files = [sample(load_program(str(VLLM), d), 3, 3, "vllm.sq") for d in DEPLOYMENTS]  # 0.6 s
    a, b = files
    assert a["arrivals"] == b["arrivals"]
    differ = 0
    for sa, sb in zip(a["sessions"], b["sessions"]):
        assert sa["init"] == sb["init"]
        for ta, tb in zip(sa["turns"], sb["turns"]):
            assert _prefix_consistent(ta, tb)
        assert _prefix_consistent(sa["session"], sb["session"])
        differ += len(sa["turns"]) != len(sb["turns"]) or len(sa["session"]) != len(sb["session"])
    assert differ > 0, "the two deployments should consume different draws (else the check is empty)"


def test_fast_sessions_see_the_same_draws_under_any_deployment(monkeypatch):
    from serq.frontend import load_program
    from serq_fast import sessions, step
    from serq_fast.sources import LiveSource

    seen: list = []

    class Recording(LiveSource):
        __slots__ = ()

        def __init__(self, kind, *key, log=None):
            super().__init__(kind, *key, log=log)
            self.log = []
            seen[-1][(kind, *key)] = self.log

    monkeypatch.setattr(step, "LiveSource", Recording)      # the run's streams
    monkeypatch.setattr(sessions, "LiveSource", Recording)  # the session and turn streams
    runs = []
    for d in DEPLOYMENTS:
        seen.append({})
        runs.append(step.Sim(load_program(str(VLLM), d), seed=3, horizon=float("inf"), warmup=0.0, arrivals=12).run())
    a, b = seen
    common = set(a) & set(b)
    assert ("arrival", 3) in common and any(k[0] == "turn" for k in common)
    assert all(_prefix_consistent(a[k], b[k]) for k in common)
    assert any(len(a[k]) != len(b[k]) for k in common) or set(a) != set(b)
    assert runs[0].client["response"].exact != runs[1].client["response"].exact
