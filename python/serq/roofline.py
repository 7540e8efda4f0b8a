"""Step-cost constants from public hardware and model figures: a roofline (docs/profiles.md §2).

A serving step reads every weight once and the KV of every resident token, and does about two
FLOPs per active parameter per token. Divided by the GPU's peak memory bandwidth and peak
dense FLOP/s (each scaled by an explicit efficiency factor, 1 by default), these give the
constants of both cost forms the examples use:

  examples/multi-turn/vllm.sq     c_it + max(omega + beta*kv, a*tokens) + comm*tokens
  examples/replay/vllm_replay.sq  c_fit + c_it + d_dec*decoders + e_kv*kv_decode
                                  + a_pre*prefilled + b_att*attention

and the KV blocks the GPU's memory holds for the model under vLLM's gpu_memory_utilization rule.
The figures come from serq/catalog.json, each with its public source.

What a roofline cannot know: CPU-side and kernel-launch overheads per step (scheduling,
sampling, Python), per-request overheads outside the engine, and how far real kernels fall
short of peak. The first two are set to 0 (`c_it`; `c0` of the replay is left to the program),
the last is the efficiency factors.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from importlib import resources

from .errors import SerqError

GiB = 2 ** 30
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
ACTIVATION_BYTES = 2  # the hidden states all-reduced under tensor parallelism are bf16/fp16
TP_CHOICES = (1, 2, 4, 8)  # one node
GPU_FIELDS = ("name", "peak_tflops", "hbm_TBps", "memory_GiB", "interconnect", "interconnect_GBps", "source")
DENSE_FIELDS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "vocab")


class CatalogError(SerqError):
    pass


def load_catalog() -> dict:
    """serq/catalog.json, checked: every figure positive, every entry's source known."""
    text = resources.files("serq").joinpath("catalog.json").read_text(encoding="utf-8")
    cat = json.loads(text)
    check_catalog(cat)
    return cat


def check_catalog(cat: dict) -> None:
    sources = cat.get("sources") or {}
    for gid, g in cat["gpus"].items():
        for f in GPU_FIELDS:
            if f not in g:
                raise CatalogError(f"catalog: gpus.{gid}.{f} missing")
        if g["source"] not in sources:
            raise CatalogError(f"catalog: gpus.{gid}.source {g['source']!r} is not in `sources`")
        for dt, v in g["peak_tflops"].items():
            if dt not in DTYPE_BYTES or not _positive(v):
                raise CatalogError(f"catalog: gpus.{gid}.peak_tflops.{dt} must be a known dtype with a positive figure")
        for f in ("hbm_TBps", "memory_GiB", "interconnect_GBps"):
            if not _positive(g[f]):
                raise CatalogError(f"catalog: gpus.{gid}.{f} must be positive")
    for mid, m in cat["models"].items():
        for f in DENSE_FIELDS + ("params_published_B", "source"):
            if f not in m:
                raise CatalogError(f"catalog: models.{mid}.{f} missing")
        if m["source"] not in sources:
            raise CatalogError(f"catalog: models.{mid}.source {m['source']!r} is not in `sources`")
        moe = "experts" in m
        for f in DENSE_FIELDS + (("experts", "experts_active", "moe_intermediate") if moe else ("intermediate",)):
            if not (isinstance(m.get(f), int) and m[f] > 0):
                raise CatalogError(f"catalog: models.{mid}.{f} must be a positive whole number")


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


# ------------------------------------------------------------------------------ the model

@dataclass(frozen=True)
class Params:
    total: int       # every weight (what is stored and, at batch sizes that touch every expert, read)
    active: int      # the weights one token passes through (total for a dense model)
    embedding: int   # the input embedding table (a lookup: no FLOPs)
    lm_head: int     # the output projection (applied where a token is sampled)


def model_params(m: dict) -> Params:
    """Parameter counts from the architecture (config.json's fields); checked against the
    published totals in tests/test_profile.py."""
    h, L = m["hidden"], m["layers"]
    q_out = m["heads"] * m["head_dim"]
    kv_out = m["kv_heads"] * m["head_dim"]
    attention = h * q_out + 2 * h * kv_out + q_out * h  # q, k, v, o projections
    norms = 2 * h
    if "experts" in m:
        expert = 3 * h * m["moe_intermediate"]  # gate, up, down (SwiGLU)
        router = h * m["experts"]
        mlp_total = m["experts"] * expert + router
        mlp_active = m["experts_active"] * expert + router
    else:
        mlp_total = mlp_active = 3 * h * m["intermediate"]
    embedding = m["vocab"] * h
    lm_head = 0 if m["tied_embeddings"] else m["vocab"] * h
    total = L * (attention + mlp_total + norms) + h + embedding + lm_head
    active = L * (attention + mlp_active + norms) + h + embedding + lm_head
    return Params(total, active, embedding, lm_head if lm_head else embedding)


