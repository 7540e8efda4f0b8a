#!/usr/bin/env python3
"""Drive the real vLLM v1 scheduler through a scenario and write its trace (runs in the oracle venv).

    tools/vllm_oracle/.venv/bin/python tools/vllm_oracle/driver.py SCENARIO.json [-o TRACE.json]
    tools/vllm_oracle/.venv/bin/python tools/vllm_oracle/driver.py A.json B.json ... --out-dir DIR

Only the model is fake: the real `Scheduler` / `AsyncScheduler`, KV cache manager, block pool,
prefix-cache hashing and stop checks run unchanged on the CPU, without weights or a tokenizer.
After every `schedule()` each scheduled request whose prefill is complete "samples" one
deterministic token (EOS at the scenario's `eos_at`), and that output goes back through
`update_from_output`. The loop around the scheduler follows the engine core: one schedule +
one update per step in sync mode, and a 2-deep batch queue in async mode. With speculative
decoding (the scenario's `speculative` object) a request verifying drafts gets its accepted
drafts plus one token, the count from `serq_vllm.scenario.accepted_drafts`, and in sync mode
fresh drafts are handed back through `update_draft_token_ids` as the engine core does.

The scenario is read and validated by `serq_vllm.scenario` (the repository's python/ dir is
put on sys.path), so the driver and the serQ side agree on every default and prompt rule.
Exit status: 0 ok, 2 bad scenario or usage, 1 unexpected failure. Several scenarios in one
process share the ~7 s vLLM import.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
import warnings
from collections import deque
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "python"))

from serq_vllm.scenario import (  # noqa: E402
    EOS_TOKEN_ID,
    VOCAB_SIZE,
    ResolvedScenario,
    ScenarioError,
    accepted_drafts,
    fake_output_token,
    load_scenario,
    tokens_for_segment,
)

for _k, _v in {
    "VLLM_TARGET_DEVICE": "cpu",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_LOGGING_LEVEL": "ERROR",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1",
    "VLLM_PLUGINS": "",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_k, _v)

TIME_EPS = 1e-12
DUMMY_ARCH = "SerqOracleDummyForCausalLM"
EMPTY_CALLS_BEFORE_STALL = 3
# safety net: give up after this many empty schedule() calls in a run (a scenario whose pending
# arrivals can never be admitted would otherwise only end at max_steps)
MAX_EMPTY_CALLS = 1_000_000


# ---------------------------------------------------------------------------------------------
# vLLM objects


class _VllmEnv:
    """Imports vLLM once and builds a fresh scheduler per scenario."""

    def __init__(self) -> None:
        warnings.filterwarnings("ignore")
        t0 = time.perf_counter()
        import inspect

        import torch
        import vllm
        from vllm import ModelRegistry, SamplingParams
        from vllm.config import (
            CacheConfig,
            ModelConfig,
            ParallelConfig,
            SchedulerConfig,
            SpeculativeConfig,
            VllmConfig,
        )
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core import kv_cache_utils
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
        from vllm.v1.request import Request
        from vllm.v1.structured_output import StructuredOutputManager

        for name in ("vllm", "transformers", "torch"):
            logging.getLogger(name).setLevel(logging.ERROR)

        self.inspect = inspect
        self.torch = torch
        self.version = vllm.__version__
        self.SamplingParams = SamplingParams
        self.CacheConfig = CacheConfig
        self.ModelConfig = ModelConfig
        self.SchedulerConfig = SchedulerConfig
        self.VllmConfig = VllmConfig
        self.ParallelConfig = ParallelConfig
        self.SpeculativeConfig = SpeculativeConfig
        self.DraftTokenIds = DraftTokenIds
        self.kv_cache_utils = kv_cache_utils
        self.get_hash_fn_by_name = get_hash_fn_by_name
        self.AsyncScheduler = AsyncScheduler
        self.Scheduler = Scheduler
        self.FullAttentionSpec = FullAttentionSpec
        self.KVCacheConfig = KVCacheConfig
        self.KVCacheGroupSpec = KVCacheGroupSpec
        self.ModelRunnerOutput = ModelRunnerOutput
        self.Request = Request
        self.StructuredOutputManager = StructuredOutputManager

        class _DummyModel(torch.nn.Module):  # registered, never instantiated
            def __init__(self, *, vllm_config=None, prefix: str = "") -> None:
                super().__init__()

            def embed_input_ids(self, input_ids):
                raise NotImplementedError

            def forward(self, *args, **kwargs):
                raise NotImplementedError

            def compute_logits(self, hidden_states):
                raise NotImplementedError

        ModelRegistry.register_model(DUMMY_ARCH, _DummyModel)
        self.model_dir = self._write_model_dir()
        self._request_params = set(inspect.signature(Request.__init__).parameters)
        self._scheduler_params = set(inspect.signature(Scheduler.__init__).parameters)
        self.import_s = time.perf_counter() - t0

    def _write_model_dir(self) -> str:
        d = tempfile.mkdtemp(prefix="serq-vllm-oracle-model-")
        cfg = {
            "architectures": [DUMMY_ARCH],
            "model_type": "llama",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "vocab_size": VOCAB_SIZE,
            "bos_token_id": 1,
            "eos_token_id": EOS_TOKEN_ID,
            "max_position_embeddings": 1 << 20,
            "torch_dtype": "float16",
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
        }
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        return d

    @staticmethod
    def _accepted(cls, kwargs: dict, label: str, notes: list[str]) -> dict:
        import dataclasses
        import inspect

        names = set()
        if dataclasses.is_dataclass(cls):
            names |= {f.name for f in dataclasses.fields(cls)}
            # InitVars are not fields but are constructor arguments
        try:
            names |= set(inspect.signature(cls).parameters)
        except (TypeError, ValueError):
            pass
        out = {}
        for k, v in kwargs.items():
            if k in names:
                out[k] = v
            else:
                notes.append(f"{label}: dropped unknown keyword {k!r} (not in this vLLM version)")
        return out

    def build(self, sc: ResolvedScenario, notes: list[str]):
        cfg = sc.config
        bs = cfg["block_size"]
        n_blocks = cfg["num_gpu_blocks"]
        model_config = self.ModelConfig(
            model=self.model_dir,
            dtype="float16",
            seed=0,
            skip_tokenizer_init=True,
            max_model_len=cfg["max_model_len"],
        )
        sched_kwargs = dict(
            max_num_seqs=cfg["max_num_seqs"],
            max_num_batched_tokens=cfg["max_num_batched_tokens"],
            max_model_len=cfg["max_model_len"],
            long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
            enable_chunked_prefill=cfg["enable_chunked_prefill"],
            policy=cfg["policy"],
            async_scheduling=cfg["async_scheduling"],
            is_encoder_decoder=False,
        )
        sched_kwargs.update(cfg["scheduler_config_extra"])
        scheduler_config = self.SchedulerConfig(
            **self._accepted(self.SchedulerConfig, sched_kwargs, "scheduler_config_extra", notes)
        )
        cache_kwargs = dict(
            block_size=bs,
            gpu_memory_utilization=0.9,
            cache_dtype="auto",
            enable_prefix_caching=cfg["enable_prefix_caching"],
        )
        cache_kwargs.update(cfg["cache_config_extra"])
        cache_config = self.CacheConfig(
            **self._accepted(self.CacheConfig, cache_kwargs, "cache_config_extra", notes)
        )
        speculative_config = None
        if sc.speculative is not None:
            # a "draft_model" proposer names the dummy model itself: its config is read, never
            # its weights (the scheduler only asks the config for lookahead and draft slots)
            speculative_config = self.SpeculativeConfig(
                method=sc.speculative.method,
                num_speculative_tokens=sc.speculative.num_speculative_tokens,
                model=self.model_dir if sc.speculative.method == "draft_model" else None,
                target_model_config=model_config,
                target_parallel_config=self.ParallelConfig(),
            )
        vllm_config = self.VllmConfig(
            scheduler_config=scheduler_config,
            model_config=model_config,
            cache_config=cache_config,
            speculative_config=speculative_config,
        )
        if speculative_config is not None:
            spec = sc.speculative
            got = (vllm_config.num_lookahead_tokens, speculative_config.max_num_new_slots_for_drafting)
            if got != (spec.lookahead_tokens, spec.draft_slots):
                raise RuntimeError(f"vLLM {self.version} gives {spec.method!r} lookahead/draft slots "
                                   f"{got}; serq_vllm.scenario.SPEC_METHODS says "
                                   f"{(spec.lookahead_tokens, spec.draft_slots)}")
        # The CPU platform forces async scheduling off; the scenario decides.
        vllm_config.scheduler_config.async_scheduling = cfg["async_scheduling"]
        vllm_config.cache_config.num_gpu_blocks = n_blocks
        kv_cache_config = self.KVCacheConfig(
            num_blocks=n_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[
                self.KVCacheGroupSpec(
                    ["layer"],
                    self.FullAttentionSpec(
                        block_size=bs, num_kv_heads=1, head_size=1, dtype=self.torch.float32
                    ),
                )
            ],
        )
        cls = self.AsyncScheduler if cfg["async_scheduling"] else self.Scheduler
        kwargs = dict(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=self.StructuredOutputManager(vllm_config),
            log_stats=True,
        )
        if "block_size" in self._scheduler_params:
            kwargs["block_size"] = bs
        scheduler = cls(**kwargs)

        hash_fn = self.get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
        self.kv_cache_utils.init_none_hash(hash_fn)
        block_hasher = self.kv_cache_utils.get_request_block_hasher(bs, hash_fn)
        return scheduler, block_hasher

    def make_request(self, rid, tokens, max_tokens, arrival_time, priority, block_hasher):
        sp = self.SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=False)
        sp.update_from_generation_config({}, eos_token_id=EOS_TOKEN_ID)
        kwargs = dict(
            request_id=rid,
            prompt_token_ids=tokens,
            sampling_params=sp,
            pooling_params=None,
            arrival_time=arrival_time,
            priority=priority,
            block_hasher=block_hasher,
        )
        if "eos_token_id" in self._request_params:
            kwargs["eos_token_id"] = EOS_TOKEN_ID
        return self.Request(**{k: v for k, v in kwargs.items() if k in self._request_params})


# ---------------------------------------------------------------------------------------------
# one run


class ConfigRejected(Exception):
    """vLLM refused to build a scheduler for the scenario's configuration (bad input, exit 2)."""


