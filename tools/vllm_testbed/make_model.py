#!/usr/bin/env python3
"""Build the testbed's small random-weight Llama locally (runs in the testbed venv).

    tools/vllm_testbed/.venv/bin/python tools/vllm_testbed/make_model.py OUT_DIR [--hidden 256] ...

Nothing is downloaded: the config is written here and the weights are drawn from a fixed seed, so
the same options give byte-identical safetensors on any machine (the test in
tests/test_testbed.py checks the digest the builder prints). The model has no tokenizer: the
engine is started with skip_tokenizer_init and prompts are token ids.

Why random weights are enough: serQ predicts time and scheduling, not text. A step's cost depends
on the model's shapes (layers, hidden size, heads, vocab) and on how many tokens it processes,
never on what the weights say; the outputs' lengths are fixed by ignore_eos and min_tokens.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="model directory to write (replaced atomically)")
    p.add_argument("--hidden", type=int, default=256, help="hidden size [256]")
    p.add_argument("--layers", type=int, default=4, help="decoder layers [4]")
    p.add_argument("--heads", type=int, default=4, help="attention heads [4]")
    p.add_argument("--kv-heads", type=int, default=4, help="KV heads (GQA when < heads) [4]")
    p.add_argument("--intermediate", type=int, default=None, help="MLP size [4 × hidden]")
    p.add_argument("--vocab", type=int, default=32000,
                   help="vocabulary size [32000: the token ids of oracle scenarios lie below it]")
    p.add_argument("--max-positions", type=int, default=8192, help="max_position_embeddings [8192]")
    p.add_argument("--seed", type=int, default=0, help="weight seed [0]")
    a = p.parse_args(argv)
    for name in ("hidden", "layers", "heads", "kv_heads", "vocab", "max_positions"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be a positive integer")
    if a.hidden % a.heads or a.heads % a.kv_heads:
        p.error("--hidden must be a multiple of --heads, and --heads a multiple of --kv-heads")
    return a


def build(a: argparse.Namespace) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate or 4 * a.hidden,
        num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        max_position_embeddings=a.max_positions, bos_token_id=1, eos_token_id=2,
        tie_word_embeddings=False, torch_dtype="float32",
    )
    torch.manual_seed(a.seed)
    model = LlamaForCausalLM(cfg).to(torch.float32).eval()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    model.save_pretrained(tmp, safe_serialization=True)
    digest = hashlib.sha256((tmp / "model.safetensors").read_bytes()).hexdigest()
    info = {
        "hidden": a.hidden, "layers": a.layers, "heads": a.heads, "kv_heads": a.kv_heads,
        "intermediate": a.intermediate or 4 * a.hidden, "vocab": a.vocab, "seed": a.seed,
        "max_positions": a.max_positions,
        "parameters": sum(p.numel() for p in model.parameters()),
        "weights_sha256": digest,
    }
    (tmp / "serq_testbed_model.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    # replace an older model only once the new one is complete
    if out.exists():
        old = out.with_name(out.name + ".old")
        os.replace(out, old)
        os.replace(tmp, out)
        import shutil
        shutil.rmtree(old)
    else:
        os.replace(tmp, out)
    return info


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    info = build(a)
    print(json.dumps(info, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
