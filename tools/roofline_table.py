#!/usr/bin/env python3
"""Print the table of docs/validation.md "Roofline versus the seed's measured fit": serQ's
roofline for A100 80GB / Qwen3-8B (bf16, one GPU, every efficiency 1) beside the seed's fit to
3 022 measured steps (the shipped profile a100-qwen3-8b-seed), term by term.

    python tools/roofline_table.py          print the table (markdown)
    python tools/roofline_table.py --check  exit 1 if docs/validation.md does not hold it

tests/test_profile.py runs --check, so the table cannot drift from the code.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

from serq.profilefile import resolve_profile  # noqa: E402
from serq.roofline import GiB, Setup, load_catalog, model_params, roofline  # noqa: E402

DOC = os.path.join(ROOT, "docs", "validation.md")


def fmt(x: float, unit: str) -> str:
    scale = {"ms": 1e3, "µs": 1e6, "ns": 1e9}[unit]
    v = x * scale
    return f"{v:.3g} {unit}"


def table() -> str:
    cat = load_catalog()
    roof = roofline(Setup("a100-80g", "qwen3-8b", tp=1), cat)
    seed = resolve_profile("a100-qwen3-8b-seed")
    r, s = roof["coefficients"], seed["coefficients"]
    g = cat["gpus"]["a100-80g"]
    p = model_params(cat["models"]["qwen3-8b"])
    # The matmuls a prefilled token passes through: not the input embedding (a lookup) and not the
    # LM head (vLLM computes logits only where it samples, the last position of a prefill).
    a_matmul = 2 * (p.active - p.embedding - p.lm_head) / (g["peak_tflops"]["bf16"] * 1e12)
    rows = [
        ("c", "weights read once per step: weight bytes / HBM bandwidth", r["c"]["value"], s["c"]["value"], "ms"),
        ("d", "per decoding request: 2 x parameters / peak FLOP/s", r["d"]["value"], s["d"]["value"], "µs"),
        ("e", "per KV token a decode reads: KV bytes per token / HBM bandwidth", r["e"]["value"], s["e"]["value"], "µs"),
        ("a", "per prefilled token: 2 x parameters / peak FLOP/s", r["a"]["value"], s["a"]["value"], "µs"),
        ("a'", "per prefilled token, matmuls only: 2 x (parameters - embedding - LM head) / peak", a_matmul,
         s["a"]["value"], "µs"),
        ("b", "per attention unit n(K + n/2): 4 x layers x heads x head_dim / peak", r["b"]["value"],
         s["b"]["value"], "ns"),
    ]
    out = ["| term | roofline formula | roofline | seed fit | roofline / fit |",
           "|---|---|---|---|---|"]
    for name, what, rv, sv, unit in rows:
        out.append(f"| {name} | {what} | {fmt(rv, unit)} | {fmt(sv, unit)} | {rv / sv:.3f} ({(rv / sv - 1) * 100:+.1f} %) |")
    out.append(f"| c_it | fixed overhead per step | 0 | {fmt(s['c_it']['value'], 'ms')} | — |")
    out.append(f"| c0 | per request, outside the engine (replay) | — (left to the program) | "
               f"{fmt(s['c0']['value'], 'ms')} | — |")
    d = roof["derived"]
    kv_per_block = d["block_size"] * d["kv_bytes_per_token_per_gpu"]
    testbed = int(seed["set"]["blocks"])
    # the gpu_memory_utilization under which the same rule gives the testbed's blocks
    util = ((testbed + 1) * kv_per_block + d["weight_GiB_per_gpu"] * GiB + d["inputs"]["reserve_gib"] * GiB) \
        / (g["memory_GiB"] * GiB)
    out.append(f"| blocks | KV blocks of 16 tokens (gpu_memory_utilization 0.9, 1 GiB reserve) | "
               f"{d['kv_blocks']} | {testbed} (the testbed) | {d['kv_blocks'] / testbed:.2f}; the testbed's "
               f"{testbed} matches gpu_memory_utilization ≈ {util:.2f} under the same rule |")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = table()
    if "--check" in argv:
        with open(DOC, encoding="utf-8") as fh:
            doc = fh.read()
        if text not in doc:
            print(f"{DOC} does not hold the current table; regenerate it with tools/roofline_table.py:\n{text}",
                  file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
