#!/usr/bin/env python3
"""Turn a multi-turn replay trace into a testbed workload (an oracle scenario), or draw a trace.

    python3 tools/vllm_testbed/workload.py gen --seed 1 --sessions 12 -o trace.csv
    python3 tools/vllm_testbed/workload.py scenario trace.csv --clock step --spacing-steps 40 -o w.json
    python3 tools/vllm_testbed/workload.py scenario trace.csv --clock wall --spacing 1.5 -o w.json

Runs with any Python (no vLLM needed). The trace format is the replay program's
(examples/replay/vllm_replay.sq): ``session,turn,new,out,think[,forced]``, rows of a session
consecutive and in turn order; turn k's prompt is turn k-1's prompt + its output + ``new``.

The workload is an oracle scenario (docs/oracle.md §3) so that one file drives the real engine
(tools/vllm_testbed/driver.py), the real scheduler (tools/vllm_oracle/driver.py) and serQ's
model (`serq oracle run`): a session's first turn arrives by step (``arrival_step``, step clock)
or by time (``arrival_time``, wall clock); each later turn is ``after`` its predecessor with
``prompt_from`` it and ``append_len = new`` fresh tokens, so the conversation's prefix is shared
through the prefix cache exactly as in an agent loop. The client's pause is ``delay_steps``
(step clock: the pause in steps, ``think / step_s`` rounded) or ``_think_s`` (wall clock:
seconds after the previous answer, read by the testbed driver; keys starting with ``_`` are
ignored by the oracle). Each request also carries ``_session`` and ``_turn``.

A forced miss (``forced`` = 1) cannot be reproduced on a real engine (its prefix is in the
cache), so such a trace is refused.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))  # serq.outputfile: stdlib only


class WorkloadError(ValueError):
    pass


@dataclass(frozen=True)
class Turn:
    session: int
    turn: int
    new: int
    out: int
    think: float


def read_trace(path: str | Path) -> list[Turn]:
    """The rows of a replay trace, checked: consecutive sessions, turns 1, 2, … in order."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"{p}: cannot read the trace: {exc}") from None
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise WorkloadError(f"{p}: empty trace (expected a header session,turn,new,out,think[,forced])")
    rows = list(csv.reader(lines))
    header = [h.strip() for h in rows[0]]
    need = ["session", "turn", "new", "out", "think"]
    if header[:5] != need or len(header) > 6 or (len(header) == 6 and header[5] != "forced"):
        raise WorkloadError(f"{p}:1: header must be session,turn,new,out,think[,forced], got {','.join(header)}")
    turns: list[Turn] = []
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise WorkloadError(f"{p}: row {n}: {len(row)} fields, the header has {len(header)}")
        try:
            s, t, new, out = (int(row[i]) for i in range(4))
            think = float(row[4])
            forced = int(row[5]) if len(row) == 6 else 0
        except ValueError:
            raise WorkloadError(f"{p}: row {n}: session, turn, new, out, forced must be integers and think a number") from None
        if forced:
            raise WorkloadError(f"{p}: row {n}: a forced miss cannot be reproduced on a real engine")
        if new < 1 or out < 1 or not think >= 0 or think == float("inf"):
            raise WorkloadError(f"{p}: row {n}: need new >= 1, out >= 1 and a finite think >= 0")
        prev = turns[-1] if turns else None
        if prev is None or s != prev.session:
            if t != 1 or s != (prev.session + 1 if prev else 0):
                raise WorkloadError(f"{p}: row {n}: sessions must be numbered 0, 1, … and start at turn 1")
        elif t != prev.turn + 1:
            raise WorkloadError(f"{p}: row {n}: turn {t} of session {s} follows turn {prev.turn}")
        turns.append(Turn(s, t, new, out, think))
    return turns


def generate(seed: int, sessions: int, turns: tuple[int, int], first: tuple[int, int],
             new: tuple[int, int], out: tuple[int, int], think: tuple[float, float]) -> list[Turn]:
    """A random trace; only random.Random(seed) is used, so equal options give equal rows."""
    rng = random.Random(seed)
    rows = []
    for s in range(sessions):
        k = rng.randint(*turns)
        for t in range(1, k + 1):
            n = rng.randint(*first) if t == 1 else rng.randint(*new)
            pause = round(rng.uniform(*think), 2) if t < k else 0.0
            rows.append(Turn(s, t, n, rng.randint(*out), pause))
    return rows


def trace_text(rows: list[Turn], comment: str) -> str:
    lines = [f"# {comment}", "session,turn,new,out,think"]
    lines += [f"{r.session},{r.turn},{r.new},{r.out},{r.think:g}" for r in rows]
    return "\n".join(lines) + "\n"


