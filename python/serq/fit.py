"""`serq fit`: a step-cost model fitted to measured engine steps.

A step's duration is modelled as a sum of terms, each a coefficient times a product of measured
features (columns of the steps CSV that tools/vllm_testbed/driver.py writes), by default the form
of the seed's A100 fit:

    duration = c + d*decoders + e*kv_decode + a*prefilled + b*attention

The model is linear in its coefficients, so it is fitted by least squares (numpy), optionally
made robust to outliers (Huber weights, iteratively reweighted), on a seeded random training
split; the held-out rows give the error per step kind (decode-only, prefill-only, mixed), so the
MAPE a profile reports was never seen by the fit. Confidence intervals are the usual
normal-approximation ones from the residual variance and (XᵀWX)⁻¹.

The result is a profile (docs/profiles.md): coefficients with intervals, the fit's diagnostics,
and `set` values that examples/replay/vllm_replay.sq reads, so a program runs on the fitted
clock with `--profile FILE`.

Every problem with the input (a missing column, a non-number, NaN, fewer training rows than
terms, a design whose coefficients cannot be told apart) is a FitError with a message that says
what to do; the CLI prints it and exits 2.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

DEFAULT_MODEL = "c + d*decoders + e*kv_decode + a*prefilled + b*attention"
#: the replay program's setting for each term it has (examples/replay/vllm_replay.sq); a term of
#: another model sets the setting named as its coefficient
REPLAY_SETTINGS = {("c", ()): "c_fit", ("d", ("decoders",)): "d_dec", ("e", ("kv_decode",)): "e_kv",
                   ("a", ("prefilled",)): "a_pre", ("b", ("attention",)): "b_att",
                   ("f", ("prefill_requests",)): "f_pre"}
KINDS = ("decode", "prefill", "mixed")
HUBER_K = 1.345          # 95 % efficiency at the normal, the textbook choice
Z95 = 1.959963984540054  # two-sided 95 % normal quantile
MAX_INPUT_BYTES = 256 * 1024 * 1024


class FitError(ValueError):
    """Bad input to a fit; the message names the file, row or column and what to do."""


@dataclass(frozen=True)
class Term:
    coef: str
    factors: tuple[tuple[str, int], ...]   # (column, power); empty for an intercept

    def text(self) -> str:
        fs = [c if p == 1 else f"{c}**{p}" for c, p in self.factors]
        return "*".join([self.coef] + fs)


@dataclass
class Fit:
    model: str
    target: str
    terms: list[Term]
    coef: dict[str, float]
    ci95: dict[str, tuple[float, float]]
    robust: bool
    rows: int
    train_rows: int
    test_rows: int
    mape: dict[str, float | None] = field(default_factory=dict)   # per kind and "all", held out
    counts: dict[str, int] = field(default_factory=dict)           # held-out rows per kind
    train_mape: dict[str, float | None] = field(default_factory=dict)

    def predict(self, table: dict[str, np.ndarray]) -> np.ndarray:
        return design(self.terms, table) @ np.array([self.coef[t.coef] for t in self.terms])


def parse_model(text: str, columns: list[str]) -> list[Term]:
    """`c + d*decoders + …` as terms: each a coefficient (a name that is not a column) followed
    by `*column` or `*column**N` factors. Linear in the coefficients, or a FitError."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise FitError(f"--model {text!r}: not an expression ({exc.msg} at column {exc.offset})") from None
    summands: list[ast.AST] = []

    def flatten_sum(node: ast.AST) -> None:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            flatten_sum(node.left)
            flatten_sum(node.right)
        else:
            summands.append(node)

    def flatten_product(node: ast.AST, out: list[ast.AST]) -> None:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            flatten_product(node.left, out)
            flatten_product(node.right, out)
        else:
            out.append(node)

    flatten_sum(tree)
    terms: list[Term] = []
    seen: set[str] = set()
    colset = set(columns)
    for s in summands:
        factors: list[ast.AST] = []
        flatten_product(s, factors)
        head, rest = factors[0], factors[1:]
        if not isinstance(head, ast.Name) or head.id in colset:
            raise FitError(f"--model {text!r}: the term `{ast.unparse(s)}` does not start with a coefficient; "
                           "write each term as COEFFICIENT*column*… (a coefficient is a name that is not a column)")
        cols = []
        for f in rest:
            if isinstance(f, ast.Name):
                name, power = f.id, 1
            elif (isinstance(f, ast.BinOp) and isinstance(f.op, ast.Pow) and isinstance(f.left, ast.Name)
                  and isinstance(f.right, ast.Constant) and isinstance(f.right.value, int)
                  and not isinstance(f.right.value, bool) and f.right.value >= 1):
                name, power = f.left.id, f.right.value
            else:
                raise FitError(f"--model {text!r}: `{ast.unparse(f)}` is not a column or column**N "
                               f"(columns: {', '.join(columns)})")
            if name not in colset:
                raise FitError(f"missing column(s) {name} that --model {text!r} multiplies "
                               f"(columns: {', '.join(columns)})")
            cols.append((name, power))
        if head.id in seen:
            raise FitError(f"--model {text!r}: coefficient {head.id} appears in two terms")
        seen.add(head.id)
        terms.append(Term(head.id, tuple(cols)))
    return terms


