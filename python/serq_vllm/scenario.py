"""Scenario files for the vLLM oracle: load, validate, resolve.

A scenario is one JSON object describing an engine configuration and a list of requests
(docs/oracle.md has the format field by field). This module turns it into a
`ResolvedScenario`: every config default filled in, every request's arrival rule and prompt
structure made explicit. It never needs vLLM, so the serQ side (simulators, tests) and the
oracle driver (which runs inside the vLLM virtualenv) share exactly one reading of a scenario.

Bad input raises `ScenarioError`, whose message starts with the path of the offending field,
e.g. ``requests[3].prompt_len: must be a non-negative integer, got -5``.

Prompts are described as data (`PromptSegment` lists) rather than token ids, because what
matters to a scheduler model is the sharing structure: which requests share which prefix, and
which prompt extends which earlier conversation. `tokens_for_segment` turns a segment into the
deterministic token ids the oracle driver feeds to vLLM.

With speculative decoding (the optional `speculative` object, `SpecDecode`) the number of drafts
a step accepts is `accepted_drafts`, a seeded function of the request and its output position
that the driver and serQ's model each compute, sharing no random state at run time.
"""

from __future__ import annotations

import json
import math
import random
import hashlib
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

__all__ = [
    "ScenarioError",
    "DEFAULT_CONFIG",
    "CONFIG_KEYS",
    "REQUEST_KEYS",
    "VOCAB_SIZE",
    "EOS_TOKEN_ID",
    "PromptSegment",
    "ResolvedRequest",
    "ResolvedScenario",
    "load_scenario",
    "resolve_scenario",
    "tokens_for_segment",
    "fresh_token_ids",
    "fake_output_token",
    "SpecDecode",
    "SPEC_METHODS",
    "accepted_drafts",
]

#: Vocabulary of the weightless model the driver builds, and its EOS id.
VOCAB_SIZE = 32000
EOS_TOKEN_ID = 2
#: Generated token ids lie in [FIRST_TOKEN_ID, VOCAB_SIZE): never EOS or another special id.
FIRST_TOKEN_ID = 10

DEFAULT_STEP_TIME = {"base_s": 0.01, "per_token_s": 0.0001}

#: The config knobs with their defaults, in the order a trace writes them.
DEFAULT_CONFIG: dict[str, Any] = {
    "block_size": 16,
    "num_gpu_blocks": 1024,
    "max_num_batched_tokens": 2048,
    "max_num_seqs": 128,
    "max_model_len": None,
    "long_prefill_token_threshold": 0,
    "enable_prefix_caching": True,
    "enable_chunked_prefill": True,
    "policy": "fcfs",
    "async_scheduling": False,
    "step_time": DEFAULT_STEP_TIME,
    "scheduler_config_extra": {},
    "cache_config_extra": {},
}
CONFIG_KEYS = tuple(DEFAULT_CONFIG)
MAX_MODEL_LEN_CAP = 32768
DEFAULT_MAX_STEPS = 100000

REQUEST_KEYS = (
    "id",
    "max_tokens",
    "output_len",
    "priority",
    "eos_at",
    "prompt_token_ids",
    "prompt_len",
    "prefix_group",
    "prefix_len",
    "arrival_step",
    "arrival_time",
    "after",
    "delay_steps",
    "prompt_from",
    "append_len",
    "append_token_ids",
)
# Free-text keys a request may carry without effect.
_REQUEST_COMMENT_KEYS = ("description", "comment", "note")
TOP_LEVEL_KEYS = ("name", "description", "config", "prefix_groups", "requests", "max_steps",
                  "speculative")

#: Speculative decoding's proposer kinds the oracle fakes, each with vLLM 0.31.0's two numbers
#: for it (vllm/config/vllm.py `num_lookahead_tokens`, vllm/config/speculative.py
#: `max_num_new_slots_for_drafting`): KV slots reserved past the scheduled tokens (a multiple of
#: k: 0 or k) and the input-budget slots each scheduled request costs beyond its tokens.
#: "ngram" drafts from the prompt on the host (no KV of its own); "draft_model" runs a small
#: model autoregressively, which writes KV past the verified range and keeps one input token.
SPEC_METHODS = {"ngram": (0, 0), "draft_model": (1, 1)}
SPEC_KEYS = ("num_speculative_tokens", "method", "accept_percent", "seed")
#: Most draft tokens a scenario may ask for per step (vLLM itself has no small limit; the
#: bound keeps a step's scheduled tokens within what the scenarios' budgets exercise).
MAX_SPEC_TOKENS = 64


