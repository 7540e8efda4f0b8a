"""A lockstep campaign: many random programs of each kind of tests/strategies.py through `serq
lockstep`'s comparison (serq_drt.lockstep), going on past a divergence, with a JSON summary.

The random lockstep tests (tests/test_lockstep_*.py) run a few derandomised programs per kind and
stop at the first divergence; a campaign draws other programs (`--seed`: hypothesis's random
seed, no example database, no shrinking) in larger numbers, one kind after another, and keeps
every divergence, crash and run-time error as a pasteable `Case(...)` literal with the message.
Minimise a kept case by hand or with the test of its kind.

    python3 tools/lockstep_campaign.py --seed 24001 --count 300 --count-new 3000 \
        --summary camp-24001.json

`--count-new` is the count of the kinds issue 18 added last (content tiers, drawn acceptance
counts); `--kinds a,b` runs only those (`--list` names them). The summary is rewritten after each
kind, so a stopped campaign keeps the kinds it finished.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "tests")]

import strategies  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from serq.frontend import compile_source  # noqa: E402
from serq_drt.lockstep import Divergence, lockstep  # noqa: E402
from serq_spec.errors import SpecError  # noqa: E402


def _with_every_step(strategy):
    """Half the draws without the decode fast-forward (SERQ_FAST_NO_FF), as the tests do."""
    return st.tuples(strategy, st.booleans())


def _vllm(**flags):
    return lambda: strategies.vllm_programs(**flags)


def _either(flag: str, **flags):
    """vllm_programs with FLAG drawn true or false."""
    return lambda: st.booleans().flatmap(lambda b: strategies.vllm_programs(**{flag: b}, **flags))


# name: (strategy factory, draws an every-step boolean too); the names follow the tests
KINDS = {
    "plain": (lambda: st.one_of(strategies.vllm_programs(), strategies.queue_programs(),
                                strategies.routing_programs()), False),
    "every step": (_vllm(), True),
    "scope": (strategies.scope_programs, False),
    "content": (_vllm(content=True), True),
    "speculating": (_either("content", speculate=True), False),
    "accepting": (lambda: st.tuples(st.booleans(), st.booleans()).flatmap(
        lambda c_l: strategies.vllm_programs(content=c_l[0], lag=c_l[1], speculate=True, accept=True)), False),
    "lag": (_either("content", lag=True), False),
    "arrivals": (lambda: st.one_of(strategies.vllm_programs(arrivals=True),
                                   st.booleans().flatmap(lambda c: strategies.vllm_programs(
                                       content=c, lag=True, arrivals=True)),
                                   strategies.queue_programs(arrivals=True)), False),
    "lease": (_either("arrivals", lease=True), True),
    "claims": (_either("content", claims=True), False),
    "fork": (strategies.fork_programs, False),
    "replicas": (lambda: st.tuples(st.sampled_from(["", "content", "lease"]), st.booleans()).flatmap(
        lambda f: strategies.vllm_programs(content=f[0] == "content", lag=f[1], lease=f[0] == "lease",
                                           replicas=True)), False),
    "content pin": (strategies.content_pin_programs, False),
    "estimator": (strategies.estimator_programs, False),
    "engine estimator": (strategies.engine_estimator_programs, False),
    "feedback estimator": (strategies.feedback_estimator_programs, False),
    "flow": (strategies.flow_programs, False),
    "transfer": (strategies.transfer_programs, False),
    "spill": (lambda: st.booleans().flatmap(lambda a: strategies.spill_programs(arrivals=a)), False),
    "lag speculating": (_either("content", lag=True, speculate=True), False),
    "k step": (strategies.k_step_programs, False),
    "pd queue": (strategies.pd_queue_programs, False),
    "spill engine": (_vllm(spill=True), False),
    "spill replicas": (_vllm(spill=True, replicas=True), False),
    "spill two pools": (strategies.two_spill_programs, False),
    "spill flow link": (strategies.flow_spill_programs, False),
    "content spill engine": (_vllm(content=True, spill=True), False),
    "content spill holds": (strategies.content_spill_programs, False),
    # the new features together, which no test draws: drawn acceptance counts on a speculating
    # engine whose (content) KV pool spills, `lag 0` or `lag 1`, alone or as replicas
    "accepting spill": (lambda: st.tuples(*[st.booleans()] * 3).flatmap(
        lambda f: strategies.vllm_programs(content=f[0], lag=f[1], replicas=f[2], speculate=True, accept=True,
                                           spill=True)), True),
}
NEW_KINDS = ("accepting", "content spill engine", "content spill holds", "accepting spill")


class Overlong(Exception):
    """One program took more CPU than the campaign allows it (a hang or a livelock is a finding)."""


def _overlong(signum, frame):
    raise Overlong


def run_kind(kind: str, count: int, seed: int, cpu_limit: float) -> dict:
    factory, every_step = KINDS[kind]
    strategy = _with_every_step(factory()) if every_step else factory()
    found: list[dict] = []
    tally = {"programs": 0, "steps": 0, "slowest": (0.0, "")}
    reported = [0]

    def one(case, no_ff: bool) -> None:
        tally["programs"] += 1
        if tally["programs"] % 250 == 0:
            print(f"  {kind}: {tally['programs']} programs, {len(found)} found", flush=True)
        started = time.process_time()
        signal.setitimer(signal.ITIMER_PROF, cpu_limit)
        if no_ff:
            os.environ["SERQ_FAST_NO_FF"] = "1"
        try:
            ir = compile_source(case.text, case.name, {})
            tally["steps"] += lockstep(ir, case.seed, case.sessions, case.name)
        except Overlong:
            found.append({"class": "overlong", "no_ff": no_ff, "case": repr(case),
                          "message": f"more than {cpu_limit} CPU-s (sampling and both engines)"})
        except Divergence as d:
            found.append({"class": "divergence", "no_ff": no_ff, "case": repr(case), "message": str(d)})
        except SpecError as exc:   # the same run-time error in both engines
            found.append({"class": "run-time error", "no_ff": no_ff, "case": repr(case), "message": str(exc)})
        except Exception as exc:   # a crash of either engine or the front-end is a finding
            found.append({"class": "crash", "no_ff": no_ff, "case": repr(case),
                          "message": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc(limit=-6)})
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            if len(found) > reported[0]:
                print(f"  found: {json.dumps(found[-1])}", flush=True)
                reported[0] = len(found)
            os.environ.pop("SERQ_FAST_NO_FF", None)
            took = time.process_time() - started
            if took > tally["slowest"][0]:   # a near-hang shows here
                tally["slowest"] = (took, repr(case))

    @hypothesis_seed(seed)
    @settings(max_examples=count, deadline=None, derandomize=False, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def campaign(drawn):
        case, no_ff = drawn if every_step else (drawn, False)
        one(case, no_ff)

    wall, cpu = time.monotonic(), time.process_time()
    campaign()
    return {"programs": tally["programs"], "steps compared": tally["steps"],
            "wall s": round(time.monotonic() - wall, 1), "cpu s": round(time.process_time() - cpu, 1),
            "slowest cpu s": round(tally["slowest"][0], 2), "slowest case": tally["slowest"][1], "found": found}


def write_summary(path: Path, summary: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    os.replace(tmp, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=24001, help="hypothesis's seed of every kind")
    ap.add_argument("--count", type=int, default=200, help="programs of each older kind")
    ap.add_argument("--count-new", type=int, default=2000, help=f"programs of each of {', '.join(NEW_KINDS)}")
    ap.add_argument("--cpu-limit", type=float, default=30.0,
                    help="CPU-s one program may take (sampling and both engines) before it is kept as overlong")
    ap.add_argument("--kinds", help="comma-separated kinds to run (default: all)")
    ap.add_argument("--summary", type=Path, default=Path("lockstep-campaign.json"))
    ap.add_argument("--list", action="store_true", help="name the kinds and stop")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(KINDS))
        return 0
    signal.signal(signal.SIGPROF, _overlong)
    kinds = args.kinds.split(",") if args.kinds else list(KINDS)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        ap.error(f"unknown kinds {unknown}; --list names them")
    summary = {"seed": args.seed, "complete": False, "kinds": {}}
    for kind in kinds:
        count = args.count_new if kind in NEW_KINDS else args.count
        result = run_kind(kind, count, args.seed, args.cpu_limit)
        summary["kinds"][kind] = result
        write_summary(args.summary, summary)
        print(f"{kind}: {result['programs']} programs, {result['steps compared']} steps, "
              f"{len(result['found'])} found, {result['wall s']} s wall, {result['cpu s']} CPU-s", flush=True)
    summary["complete"] = True
    write_summary(args.summary, summary)
    return 1 if any(r["found"] for r in summary["kinds"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
