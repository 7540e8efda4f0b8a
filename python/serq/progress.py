"""Progress on standard error while a long run or a sweep goes on: only when standard error is a
terminal (never in a pipe, a log or CI, so `--json` output and logs stay clean), drawn by tqdm
when it is installed (the `sweep` extra), else by a plain one-line bar."""

from __future__ import annotations

import math
import sys


def _tqdm():
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


def on_terminal(stream=None) -> bool:
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


class RunProgress:
    """The `progress(now, horizon)` callback of serq_fast.step.Sim: simulated time over the
    horizon. `close()` clears it."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.bar = None
        self.tqdm = _tqdm()

    def __call__(self, now: float, horizon: float) -> None:
        if self.tqdm is not None and math.isfinite(horizon):
            if self.bar is None:
                self.bar = self.tqdm(total=horizon, unit="s", desc="simulated", leave=False,
                                     file=self.stream, bar_format="{l_bar}{bar}| {n:.1f}/{total:g} s [{elapsed}<{remaining}]")
            self.bar.n = min(now, horizon)
            self.bar.refresh()
            return
        if math.isfinite(horizon) and horizon > 0:
            frac = min(1.0, now / horizon)
            self.stream.write(f"\r[{'#' * int(frac * 30):<30}] {frac:6.1%}  t = {now:.1f} s")
        else:
            self.stream.write(f"\rt = {now:.1f} s")
        self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        else:
            self.stream.write("\r" + " " * 60 + "\r")
            self.stream.flush()


def run_progress(stream=None) -> RunProgress | None:
    """A progress callback for one run, or None off a terminal."""
    return RunProgress(stream) if on_terminal(stream) else None


class CountProgress:
    """Finished runs out of a total (sweeps, capacity searches); silent off a terminal."""

    def __init__(self, total: int | None, desc: str, stream=None, done: int = 0) -> None:
        self.stream = stream or sys.stderr
        self.bar = None
        self.n = done
        self.total = total
        self.desc = desc
        self.shown = on_terminal(self.stream)
        if self.shown and _tqdm() is not None:
            self.bar = _tqdm()(total=total, initial=done, desc=desc, unit="run", file=self.stream, leave=False)

    def update(self, k: int = 1) -> None:
        self.n += k
        if self.bar is not None:
            self.bar.update(k)
        elif self.shown:
            of = f"/{self.total}" if self.total is not None else ""
            self.stream.write(f"\r{self.desc}: {self.n}{of} runs")
            self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.shown:
            self.stream.write("\r" + " " * 60 + "\r")
            self.stream.flush()