class ScenarioError(ValueError):
    """A scenario that cannot be used. `path` names the field (``requests[3].prompt_len``)."""

    def __init__(self, path: str, message: str):
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


# --------------------------------------------------------------------------------------------
# resolved data


@dataclass(frozen=True)
class PromptSegment:
    """One piece of a prompt, in order.

    kind:
      - ``"ids"``: the explicit token ids in `ids`.
      - ``"group"``: the first `length` tokens of prefix group `source`'s shared sequence
        (shared by every request of that group: equal leading blocks hit in the prefix cache).
      - ``"fresh"``: `length` tokens private to one request, from the sequence seeded `source`
        (``"req:<id>"``).
      - ``"parent"``: the whole prompt of request `source` followed by **all** of its output
        tokens (known only once that request finished; see `prompt_from`).
    """

    kind: str
    source: str = ""
    length: int = 0
    ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class SpecDecode:
    """The `speculative` object of a scenario: k draft tokens per step (docs/oracle.md §3.3).

    The fake proposer always proposes `num_speculative_tokens` drafts for a request whose last
    step sampled; `accepted_drafts` decides how many of the drafts a step verifies are accepted.
    """

    num_speculative_tokens: int
    method: str = "ngram"
    accept_percent: int = 70
    seed: int = 0

    @property
    def lookahead_tokens(self) -> int:
        """KV slots vLLM allocates past a step's scheduled tokens (`num_lookahead_tokens`)."""
        return SPEC_METHODS[self.method][0] * self.num_speculative_tokens

    @property
    def draft_slots(self) -> int:
        """Input-budget slots each scheduled request costs beyond its tokens."""
        return SPEC_METHODS[self.method][1]

    def as_json(self) -> dict:
        return {k: getattr(self, k) for k in SPEC_KEYS}


def accepted_drafts(spec: SpecDecode, request_id: str, outputs_before: int, num_drafts: int) -> int:
    """How many of the `num_drafts` draft tokens a step verifies for a request are accepted.

    The step's drafts are judged in order, each accepted with probability `accept_percent`/100,
    and the first rejection ends the run (what a rejection sampler does). The "coin" of draft j
    is blake2b of (seed, request id, `outputs_before`, j) modulo 100, so the number depends only
    on the request and on how many output tokens it had before the step: the oracle driver and
    serQ's model compute it independently, with no shared random state, and a request that is
    preempted and runs again draws the same numbers at the same output positions.
    """
    accepted = 0
    for j in range(num_drafts):
        digest = hashlib.blake2b(
            f"{spec.seed}\x00{request_id}\x00{outputs_before}\x00{j}".encode(), digest_size=8
        ).digest()
        if int.from_bytes(digest, "big") % 100 >= spec.accept_percent:
            break
        accepted += 1
    return accepted


@dataclass
class ResolvedRequest:
    id: str
    index: int
    max_tokens: int
    priority: int = 0
    eos_at: int | None = None
    #: step-based arrival (None when the request arrives by time or by `after`)
    arrival_step: int | None = None
    #: time-based arrival in virtual seconds (None when not given or overridden by `after`)
    arrival_time: float | None = None
    #: the same arrival time as an exact rational, parsed from the JSON number's decimal text
    arrival_time_exact: Fraction | None = None
    after: str | None = None
    delay_steps: int = 0
    prompt_from: str | None = None
    prompt: list[PromptSegment] = field(default_factory=list)
    #: the group this request's prompt starts with, and how many of its tokens (0 if none)
    prefix_group: str | None = None
    prefix_len: int = 0

    @property
    def expected_output_len(self) -> int:
        """Output tokens if the request runs to completion: EOS counts as an output token."""
        if self.eos_at is not None and self.eos_at + 1 < self.max_tokens:
            return self.eos_at + 1
        return self.max_tokens

    @property
    def arrival_kind(self) -> str:
        """``"after"``, ``"time"`` or ``"step"``."""
        if self.after is not None:
            return "after"
        if self.arrival_time is not None:
            return "time"
        return "step"


