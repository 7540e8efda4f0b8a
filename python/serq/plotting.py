"""What every serQ figure needs: matplotlib (the `plot` extra) without a display, a checked
output path, and an atomic save (a temporary file in the same folder, then a rename)."""

from __future__ import annotations

import os

from .outputfile import replacing
from .errors import SerqError

FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only: no display is ever opened)."""
    try:
        import matplotlib
    except ImportError:
        raise SerqError("plots need matplotlib: pip install 'serq[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def check_plot_path(path: str) -> None:
    """Fail before the work, not after it: a figure path must end .png, .svg or .pdf, in an
    existing folder, and matplotlib must be there."""
    if not path.lower().endswith(FIGURE_SUFFIXES):
        raise SerqError(f"{path}: a figure is written as {', '.join(FIGURE_SUFFIXES)} (give a file name "
                        "with one of these endings)")
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise SerqError(f"{path}: {folder} is not an existing folder")
    pyplot()


def save_figure(fig, path: str) -> None:
    try:
        with replacing(path) as tmp:
            fig.savefig(tmp, bbox_inches="tight", dpi=120, format=os.path.splitext(path)[1][1:].lower())
    except OSError as exc:
        raise SerqError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        pyplot().close(fig)
