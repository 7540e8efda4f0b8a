"""A plan as the IR of the program the model runs: the scenario's settings as `args.number`
inputs, its requests as an ordered trace written into the IR, its prefix tree as the program's
`prefix` declarations (docs/vllm-model.md §2, "`forced` encoding").

The programs are package data (`programs/`): `vllm_scenario.sq` (FCFS), `vllm_scenario_async.sq`
(FCFS as an explicit hold: async scheduling, the watermark) and `vllm_scenario_priority.sq` (the
priority policy, explicit hold), with the library `vllm.sq` they use and the example trace
`data/preempt.csv` they declare (the model replaces it). They are found beside this module, so an
installed package needs no source tree.
"""

from __future__ import annotations

import copy
from fractions import Fraction
from pathlib import Path

from serq import frontend
from serq_vllm.plan import ContentPlan, Plan, Turn, Unsupported, number_text
from serq_vllm.scenario import accepted_drafts

#: The folder of the programs (package data, declared in pyproject.toml).
PROGRAMS = Path(__file__).resolve().parent / "programs"


def program_path(priority: bool, hold: bool = False) -> Path:
    """The program of a plan: the priority one, else the explicit-hold FCFS one (async
    scheduling, the watermark), else the plain FCFS one."""
    name = ("vllm_scenario_async.sq" if hold
            else "vllm_scenario_priority.sq" if priority else "vllm_scenario.sq")
    return PROGRAMS / name


_IR_CACHE: dict[tuple, dict] = {}


def ir_for(plan: Plan, order: dict[str, int] | None = None, source: str | None = None,
           thinks: dict[str, Fraction] | None = None) -> dict:
    """The program's IR with the plan's inputs and its sessions written in as an ordered trace.

    `source` replaces the program text (same file name, so `use` paths still resolve): the
    tests use it to seed faults."""
    path = program_path(plan.priority, plan.use_hold)
    key = (str(path), tuple(sorted(plan.settings.items())), source)
    if key not in _IR_CACHE:
        if source is None:
            _IR_CACHE[key] = frontend.load_program(str(path), plan.settings)
        else:
            _IR_CACHE[key] = frontend.compile_source(source, str(path), plan.settings)
    ir = copy.deepcopy(_IR_CACHE[key])
    thinks = thinks or {}
    rows = []
    for turns in plan.sessions:
        srows = []
        local_hist: dict[int, int] = {}  # a session's conversations, numbered from 0
        for t in turns:
            o = t.order if order is None else order[t.rid]
            pk, nb, hist = t.content
            pkeys, hists = int(plan.settings["pkeys"]), int(plan.settings["hists"])
            cc = (nb * pkeys + pk) * hists + local_hist.setdefault(hist, len(local_hist))
            think = thinks.get(t.rid, t.think)
            code = (cc * 2 + int(t.rid in plan.idle_added)) * 2 + t.extra
            if plan.priority:
                # one more bit: an async victim vLLM scheduled earlier in its preempting call
                # (its readmission's cache cap is `computed`, not `computed - 1`: §1 async (5))
                code = code * 2 + int(t.rid in plan.cache_victims)
                pr = plan.scenario.request(t.rid).priority - plan.prio_min
                tspan = int(plan.settings.get("tspan", "1"))
                forced = ((code * tspan + plan.tkeys.get(t.rid, 0)) * plan.prio_span + pr) \
                    * plan.radix + o
                if forced >= 2**53:
                    # serq_fast unpacks it in binary64: beyond 2^53 the integer is not exact
                    raise Unsupported("mixed-arrivals" if plan.tkeys else "priority",
                                      f"{t.rid!r}: its packed trace key {forced} (content "
                                      f"{code}, arrival key {plan.tkeys.get(t.rid, 0)} of "
                                      f"{tspan}, priority, rank) is 2^53 or more")
            elif plan.use_hold:
                forced = code * plan.radix + o
            else:
                forced = cc * plan.radix + o
            row = [str(t.prompt), str(t.out), number_text(think), number_text(forced)]
            if plan.speculative:
                row.append(acceptance(plan, t))
            srows.append(row)
        rows.append(srows)
    ir["workload"]["trace"] = {"ordered": True, "sessions": rows}
    _content_into_ir(ir, plan.content)
    ir["workload"]["arrival"] = {"kind": "batch", "n": len(plan.sessions)}
    return ir


def acceptance(plan: Plan, t: Turn) -> list[int]:
    """The drafts vLLM's verification accepts at each output number of a request when k are
    verified (docs/vllm-model.md §5.6): `accepted_drafts` at d = k. A step that verifies fewer keeps
    the same coins cut at its count, so the program reads min(count, drafts scheduled)."""
    spec = plan.scenario.speculative
    k = spec.num_speculative_tokens
    return [accepted_drafts(spec, t.rid, i, k) for i in range(t.out)]


def _content_into_ir(ir: dict, cplan: ContentPlan | None) -> None:
    """The scenario's prefix tree as the program's `prefix` declarations (docs/ir.md), replacing
    the program's example; with caching off (None) the kv holds lose their content clause, so
    their blocks are never identified and nothing is ever hit (docs/content.md §1)."""
    if cplan is not None:
        ir["prefixes"] = [{"key": str(k), "length": str(ln), "after": None if a is None else str(a),
                           "total": str(tot)} for k, ln, a, tot in cplan.prefixes]
        return
    ir["prefixes"] = []
    kv = [i for i, pool in enumerate(ir["pools"]) if pool["name"] == "kv"]
    for block in ir["blocks"]:
        for st in block:
            if st.get("op") == "hold":
                for item in st["pools"]:
                    if item["pool"]["base"] in kv:
                        item["content"] = None

