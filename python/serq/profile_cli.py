"""`serq profile`: step-cost constants for a catalogued GPU and model (registered by serq/cli.py).

    serq profile --gpu a100-80g --model qwen3-8b              the profile file, on stdout
    serq profile --gpu h100-sxm --model llama-3.1-70b -o P.json   written atomically
    serq profile --gpu ... --model ... --set-args             the --set NAME=VALUE words
    serq profile --list                                       the catalog's GPUs and models

Exit 2 with a message (an unknown name lists the known ones), never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from .errors import SerqError, print_error


def register(subparsers: argparse._SubParsersAction) -> None:
    from .roofline import Setup

    d = Setup("", "")
    p = subparsers.add_parser(
        "profile", help="step-cost constants for a GPU and model from public specs (a roofline)",
        description="Derive the step-cost constants of examples/multi-turn/vllm.sq and "
                    "examples/replay/vllm_replay.sq, and the KV blocks vLLM would allocate, for a GPU "
                    "and model of serQ's catalog (docs/profiles.md). Prints the profile file, or writes "
                    "it with -o; apply it with `--profile FILE` on check, ir, sample, spec, run, lockstep, sweep, capacity.")
    p.add_argument("--gpu", metavar="NAME", help="a GPU of the catalog (--list shows them)")
    p.add_argument("--model", metavar="NAME", help="a model of the catalog (--list shows them)")
    p.add_argument("--tp", type=int, default=None, metavar="N",
                   help="tensor-parallel GPUs (default: the smallest of 1, 2, 4, 8 that holds the weights "
                        "and at least one KV block)")
    p.add_argument("--dtype", default=d.dtype, choices=("bf16", "fp16", "fp8"),
                   help=f"weights and matmuls (default {d.dtype})")
    p.add_argument("--kv-dtype", default=None, choices=("bf16", "fp16", "fp8"),
                   help="KV cache (default: bf16 for fp8 weights, else --dtype)")
    p.add_argument("--gpu-memory-utilization", type=float, default=d.gpu_memory_utilization, metavar="F",
                   help=f"vLLM's fraction of GPU memory for weights, activations and KV (default {d.gpu_memory_utilization})")
    p.add_argument("--block-size", type=int, default=d.block_size, metavar="N",
                   help=f"tokens per KV block (default {d.block_size})")
    p.add_argument("--reserve-gib", type=float, default=d.reserve_gib, metavar="G",
                   help=f"memory that is neither weights nor KV: activation peak, CUDA graphs, non-torch "
                        f"(vLLM measures it at start-up; default {d.reserve_gib:g} GiB)")
    for name, what in (("compute", "FLOP/s"), ("memory", "HBM bandwidth"), ("link", "interconnect bandwidth")):
        p.add_argument(f"--{name}-eff", type=float, default=getattr(d, f"{name}_eff"), metavar="F",
                       help=f"achieved / peak {what} (default 1: the roofline)")
    p.add_argument("--calibrate", metavar="FIT", default=None,
                   help="correct the roofline by a measured fit (a profile file or shipped name, e.g. "
                        "a100-qwen3-8b-seed) made on the same GPU: each term scaled by fit / roofline")
    p.add_argument("--calibrate-model", metavar="NAME", default=None,
                   help="the model the --calibrate fit was measured with (default: --model)")
    p.add_argument("--calibrate-gpu", metavar="NAME", default=None,
                   help="the GPU the --calibrate fit was measured on (default: --gpu)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the profile here (atomically) instead of stdout")
    p.add_argument("--set-args", action="store_true",
                   help="print the profile's settings as `--set NAME=VALUE` words instead of the file")
    p.add_argument("--list", action="store_true", help="list the catalog's GPUs and models, with their sources")
    p.set_defaults(func=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except SerqError as exc:
        return print_error(exc)
    except BrokenPipeError:
        raise
    except Exception as exc:
        print(f"serq: error: internal error in serq profile ({type(exc).__name__}: {exc}); please report it",
              file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from .profilefile import profile_text, write_profile
    from .roofline import Setup, load_catalog, roofline, unknown

    cat = load_catalog()
    if args.list:
        sys.stdout.write(_listing(cat))
        return 0
    if not args.gpu:
        raise unknown("GPU", "(none: give --gpu NAME)", cat["gpus"])
    if not args.model:
        raise unknown("model", "(none: give --model NAME)", cat["models"])
    setup = Setup(gpu=args.gpu, model=args.model, tp=args.tp, dtype=args.dtype, kv_dtype=args.kv_dtype,
                  gpu_memory_utilization=args.gpu_memory_utilization, block_size=args.block_size,
                  reserve_gib=args.reserve_gib, compute_eff=args.compute_eff, memory_eff=args.memory_eff,
                  link_eff=args.link_eff)
    prof = roofline(setup, cat)
    if args.calibrate:
        from dataclasses import replace

        from .profilefile import resolve_profile
        from .roofline import calibrate

        fit = resolve_profile(args.calibrate)
        if fit["kind"] == "roofline":
            raise SerqError(f"--calibrate {args.calibrate}: a roofline is not a measurement; give a fit")
        base = Setup(gpu=args.calibrate_gpu or args.gpu, model=args.calibrate_model or args.model, tp=None,
                     dtype=args.dtype,
                     kv_dtype=args.kv_dtype, block_size=args.block_size)
        same = not args.calibrate_model and not args.calibrate_gpu
        prof = calibrate(prof, roofline(replace(base, tp=args.tp if same else None), cat), fit)
    if args.output:
        write_profile(args.output, prof)
    if args.set_args:
        print(" ".join(f"--set {k}={v}" for k, v in sorted(prof["set"].items())))
    elif not args.output:
        sys.stdout.write(profile_text(prof))
    return 0


def _listing(cat: dict) -> str:
    lines = ["GPUs (peak dense TFLOP/s, HBM TB/s, memory GiB, interconnect GB/s):"]
    for gid, g in cat["gpus"].items():
        flops = ", ".join(f"{k} {v:g}" for k, v in g["peak_tflops"].items())
        lines.append(f"  {gid:<14} {g['name']}: {flops}; {g['hbm_TBps']:g} TB/s; {g['memory_GiB']:g} GiB; "
                     f"{g['interconnect']} {g['interconnect_GBps']:g} GB/s  [{g['source']}]")
    lines.append("models (layers, hidden, heads / KV heads x head dim):")
    for mid, m in cat["models"].items():
        moe = f", {m['experts']} experts ({m['experts_active']} active)" if "experts" in m else ""
        lines.append(f"  {mid:<14} {m['name']}: {m['layers']} layers, {m['hidden']}, "
                     f"{m['heads']}/{m['kv_heads']} x {m['head_dim']}{moe}  [{m['source']}]")
    lines.append("sources:")
    for key, text in cat["sources"].items():
        lines.append(f"  {key}: {text}")
    return "\n".join(lines) + "\n"
