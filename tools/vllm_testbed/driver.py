#!/usr/bin/env python3
"""Run a workload through a whole real vLLM engine on the CPU and write what it did and how long
each step took (runs in the testbed venv: tools/vllm_testbed/setup.sh).

    tools/vllm_testbed/.venv/bin/python tools/vllm_testbed/driver.py WORKLOAD.json \
        --model MODEL_DIR --out-dir DIR [--reps N] [--warmup-steps N]

WORKLOAD is an oracle scenario (docs/oracle.md §3) as tools/vllm_testbed/workload.py writes it.
Unlike the scheduler oracle (tools/vllm_oracle/driver.py), nothing is faked: the engine is vLLM's
LLMEngine with its scheduler, KV cache manager, CPU model runner and sampler, serving a small
random-weight Llama (make_model.py). Outputs have exact lengths (ignore_eos, min_tokens =
max_tokens, greedy sampling). Two clocks (the scenario's ``_clock``):

* ``step``: arrivals by step number (``arrival_step``; ``after`` + ``delay_steps``), exactly as the
  oracle's loop adds them (docs/oracle.md §2.3, sync mode). The schedule is then deterministic and
  the trace can be compared with serQ's model: ``serq oracle compare DIR/NAME.trace.json
  <(serq oracle run WORKLOAD.json)``.
* ``wall``: arrivals in seconds on the wall clock: a session's first turn at ``arrival_time``, a
  later turn ``_think_s`` seconds after its predecessor's last token (an agent client's loop). This
  is the run whose latencies serQ predicts.

Files written to DIR (each atomically), NAME being the scenario's name, ``-rK`` added per rep:
  NAME.trace.json     the oracle trace format (docs/oracle.md §4) plus a ``measured`` object per step
  NAME.steps.csv      one row per step: durations and the step-cost features (docs/testbed.md)
  NAME.requests.csv   one row per request: session, turn, times, lengths, cache hit, preemptions
Exit status: 0 ok, 2 bad workload or usage, 1 engine failure.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "python"))

sys.path.insert(0, str(HERE))
from serq_vllm.scenario import ScenarioError, load_scenario, tokens_for_segment  # noqa: E402
from workload import write_atomic  # noqa: E402  (the testbed's one atomic writer)

# Before torch is imported: one intra-op thread (two threads on two loaded cores make a decode step
# ~15x slower and much noisier), the engine core in this process (so a step can be timed and its
# scheduler output read), no hub access ever.
for _k, _v in {
    "OMP_NUM_THREADS": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_TARGET_DEVICE": "cpu",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_LOGGING_LEVEL": "ERROR",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_k, _v)

#: The knobs the testbed passes to the engine; anything else in a scenario's config is refused
#: (the scheduler oracle accepts more, but each knob here must be an EngineArgs field).
ENGINE_KNOBS = {
    "block_size": "block_size",
    "num_gpu_blocks": "num_gpu_blocks_override",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_num_seqs": "max_num_seqs",
    "max_model_len": "max_model_len",
    "long_prefill_token_threshold": "long_prefill_token_threshold",
    "enable_prefix_caching": "enable_prefix_caching",
    "enable_chunked_prefill": "enable_chunked_prefill",
}
STEP_COLUMNS = ["step", "start_s", "wall_s", "cpu_s", "gap_s", "arrivals", "tokens", "decoders", "kv_decode",
                "ctx_decode", "prefilled", "attention", "prefill_requests", "kind", "num_running",
                "num_waiting", "preempted"]
REQUEST_COLUMNS = ["id", "session", "turn", "arrival_s", "first_token_s", "finish_s", "ttft_s",
                   "tpot_s", "response_s", "prompt_len", "output_len", "cached_tokens",
                   "preemptions", "arrival_step", "first_token_step", "finish_step"]


class WorkloadRefused(ValueError):
    pass


def check_workload(sc, raw: dict) -> str:
    """The clock of a testbed workload; refuse what the real engine cannot reproduce."""
    clock = raw.get("_clock", "step")
    if clock not in ("step", "wall"):
        raise WorkloadRefused(f"_clock: must be 'step' or 'wall', got {clock!r}")
    cfg = sc.config
    if cfg["policy"] != "fcfs" or cfg["async_scheduling"]:
        raise WorkloadRefused("config: the testbed runs the FCFS policy without async scheduling")
    if cfg["scheduler_config_extra"] or cfg["cache_config_extra"]:
        raise WorkloadRefused("config: scheduler_config_extra / cache_config_extra are not passed to the engine")
    if cfg["block_size"] % 32:
        raise WorkloadRefused(f"config.block_size: vLLM's CPU attention needs a multiple of 32, got {cfg['block_size']}")
    if raw.get("config", {}).get("max_model_len") is None:
        raise WorkloadRefused("config.max_model_len: give it explicitly (the engine needs one request of "
                              "max_model_len tokens to fit in num_gpu_blocks - 1 blocks)")
    if (cfg["num_gpu_blocks"] - 1) * cfg["block_size"] < cfg["max_model_len"]:
        raise WorkloadRefused("config: (num_gpu_blocks - 1) x block_size must hold max_model_len tokens")
    for r in sc.requests:
        if r.eos_at is not None:
            raise WorkloadRefused(f"requests[{r.index}].eos_at: outputs have exact lengths on the testbed")
        if clock == "step" and r.arrival_time is not None:
            raise WorkloadRefused(f"requests[{r.index}].arrival_time: a step-clock workload arrives by step")
        if clock == "wall" and r.after is None and r.arrival_time is None:
            raise WorkloadRefused(f"requests[{r.index}]: a wall-clock workload needs arrival_time or after")
    return clock


class Engine:
    """One LLMEngine built for a workload's config, with its scheduler's calls observed."""

    def __init__(self, model: str, config: dict, seed: int) -> None:
        from vllm import EngineArgs, LLMEngine, SamplingParams

        self.SamplingParams = SamplingParams
        kwargs = {ENGINE_KNOBS[k]: v for k, v in config.items() if k in ENGINE_KNOBS and v is not None}
        if not kwargs.get("long_prefill_token_threshold"):
            kwargs.pop("long_prefill_token_threshold", None)
        t0 = time.perf_counter()
        self.llm = LLMEngine.from_engine_args(EngineArgs(
            model=model, skip_tokenizer_init=True, dtype="float32", seed=seed, enforce_eager=True,
            **kwargs))
        self.build_s = time.perf_counter() - t0
        core = self.llm.engine_core.engine_core
        self.sched = core.scheduler
        self.block_pool = self.sched.kv_cache_manager.block_pool
        self.blocks_of = self.sched.kv_cache_manager.coordinator.single_type_managers[0].req_to_blocks
        self.block_size = config["block_size"]
        self.observer = None
        real_schedule, real_update, real_add = (self.sched.schedule, self.sched.update_from_output,
                                                self.sched.add_request)

        def schedule(*a, **k):
            so = real_schedule(*a, **k)
            if self.observer is not None:
                self.observer.scheduled(so)
            return so

        def update(so, mro, *a, **k):
            outs = real_update(so, mro, *a, **k)
            if self.observer is not None:
                self.observer.updated(outs)
            return outs

        def add(req, *a, **k):
            if self.observer is not None:
                self.observer.added(req)
            return real_add(req, *a, **k)

        self.sched.schedule, self.sched.update_from_output, self.sched.add_request = schedule, update, add

    def add(self, rid: str, tokens: list[int], max_tokens: int) -> None:
        from vllm.inputs import TokensPrompt

        sp = self.SamplingParams(max_tokens=max_tokens, min_tokens=max_tokens, ignore_eos=True,
                                 temperature=0.0)
        self.llm.add_request(rid, TokensPrompt(prompt_token_ids=tokens), sp)

    def warm_up(self, steps: int, vocab: int) -> None:
        """Run throwaway requests so that the measured run starts warm, then clear the cache."""
        if steps <= 0:
            return
        budget = self.sched.scheduler_config.max_num_batched_tokens
        n = max(1, min(budget, self.sched.max_model_len - 2) )
        for i in range(2):
            toks = [(7919 * (i + 1) * (j + 3)) % (vocab - 10) + 10 for j in range(n)]
            self.add(f"warmup{i}", toks, max(1, steps))
        while self.llm.has_unfinished_requests():
            self.llm.step()
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("the prefix cache could not be reset after the warm-up")


class Run:
    """One pass of a workload: adds its requests at their moments, steps, and records."""

    def __init__(self, eng: Engine, sc, raw: dict, clock: str) -> None:
        self.eng, self.sc, self.clock = eng, sc, clock
        raw_reqs = raw["requests"]
        self.meta = {r.id: (raw_reqs[r.index].get("_session"), raw_reqs[r.index].get("_turn"),
                            float(raw_reqs[r.index].get("_think_s", 0.0))) for r in sc.requests}
        self.pending = list(sc.requests)
        self.internal: dict[str, str] = {}        # vLLM's request id -> the workload's id
        self.prompt_tokens: dict[str, list[int]] = {}
        self.outputs: dict[str, list[int]] = {r.id: [] for r in sc.requests}
        self.finish_known: dict[str, int] = {}    # id -> finish step
        self.finish_wall: dict[str, float] = {}
        self.ever_scheduled: set[str] = set()
        self.preempted_waiting: set[str] = set()
        self.records = {r.id: {"prompt_len": None, "max_tokens": r.max_tokens, "priority": 0,
                               "arrival_step": None, "arrival_time": None, "first_scheduled_step": None,
                               "first_token_step": None, "finish_step": None, "finish_reason": None,
                               "num_preemptions": 0, "cached_tokens_at_admission": None,
                               "output_len": 0} for r in sc.requests}
        self.wall = {r.id: {"arrival_s": None, "first_token_s": None, "finish_s": None} for r in sc.requests}
        self.steps: list[dict] = []
        self.step_rows: list[dict] = []
        self.arrived: list[str] = []
        self.step = 0
        self._adding: str | None = None
        self._current: dict | None = None

    # -- observer callbacks (called from inside LLMEngine.step) --------------------------------
    def added(self, req) -> None:
        self.internal[req.request_id] = self._adding

    def scheduled(self, so) -> None:
        total = so.total_num_scheduled_tokens
        preempted = sorted(self.internal[r] for r in (so.preempted_req_ids or ()))
        for rid in preempted:
            self.records[rid]["num_preemptions"] += 1
            self.preempted_waiting.add(rid)
        entries = []
        for iid, n in so.num_scheduled_tokens.items():
            rid = self.internal[iid]
            req = self.eng.sched.requests[iid]
            before = req.num_computed_tokens - n
            kind = ("new" if rid not in self.ever_scheduled
                    else "resumed" if rid in self.preempted_waiting else "running")
            entries.append({"id": rid, "tokens": n, "computed_before": before, "kind": kind,
                            "samples": not req.is_prefill_chunk,
                            "blocks": len(self.eng.blocks_of.get(iid, ())),
                            "_prompt": req.num_prompt_tokens})
        record = None
        if total > 0 or preempted:
            record = {"step": self.step, "time": None, "arrived": self.arrived, "scheduled": entries,
                      "total_tokens": total, "preempted": preempted,
                      "free_blocks_after_schedule": self.eng.block_pool.get_num_free_blocks(),
                      "num_running": len(self.eng.sched.running), "num_waiting": len(self.eng.sched.waiting),
                      "finished": [], "free_blocks_after_update": None}
            self.arrived = []
        if total > 0:
            for e in entries:
                rec = self.records[e["id"]]
                if e["id"] not in self.ever_scheduled:
                    self.ever_scheduled.add(e["id"])
                    rec["first_scheduled_step"] = self.step
                    rec["cached_tokens_at_admission"] = e["computed_before"]
                self.preempted_waiting.discard(e["id"])
        self._current = {"record": record, "step_no": self.step if total > 0 else None}

    def updated(self, outs) -> None:
        cur = self._current
        step_no = cur["step_no"]
        finished = []
        for eco in outs.values():
            for o in eco.outputs:
                rid = self.internal[o.request_id]
                new = list(o.new_token_ids or ())
                if new:
                    if not self.outputs[rid]:
                        self.records[rid]["first_token_step"] = step_no
                    self.outputs[rid].extend(new)
                if o.finish_reason is not None:
                    reason = str(getattr(o.finish_reason, "name", o.finish_reason)).lower()
                    rec = self.records[rid]
                    rec["finish_step"], rec["finish_reason"] = step_no, reason
                    finished.append({"id": rid, "reason": reason, "output_len": len(self.outputs[rid])})
        cur["finished"] = finished
        if cur["record"] is not None:
            cur["record"]["finished"] = finished
            cur["record"]["free_blocks_after_update"] = self.eng.block_pool.get_num_free_blocks()

    # -- arrivals ------------------------------------------------------------------------------
    def _ready(self, r, now: float) -> bool:
        if r.after is not None:
            if self.clock == "step":
                fin = self.finish_known.get(r.after)
                return fin is not None and self.step >= fin + r.delay_steps
            fin_t = self.finish_wall.get(r.after)
            return fin_t is not None and now >= fin_t + self.meta[r.id][2]
        if self.clock == "wall":
            return now >= r.arrival_time
        return self.step >= (r.arrival_step or 0)

    def _due(self, r) -> float:
        """Wall clock: when request r becomes ready (inf while its parent runs)."""
        if r.after is not None:
            fin_t = self.finish_wall.get(r.after)
            return float("inf") if fin_t is None else fin_t + self.meta[r.id][2]
        return r.arrival_time

    def add_ready(self, now: float) -> None:
        still = []
        for r in self.pending:
            if not self._ready(r, now):
                still.append(r)
                continue
            toks: list[int] = []
            for seg in r.prompt:
                if seg.kind == "parent":
                    toks += self.prompt_tokens[seg.source] + self.outputs[seg.source]
                else:
                    toks += tokens_for_segment(seg)
            self._adding = r.id
            self.eng.add(r.id, toks, r.max_tokens)
            self._adding = None
            self.prompt_tokens[r.id] = toks
            rec = self.records[r.id]
            rec["prompt_len"], rec["arrival_step"] = len(toks), self.step
            # the moment the client sent it (not when the loop noticed): a turn's think time
            # starts at its predecessor's last token, a first turn at its arrival_time
            self.wall[r.id]["arrival_s"] = self._due(r) if self.clock == "wall" else now
            rec["arrival_time"] = round(self.wall[r.id]["arrival_s"], 9)
            self.arrived.append(r.id)
        self.pending = still

    # -- the loop --------------------------------------------------------------------------------
    def run(self, max_steps: int) -> None:
        eng = self.eng
        eng.observer = self
        t_start = time.perf_counter()
        last_end = 0.0
        try:
            while self.step < max_steps:
                if not self.pending and not eng.llm.has_unfinished_requests():
                    break
                now = time.perf_counter() - t_start
                self.add_ready(now)
                if not eng.llm.has_unfinished_requests():
                    if self.clock == "step":
                        self.step += 1            # an idle engine counts steps (docs/oracle.md §2.3)
                    else:
                        due = min((self._due(r) for r in self.pending), default=None)
                        if due is None or due == float("inf"):
                            raise RuntimeError("requests wait on parents that never finish")
                        time.sleep(max(0.0, due - (time.perf_counter() - t_start)))
                    continue
                self._current = None
                w0, c0 = time.perf_counter(), time.process_time()
                eng.llm.step()
                w1, c1 = time.perf_counter(), time.process_time()
                cur = self._current
                if cur is None or cur["step_no"] is None:
                    continue                     # nothing was scheduled: not a step
                start = w0 - t_start
                for f in cur["finished"]:
                    self.finish_known[f["id"]] = cur["step_no"]
                    self.finish_wall[f["id"]] = w1 - t_start
                    self.wall[f["id"]]["finish_s"] = w1 - t_start
                rec = cur["record"]
                for e in rec["scheduled"]:
                    w = self.wall[e["id"]]
                    if w["first_token_s"] is None and self.outputs[e["id"]]:
                        w["first_token_s"] = w1 - t_start
                rec["time"] = round(start, 9)
                row = features(rec, eng.block_size)
                row.update(step=rec["step"], start_s=start, wall_s=w1 - w0, cpu_s=c1 - c0,
                           gap_s=(start - last_end) if self.step_rows else 0.0,
                           arrivals=len(rec["arrived"]),
                           num_running=rec["num_running"], num_waiting=rec["num_waiting"],
                           preempted=len(rec["preempted"]))
                rec["measured"] = {"wall_s": round(w1 - w0, 6), "cpu_s": round(c1 - c0, 6)}
                last_end = w1 - t_start
                self.step_rows.append(row)
                self.steps.append(rec)
                self.step += 1
        finally:
            eng.observer = None
        for rid, toks in self.outputs.items():
            self.records[rid]["output_len"] = len(toks)
        for rec in self.steps:
            for e in rec["scheduled"]:
                e.pop("_prompt", None)

    def trace(self, version: str, model_info: dict) -> dict:
        unfinished = sorted(r for r, rec in self.records.items() if rec["finish_reason"] is None)
        return {"scenario": self.sc.name, "vllm_version": version, "config": self.sc.config,
                "num_usable_blocks": self.sc.num_usable_blocks, "steps": self.steps,
                "requests": self.records, "unfinished": unfinished, "stalled": False,
                "timing": {"build_s": round(self.eng.build_s, 3), "num_steps": len(self.steps)},
                "testbed": {"clock": self.clock, "model": model_info}}

    def request_rows(self) -> list[dict]:
        rows = []
        for r in self.sc.requests:
            rec, w = self.records[r.id], self.wall[r.id]
            session, turn, _ = self.meta[r.id]
            ttft = (w["first_token_s"] - w["arrival_s"]) if w["first_token_s"] is not None else None
            resp = (w["finish_s"] - w["arrival_s"]) if w["finish_s"] is not None else None
            n = rec["output_len"]
            tpot = ((w["finish_s"] - w["first_token_s"]) / (n - 1)) if n > 1 and resp is not None else None
            rows.append({"id": r.id, "session": session, "turn": turn, "arrival_s": w["arrival_s"],
                         "first_token_s": w["first_token_s"], "finish_s": w["finish_s"], "ttft_s": ttft,
                         "tpot_s": tpot, "response_s": resp, "prompt_len": rec["prompt_len"],
                         "output_len": n, "cached_tokens": rec["cached_tokens_at_admission"],
                         "preemptions": rec["num_preemptions"], "arrival_step": rec["arrival_step"],
                         "first_token_step": rec["first_token_step"], "finish_step": rec["finish_step"]})
        return rows


def features(rec: dict, block_size: int) -> dict:
    """The step-cost features of a step record, with serQ's definitions (docs/testbed.md §3).

    A scheduled entry decodes when it computes one token past its prompt; every other entry is
    a prefill chunk (a resumed request recomputing its outputs included). `kv_decode` is the KV
    a decode holds after the step's growth in tokens of whole blocks, as serQ's `batch.kv_decode`
    counts a pool's units; `ctx_decode` the exact context tokens; `attention` is serQ's
    `batch.attention`: n·(K + n/2) over prefill chunks of n tokens after K computed ones.
    """
    dec = kvd = ctx = pre = preq = 0
    att = 0.0
    for e in rec["scheduled"]:
        n, k = e["tokens"], e["computed_before"]
        if n == 1 and k >= e["_prompt"]:
            dec += 1
            kvd += e["blocks"] * block_size
            ctx += k + 1
        else:
            pre += n
            preq += 1
            att += n * (k + n / 2)
    kind = "mixed" if dec and pre else "decode" if dec else "prefill"
    return {"tokens": rec["total_tokens"], "decoders": dec, "kv_decode": kvd, "ctx_decode": ctx,
            "prefilled": pre, "attention": att, "prefill_requests": preq, "kind": kind}


def csv_text(rows: list[dict], columns: list[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, columns, lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if row[k] is None else (f"{row[k]:.9g}" if isinstance(row[k], float) else row[k]))
                    for k in columns})
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", help="a testbed workload (tools/vllm_testbed/workload.py scenario)")
    p.add_argument("--model", required=True, help="model directory (tools/vllm_testbed/make_model.py)")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--reps", type=int, default=1, help="passes of the workload on one engine [1]")
    p.add_argument("--warmup-steps", type=int, default=8, help="decode steps of the warm-up [8]")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    out = Path(a.out_dir)
    if not out.is_dir():
        print(f"driver.py: error: --out-dir {out} is not a directory", file=sys.stderr)
        return 2
    model_info_path = Path(a.model) / "serq_testbed_model.json"
    if not model_info_path.is_file():
        print(f"driver.py: error: {a.model} is not a testbed model (no serq_testbed_model.json; "
              "build one with tools/vllm_testbed/make_model.py)", file=sys.stderr)
        return 2
    model_info = json.loads(model_info_path.read_text())
    try:
        sc = load_scenario(a.workload)
        raw = json.loads(Path(a.workload).read_text(encoding="utf-8"))
        clock = check_workload(sc, raw)
    except (ScenarioError, WorkloadRefused) as exc:
        print(f"driver.py: error: {a.workload}: {exc}", file=sys.stderr)
        return 2
    import vllm

    eng = Engine(a.model, sc.config, a.seed)
    print(f"engine built in {eng.build_s:.1f} s (vllm {vllm.__version__})", file=sys.stderr)
    for rep in range(a.reps):
        eng.warm_up(a.warmup_steps, model_info["vocab"])
        run = Run(eng, sc, raw, clock)
        t0 = time.perf_counter()
        run.run(sc.max_steps)
        stem = sc.name + (f"-r{rep + 1}" if a.reps > 1 else "")
        write_atomic(str(out / f"{stem}.trace.json"), json.dumps(run.trace(vllm.__version__, model_info), indent=1) + "\n")
        write_atomic(str(out / f"{stem}.steps.csv"), csv_text(run.step_rows, STEP_COLUMNS))
        write_atomic(str(out / f"{stem}.requests.csv"), csv_text(run.request_rows(), REQUEST_COLUMNS))
        print(f"{stem}: {len(run.steps)} steps, {len(sc.requests)} requests in "
              f"{time.perf_counter() - t0:.1f} s -> {out}/{stem}.*", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
