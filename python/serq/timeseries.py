"""The state of one run over time, for `serq run --plot`: every pool's used and cached units and
its queue length, every engine's batch (its residents), read at the end of settles (where the
report's time averages sample) no more often than every `step` seconds of simulated time."""

from __future__ import annotations

import math

from .plotting import check_plot_path, pyplot, save_figure  # noqa: F401 (check_plot_path for the CLI)

MAX_POINTS = 4000  # past this the series is thinned (every other point) and the step doubled


class Series:
    def __init__(self, step: float = 0.05) -> None:
        self.step = step
        self.next_t = -math.inf
        self.times: list[float] = []
        self.rows: list[tuple] = []
        self.pools: list[str] = []
        self.engines: list[str] = []

    def observe(self, sim) -> None:
        now = sim.now
        if now < self.next_t:
            return
        if not self.times:
            self.pools = [p.name for p in sim.pools]
            self.engines = [e.name for e in sim.engines]
        self.next_t = now + self.step
        self.times.append(now)
        self.rows.append(tuple((p.used, p.cached, p.qlen()) for p in sim.pools)
                         + tuple(len(e.residents) for e in sim.engines))
        if len(self.times) > MAX_POINTS:
            self.times = self.times[::2]
            self.rows = self.rows[::2]
            self.step *= 2

    def plot(self, path: str, title: str = "") -> None:
        plt = pyplot()
        fig, axes = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True)
        np_ = len(self.pools)
        for i, name in enumerate(self.pools):
            used = [r[i][0] for r in self.rows]
            cached = [r[i][1] for r in self.rows]
            if any(used) or any(cached):
                axes[0].step(self.times, used, where="post", label=f"{name} used")
                axes[0].step(self.times, cached, where="post", label=f"{name} cached", linestyle="--")
            axes[1].step(self.times, [r[i][2] for r in self.rows], where="post", label=f"{name} queue")
        for j, name in enumerate(self.engines):
            axes[2].step(self.times, [r[np_ + j] for r in self.rows], where="post", label=f"{name} batch")
        for ax, ylabel in zip(axes, ("units", "waiting", "running requests")):
            ax.set_ylabel(ylabel)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(loc="upper right", fontsize="small")
            ax.grid(alpha=0.3)
        axes[-1].set_xlabel("simulated time (s)")
        if title:
            axes[0].set_title(title)
        save_figure(fig, path)