# ------------------------------------------------------------------------------ the roofline

@dataclass(frozen=True)
class Setup:
    gpu: str
    model: str
    tp: int | None = None          # None: the smallest of TP_CHOICES whose KV blocks fit
    dtype: str = "bf16"            # weights and matmuls
    kv_dtype: str | None = None    # None: the activations' 16-bit type (bf16 for fp8 weights)
    gpu_memory_utilization: float = 0.9   # vLLM's default
    block_size: int = 16                   # vLLM's default
    reserve_gib: float = 1.0       # activation peak, CUDA graphs, non-torch memory (vLLM measures it)
    compute_eff: float = 1.0       # achieved / peak FLOP/s
    memory_eff: float = 1.0        # achieved / peak HBM bandwidth
    link_eff: float = 1.0          # achieved / peak interconnect bandwidth


def unknown(kind: str, name: str, known) -> SerqError:
    return SerqError(f"unknown {kind} {name!r} (known: {', '.join(known)})")


def roofline(setup: Setup, catalog: dict | None = None) -> dict:
    """The profile (docs/profiles.md §3) of SETUP; a SerqError for an unknown name, a dtype the
    GPU has no figure for, a parallelism the model cannot split into, or weights that leave no
    room for KV blocks."""
    cat = catalog or load_catalog()
    if setup.gpu not in cat["gpus"]:
        raise unknown("GPU", setup.gpu, cat["gpus"])
    if setup.model not in cat["models"]:
        raise unknown("model", setup.model, cat["models"])
    g, m = cat["gpus"][setup.gpu], cat["models"][setup.model]
    if setup.dtype not in g["peak_tflops"]:
        raise SerqError(f"--dtype {setup.dtype}: the catalog has no {setup.dtype} figure for {setup.gpu} "
                        f"(it has: {', '.join(g['peak_tflops'])})")
    kv_dtype = setup.kv_dtype or ("bf16" if setup.dtype == "fp8" else setup.dtype)
    if kv_dtype not in DTYPE_BYTES:
        raise SerqError(f"--kv-dtype {kv_dtype}: expected one of {', '.join(DTYPE_BYTES)}")
    for name in ("gpu_memory_utilization", "compute_eff", "memory_eff", "link_eff"):
        v = getattr(setup, name)
        if not (0 < v <= 1):
            raise SerqError(f"--{name.replace('_', '-')} must be in (0, 1], got {v}")
    if setup.block_size < 1:
        raise SerqError(f"--block-size must be a positive whole number, got {setup.block_size}")
    if not (setup.reserve_gib >= 0 and math.isfinite(setup.reserve_gib)):
        raise SerqError(f"--reserve-gib must be >= 0, got {setup.reserve_gib}")
    if setup.tp is None:
        tried = []
        for tp in TP_CHOICES:
            if m["heads"] % tp == 0:
                terms = _terms(setup, g, m, tp, kv_dtype)
                if terms["kv_blocks"] >= 1:
                    return _profile(setup, g, m, tp, kv_dtype, terms, cat)
                tried.append(tp)
        raise SerqError(f"{setup.model} does not fit on {' or '.join(f'{t} x {setup.gpu}' for t in tried)} "
                        "with room for a KV block (try --dtype fp8 or a lower --reserve-gib)")
    tp = setup.tp
    if tp < 1 or m["heads"] % tp or (m["kv_heads"] % tp and tp % m["kv_heads"]):
        raise SerqError(f"--tp {tp}: vLLM splits {setup.model}'s {m['heads']} attention heads and "
                        f"{m['kv_heads']} KV heads evenly; choose a divisor of {m['heads']}")
    terms = _terms(setup, g, m, tp, kv_dtype)
    if terms["kv_blocks"] < 1:
        fits = [t for t in TP_CHOICES if m["heads"] % t == 0 and _terms(setup, g, m, t, kv_dtype)["kv_blocks"] >= 1]
        raise SerqError(f"{setup.model} in {setup.dtype} leaves no KV blocks on {tp} x {setup.gpu} "
                        f"({terms['weight_bytes_per_gpu'] / GiB:.1f} GiB of weights per GPU)"
                        + (f"; --tp {fits[0]} fits" if fits else ""))
    return _profile(setup, g, m, tp, kv_dtype, terms, cat)