def _reason(fr) -> str | None:
    if fr is None:
        return None
    return str(getattr(fr, "name", fr)).lower()


class _Run:
    def __init__(self, env: _VllmEnv, sc: ResolvedScenario) -> None:
        self.env = env
        self.sc = sc
        self.notes: list[str] = []
        t0 = time.perf_counter()
        try:
            self.sched, self.block_hasher = env.build(sc, self.notes)
        except Exception as exc:  # vLLM's own config validation (e.g. an extra knob's value)
            msg = " ".join(str(exc).split())
            raise ConfigRejected(f"vLLM rejected the configuration: {type(exc).__name__}: {msg[:500]}") from exc
        self.build_s = time.perf_counter() - t0
        self.base_s = sc.step_base_s
        self.per_token_s = sc.step_per_token_s
        self.pending = list(sc.requests)  # not yet added, list order
        self.reqs: dict[str, object] = {}  # added vLLM Request objects
        self.prompt_tokens: dict[str, list[int]] = {}
        self.outputs: dict[str, list[int]] = {r.id: [] for r in sc.requests}
        self.finish_known: dict[str, int] = {}  # id -> finish step, once processed
        self.ever_scheduled: set[str] = set()
        self.preempted_waiting: set[str] = set()
        self.records = {
            r.id: {
                "prompt_len": None,
                "max_tokens": r.max_tokens,
                "priority": r.priority,
                "arrival_step": None,
                "arrival_time": None,
                "first_scheduled_step": None,
                "first_token_step": None,
                "finish_step": None,
                "finish_reason": None,
                "num_preemptions": 0,
                "cached_tokens_at_admission": None,
                "output_len": 0,
            }
            for r in sc.requests
        }
        self.steps: list[dict] = []
        self.arrived_buffer: list[str] = []
        self.step = 0
        self.clock = 0.0
        self.stalled = False
        self.empty_calls = 0
        self.schedule_s = 0.0
        self.update_s = 0.0
        kvm = self.sched.kv_cache_manager
        self.block_pool = kvm.block_pool
        self.blocks_of = kvm.coordinator.single_type_managers[0].req_to_blocks

    # --- arrivals -----------------------------------------------------------------------------
    def _ready(self, r) -> bool:
        if r.after is not None:
            fin = self.finish_known.get(r.after)
            return fin is not None and self.step >= fin + r.delay_steps
        if r.arrival_time is not None and r.arrival_time > self.clock + TIME_EPS:
            return False
        if r.arrival_step is not None and self.step < r.arrival_step:
            return False
        return True

    def _prompt(self, r) -> list[int]:
        toks: list[int] = []
        for seg in r.prompt:
            if seg.kind == "parent":
                toks += self.prompt_tokens[seg.source] + self.outputs[seg.source]
            else:
                toks += tokens_for_segment(seg)
        return toks

    def add_ready(self) -> None:
        if not self.pending:
            return
        still = []
        for r in self.pending:
            if not self._ready(r):
                still.append(r)
                continue
            toks = self._prompt(r)
            arrival = r.arrival_time if (r.after is None and r.arrival_time is not None) else self.clock
            req = self.env.make_request(
                r.id, toks, r.max_tokens, arrival, r.priority, self.block_hasher
            )
            self.sched.add_request(req)
            self.reqs[r.id] = req
            self.prompt_tokens[r.id] = toks
            rec = self.records[r.id]
            rec["prompt_len"] = len(toks)
            rec["arrival_step"] = self.step
            rec["arrival_time"] = arrival
            self.arrived_buffer.append(r.id)
        self.pending = still

    def can_still_arrive(self) -> bool:
        """Is some pending request able to arrive without the scheduler making progress?

        A request chained by `after` to a parent that has not finished cannot: when the
        scheduler is stuck, that parent never finishes.
        """
        return any(r.after is None or r.after in self.finish_known for r in self.pending)

    def next_arrival_time(self) -> float | None:
        times = [
            r.arrival_time
            for r in self.pending
            if r.after is None and r.arrival_time is not None
        ]
        return min(times) if times else None

    def advance_idle(self) -> None:
        """Nothing can run now: jump the clock to the next timed arrival, or count a step."""
        t = self.next_arrival_time()
        if t is not None and t > self.clock + TIME_EPS:
            self.clock = t
        else:
            self.step += 1

    # --- one schedule() ------------------------------------------------------------------------
    def schedule(self):
        t0 = time.perf_counter()
        so = self.sched.schedule()
        self.schedule_s += time.perf_counter() - t0
        total = so.total_num_scheduled_tokens
        preempted = sorted(so.preempted_req_ids or ())
        for rid in preempted:
            self.records[rid]["num_preemptions"] += 1
            self.preempted_waiting.add(rid)
        samples = {}
        entries = []
        spec_tokens = so.scheduled_spec_decode_tokens or {}
        padded: set[str] = set()
        for rid, n in so.num_scheduled_tokens.items():
            req = self.reqs[rid]
            samples[rid] = not req.is_prefill_chunk
            if total > 0:
                before = req.num_computed_tokens - n
                if rid not in self.ever_scheduled:
                    kind = "new"
                elif rid in self.preempted_waiting:
                    kind = "resumed"
                else:
                    kind = "running"
                entry = {
                    "id": rid,
                    "tokens": n,
                    "computed_before": before,
                    "kind": kind,
                    "samples": samples[rid],
                    "blocks": len(self.blocks_of.get(rid, ())),
                }
                if self.sc.speculative is not None:
                    # drafts verified this step; a request admitted from the waiting queue with
                    # one token left is padded with placeholder drafts (-1) that no model accepts
                    entry["drafts"] = len(spec_tokens.get(rid, ()))
                    if kind != "running" and entry["drafts"]:
                        padded.add(rid)
                entries.append(entry)
        record = None
        if total > 0 or preempted:
            record = {
                "step": self.step,
                "time": round(self.clock, 9),
                "arrived": self.arrived_buffer,
                "scheduled": entries,
                "total_tokens": total,
                "preempted": preempted,
                "free_blocks_after_schedule": self.block_pool.get_num_free_blocks(),
                "cached_blocks": self._cached_blocks(),
                "num_running": len(self.sched.running),
                "num_waiting": len(self.sched.waiting),
                "finished": [],
                "free_blocks_after_update": None,
            }
            self.arrived_buffer = []
            self.steps.append(record)
        step_no = self.step if total > 0 else None
        if total > 0:
            for e in entries:
                rid = e["id"]
                rec = self.records[rid]
                if rid not in self.ever_scheduled:
                    self.ever_scheduled.add(rid)
                    rec["first_scheduled_step"] = self.step
                    rec["cached_tokens_at_admission"] = e["computed_before"]
                self.preempted_waiting.discard(rid)
            self.clock += self.base_s + self.per_token_s * total
            self.step += 1
        else:
            self.empty_calls += 1
        return (so, samples, record, step_no, padded)

    def _cached_blocks(self) -> int:
        cache = getattr(self.block_pool.cached_block_hash_to_block, "_cache", None)
        if cache is None:
            return len(self.block_pool.cached_block_hash_to_block)
        return sum(1 if not isinstance(v, dict) else len(v) for v in cache.values())

    # --- process one batch's (fake) output -------------------------------------------------------
    def process(self, batch) -> None:
        so, samples, record, step_no, padded = batch
        req_ids = list(so.num_scheduled_tokens)
        spec = self.sc.speculative
        spec_tokens = so.scheduled_spec_decode_tokens or {}
        sampled = []
        accepted: dict[str, int] = {}
        for rid in req_ids:
            if samples[rid]:
                idx = len(self.outputs[rid])
                drafts = len(spec_tokens.get(rid, ()))
                n_acc = 0
                if spec is not None and drafts and rid not in padded:
                    n_acc = accepted_drafts(spec, rid, idx, drafts)
                accepted[rid] = n_acc
                sampled.append([fake_output_token(rid, idx + i, self._eos.get(rid))
                                for i in range(n_acc + 1)])
            else:
                sampled.append([])
        mro = self.env.ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=sampled,
            logprobs=None,
            prompt_logprobs_dict={},
            pooler_output=[],
        )
        t0 = time.perf_counter()
        outs = self.sched.update_from_output(so, mro)
        self.update_s += time.perf_counter() - t0
        finished = []
        stats = None
        for eco in outs.values():
            if getattr(eco, "scheduler_stats", None) is not None and stats is None:
                stats = eco.scheduler_stats
            for o in eco.outputs:
                rid = o.request_id
                new = list(o.new_token_ids or ())
                if new:
                    if not self.outputs[rid] and self.records[rid]["first_token_step"] is None:
                        self.records[rid]["first_token_step"] = step_no
                    self.outputs[rid].extend(new)
                reason = _reason(o.finish_reason)
                if reason is not None:
                    rec = self.records[rid]
                    rec["finish_step"] = step_no
                    rec["finish_reason"] = reason
                    self.finish_known[rid] = step_no
                    finished.append({"id": rid, "reason": reason, "output_len": len(self.outputs[rid])})
        for rid, toks in self.outputs.items():
            self.records[rid]["output_len"] = len(toks)
        if spec is not None and not self.sc.config["async_scheduling"]:
            self._propose_drafts(req_ids, samples)
        if record is not None:
            if spec is not None:
                for e in record["scheduled"]:
                    if e["id"] in accepted and e["drafts"]:
                        e["accepted"] = accepted[e["id"]]
            record["finished"] = finished
            record["free_blocks_after_update"] = self.block_pool.get_num_free_blocks()
            pc = getattr(stats, "prefix_cache_stats", None) if stats is not None else None
            if pc is not None:
                record["prefix_cache"] = {
                    "requests": int(pc.requests),
                    "queries": int(pc.queries),
                    "hits": int(pc.hits),
                }
        elif finished:
            # An output with finishes but no record cannot happen (only token-carrying batches
            # produce outputs); keep the information rather than lose it.
            self.notes.append(f"finishes from an empty batch: {finished}")

    def _propose_drafts(self, req_ids: list[str], samples: dict[str, bool]) -> None:
        """Sync mode: the engine core's post-step hands the proposer's drafts to the scheduler.

        The fake proposer drafts k tokens for every request of the batch that sampled (vLLM
        ignores drafts of a finished request or of a prefill chunk). Their ids never matter: a
        draft's acceptance is `accepted_drafts`, and the accepted tokens come back as samples.
        """
        k = self.sc.speculative.num_speculative_tokens
        ids = [rid for rid in req_ids if samples[rid]]
        drafts = [[fake_output_token(rid, len(self.outputs[rid]) + j) for j in range(k)]
                  for rid in ids]
        self.sched.update_draft_token_ids(self.env.DraftTokenIds(req_ids=ids, draft_token_ids=drafts))

    # --- the loop ----------------------------------------------------------------------------------
    def run(self) -> dict:
        self._eos = {r.id: r.eos_at for r in self.sc.requests if r.eos_at is not None}
        async_mode = self.sc.config["async_scheduling"]
        inflight: deque = deque()
        streak = 0
        total_empty = 0
        t0 = time.perf_counter()
        while self.step < self.sc.max_steps:
            if not self.pending and not self.sched.has_requests() and not inflight:
                break
            self.add_ready()
            has = self.sched.has_requests()
            if not has and not inflight:
                self.advance_idle()
                continue
            scheduled_tokens = False
            if has:
                batch = self.schedule()
                scheduled_tokens = batch[0].total_num_scheduled_tokens > 0
                if scheduled_tokens:
                    # "3 consecutive empty calls" (docs/oracle.md §2.3): a call with tokens ends
                    # the streak, also in async mode, where it usually skips the processing below
                    streak = 0
                inflight.appendleft(batch)
                if async_mode and len(inflight) < 2 and (
                    scheduled_tokens or self.sched.has_requests()
                ):
                    continue
            self.process(inflight.pop())
            # Stall detection: schedule() keeps returning nothing although requests remain and
            # no batch that carries tokens is in flight (async mode keeps empty batches in the
            # queue, so look at what they carry rather than at the queue length).
            busy = any(b[0].total_num_scheduled_tokens > 0 for b in inflight)
            if has and not scheduled_tokens and not busy and self.sched.has_requests():
                streak += 1
                total_empty += 1
                if streak >= EMPTY_CALLS_BEFORE_STALL:
                    if not self.can_still_arrive() or total_empty > MAX_EMPTY_CALLS:
                        self.stalled = True
                        break
                    self.advance_idle()
            elif scheduled_tokens:
                streak = 0
        while inflight:
            self.process(inflight.pop())
        loop_s = time.perf_counter() - t0

        unfinished = sorted(rid for rid, rec in self.records.items() if rec["finish_reason"] is None)
        n = len(self.steps)
        return {
            "scenario": self.sc.name,
            "vllm_version": self.env.version,
            "config": self.sc.config,
            **({"speculative": self.sc.speculative.as_json()} if self.sc.speculative else {}),
            "num_usable_blocks": self.sc.num_usable_blocks,
            "steps": self.steps,
            "requests": self.records,
            "unfinished": unfinished,
            "stalled": self.stalled,
            "timing": {
                "build_s": round(self.build_s, 4),
                "loop_s": round(loop_s, 4),
                "schedule_s": round(self.schedule_s, 4),
                "update_s": round(self.update_s, 4),
                "num_steps": n,
                "empty_schedule_calls": self.empty_calls,
                "steps_per_s": round(n / loop_s, 1) if loop_s > 0 else 0.0,
            },
        }


