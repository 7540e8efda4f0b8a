#!/usr/bin/env python3
"""Seeded random scenarios for the vLLM oracle (standard library only).

    python3 tools/vllm_oracle/gen_scenarios.py --seed 1 --count 120 --out-dir vectors/vllm
    python3 tools/vllm_oracle/gen_scenarios.py --seed 7 --count 3 --print

Scenario k of seed s depends only on (s, k): `--start` lets a run extend an earlier one, and one
scenario can be re-created alone. Files are named `<prefix><k:04d>.scenario.json`.

What the draws cover: step-based and time-based arrivals (bursts, spread, Poisson-like gaps),
prompt lengths 1..600 and outputs from 1, shared prefix groups (aligned and unaligned lengths,
`prefix_len` shorter than the group, prompts shorter than the prefix), explicit token ids (some
sharing a prefix), multi-turn chains via `after` / `prompt_from` with `append_len` or
`append_token_ids` and `delay_steps`, EOS at a random output index, small KV pools (always at
least ceil(longest sequence / block_size) + 2 blocks, so every request fits alone), small
token budgets, `long_prefill_token_threshold`, `max_num_seqs`, fcfs/priority, sync/async
scheduling, `scheduler_reserve_full_isl` on/off, an occasional watermark, chunked prefill off,
prefix caching off, and varied `step_time` clocks. Seeds from EXTENDED_FROM_SEED on add `after`
fan-out and a `max_model_len` that ends some outputs, drawn from a stream of their own; seeds from
MIXED_FROM_SEED on also mix step- and time-based arrivals (a third stream), and seeds from
FORK_FROM_SEED on fork conversations (two requests continuing one: a fourth stream), and
seeds from KNOBS_FROM_SEED on draw `long_prefill_token_threshold_adaptive` and
`max_num_active_seqs` (a fifth stream), and seeds from SPEC_FROM_SEED on speculative decoding
(the `speculative` object: a sixth stream).

Every scenario is validated with serq_vllm.scenario before it is written.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "python"))

from serq_vllm.scenario import resolve_scenario  # noqa: E402

MAX_STEPS = 800

#: Seeds from this one on also draw the shapes the model learned after the first campaigns
#: (`after` fan-out, `max_model_len` below a request's prompt + output), from a random stream of
#: their own: every scenario of an earlier seed is drawn exactly as before (the committed
#: campaign vectors are checked against this generator).
EXTENDED_FROM_SEED = 20000
#: Seeds from this one on also mix step- and time-based arrivals in some scenarios (a third
#: stream, so seeds EXTENDED_FROM_SEED.. below it keep their scenarios).
MIXED_FROM_SEED = 23000
#: Seeds from this one on also fork conversations in some scenarios: a request continued by two
#: or more others (`prompt_from` the same request), possibly from another session (a fourth
#: stream, so earlier seeds keep their scenarios).
FORK_FROM_SEED = 40000
#: Seeds from this one on also draw vLLM's two remaining scheduler knobs of docs/oracle.md §3.1:
#: `long_prefill_token_threshold_adaptive` (with a threshold) and `max_num_active_seqs`
#: (a fifth stream).
KNOBS_FROM_SEED = 42000
#: Seeds from this one on also draw speculative decoding in about half of the scenarios: the
#: `speculative` object (1-6 draft tokens, either proposer kind, an acceptance rate and seed;
#: a sixth stream). vLLM runs async scheduling only with the model-based proposer, so an async
#: scenario draws "draft_model".
SPEC_FROM_SEED = 50000


def _out_len(rng: random.Random) -> int:
    u = rng.random()
    if u < 0.12:
        return 1
    if u < 0.6:
        return rng.randint(2, 16)
    return rng.randint(17, 48)


def _prompt_len(rng: random.Random) -> int:
    u = rng.random()
    if u < 0.2:
        return rng.randint(1, 32)
    if u < 0.85:
        return rng.randint(16, 200)
    return rng.randint(200, 600)


def _fanout(requests: list[dict], xrng: random.Random, policy: str, groups: dict,
            features: list[str]) -> None:
    """`after` fan-out: one to three more requests after an existing one. They start fresh
    conversations (a prompt of their own or a prefix group), except that one of them may
    continue the parent's (`prompt_from`) when no other child does (forks of a conversation
    come from their own stream, `_fork`, so that earlier seeds keep their scenarios)."""
    added = 0
    for _ in range(xrng.choice([1, 1, 2])):
        parent = xrng.choice(requests)
        pid = parent["id"]
        kids = [r for r in requests if r.get("after") == pid]
        continued = any("prompt_from" in r for r in kids)
        for j in range(xrng.randint(1 if kids else 2, 3)):
            child: dict = {"id": f"{pid}.f{len(kids) + j}", "after": pid,
                           "delay_steps": xrng.choice([0, 0, 1, 2, 3, 6])}
            u = xrng.random()
            if not continued and u < 0.3:
                child["prompt_from"] = pid
                child["append_len"] = xrng.choice([0, xrng.randint(1, 16)])
                continued = True
            elif groups and u < 0.6:
                child["prefix_group"] = xrng.choice(sorted(groups))
                child["prompt_len"] = groups[child["prefix_group"]]["length"] + xrng.randint(0, 60)
            else:
                child["prompt_len"] = _prompt_len(xrng)
            child["max_tokens"] = _out_len(xrng)
            if xrng.random() < 0.15:
                child["eos_at"] = xrng.randint(0, child["max_tokens"])
            if policy == "priority":
                child["priority"] = xrng.randint(-1, 3)
            pos = requests.index(parent) + 1
            requests.insert(xrng.randint(pos, len(requests)), child)
            added += 1
    features.append(f"fanout={added}")


def _mix_arrivals(requests: list[dict], mrng: random.Random, features: list[str]) -> None:
    """Step- and time-based arrivals in one scenario (docs/oracle.md §2.3): some requests trade
    their arrival for the other kind, some get an `arrival_step` beside their `arrival_time`."""
    mixed = 0
    for r in requests:
        if "after" in r:
            continue
        u = mrng.random()
        if "arrival_time" in r and u < 0.3:
            del r["arrival_time"]
            r["arrival_step"] = mrng.randint(0, 40)
        elif "arrival_time" in r and u < 0.45:
            r["arrival_step"] = mrng.randint(0, 40)
        elif "arrival_step" in r and u < 0.3:
            del r["arrival_step"]
            r["arrival_time"] = round(mrng.uniform(0, 0.5), 3)
        else:
            continue
        mixed += 1
    if mixed:
        features.append(f"mixed_arrivals={mixed}")


def _fork(requests: list[dict], frng: random.Random, policy: str, features: list[str]) -> None:
    """Forked conversations: one or two requests get one or two more continuations
    (`prompt_from` them) beside any they have, each `after` the request itself or after one of
    its later turns (so it may sit in another session), with no, a short or a repeated append
    (two continuations with the same append have one prompt)."""
    added = 0
    for _ in range(frng.choice([1, 1, 2])):
        src = frng.choice(requests)
        sid = src["id"]
        later = [sid]  # src and the requests `after` it, transitively
        for r in requests:
            if r.get("after") in later:
                later.append(r["id"])
        append = frng.choice([0, frng.randint(1, 16), frng.randint(16, 60)])
        for j in range(frng.randint(1, 2)):
            after = frng.choice(later)
            child: dict = {"id": f"{sid}.k{added}", "after": after, "prompt_from": sid,
                           "delay_steps": frng.choice([0, 0, 1, 2, 3, 6]),
                           "max_tokens": _out_len(frng)}
            if frng.random() < 0.7:
                append = frng.choice([append, 0, frng.randint(1, 40)])
            if append:
                child["append_len"] = append
            if frng.random() < 0.15:
                child["eos_at"] = frng.randint(0, child["max_tokens"])
            if policy == "priority":
                child["priority"] = frng.randint(-1, 3)
            pos = next(i for i, r in enumerate(requests) if r["id"] == after) + 1
            requests.insert(frng.randint(pos, len(requests)), child)
            added += 1
    features.append(f"forks={added}")


def _cap_model_len(cfg: dict, draft: dict, xrng: random.Random, features: list[str]) -> None:
    """`max_model_len` below some request's prompt + output (vLLM stops it there, finish reason
    `length`), but above every prompt: a prompt of max_model_len tokens or more is no vLLM
    workload (its input processor rejects it; so does the scenario reader). So no capped request has a `prompt_from` child: that
    child's prompt would hold the parent's max_model_len tokens."""
    sc = resolve_scenario(draft)
    longest = max(sc.static_prompt_len(r.id) + r.max_tokens for r in sc.requests)
    safe = max(sc.static_prompt_len(r.id) for r in sc.requests) + 1
    if safe >= longest:
        return
    cfg["max_model_len"] = mml = xrng.randint(safe, longest - 1)
    if cfg.get("long_prefill_token_threshold", 0) > mml:
        cfg["long_prefill_token_threshold"] = mml
    features.append("max_model_len")


def generate(seed: int, k: int, name: str) -> dict:
    rng = random.Random(f"serq-oracle-scenario:{seed}:{k}")
    bs = rng.choice([4, 8, 16, 16, 16, 32])
    arrivals = rng.choice(["step", "step", "time"])
    step_pattern = rng.choice(["burst", "spread", "gaps"])
    policy = "priority" if rng.random() < 0.3 else "fcfs"
    features: list[str] = [f"arrivals={arrivals}" + (f"/{step_pattern}" if arrivals == "step" else "")]

    groups: dict[str, dict] = {}
    for g in range(rng.choice([0, 0, 1, 1, 2])):
        length = rng.randint(1, 10) * bs + (rng.randint(1, bs - 1) if rng.random() < 0.3 else 0)
        groups[f"sys{g}"] = {"length": length}
    if groups:
        features.append(f"prefix_groups={len(groups)}")

    n_base = rng.randint(1, 8)
    requests: list[dict] = []
    explicit_lists: list[list[int]] = []
    t = 0.0
    mean_gap = rng.choice([0.005, 0.02, 0.05, 0.2])
    step_clock = 0
    for i in range(n_base):
        r: dict = {"id": f"r{i}"}
        u = rng.random()
        if groups and u < 0.55:
            g = rng.choice(sorted(groups))
            r["prefix_group"] = g
            glen = groups[g]["length"]
            plen = glen
            if rng.random() < 0.3:
                plen = rng.randint(0, glen)
                r["prefix_len"] = plen
            if rng.random() < 0.15:
                r["prompt_len"] = rng.randint(1, max(1, plen))
            else:
                r["prompt_len"] = plen + rng.randint(0, 120)
            if r["prompt_len"] == 0:
                r["prompt_len"] = 1
        elif u < 0.63:
            if explicit_lists and rng.random() < 0.5:
                base = rng.choice(explicit_lists)
                keep = rng.randint(1, len(base))
                ids = base[:keep] + [rng.randrange(10, 32000) for _ in range(rng.randint(0, 40))]
            else:
                ids = [rng.randrange(10, 32000) for _ in range(_prompt_len(rng))]
            explicit_lists.append(ids)
            r["prompt_token_ids"] = ids
            features.append("explicit_ids")
        else:
            r["prompt_len"] = _prompt_len(rng)
        r["max_tokens"] = _out_len(rng)
        if rng.random() < 0.15:
            # EOS somewhere in the output (sometimes past max_tokens: then length wins)
            r["eos_at"] = rng.randint(0, r["max_tokens"] + (2 if rng.random() < 0.2 else -1))
            features.append("eos")
        if policy == "priority":
            r["priority"] = rng.randint(-1, 3)
        if arrivals == "step":
            if step_pattern == "burst":
                r["arrival_step"] = rng.choice([0, 0, 0, rng.randint(0, 3)])
            elif step_pattern == "spread":
                r["arrival_step"] = rng.randint(0, 40)
            else:
                step_clock += rng.choice([0, 0, 1, 2, 5, 12])
                r["arrival_step"] = step_clock
        else:
            if i > 0 or rng.random() < 0.5:
                t += rng.expovariate(1.0 / mean_gap)
            r["arrival_time"] = round(t, 3)
        requests.append(r)
    if arrivals == "step" and step_pattern == "spread":
        requests.sort(key=lambda r: r["arrival_step"])  # list order is FCFS order anyway

    # multi-turn follow-ups, inserted somewhere after their parent
    n_turns = 0
    for parent in list(requests):
        depth_parent = parent
        depth = 0
        while depth < 3 and rng.random() < (0.3 if depth == 0 else 0.5):
            child: dict = {"id": f"{depth_parent['id']}.{depth + 2}", "after": depth_parent["id"]}
            child["delay_steps"] = rng.choice([0, 0, 1, 2, 3, 6])
            if rng.random() < 0.8:
                child["prompt_from"] = depth_parent["id"]
                if rng.random() < 0.1:
                    child["append_token_ids"] = [rng.randrange(10, 32000) for _ in range(rng.randint(1, 20))]
                else:
                    child["append_len"] = rng.choice([0, rng.randint(1, 16), rng.randint(16, 80)])
            else:
                child["prompt_len"] = _prompt_len(rng)
            child["max_tokens"] = _out_len(rng)
            if policy == "priority":
                child["priority"] = rng.randint(-1, 3)
            pos = requests.index(depth_parent) + 1
            requests.insert(rng.randint(pos, len(requests)), child)
            n_turns += 1
            depth_parent = child
            depth += 1
    if n_turns:
        features.append(f"turns={n_turns}")
    xrng = random.Random(f"serq-oracle-extended:{seed}:{k}") if seed >= EXTENDED_FROM_SEED else None
    if xrng is not None and xrng.random() < 0.35:
        _fanout(requests, xrng, policy, groups, features)
    if seed >= MIXED_FROM_SEED:
        mrng = random.Random(f"serq-oracle-mixed:{seed}:{k}")
        if mrng.random() < 0.4:
            _mix_arrivals(requests, mrng, features)
    if seed >= FORK_FROM_SEED:
        frng = random.Random(f"serq-oracle-fork:{seed}:{k}")
        if frng.random() < 0.4:
            _fork(requests, frng, policy, features)

    draft = {"name": name, "config": {"block_size": bs}, "prefix_groups": groups, "requests": requests}
    sc = resolve_scenario(draft)
    # prompt + max_tokens (not shortened by EOS): the longest sequence any request can reach
    longest = max(sc.static_prompt_len(r.id) + r.max_tokens for r in sc.requests)
    need = math.ceil(longest / bs) + 2  # every request fits alone (plus the null block)
    pressure = rng.choice(["tight", "tight", "medium", "roomy"])
    if pressure == "tight":
        blocks = need + rng.randint(0, 3)
    elif pressure == "medium":
        blocks = need + rng.randint(0, 2 * need)
    else:
        blocks = 4 * need + 64
    features.append(f"kv={pressure}")

    seqs = rng.choice([1, 2, 3, 4, 8, 16, 128])
    budget = rng.choice([16, 24, 32, 48, 64, 100, 128, 256, 512, 2048])
    budget = max(budget, seqs)
    cfg: dict = {
        "block_size": bs,
        "num_gpu_blocks": blocks,
        "max_num_batched_tokens": budget,
        "max_num_seqs": seqs,
    }
    if rng.random() < 0.5:
        cfg["max_model_len"] = min(longest + rng.randint(0, 200), blocks * bs)
    mml = cfg.get("max_model_len", min(32768, blocks * bs))
    if rng.random() < 0.4:
        cfg["long_prefill_token_threshold"] = rng.randint(1, min(budget, mml))
        features.append("threshold")
    if rng.random() < 0.25:
        cfg["enable_prefix_caching"] = False
    if rng.random() < 0.06:
        cfg["enable_chunked_prefill"] = False
        cfg["max_model_len"] = mml = max(longest, 1)
        cfg["max_num_batched_tokens"] = budget = max(budget, mml)
        cfg.pop("long_prefill_token_threshold", None)
        features.append("no_chunking")
    if policy == "priority":
        cfg["policy"] = "priority"
        features.append("priority")
    if rng.random() < 0.3:
        cfg["async_scheduling"] = True
        features.append("async")
    extra: dict = {}
    if rng.random() < 0.3:
        extra["scheduler_reserve_full_isl"] = False
        features.append("no_reserve")
    if rng.random() < 0.05:
        extra["watermark"] = rng.choice([0.01, 0.02, 0.05])
        features.append("watermark")
    if extra:
        cfg["scheduler_config_extra"] = extra
    if arrivals == "time" or rng.random() < 0.15:
        cfg["step_time"] = rng.choice(
            [
                {"base_s": 0.01, "per_token_s": 0.0001},
                {"base_s": 0.005, "per_token_s": 0.0002},
                {"base_s": 1, "per_token_s": 0},
                {"base_s": 0.02},
                {"per_token_s": 0.00005},
            ]
        )

    if seed >= KNOBS_FROM_SEED:
        krng = random.Random(f"serq-oracle-knobs:{seed}:{k}")
        if "long_prefill_token_threshold" in cfg and krng.random() < 0.4:
            cfg.setdefault("scheduler_config_extra", {})[
                "long_prefill_token_threshold_adaptive"] = True
            features.append("adaptive_threshold")
        if seqs > 1 and krng.random() < 0.2:
            cfg.setdefault("scheduler_config_extra", {})["max_num_active_seqs"] = \
                krng.randint(1, min(seqs - 1, 8))
            features.append("active_seqs")
    if xrng is not None and xrng.random() < 0.35 and "no_chunking" not in features:
        _cap_model_len(cfg, {"config": cfg, "prefix_groups": groups, "requests": requests},
                       xrng, features)

    spec = None
    if seed >= SPEC_FROM_SEED:
        srng = random.Random(f"serq-oracle-spec:{seed}:{k}")
        if srng.random() < 0.5:
            method = "draft_model" if cfg.get("async_scheduling") or srng.random() < 0.5 \
                else "ngram"
            spec = {"num_speculative_tokens": srng.choice([1, 2, 3, 4, 6]), "method": method,
                    "accept_percent": srng.choice([0, 30, 60, 80, 100]),
                    "seed": srng.randrange(1000)}
            # the model-based proposer costs each scheduled request one input slot more
            if method == "draft_model" and cfg.get("max_num_batched_tokens", 2048) <= 1:
                cfg["max_num_batched_tokens"] = 2
            features.append(f"spec_{method}")

    scenario = {
        "name": name,
        "description": f"random scenario (gen_scenarios.py seed {seed}, index {k}): "
        + ", ".join(dict.fromkeys(features)),
        "config": cfg,
    }
    if groups:
        scenario["prefix_groups"] = groups
    scenario["requests"] = requests
    scenario["max_steps"] = MAX_STEPS
    if spec is not None:
        scenario["speculative"] = spec
    resolve_scenario(scenario)  # must be valid
    return scenario


def poisson_scenario(n: int, seed: int = 1, rate: float = 10.0) -> dict:
    """A large open-loop scenario for speed measurements (benchmarks/bench_oracle.py): `n`
    requests with Poisson arrivals (`rate` per second, seconds clock), each starting with one of
    four shared system prompts (64, 256, 512, 1024 tokens) and then 16..400 tokens of its own,
    with 8..256 output tokens; 4,096 blocks of 16, a token budget of 2,048, 128 sequences."""
    rng = random.Random(f"serq-oracle-poisson:{seed}:{n}")
    groups = {f"sys{g}": {"length": length} for g, length in enumerate((64, 256, 512, 1024))}
    requests = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        g = f"sys{rng.randrange(len(groups))}"
        requests.append({"id": f"p{i}", "arrival_time": round(t, 4), "prefix_group": g,
                         "prompt_len": groups[g]["length"] + rng.randint(16, 400),
                         "max_tokens": rng.randint(8, 256)})
    scenario = {"name": f"poisson{n}",
                "description": f"{n} Poisson requests at {rate}/s over four shared prefixes "
                               f"(gen_scenarios.py --poisson {n} --seed {seed})",
                "config": {"num_gpu_blocks": 4096, "max_num_batched_tokens": 2048,
                           "max_num_seqs": 128},
                "prefix_groups": groups, "requests": requests}
    resolve_scenario(scenario)  # must be valid
    return scenario


def chain_scenario(turns: int, sessions: int = 1, seed: int = 1) -> dict:
    """Multi-turn conversations for speed measurements: `sessions` chains of `turns` requests,
    each turn `after` the previous one and continuing its prompt and output (`prompt_from`)
    with 8..64 tokens of its own; 1..32 output tokens; chains start 0.05 s apart on a seconds
    clock; 4,096 blocks of 16."""
    rng = random.Random(f"serq-oracle-chain:{seed}:{turns}:{sessions}")
    requests = []
    for s in range(sessions):
        requests.append({"id": f"c{s}.0", "arrival_time": round(0.05 * s, 4),
                         "prompt_len": rng.randint(16, 200), "max_tokens": rng.randint(1, 32)})
        for k in range(1, turns):
            requests.append({"id": f"c{s}.{k}", "after": f"c{s}.{k - 1}",
                             "prompt_from": f"c{s}.{k - 1}", "append_len": rng.randint(8, 64),
                             "max_tokens": rng.randint(1, 32)})
    scenario = {"name": f"chain{sessions}x{turns}",
                "description": f"{sessions} conversation(s) of {turns} turns "
                               f"(gen_scenarios.py --chain {turns} --sessions {sessions})",
                "config": {"num_gpu_blocks": 4096, "max_num_batched_tokens": 2048,
                           "max_num_seqs": 128},
                "requests": requests}
    resolve_scenario(scenario)  # must be valid
    return scenario


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--start", type=int, default=1, help="index of the first scenario (default 1)")
    ap.add_argument("--prefix", default="r", help="file/scenario name prefix (default r)")
    ap.add_argument("--out-dir", help="directory for <prefix><k>.scenario.json files")
    ap.add_argument("--print", action="store_true", help="print the scenarios to stdout instead")
    ap.add_argument("--poisson", type=int, metavar="N",
                    help="write one speed scenario instead: N Poisson requests (poisson_scenario)")
    ap.add_argument("--chain", type=int, metavar="TURNS",
                    help="write one speed scenario instead: --sessions chains of TURNS turns")
    ap.add_argument("--sessions", type=int, default=1, help="chains of a --chain scenario")
    args = ap.parse_args(argv)
    if not args.out_dir and not args.print:
        ap.error("give --out-dir or --print")
    out = Path(args.out_dir) if args.out_dir else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    if args.poisson is not None or args.chain is not None:
        sc = (poisson_scenario(args.poisson, args.seed) if args.poisson is not None
              else chain_scenario(args.chain, args.sessions, args.seed))
        text = json.dumps(sc, indent=1) + "\n"
        if out:
            (out / f"{sc['name']}.scenario.json").write_text(text)
            print(f"wrote {out / (sc['name'] + '.scenario.json')}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return 0
    for k in range(args.start, args.start + args.count):
        name = f"{args.prefix}{k:04d}"
        sc = generate(args.seed, k, name)
        text = json.dumps(sc, indent=1) + "\n"
        if out:
            (out / f"{name}.scenario.json").write_text(text)
        else:
            sys.stdout.write(text)
    if out:
        print(f"wrote {args.count} scenarios to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