def read_steps(path: str | Path) -> tuple[list[str], dict[str, list[str]]]:
    """The CSV's header and its columns as text (numbers are parsed per column as needed)."""
    p = Path(path)
    if not p.is_file():
        raise FitError(f"{p}: not a file" if p.exists() else f"{p}: no such file")
    if p.stat().st_size > MAX_INPUT_BYTES:
        raise FitError(f"{p}: larger than {MAX_INPUT_BYTES // 2**20} MiB; fit a sample of its rows")
    try:
        with open(p, newline="", encoding="utf-8") as f:
            rows = [r for r in csv.reader(line for line in f if not line.startswith("#")) if r]
    except UnicodeDecodeError:
        raise FitError(f"{p}: not a CSV text file (not UTF-8)") from None
    except csv.Error as exc:
        raise FitError(f"{p}: cannot read as CSV: {exc}") from None
    if not rows:
        raise FitError(f"{p}: empty (expected a header row and one row per step)")
    header = [h.strip() for h in rows[0]]
    cols: dict[str, list[str]] = {h: [] for h in header}
    for i, r in enumerate(rows[1:], start=2):
        if len(r) != len(header):
            raise FitError(f"{p}: row {i} has {len(r)} fields, the header has {len(header)}")
        for h, v in zip(header, r):
            cols[h].append(v.strip())
    return header, cols


def numeric(path: str | Path, cols: dict[str, list[str]], name: str) -> np.ndarray:
    vals = np.empty(len(cols[name]))
    for i, v in enumerate(cols[name]):
        try:
            x = float(v)
        except ValueError:
            raise FitError(f"{path}: row {i + 2}, column {name}: not a number: {v!r}") from None
        if not math.isfinite(x):
            raise FitError(f"{path}: row {i + 2}, column {name}: {v} is not finite; drop the row or fix the measurement")
        vals[i] = x
    return vals


def design(terms: list[Term], table: dict[str, np.ndarray]) -> np.ndarray:
    n = len(next(iter(table.values())))
    X = np.ones((n, len(terms)))
    for j, t in enumerate(terms):
        for c, p in t.factors:
            X[:, j] *= table[c] ** p
    return X


def step_kinds(table: dict[str, np.ndarray], kind_text: list[str] | None) -> np.ndarray:
    """The kind of each step: the `kind` column if given, else from decoders and prefilled."""
    if kind_text is not None:
        return np.array(kind_text)
    dec = table.get("decoders")
    pre = table.get("prefilled")
    if dec is None or pre is None:
        return np.array(["all"] * len(next(iter(table.values()))))
    return np.where((dec > 0) & (pre > 0), "mixed", np.where(dec > 0, "decode", "prefill"))


def _weighted_lstsq(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    sw = np.sqrt(w)
    beta, *_ = np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)
    return beta