def run_scenario(env: _VllmEnv, sc: ResolvedScenario) -> tuple[dict, list[str]]:
    run = _Run(env, sc)
    trace = run.run()
    return trace, sc.warnings + run.notes


def write_trace(trace: dict, path: str | None) -> None:
    text = json.dumps(trace, indent=1) + "\n"
    if path is None or path == "-":
        sys.stdout.write(text)
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenarios", nargs="+", help="scenario JSON file(s)")
    ap.add_argument("-o", "--output", help="trace file for a single scenario (default: stdout)")
    ap.add_argument(
        "--out-dir",
        help="write each trace to DIR/<scenario file stem, without .scenario>.trace.json",
    )
    ap.add_argument(
        "--allow-unknown-knobs",
        action="store_true",
        help="accept config keys that are not knobs (passed through to the trace's config)",
    )
    ap.add_argument("--quiet", action="store_true", help="no warnings or progress on stderr")
    args = ap.parse_args(argv)
    if args.output and len(args.scenarios) > 1:
        ap.error("-o takes a single scenario; use --out-dir for several")

    resolved = []
    for p in args.scenarios:
        try:
            resolved.append((p, load_scenario(p, allow_unknown_config=args.allow_unknown_knobs)))
        except ScenarioError as exc:
            print(f"driver.py: {p}: {exc}", file=sys.stderr)
            return 2

    env = _VllmEnv()
    if not args.quiet:
        print(f"driver.py: vLLM {env.version} imported in {env.import_s:.1f} s", file=sys.stderr)
    status = 0
    for p, sc in resolved:
        try:
            trace, notes = run_scenario(env, sc)
        except ConfigRejected as exc:
            print(f"driver.py: {p}: {exc}", file=sys.stderr)
            status = status or 2
            continue
        except Exception as exc:  # report and go on with the other scenarios
            import traceback

            traceback.print_exc()
            print(f"driver.py: {p}: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
            status = 1
            continue
        if not args.quiet:
            for n in notes:
                print(f"driver.py: {p}: warning: {n}", file=sys.stderr)
        if args.out_dir:
            stem = Path(p).name
            for suffix in (".json", ".scenario"):
                if stem.endswith(suffix):
                    stem = stem[: -len(suffix)]
            out = str(Path(args.out_dir) / f"{stem}.trace.json")
        else:
            out = args.output
        write_trace(trace, out)
        if not args.quiet and out and out != "-":
            t = trace["timing"]
            print(
                f"driver.py: {p} -> {out}: {t['num_steps']} steps, "
                f"{len(trace['unfinished'])} unfinished{', STALLED' if trace['stalled'] else ''}",
                file=sys.stderr,
            )
    return status


if __name__ == "__main__":
    sys.exit(main())