def scenario(rows: list[Turn], *, name: str, clock: str, config: dict, spacing: float,
             spacing_steps: int, step_s: float) -> dict:
    """The workload of `rows` as an oracle scenario (module docstring)."""
    reqs = []
    prev_think: dict[int, float] = {}   # session -> the pause after its latest turn
    for r in rows:
        rid = f"s{r.session}t{r.turn}"
        req: dict = {"id": rid, "max_tokens": r.out, "_session": r.session, "_turn": r.turn}
        if r.turn == 1:
            req["prompt_len"] = r.new
            if clock == "step":
                req["arrival_step"] = r.session * spacing_steps
            else:
                req["arrival_time"] = round(r.session * spacing, 9)
        else:
            parent = f"s{r.session}t{r.turn - 1}"
            req.update(after=parent, prompt_from=parent, append_len=r.new)
            pause = prev_think[r.session]
            if clock == "step":
                req["delay_steps"] = int(round(pause / step_s)) if step_s > 0 else 0
            else:
                req["_think_s"] = pause
        prev_think[r.session] = r.think
        reqs.append(req)
    return {"name": name, "description": f"testbed workload, {clock} clock", "_clock": clock,
            "config": config, "requests": reqs}


def write_atomic(path: str, text: str) -> None:
    """TEXT to PATH atomically (serq.outputfile, the project's one writer), or to stdout for '-'."""
    if path == "-":
        sys.stdout.write(text)
        return
    from serq.outputfile import write_text

    write_text(path, text)


def _pair(kind):
    def parse(s: str):
        a, sep, b = s.partition(",")
        try:
            lo, hi = kind(a), kind(b if sep else a)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected LO,HI, got {s!r}") from None
        if lo > hi or lo < 0:
            raise argparse.ArgumentTypeError(f"need 0 <= LO <= HI, got {s!r}")
        return lo, hi
    return parse


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen", help="draw a random multi-turn trace")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--sessions", type=int, default=12)
    g.add_argument("--turns", type=_pair(int), default=(2, 5), help="turns per session LO,HI [2,5]")
    g.add_argument("--first", type=_pair(int), default=(96, 480), help="first prompt tokens [96,480]")
    g.add_argument("--new", type=_pair(int), default=(16, 160), help="tokens a later turn appends [16,160]")
    g.add_argument("--out", type=_pair(int), default=(8, 64), help="output tokens [8,64]")
    g.add_argument("--think", type=_pair(float), default=(0.2, 2.0), help="pause after a turn, s [0.2,2.0]")
    g.add_argument("-o", "--output", default="-")
    s = sub.add_parser("scenario", help="a trace as a testbed workload (an oracle scenario)")
    s.add_argument("trace")
    s.add_argument("--clock", choices=["step", "wall"], required=True)
    s.add_argument("--name", default=None)
    s.add_argument("--spacing", type=float, default=1.0, help="wall clock: seconds between session starts [1.0]")
    s.add_argument("--spacing-steps", type=int, default=20, help="step clock: steps between session starts [20]")
    s.add_argument("--step-s", type=float, default=0.02, help="step clock: seconds per step to turn think into steps [0.02]")
    s.add_argument("--block-size", type=int, default=32)
    s.add_argument("--blocks", type=int, default=512, help="num_gpu_blocks, null block included [512]")
    s.add_argument("--max-num-seqs", type=int, default=16)
    s.add_argument("--max-num-batched-tokens", type=int, default=256)
    s.add_argument("--max-model-len", type=int, default=4096)
    s.add_argument("-o", "--output", default="-")
    a = p.parse_args(argv)
    try:
        if a.cmd == "gen":
            rows = generate(a.seed, a.sessions, a.turns, a.first, a.new, a.out, a.think)
            cmd = " ".join(["workload.py"] + (argv if argv is not None else sys.argv[1:]))
            write_atomic(a.output, trace_text(rows, f"generated by: {cmd}"))
        else:
            rows = read_trace(a.trace)
            config = {"block_size": a.block_size, "num_gpu_blocks": a.blocks,
                      "max_num_seqs": a.max_num_seqs, "max_num_batched_tokens": a.max_num_batched_tokens,
                      "max_model_len": a.max_model_len}
            sc = scenario(rows, name=a.name or Path(a.trace).stem, clock=a.clock, config=config,
                          spacing=a.spacing, spacing_steps=a.spacing_steps, step_s=a.step_s)
            write_atomic(a.output, json.dumps(sc, indent=1) + "\n")
    except WorkloadError as exc:
        print(f"workload.py: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