@dataclass
class ResolvedScenario:
    name: str
    description: str
    #: every knob of DEFAULT_CONFIG in order (max_model_len resolved), then any extra keys
    config: dict[str, Any]
    prefix_groups: dict[str, int]
    requests: list[ResolvedRequest]
    max_steps: int
    warnings: list[str] = field(default_factory=list)
    #: speculative decoding (None: off)
    speculative: SpecDecode | None = None
    # Derived once, on first use (a resolved scenario is never changed afterwards): id -> request,
    # and id -> static prompt length. Recomputing them per call made loading and modelling a
    # `prompt_from` chain exponential in its length (docs/oracle.md §3).
    _by_id: dict[str, ResolvedRequest] | None = field(default=None, init=False, repr=False,
                                                      compare=False)
    _prompt_lens: dict[str, int] | None = field(default=None, init=False, repr=False,
                                                compare=False)

    # convenient views of the config ------------------------------------------------------
    @property
    def block_size(self) -> int:
        return self.config["block_size"]

    @property
    def num_usable_blocks(self) -> int:
        return self.config["num_gpu_blocks"] - 1

    @property
    def step_base_s(self) -> float:
        return float(self.config["step_time"].get("base_s", DEFAULT_STEP_TIME["base_s"]))

    @property
    def step_per_token_s(self) -> float:
        # A scenario that gives `step_time` replaces the whole object: a missing per-token
        # cost then means 0, not the default.
        return float(self.config["step_time"].get("per_token_s", 0.0))

    @property
    def step_base_exact(self) -> Fraction:
        """`step_base_s` as the exact rational its decimal text denotes (0.01 -> 1/100)."""
        return _exact_decimal(self.config["step_time"].get("base_s", DEFAULT_STEP_TIME["base_s"]))

    @property
    def step_per_token_exact(self) -> Fraction:
        """`step_per_token_s` as an exact rational (0.0001 -> 1/10000)."""
        return _exact_decimal(self.config["step_time"].get("per_token_s", 0))

    def request(self, rid: str) -> ResolvedRequest:
        if self._by_id is None:
            self._by_id = {r.id: r for r in self.requests}
        try:
            return self._by_id[rid]
        except KeyError:
            raise KeyError(rid) from None

    def static_prompt_len(self, rid: str) -> int:
        """Prompt length assuming every `prompt_from` ancestor runs to completion (its output
        as long as `output_len` says)."""
        if self._prompt_lens is None:
            self._prompt_lens = self._static_prompt_lens()
        return self._prompt_lens[rid]

    def _static_prompt_lens(self) -> dict[str, int]:
        """Every request's static prompt length, each computed once, sources first (iteratively:
        a chain may be longer than Python's recursion limit)."""
        lens: dict[str, int] = {}
        for r in self.requests:
            stack = [r]
            while stack:
                cur = stack[-1]
                if cur.id in lens:
                    stack.pop()
                    continue
                todo = [self.request(seg.source) for seg in cur.prompt
                        if seg.kind == "parent" and seg.source not in lens]
                if todo:
                    stack.extend(todo)
                    continue
                stack.pop()
                total = 0
                for seg in cur.prompt:
                    if seg.kind == "parent":
                        total += lens[seg.source] + self._output_len(seg.source, lens[seg.source])
                    elif seg.kind == "ids":
                        total += len(seg.ids)
                    else:
                        total += seg.length
                lens[cur.id] = total
        return lens

    def output_len(self, rid: str) -> int:
        """Output tokens of a request that runs to completion. vLLM's stop check ends it at the
        first of: the EOS token (`eos_at`, counted), `max_tokens` outputs, or prompt + outputs
        reaching `max_model_len` (finish reason `length`). Never 0 for a resolved scenario: a
        prompt of `max_model_len` tokens or more is refused by `resolve_scenario`, as vLLM
        refuses it."""
        return self._output_len(rid, self.static_prompt_len(rid))

    def _output_len(self, rid: str, prompt_len: int) -> int:
        room = self.config["max_model_len"] - prompt_len
        return max(0, min(self.request(rid).expected_output_len, room))

    def finish_reason(self, rid: str) -> str | None:
        """`stop` (EOS), `length` (max_tokens or max_model_len), or None (never completes)."""
        r = self.request(rid)
        out = self.output_len(rid)
        if out == 0:
            return None
        return "stop" if r.eos_at is not None and r.eos_at + 1 <= out else "length"

    def longest_sequence(self) -> int:
        """Largest prompt + expected output over all requests (what must fit in the KV cache)."""
        return max(
            (self.static_prompt_len(r.id) + r.expected_output_len for r in self.requests),
            default=0,
        )


# --------------------------------------------------------------------------------------------
# token ids


def fresh_token_ids(seed: str, n: int, start: int = 0) -> list[int]:
    """Deterministic pseudo-random token ids in [10, 32000) for a seed string.

    The same seed always yields the same sequence (Python's `random` seeded with a string is
    stable across runs and platforms), so two requests of one prefix group share their prefix
    blocks, and different seeds share no full block in practice.
    """
    rng = random.Random(seed)
    out = [rng.randrange(FIRST_TOKEN_ID, VOCAB_SIZE) for _ in range(start + n)]
    return out[start:]