def _terms(setup: Setup, g: dict, m: dict, tp: int, kv_dtype: str) -> dict:
    """The per-GPU quantities and the cost constants (seconds) of a tp-way split."""
    p = model_params(m)
    flops = g["peak_tflops"][setup.dtype] * 1e12 * setup.compute_eff
    bandwidth = g["hbm_TBps"] * 1e12 * setup.memory_eff
    weight_bytes = p.total * DTYPE_BYTES[setup.dtype] / tp
    kv_heads = math.ceil(m["kv_heads"] / tp)  # vLLM replicates KV heads when tp exceeds them
    kv_bytes_per_token = 2 * m["layers"] * kv_heads * m["head_dim"] * DTYPE_BYTES[kv_dtype]
    flops_per_token = 2 * p.active / tp
    # batch.attention counts n*(K + n/2) per prefill chunk: one unit is one (query, key) pair,
    # 2*head_dim FLOPs for q.k and 2*head_dim for the weighted sum of v, per head and layer.
    attention_flops_per_unit = 4 * m["layers"] * (m["heads"] // tp) * m["head_dim"]
    if tp > 1:
        # Two all-reduces of the hidden state per layer (after attention, after the MLP); a
        # ring all-reduce sends 2(tp-1)/tp of the data from each GPU, one direction at a time.
        one_way = g["interconnect_GBps"] / 2 * 1e9 * setup.link_eff
        comm = 2 * m["layers"] * 2 * (tp - 1) / tp * m["hidden"] * ACTIVATION_BYTES / one_way
    else:
        comm = 0.0
    total_memory = g["memory_GiB"] * GiB
    requested = math.ceil(total_memory * setup.gpu_memory_utilization)
    available = requested - weight_bytes - setup.reserve_gib * GiB
    bytes_per_block = setup.block_size * kv_bytes_per_token
    num_gpu_blocks = math.floor(available / bytes_per_block) if available > 0 else 0
    return {
        "a": flops_per_token / flops,
        "omega": weight_bytes / bandwidth,
        "beta": kv_bytes_per_token / bandwidth,
        "b": attention_flops_per_unit / flops,
        "comm": comm,
        "kv_blocks": num_gpu_blocks - 1,  # vLLM's block pool keeps one null block
        "num_gpu_blocks": num_gpu_blocks,
        "weight_bytes_per_gpu": weight_bytes,
        "kv_bytes_per_token_per_gpu": kv_bytes_per_token,
        "flops_per_token_per_gpu": flops_per_token,
        "attention_flops_per_unit_per_gpu": attention_flops_per_unit,
        "kv_memory_bytes_per_gpu": available,
        "params": p,
    }


def number_text(x: float) -> str:
    """A setting's text: 6 significant digits (the figures behind it have fewer)."""
    return format(x, ".6g")


def _profile(setup: Setup, g: dict, m: dict, tp: int, kv_dtype: str, t: dict, cat: dict) -> dict:
    per_token = t["a"] + t["comm"]
    coefficients = {
        "c": _coef(t["omega"], "s"),            # weights read once per step (= omega)
        "d": _coef(per_token, "s/decoder"),     # a decode token's matmuls and all-reduces
        "e": _coef(t["beta"], "s/token"),       # KV read per resident token (= beta)
        "a": _coef(t["a"], "s/token"),          # matmul FLOPs of one token
        "b": _coef(t["b"], "s/unit"),           # attention FLOPs of one (query, key) pair
        "comm": _coef(t["comm"], "s/token"),    # tensor-parallel all-reduce of one token
    }
    sets = {
        # examples/multi-turn/vllm.sq
        "a": number_text(t["a"]), "omega": number_text(t["omega"]), "beta": number_text(t["beta"]),
        "comm": number_text(t["comm"]),
        # examples/replay/vllm_replay.sq
        "c_fit": number_text(t["omega"]), "d_dec": number_text(per_token), "e_kv": number_text(t["beta"]),
        "a_pre": number_text(per_token), "b_att": number_text(t["b"]),
        # both: a roofline knows no fixed per-step overhead; the KV pool
        "c_it": "0", "blocks": str(t["kv_blocks"]), "bs": str(setup.block_size),
    }
    p = t["params"]
    inputs = asdict(setup)
    inputs.update(tp=tp, kv_dtype=kv_dtype)
    return {
        "serq_profile": 1,
        "name": f"{setup.gpu}/{setup.model}/{setup.dtype}/tp{tp}",
        "kind": "roofline",
        "source": (f"roofline from serq's catalog (python/serq/catalog.json): {g['name']} "
                   f"[{cat['sources'][g['source']]}]; {m['name']} [{cat['sources'][m['source']]}]"),
        "cost_model": ("c + d*decoders + e*kv_decode + a*prefilled + b*attention (replay form, "
                       "a_pre = d = a + comm); max(omega + beta*kv, a*tokens) + comm*tokens "
                       "(multi-turn form, omega = c, beta = e)"),
        "coefficients": coefficients,
        "set": sets,
        "derived": {
            "inputs": inputs,
            "kv_blocks": t["kv_blocks"],
            "num_gpu_blocks": t["num_gpu_blocks"],
            "block_size": setup.block_size,
            "kv_tokens": t["kv_blocks"] * setup.block_size,
            "kv_memory_GiB_per_gpu": round(t["kv_memory_bytes_per_gpu"] / GiB, 3),
            "kv_bytes_per_token_per_gpu": t["kv_bytes_per_token_per_gpu"],
            "weight_GiB_per_gpu": round(t["weight_bytes_per_gpu"] / GiB, 3),
            "flops_per_token_per_gpu": t["flops_per_token_per_gpu"],
            "attention_flops_per_unit_per_gpu": t["attention_flops_per_unit_per_gpu"],
            "params_total": p.total,
            "params_active": p.active,
            "not_modelled": ("CPU and kernel-launch overhead per step (c_it = 0), per-request overhead "
                             "outside the engine (the replay's c0 is left as the program has it), "
                             "kernels below peak (the efficiency factors), norms, activations and "
                             "rotary embeddings"),
        },
    }


def _coef(v: float, unit: str) -> dict:
    return {"value": float(f"{v:.6g}"), "unit": unit, "ci95": None}


def calibrate(target: dict, measured_roofline: dict, fit: dict) -> dict:
    """TARGET's roofline profile corrected by a measured fit (docs/profiles.md §6).

    `fit` was measured on the setup whose uncorrected roofline is `measured_roofline` (the same GPU,
    perhaps another model). Each term of the replay form is scaled by how far the fit is from that
    roofline — fit / roofline: the achieved fraction of peak that the term's kernels reach, taken
    to carry over to another model on the same GPU — and the part of the fit's intercept that the
    weight read does not explain is kept as a fixed per-step overhead. The multi-turn form's
    constants get the same factors (a from a, omega and beta from e, the overhead as c_it)."""
    rc, fc = measured_roofline["coefficients"], fit["coefficients"]
    for name in ("c", "d", "e", "a", "b"):
        if name not in fc:
            raise SerqError(f"--calibrate: the fit {fit['name']!r} has no coefficient {name} (it needs the "
                            "form c + d*decoders + e*kv_decode + a*prefilled + b*attention)")
        if not rc[name]["value"] > 0:
            raise SerqError(f"--calibrate: the roofline of the measured setup has no {name} term to scale")
    factor = {n: fc[n]["value"] / rc[n]["value"] for n in ("d", "e", "a", "b")}
    # the intercept: the weight read at the bandwidth the KV term achieved, and what is left of
    # the fitted intercept as a fixed overhead; if the weight read alone exceeds the intercept,
    # the whole intercept is the weight read (scaled as weights are)
    overhead = max(0.0, fc["c"]["value"] - rc["c"]["value"] * factor["e"])
    factor["c"] = (fc["c"]["value"] - overhead) / rc["c"]["value"]
    fit_c_it = float(fit["set"].get("c_it", "0") or 0)
    tc = target["coefficients"]
    c = tc["c"]["value"] * factor["c"] + overhead
    values = {"c": c, "d": tc["d"]["value"] * factor["d"], "e": tc["e"]["value"] * factor["e"],
              "a": tc["a"]["value"] * factor["a"], "b": tc["b"]["value"] * factor["b"]}
    out = dict(target)
    out["name"] = f"{target['name']}/calibrated:{fit['name']}"
    out["source"] = f"{target['source']}; each term scaled by the fit {fit['name']!r} against its own roofline"
    out["coefficients"] = {**tc, **{n: _coef(v, tc[n]["unit"]) for n, v in values.items()}}
    sets = dict(target["set"])
    sets.update({
        "c_fit": number_text(values["c"] - overhead), "d_dec": number_text(values["d"]),
        "e_kv": number_text(values["e"]), "a_pre": number_text(values["a"]), "b_att": number_text(values["b"]),
        "a": number_text(float(target["set"]["a"]) * factor["a"]),
        "omega": number_text(float(target["set"]["omega"]) * factor["c"]),
        "beta": number_text(float(target["set"]["beta"]) * factor["e"]),
        "c_it": number_text(overhead + fit_c_it),
    })
    out["set"] = sets
    out["derived"] = {**target.get("derived", {}), "calibration": {
        "fit": fit["name"], "measured_roofline": measured_roofline["name"],
        "factors_fit_over_roofline": {n: float(f"{v:.6g}") for n, v in factor.items()},
        "fixed_overhead_s": float(f"{overhead:.6g}")}}
    return out