def read_many(paths) -> tuple[list[str], dict[str, list[str]]]:
    """Several steps files as one table; every file must have the first one's columns."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not paths:
        raise FitError("no steps file given")
    header, cols = read_steps(paths[0])
    for p in paths[1:]:
        h, c = read_steps(p)
        if sorted(h) != sorted(header):
            raise FitError(f"{p}: its columns ({', '.join(h)}) differ from {paths[0]}'s ({', '.join(header)})")
        for k in header:
            cols[k] += c[k]
    return header, cols


def fit_steps(path, *, model: str = DEFAULT_MODEL, target: str = "duration_s",
              robust: bool = False, holdout: float = 0.2, seed: int = 0) -> Fit:
    """Fit `model` to the steps of one CSV file or of several (a list) taken together."""
    header, cols = read_many(path)
    path = path if isinstance(path, (str, Path)) else ", ".join(map(str, path))
    if target not in cols:
        raise FitError(f"{path}: no column {target!r} to fit (columns: {', '.join(header)}); "
                       "choose one with --target")
    terms = parse_model(model, [h for h in header if h != target])
    needed = sorted({c for t in terms for c, _ in t.factors})
    missing = [c for c in needed if c not in cols]
    if missing:
        raise FitError(f"{path}: missing column(s) {', '.join(missing)} (columns: {', '.join(header)})")
    table = {c: numeric(path, cols, c) for c in needed}
    y = numeric(path, cols, target)
    n = len(y)
    if not 0 <= holdout < 1:
        raise FitError(f"--holdout {holdout}: must be in [0, 1)")
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(holdout * n))
    test, train = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    k = len(terms)
    if len(train) < k + 1:
        raise FitError(f"{path}: {len(train)} training rows for {k} coefficients ({n} rows, {n_test} held out); "
                       f"need at least {k + 1}: measure more steps or lower --holdout")
    X = design(terms, table)
    # Columns differ by many orders of magnitude (attention ~1e6, an intercept 1), so the rank
    # test and the solve work on columns scaled to unit norm.
    scale = np.linalg.norm(X[train], axis=0)
    dead = [terms[j].coef for j in range(k) if scale[j] == 0]
    if dead:
        raise FitError(f"{path}: the design is singular: coefficient(s) {', '.join(dead)} multiply a feature "
                       "that is 0 on every training row; drop the term or measure steps that exercise it")
    Xs = X / scale
    if np.linalg.matrix_rank(Xs[train]) < k:
        raise FitError(f"{path}: the design is singular: the terms of {model!r} are linearly dependent on "
                       "these steps (e.g. one feature is a multiple of another); drop a term")
    Xt, yt = Xs[train], y[train]
    w = np.ones(len(train))
    beta = _weighted_lstsq(Xt, yt, w)
    if robust:
        for _ in range(50):
            r = yt - Xt @ beta
            s = np.median(np.abs(r - np.median(r))) / 0.6745
            if s <= 0:
                break
            u = np.abs(r) / (HUBER_K * s)
            w_new = np.where(u <= 1, 1.0, 1.0 / np.maximum(u, 1e-300))
            new = _weighted_lstsq(Xt, yt, w_new)
            done = np.allclose(new, beta, rtol=1e-10, atol=0)
            beta, w = new, w_new
            if done:
                break
    r = yt - Xt @ beta
    dof = max(1, len(train) - k)
    sigma2 = float(np.sum(w * r * r) / dof)
    cov = sigma2 * np.linalg.pinv((Xt * w[:, None]).T @ Xt)
    coefs = beta / scale
    half = Z95 * np.sqrt(np.maximum(np.diag(cov), 0)) / scale
    kinds = step_kinds(table, cols.get("kind"))
    pred = X @ coefs

    def mape(idx: np.ndarray) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for kd in KINDS + ("all",):
            sel = idx if kd == "all" else idx[kinds[idx] == kd]
            sel = sel[y[sel] != 0]
            out[kd] = float(np.mean(np.abs(pred[sel] - y[sel]) / np.abs(y[sel]))) if len(sel) else None
        return out

    return Fit(model=model, target=target, terms=terms,
               coef={t.coef: float(coefs[j]) for j, t in enumerate(terms)},
               ci95={t.coef: (float(coefs[j] - half[j]), float(coefs[j] + half[j])) for j, t in enumerate(terms)},
               robust=robust, rows=n, train_rows=len(train), test_rows=n_test,
               mape=mape(test) if n_test else {}, train_mape=mape(train),
               counts={kd: int(np.sum(kinds[test] == kd)) for kd in KINDS})


def loop_overhead(path) -> tuple[float | None, float | None]:
    """The driver's own time around the steps, from the `gap_s` (and `arrivals`) columns: the
    replay program's `c_it`, the median gap between one step's end and the next one's start when
    no request was added in between, and its `c0`, the mean extra gap per request added (the
    engine's input processing of a new request, which a client waits for before its first step)."""
    header, cols = read_many(path)
    if "gap_s" not in cols:
        return None, None
    gaps = numeric("the steps", cols, "gap_s")
    arrivals = numeric("the steps", cols, "arrivals") if "arrivals" in cols else np.zeros(len(gaps))
    quiet = gaps[(gaps > 0) & (arrivals == 0)]
    if not len(quiet):
        return None, None
    c_it = float(np.median(quiet))
    busy = (gaps > 0) & (arrivals > 0)
    c0 = float(max(0.0, np.mean((gaps[busy] - c_it) / arrivals[busy]))) if busy.any() else None
    return c_it, c0


def profile_for(fit: Fit, path, name: str, overhead: tuple[float | None, float | None]) -> dict:
    """The fit as a profile (docs/profiles.md)."""
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    digest = hashlib.sha256()
    for p in paths:
        digest.update(Path(p).read_bytes())
    settings = {}
    for t in fit.terms:
        key = (t.coef, tuple(c for c, p in t.factors if p == 1) if all(p == 1 for _, p in t.factors) else None)
        settings[REPLAY_SETTINGS.get(key, t.coef)] = repr(fit.coef[t.coef])
    c_it, c0 = overhead
    if c_it is not None:
        settings["c_it"] = repr(c_it)
        # an in-process engine has no API server in front of it: a request's only delay before
        # the engine is its own input processing
        settings["c0"] = repr(c0) if c0 is not None else "0"
    return {
        "serq_profile": 1,
        "name": name,
        "kind": "fit",
        "source": f"serq fit of {', '.join(Path(p).name for p in paths)} "
                  f"(sha256 {digest.hexdigest()[:16]}, {fit.rows} steps)",
        "cost_model": fit.model,
        "coefficients": {c: {"value": v, "unit": "s" if not t.factors else "s/unit",
                             "ci95": list(fit.ci95[c])}
                         for t in fit.terms for c, v in [(t.coef, fit.coef[t.coef])]},
        "set": settings,
        "fit": {"target": fit.target, "robust": fit.robust, "rows": fit.rows, "train_rows": fit.train_rows,
                "heldout_rows": fit.test_rows, "heldout_rows_by_kind": fit.counts,
                "mape_heldout": fit.mape, "mape_train": fit.train_mape},
    }