def tokens_for_segment(seg: PromptSegment, parent_tokens: list[int] | None = None) -> list[int]:
    """Token ids of one prompt segment (`parent_tokens` = parent prompt + outputs, for "parent")."""
    if seg.kind == "ids":
        return list(seg.ids)
    if seg.kind == "group":
        return fresh_token_ids("group:" + seg.source, seg.length)
    if seg.kind == "fresh":
        return fresh_token_ids(seg.source, seg.length)
    if seg.kind == "parent":
        if parent_tokens is None:
            raise ValueError(f"segment from parent {seg.source!r} needs the parent's tokens")
        return list(parent_tokens)
    raise ValueError(f"unknown prompt segment kind {seg.kind!r}")


def fake_output_token(request_id: str, index: int, eos_at: int | None = None) -> int:
    """The token the fake model 'samples' as output number `index` (0-based) of a request."""
    if eos_at is not None and index == eos_at:
        return EOS_TOKEN_ID
    digest = hashlib.blake2b(f"{request_id}\x00{index}".encode(), digest_size=8).digest()
    return FIRST_TOKEN_ID + int.from_bytes(digest, "big") % (VOCAB_SIZE - FIRST_TOKEN_ID)


# --------------------------------------------------------------------------------------------
# validation helpers


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: Every integer of a scenario is at most this in size: the model computes with them in binary64,
#: exactly only up to 2^53 (docs/oracle.md §3).
MAX_SCENARIO_INT = 2**53
#: num_gpu_blocks at most this: the model's content pool holds a list entry per block.
MAX_GPU_BLOCKS = 2**20


