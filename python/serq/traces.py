"""Importing public request traces as sessions files (docs/traces.md).

A trace becomes a sessions file (docs/sessions.md) for the workload of
examples/multi-turn/vllm.sq, which `serq run … --replay S.json` (and `serq sweep --replay`)
replays under any deployment settings: the trace's arrival times become the file's `arrivals`,
and each conversation's turns become the draws that workload makes, in its order:
- turn k (turn stream): `fresh` (the turn's new prompt tokens; `ceil` keeps a whole number),
  `olen` − 1 (the workload adds 1), `again` (1 if another turn follows, else 0);
- session stream: the tool time before each later turn (the think time).
The program then sends turn k with prompt = every earlier prompt and answer + the new tokens,
which is how a chat conversation is resent, and asks for `out` tokens.

Formats:
- `azure`: the Azure LLM inference trace CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`, one
  request per row, timestamps as `YYYY-MM-DD HH:MM:SS.fffffff` or seconds): each request is a
  one-turn session arriving at its timestamp (relative to the first).
- `sharegpt`: ShareGPT JSON (a list of `{"id", "conversations": [{"from", "value"}, …]}`): each
  conversation is a session whose turns are its (human, gpt) message pairs. ShareGPT has no
  times and no token counts: arrivals are drawn as a Poisson process of `rate` per second and
  think times as exponential of mean `think` seconds (both from `seed`), and a message's tokens
  are estimated as ⌈characters / 4⌉ unless a `count_tokens` function is given (no tokenizer is
  bundled: a real one needs a model's vocabulary file).
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Callable

from .errors import SerqError, print_error
from .wire import canonical_json, value_to_wire

FORMATS = ("azure", "sharegpt")
TARGET_PROGRAM = "vllm.sq"


@dataclass
class Conversation:
    start: float | None  # arrival time in seconds (None: to be drawn)
    turns: list  # [(new prompt tokens, output tokens), …]


def estimate_tokens(text: str) -> int:
    """⌈characters / 4⌉, at least 1: the usual rough rate of English text in BPE vocabularies."""
    return max(1, math.ceil(len(text) / 4))


def _time(text: str) -> float:
    """A trace timestamp in seconds: a number, or an ISO date-time (more than 6 fractional
    digits, as the Azure traces have, are cut to microseconds)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    head, dot, frac = text.partition(".")
    stamp = head + (dot + frac[:6] if dot else "")
    return datetime.fromisoformat(stamp).timestamp()


def read_azure(path: str) -> list:
    try:
        fh = open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise SerqError(f"cannot read: {exc.strerror or exc}", path) from None
    out = []
    with fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        want = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
        if header is None or [h.strip() for h in header[:3]] != want:
            raise SerqError(f"an Azure LLM inference trace starts with the header {','.join(want)}", path, 1, 1)
        for row in reader:
            line = reader.line_num
            if not row or not "".join(row).strip():
                continue
            if len(row) < 3:
                raise SerqError(f"expected 3 fields ({','.join(want)}), got {len(row)}", path, line, 1)
            try:
                t = _time(row[0])
            except ValueError:
                raise SerqError(f"TIMESTAMP {row[0]!r}: not a date-time or a number of seconds", path, line, 1) from None
            counts = []
            for i, name in ((1, "ContextTokens"), (2, "GeneratedTokens")):
                try:
                    n = int(row[i])
                except ValueError:
                    n = -1
                if n < 1:
                    raise SerqError(f"{name} {row[i]!r}: expected a whole number >= 1", path, line,
                                    len(",".join(row[:i])) + 2)
                counts.append(n)
            out.append(Conversation(t, [tuple(counts)]))
    if not out:
        raise SerqError("the trace has no request", path)
    out.sort(key=lambda c: c.start)  # stable: rows of one instant keep their order
    t0 = out[0].start
    for c in out:
        c.start -= t0
    return out


def read_sharegpt(path: str, count_tokens: Callable[[str], int] = estimate_tokens) -> list:
    from .sessionsfile import read_json_file

    data = read_json_file(path, "ShareGPT file", "a ShareGPT file is a JSON list of conversations")
    if not isinstance(data, list):
        raise SerqError("a ShareGPT file is a JSON list of {\"id\", \"conversations\": [...]}", path)
    out = []
    for i, conv in enumerate(data):
        msgs = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(msgs, list):
            raise SerqError(f"[{i}]: expected an object with a \"conversations\" list", path)
        turns, pending = [], 0
        for j, m in enumerate(msgs):
            if not (isinstance(m, dict) and isinstance(m.get("from"), str) and isinstance(m.get("value"), str)):
                raise SerqError(f"[{i}].conversations[{j}]: expected {{\"from\": …, \"value\": \"…\"}}", path)
            who = m["from"].lower()
            if who in ("human", "user", "system"):
                pending += count_tokens(m["value"])  # a system prompt joins the first turn's prompt
            elif who in ("gpt", "assistant", "chatgpt", "bard", "bing"):
                if pending:  # a reply to nothing new is not a request
                    turns.append((pending, max(1, count_tokens(m["value"]))))
                    pending = 0
            else:
                raise SerqError(f"[{i}].conversations[{j}].from = {m['from']!r}: expected human/user/system "
                                "or gpt/assistant", path)
        if turns:  # a conversation without one answered message has no request
            out.append(Conversation(None, turns))
    if not out:
        raise SerqError("no conversation has a (human, gpt) pair of messages", path)
    return out


def _exact(x: float) -> str:
    return value_to_wire(Fraction(format(x, ".12g")))


def to_sessions(convs: list, seed: int = 1, rate: float = 1.0, think: float = 3.0,
                limit: int | None = None) -> dict:
    """The sessions file of CONVS for examples/multi-turn/vllm.sq (module docstring)."""
    if not (rate > 0 and math.isfinite(rate)):
        raise SerqError("--rate must be a positive number of conversations per second")
    if not (think >= 0 and math.isfinite(think)):
        raise SerqError("--think must be a number of seconds >= 0")
    if limit is not None:
        if limit < 1:
            raise SerqError("--limit must be a positive integer")
        convs = convs[:limit]
    rng = random.Random(f"serq-trace-import:{seed}")
    t, arrivals, sessions = 0.0, [], []
    for k, c in enumerate(convs):
        if c.start is None:  # Poisson arrivals: the first at 0
            if k:
                t += rng.expovariate(rate)
            arrivals.append(_exact(t))
        else:
            arrivals.append(_exact(c.start))
        turns = [[str(new), str(out - 1), "1" if n + 1 < len(c.turns) else "0"]
                 for n, (new, out) in enumerate(c.turns)]
        tools = [_exact(rng.expovariate(1 / think) if think > 0 else 0.0) for _ in c.turns[1:]]
        sessions.append({"serial": k, "init": [], "turns": turns, "session": tools})
    return {"format": "serq-sessions/1", "seed": seed, "program": TARGET_PROGRAM, "inputs": {},
            "arrivals": arrivals, "trace_picks": [], "machine": [], "sessions": sessions}


def import_trace(fmt: str, path: str, *, seed: int = 1, rate: float = 1.0, think: float = 3.0,
                 limit: int | None = None, count_tokens: Callable[[str], int] | None = None) -> dict:
    """Python form of `serq import`: the sessions file (a dict) of the trace in PATH."""
    if fmt == "azure":
        convs = read_azure(path)
    elif fmt == "sharegpt":
        convs = read_sharegpt(path, count_tokens or estimate_tokens)
    else:
        raise SerqError(f"trace format {fmt!r}: expected one of {', '.join(FORMATS)}")
    return to_sessions(convs, seed, rate, think, limit)


def write_sessions(data: dict, path: str) -> None:
    from .outputfile import replacing

    try:
        with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            fh.write(canonical_json(data) + "\n")
    except OSError as exc:
        raise SerqError(f"-o {path}: cannot write: {exc.strerror or exc}") from None


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "import", help="turn a public request trace into a sessions file for --replay",
        description="Read a trace (azure: the Azure LLM inference CSV; sharegpt: ShareGPT "
                    "conversations) and write a sessions file that `serq run "
                    "examples/multi-turn/vllm.sq --replay OUT` replays (docs/traces.md).")
    p.add_argument("format", choices=FORMATS, help="the trace's format (docs/traces.md)")
    p.add_argument("file", metavar="TRACE", help="the trace file: a CSV (azure) or a JSON list (sharegpt)")
    p.add_argument("-o", "--output", required=True, metavar="S.json", help="the sessions file to write")
    p.add_argument("--seed", type=int, default=1, metavar="N", help="seed of drawn arrivals and think times")
    p.add_argument("--rate", type=float, default=1.0, metavar="R",
                   help="conversations per second, for a trace without times (sharegpt; default 1)")
    p.add_argument("--think", type=float, default=3.0, metavar="S",
                   help="mean think time between turns, for a trace without times (default 3 s)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N sessions")
    p.set_defaults(func=cmd_import)


def cmd_import(args) -> int:
    import sys

    try:
        if args.seed < 0:
            raise SerqError("--seed must be a non-negative integer")
        data = import_trace(args.format, args.file, seed=args.seed, rate=args.rate, think=args.think,
                            limit=args.limit)
        write_sessions(data, args.output)
    except SerqError as exc:
        return print_error(exc)
    turns = sum(len(s["turns"]) for s in data["sessions"])
    print(f"{len(data['sessions'])} session(s), {turns} request(s) -> {args.output}", file=sys.stderr)
    return 0