def _is_number(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return abs(v) <= MAX_SCENARIO_INT if isinstance(v, int) else math.isfinite(v)


def _show(v: Any) -> str:
    try:
        s = json.dumps(v)
    except (TypeError, ValueError):
        s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _int(obj: dict, key: str, path: str, *, minimum: int | None = None, default: Any = None):
    if key not in obj:
        return default
    v = obj[key]
    where = f"{path}.{key}" if path else key
    if minimum == 0:
        what = "a non-negative integer"
    elif minimum == 1:
        what = "a positive integer"
    elif minimum is None:
        what = "an integer"
    else:
        what = f"an integer >= {minimum}"
    if not _is_int(v) or (minimum is not None and v < minimum):
        raise ScenarioError(where, f"must be {what}, got {_show(v)}")
    if abs(v) > MAX_SCENARIO_INT:
        raise ScenarioError(where, f"must be at most 2^53 in size, got {_show(v)}")
    return v


def _bool(obj: dict, key: str, path: str, default: Any = None):
    if key not in obj:
        return default
    v = obj[key]
    if not isinstance(v, bool):
        raise ScenarioError(f"{path}.{key}", f"must be true or false, got {_show(v)}")
    return v


def _str(obj: dict, key: str, path: str, default: Any = None):
    if key not in obj:
        return default
    v = obj[key]
    if not isinstance(v, str) or not v:
        raise ScenarioError(f"{path}.{key}", f"must be a non-empty string, got {_show(v)}")
    return v


def _token_list(obj: dict, key: str, path: str):
    if key not in obj:
        return None
    v = obj[key]
    if not isinstance(v, list):
        raise ScenarioError(f"{path}.{key}", f"must be a list of token ids, got {_show(v)}")
    for i, t in enumerate(v):
        if not _is_int(t) or not 0 <= t < VOCAB_SIZE:
            raise ScenarioError(
                f"{path}.{key}[{i}]", f"must be a token id in [0, {VOCAB_SIZE}), got {_show(t)}"
            )
    return list(v)


def _exact_decimal(v: int | float) -> Fraction:
    """The rational a JSON number's decimal text denotes (0.0001 -> 1/10000)."""
    return Fraction(repr(v)) if isinstance(v, float) else Fraction(v)


# --------------------------------------------------------------------------------------------
# resolution


def _resolve_config(raw: Any, allow_unknown: bool, warnings: list[str]) -> dict[str, Any]:
    path = "config"
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ScenarioError(path, f"must be an object, got {_show(raw)}")
    for k in raw:
        if k not in DEFAULT_CONFIG:
            if not allow_unknown:
                raise ScenarioError(
                    f"{path}.{k}", f"unknown knob (known: {', '.join(CONFIG_KEYS)})"
                )
            warnings.append(f"{path}.{k}: unknown knob, passed through unchanged")
    cfg: dict[str, Any] = {}
    cfg["block_size"] = _int(raw, "block_size", path, minimum=1, default=16)
    cfg["num_gpu_blocks"] = _int(raw, "num_gpu_blocks", path, minimum=2, default=1024)
    if cfg["num_gpu_blocks"] > MAX_GPU_BLOCKS:
        raise ScenarioError(f"{path}.num_gpu_blocks", f"must be at most {MAX_GPU_BLOCKS} (2^20) "
                            f"blocks, got {_show(cfg['num_gpu_blocks'])}")
    cfg["max_num_batched_tokens"] = _int(raw, "max_num_batched_tokens", path, minimum=1, default=2048)
    cfg["max_num_seqs"] = _int(raw, "max_num_seqs", path, minimum=1, default=128)
    capacity = cfg["num_gpu_blocks"] * cfg["block_size"]
    mml = raw.get("max_model_len")
    if mml is None:
        mml = min(MAX_MODEL_LEN_CAP, capacity)
    else:
        mml = _int(raw, "max_model_len", path, minimum=1)
        if mml > capacity:
            warnings.append(
                f"config.max_model_len: {mml} exceeds the KV cache ({capacity} tokens = "
                f"num_gpu_blocks x block_size); a real engine would refuse to start"
            )
    cfg["max_model_len"] = mml
    cfg["long_prefill_token_threshold"] = _int(
        raw, "long_prefill_token_threshold", path, minimum=0, default=0
    )
    cfg["enable_prefix_caching"] = _bool(raw, "enable_prefix_caching", path, default=True)
    cfg["enable_chunked_prefill"] = _bool(raw, "enable_chunked_prefill", path, default=True)
    policy = raw.get("policy", "fcfs")
    if policy not in ("fcfs", "priority"):
        raise ScenarioError(f"{path}.policy", f'must be "fcfs" or "priority", got {_show(policy)}')
    cfg["policy"] = policy
    cfg["async_scheduling"] = _bool(raw, "async_scheduling", path, default=False)
    st = raw.get("step_time", DEFAULT_STEP_TIME)
    if not isinstance(st, dict):
        raise ScenarioError(f"{path}.step_time", f"must be an object, got {_show(st)}")
    for k, v in st.items():
        if k not in ("base_s", "per_token_s"):
            raise ScenarioError(f"{path}.step_time.{k}", "unknown key (known: base_s, per_token_s)")
        if not _is_number(v) or v < 0:
            raise ScenarioError(
                f"{path}.step_time.{k}", f"must be a non-negative number, got {_show(v)}"
            )
    cfg["step_time"] = dict(st)
    for k in ("scheduler_config_extra", "cache_config_extra"):
        v = raw.get(k, {})
        if not isinstance(v, dict):
            raise ScenarioError(f"{path}.{k}", f"must be an object, got {_show(v)}")
        cfg[k] = dict(v)
    for k in raw:
        if k not in cfg:
            cfg[k] = raw[k]
    # constraints vLLM's own config enforces, reported against the scenario's fields
    if cfg["max_num_batched_tokens"] < cfg["max_num_seqs"]:
        raise ScenarioError(
            f"{path}.max_num_batched_tokens",
            f"must be >= max_num_seqs ({cfg['max_num_seqs']}), got {cfg['max_num_batched_tokens']}",
        )
    if cfg["long_prefill_token_threshold"] > mml:
        raise ScenarioError(
            f"{path}.long_prefill_token_threshold",
            f"must be <= max_model_len ({mml}), got {cfg['long_prefill_token_threshold']}",
        )
    if not cfg["enable_chunked_prefill"] and cfg["max_num_batched_tokens"] < mml:
        raise ScenarioError(
            f"{path}.max_num_batched_tokens",
            f"must be >= max_model_len ({mml}) when chunked prefill is off, "
            f"got {cfg['max_num_batched_tokens']}",
        )
    return cfg


def _resolve_groups(raw: Any) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ScenarioError("prefix_groups", f"must be an object, got {_show(raw)}")
    groups = {}
    for name, g in raw.items():
        path = f"prefix_groups.{name}"
        if not name:
            raise ScenarioError("prefix_groups", "a group name must be a non-empty string")
        if not isinstance(g, dict):
            raise ScenarioError(path, f'must be an object like {{"length": 64}}, got {_show(g)}')
        for k in g:
            if k not in ("length", "description"):
                raise ScenarioError(f"{path}.{k}", "unknown key (known: length)")
        if "length" not in g:
            raise ScenarioError(f"{path}.length", "missing required field")
        groups[name] = _int(g, "length", path, minimum=0)
    return groups


def _resolve_request(i: int, raw: Any, groups: dict[str, int]) -> ResolvedRequest:
    path = f"requests[{i}]"
    if not isinstance(raw, dict):
        raise ScenarioError(path, f"must be an object, got {_show(raw)}")
    for k in raw:
        if k not in REQUEST_KEYS and k not in _REQUEST_COMMENT_KEYS and not k.startswith("_"):
            raise ScenarioError(f"{path}.{k}", f"unknown field (known: {', '.join(REQUEST_KEYS)})")
    rid = raw.get("id", str(i))
    if not isinstance(rid, str) or not rid:
        raise ScenarioError(f"{path}.id", f"must be a non-empty string, got {_show(rid)}")

    max_tokens = _int(raw, "max_tokens", path, minimum=1)
    output_len = _int(raw, "output_len", path, minimum=1)
    if max_tokens is not None and output_len is not None and max_tokens != output_len:
        raise ScenarioError(
            f"{path}.output_len",
            f"is an alias of max_tokens and disagrees with it ({output_len} != {max_tokens})",
        )
    if max_tokens is None:
        max_tokens = output_len if output_len is not None else 16

    req = ResolvedRequest(id=rid, index=i, max_tokens=max_tokens)
    req.priority = _int(raw, "priority", path, default=0)
    req.eos_at = _int(raw, "eos_at", path, minimum=0)

    # arrival ------------------------------------------------------------------------------
    req.after = _str(raw, "after", path)
    req.delay_steps = _int(raw, "delay_steps", path, minimum=0, default=0)
    arrival_step = _int(raw, "arrival_step", path, minimum=0)
    if "arrival_time" in raw:
        t = raw["arrival_time"]
        if not _is_number(t) or t < 0:
            raise ScenarioError(
                f"{path}.arrival_time", f"must be a non-negative number of seconds, got {_show(t)}"
            )
    if req.after is None:
        if "arrival_time" in raw:
            req.arrival_time = float(raw["arrival_time"])
            req.arrival_time_exact = _exact_decimal(raw["arrival_time"])
            req.arrival_step = arrival_step
        else:
            req.arrival_step = arrival_step if arrival_step is not None else 0

    # prompt -------------------------------------------------------------------------------
    ids = _token_list(raw, "prompt_token_ids", path)
    prompt_len = _int(raw, "prompt_len", path, minimum=0)
    group = _str(raw, "prefix_group", path)
    prefix_len = _int(raw, "prefix_len", path, minimum=0)
    req.prompt_from = _str(raw, "prompt_from", path)
    append_len = _int(raw, "append_len", path, minimum=0)
    append_ids = _token_list(raw, "append_token_ids", path)

    if group is not None and group not in groups:
        known = ", ".join(groups) or "none defined"
        raise ScenarioError(f"{path}.prefix_group", f"unknown group {group!r} (known: {known})")
    if prefix_len is not None and group is None:
        raise ScenarioError(f"{path}.prefix_len", "only allowed together with prefix_group")
    if req.prompt_from is None:
        for k in ("append_len", "append_token_ids"):
            if k in raw:
                raise ScenarioError(f"{path}.{k}", "only allowed together with prompt_from")
    segments: list[PromptSegment] = []
    if req.prompt_from is not None:
        for k in ("prompt_token_ids", "prompt_len", "prefix_group"):
            if k in raw:
                raise ScenarioError(f"{path}.{k}", "conflicts with prompt_from")
        if append_ids is not None and append_len is not None and append_len != len(append_ids):
            raise ScenarioError(
                f"{path}.append_len",
                f"disagrees with append_token_ids (length {len(append_ids)}), got {append_len}",
            )
        segments.append(PromptSegment("parent", source=req.prompt_from))
        if append_ids:
            segments.append(PromptSegment("ids", ids=tuple(append_ids)))
        elif append_len:
            segments.append(PromptSegment("fresh", source=f"req:{rid}", length=append_len))
    elif ids is not None:
        if group is not None:
            raise ScenarioError(f"{path}.prefix_group", "conflicts with prompt_token_ids")
        if prompt_len is not None and prompt_len != len(ids):
            raise ScenarioError(
                f"{path}.prompt_len",
                f"disagrees with prompt_token_ids (length {len(ids)}), got {prompt_len}",
            )
        if not ids:
            raise ScenarioError(f"{path}.prompt_token_ids", "the prompt must have at least one token")
        segments.append(PromptSegment("ids", ids=tuple(ids)))
    else:
        if group is not None:
            plen = prefix_len if prefix_len is not None else groups[group]
            if prompt_len is None:
                prompt_len = plen
            shared = min(plen, prompt_len)
            req.prefix_group, req.prefix_len = group, shared
            if shared:
                segments.append(PromptSegment("group", source=group, length=shared))
            if prompt_len > shared:
                segments.append(
                    PromptSegment("fresh", source=f"req:{rid}", length=prompt_len - shared)
                )
        else:
            if prompt_len is None:
                raise ScenarioError(
                    f"{path}.prompt_len",
                    "missing required field (give prompt_len, prompt_token_ids, prefix_group "
                    "or prompt_from)",
                )
            segments.append(PromptSegment("fresh", source=f"req:{rid}", length=prompt_len))
        if prompt_len == 0:
            raise ScenarioError(f"{path}.prompt_len", "the prompt must have at least one token, got 0")
    req.prompt = segments
    return req


def _resolve_speculative(raw: Any, config: dict[str, Any]) -> SpecDecode | None:
    path = "speculative"
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ScenarioError(path, f'must be an object like {{"num_speculative_tokens": 3}}, '
                                  f"got {_show(raw)}")
    for k in raw:
        if k not in SPEC_KEYS and k != "description":
            raise ScenarioError(f"{path}.{k}", f"unknown key (known: {', '.join(SPEC_KEYS)})")
    if "num_speculative_tokens" not in raw:
        raise ScenarioError(f"{path}.num_speculative_tokens", "missing required field")
    k = _int(raw, "num_speculative_tokens", path, minimum=1)
    if k > MAX_SPEC_TOKENS:
        raise ScenarioError(f"{path}.num_speculative_tokens",
                            f"must be at most {MAX_SPEC_TOKENS}, got {k}")
    method = raw.get("method", "ngram")
    if method not in SPEC_METHODS:
        raise ScenarioError(f"{path}.method",
                            f"must be one of {', '.join(map(json.dumps, SPEC_METHODS))}, "
                            f"got {_show(method)}")
    accept = _int(raw, "accept_percent", path, minimum=0, default=70)
    if accept > 100:
        raise ScenarioError(f"{path}.accept_percent", f"must be at most 100, got {accept}")
    seed = _int(raw, "seed", path, default=0)
    spec = SpecDecode(num_speculative_tokens=k, method=method, accept_percent=accept, seed=seed)
    # constraints vLLM's own config enforces (vllm/config/vllm.py), reported against the fields
    if config["async_scheduling"] and method == "ngram":
        raise ScenarioError(f"{path}.method", 'vLLM runs async scheduling only with a model-based '
                            'proposer: use "draft_model" or set config.async_scheduling to false')
    if config["max_num_batched_tokens"] <= spec.draft_slots:
        raise ScenarioError("config.max_num_batched_tokens",
                            f"must exceed the proposer's {spec.draft_slots} draft slot(s) per "
                            f"request, got {config['max_num_batched_tokens']}")
    return spec


def resolve_scenario(
    obj: Any, *, default_name: str = "scenario", allow_unknown_config: bool = False
) -> ResolvedScenario:
    """Validate a parsed scenario object and fill in every default.

    `allow_unknown_config`: accept config keys that are not knobs (kept in the resolved config
    and reported in `warnings`) instead of raising.
    """
    if not isinstance(obj, dict):
        raise ScenarioError("", f"a scenario must be a JSON object, got {_show(obj)}")
    warnings: list[str] = []
    name = obj.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise ScenarioError("name", f"must be a non-empty string, got {_show(name)}")
    description = obj.get("description", "")
    if not isinstance(description, str):
        description = json.dumps(description)
    config = _resolve_config(obj.get("config"), allow_unknown_config, warnings)
    groups = _resolve_groups(obj.get("prefix_groups"))
    max_steps = _int(obj, "max_steps", "", minimum=0, default=DEFAULT_MAX_STEPS)
    speculative = _resolve_speculative(obj.get("speculative"), config)
    if "requests" not in obj:
        raise ScenarioError("requests", "missing required field")
    raw_reqs = obj["requests"]
    if not isinstance(raw_reqs, list):
        raise ScenarioError("requests", f"must be a list of request objects, got {_show(raw_reqs)}")

    requests: list[ResolvedRequest] = []
    first_index: dict[str, int] = {}
    for i, raw in enumerate(raw_reqs):
        req = _resolve_request(i, raw, groups)
        if req.id in first_index:
            raise ScenarioError(
                f"requests[{i}].id",
                f"duplicate id {req.id!r} (first used by requests[{first_index[req.id]}])",
            )
        first_index[req.id] = i
        requests.append(req)

    by_id = {r.id: r for r in requests}
    for r in requests:
        for key in ("after", "prompt_from"):
            ref = getattr(r, key)
            if ref is None:
                continue
            if ref not in by_id:
                raise ScenarioError(f"requests[{r.index}].{key}", f"names an unknown request id {ref!r}")
            if ref == r.id:
                raise ScenarioError(f"requests[{r.index}].{key}", "a request cannot name itself")
    # `after` chains must end (no cycle) ... Each request's depth in its `after` chain is
    # computed once (a walk stops at a request whose depth is known), so a long chain is checked
    # in linear time.
    depth: dict[str, int] = {}
    for r in requests:
        path = [r.id]
        on_path = {r.id}
        cur = r.after
        while cur is not None and cur not in depth:
            if cur in on_path:
                raise ScenarioError(f"requests[{r.index}].after", f"forms a cycle through {cur!r}")
            path.append(cur)
            on_path.add(cur)
            cur = by_id[cur].after
        d = -1 if cur is None else depth[cur]
        for rid in reversed(path):
            d += 1
            depth[rid] = d
    # ... and the parent of a prompt must have finished before the child is added: it must be
    # the request's `after` parent or one of that parent's own `after` ancestors (climbing from
    # the `after` parent to the depth of `prompt_from` decides it).
    for r in requests:
        if r.prompt_from is None:
            continue
        cur = r.after
        while cur is not None and depth[cur] > depth[r.prompt_from]:
            cur = by_id[cur].after
        if cur != r.prompt_from:
            raise ScenarioError(
                f"requests[{r.index}].prompt_from",
                f"the parent {r.prompt_from!r} must finish before this request is added: "
                f"set \"after\": {json.dumps(r.prompt_from)} (got after={json.dumps(r.after)})",
            )

    sc = ResolvedScenario(
        name=name,
        description=description,
        config=config,
        prefix_groups=groups,
        requests=requests,
        max_steps=max_steps,
        warnings=warnings,
        speculative=speculative,
    )
    capacity_tokens = sc.num_usable_blocks * sc.block_size
    mml = config["max_model_len"]
    for r in requests:
        plen = sc.static_prompt_len(r.id)
        if plen >= mml:
            # vLLM's input processor (`_validate_prompt_len`) rejects such a request before it
            # reaches the scheduler: a prompt longer than max_model_len, or one of exactly
            # max_model_len tokens, leaves no room for one output token. Fed to the scheduler
            # directly it would prefill max_model_len - 1 positions and then stall, holding its
            # blocks, which no real deployment does; so the scenario is not a vLLM workload.
            src = (f" (the prompt and output of {r.prompt_from!r} and its own tokens)"
                   if r.prompt_from is not None else "")
            raise ScenarioError(
                f"requests[{r.index}].prompt_len",
                f"a prompt of {plen} tokens{src} reaches max_model_len ({mml}); vLLM rejects "
                f"a request whose prompt leaves no room for one output token (raise "
                f"config.max_model_len above {plen}, or shorten the prompt)",
            )
        if plen > capacity_tokens:
            sc.warnings.append(
                f"requests[{r.index}]: prompt of {plen} tokens exceeds the usable KV cache "
                f"({capacity_tokens} tokens); it can never be admitted"
            )
        if plen + r.max_tokens > mml:
            sc.warnings.append(
                f"requests[{r.index}]: prompt ({plen}) + max_tokens ({r.max_tokens}) exceeds "
                f"max_model_len ({mml})"
            )
    return sc


def load_scenario(path: str | Path, **kwargs) -> ResolvedScenario:
    """Read, validate and resolve a scenario file. Raises ScenarioError on any problem."""
    from serq import inputfile

    p = Path(path)
    try:
        raw = inputfile.read_bytes(str(p))
    except inputfile.InputError as exc:
        raise ScenarioError("", f"cannot read {p}: {str(exc).removeprefix('cannot read: ')}") from None
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError("", f"not a scenario (not UTF-8 text: byte {exc.start}); a scenario is "
                                "a JSON file (docs/oracle.md §3)") from None
    try:
        obj = inputfile.parse(raw)
    except inputfile.InputError as exc:
        raise ScenarioError("", f"{p} is not valid JSON: {str(exc).removeprefix('not JSON: ')}") from None
    kwargs.setdefault("default_name", p.name.split(".")[0] or "scenario")
    return resolve_scenario(obj, **kwargs)
