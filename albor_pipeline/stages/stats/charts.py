"""The statistics as PNG charts (matplotlib's Agg canvas, no pyplot state, no display).

Byte-identical on rerun: one style for every chart (matplotlib's own DejaVu Sans, so the
machine's fonts play no part), and no metadata that varies (`Software` dropped; Agg writes
no date). Long tails are drawn on log scales with plain numbers on the axes.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import numpy as np
from matplotlib import style
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.ticker import FuncFormatter, LogLocator, PercentFormatter
from PIL import Image

from albor_pipeline.stages.stats.facts import Statistics, funnel_rows

STYLE: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 13,
    "axes.titlesize": 14,
    "axes.labelsize": 13,
    "legend.fontsize": 12,
    "xtick.labelsize": 12,
    "ytick.labelsize": 12,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "figure.titlesize": 15,
}
DPI = 100  # 1,100 px wide: whole in the card and in Dagster's metadata dialog (80 % of a 1,440-px window)
WIDTH = 11.0  # inches, every chart: one scale in the card, where each is shown at the page's width
PALETTE = tuple(f"C{i}" for i in range(10))  # matplotlib's default colours (tab10), a source each
REMOVED, KEPT, SPLIT, PAD = "#c0392b", "#2c6fad", "#2e8b57", "#c8c8c8"


@contextmanager
def _figure(width: float, height: float, layout: Literal["constrained"] | None = "constrained") -> Iterator[Figure]:
    with style.context(STYLE):
        fig = Figure(figsize=(width, height), dpi=DPI, layout=layout)
        FigureCanvasAgg(fig)
        yield fig


def png_bytes(fig: Figure) -> bytes:
    """The figure as a 256-colour PNG, without the metadata that would differ between builds.

    A chart is a few colours and their anti-aliased edges: a palette (median cut, no dither)
    shows it as drawn in about 40 % of the bytes of Agg's RGBA, which matters as the charts
    ship with the card and sit embedded in the `stats` asset's metadata."""
    with style.context(STYLE):
        fig.canvas.draw()  # Agg's pixels, as `savefig` draws them, without its PNG round trip
    rgba = fig.canvas.buffer_rgba()  # type: ignore[attr-defined]  # Agg's canvas has it
    image = Image.frombuffer("RGBA", (rgba.shape[1], rgba.shape[0]), rgba, "raw", "RGBA", 0, 1)
    # opaque: the figure's background is white
    palette = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    out = io.BytesIO()
    palette.save(out, format="PNG", optimize=True)
    return out.getvalue()


def _plain(x: float, _: object = None) -> str:
    """An axis number as people write it: 1,000 rather than 10^3."""
    return f"{x:,.0f}" if x >= 1 else f"{x:g}"


def _log_axis(ax: Axes, axis: str) -> None:
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(LogLocator(base=10))
    target.set_major_formatter(FuncFormatter(_plain))


def _note(ax: Axes, text: str) -> None:
    """An empty panel that says why it is empty."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#555555")
    ax.set_axis_off()


def _colors(stats: Statistics) -> dict[str, str]:
    """One colour per source, in spec order, the same in every chart."""
    names = [*stats.funnel, *(n for n in stats.redactions if n not in stats.funnel)]
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def lengths_chart(stats: Statistics, measure: str, unit: str) -> Figure:
    """Per split, each source's documents by length (log bins), its median dashed."""
    colors = _colors(stats)
    splits = list(stats.lengths)
    height = 1.0 + 2.6 * max(len(splits), 1)
    with _figure(WIDTH, height, layout=None) as fig:  # a fixed grid: see `_beside_legends`
        axes = fig.subplots(max(len(splits), 1), 1, sharex=True, squeeze=False)[:, 0]
        legends = []
        for ax, split in zip(axes, splits):
            lengths = stats.lengths[split]
            ax.set_title(f"{split}: {lengths.all.documents:,} documents", loc="left")
            drawn = 0
            for name, facts in lengths.sources.items():
                d = getattr(facts, measure)
                if d is None or not d.count:
                    continue
                share = np.array(d.bins, dtype=np.float64) / d.count
                p50 = d.quantiles["p50"]
                label = f"{name}\n{d.count:,} docs, median {p50:,.0f}"
                ax.stairs(share, d.edges(), color=colors.get(name), linewidth=2, label=label)
                ax.axvline(p50, color=colors.get(name), linestyle="--", linewidth=1, alpha=0.8)
                drawn += 1
            if not drawn:
                _note(ax, f"no {unit} recorded")
                continue
            _log_axis(ax, "x")
            ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
            legends.append(ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.05), frameon=False))
        axes[-1].set_xlabel(f"{unit} per document (log scale)")
        fig.supylabel("share of the source's documents", fontsize=13, x=0.01)
        fig.suptitle(f"Document length in {unit}, per split and source (median dashed)", y=1 - 0.12 / height)
        _beside_legends(fig, legends, left=0.085, top=1 - 0.75 / height, bottom=0.6 / height, hspace=0.35)
    return fig


def _beside_legends(fig: Figure, legends: list[Legend], **margins: float) -> None:
    """Axes from `margins` to the widest legend beside them, as constrained layout would
    place them: the legends measured once, where constrained layout measures every tick of
    every axis again and again (0.5-1 s of a chart)."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # Agg's, set by `_figure`
    widest = max((legend.get_window_extent(renderer).width for legend in legends), default=0.0)
    fig.subplots_adjust(right=1 - (widest + 0.025 * fig.bbox.width) / fig.bbox.width, **margins)


def funnel_chart(stats: Statistics) -> Figure:
    """Per document source: documents at each step, removals by reason (log scale)."""
    rows = funnel_rows(stats)
    sources = list(stats.funnel)
    color = {"removed": REMOVED, "kept": KEPT, "split": SPLIT}
    with _figure(WIDTH, 1.6 + 0.4 * len(rows)) as fig:
        axes = fig.subplots(1, max(len(sources), 1), sharey=True, squeeze=False)[0]
        y = np.arange(len(rows))
        for ax, name in zip(axes, sources):
            counts = [count(name) for _, _, count in rows]
            ax.barh(y, counts, color=[color[kind] for _, kind, _ in rows], height=0.7)
            for yi, c in zip(y, counts):
                ax.text(max(c, 1), float(yi), f" {c:,}", va="center", fontsize=11)
            _log_axis(ax, "x")
            ax.set_xlim(0.8, max(max(counts), 10) * 12)
            ax.set_title(name)
            ax.grid(axis="y", visible=False)
        axes[0].set_yticks(y, [label for label, _, _ in rows])
        axes[0].invert_yaxis()
        fig.suptitle("Filter funnel per document source: removed in red, kept in blue, splits in green")
        fig.supxlabel("documents (log scale)", fontsize=13)
    return fig


def redactions_chart(stats: Statistics) -> Figure:
    """Every (source, type, where) with its count, on a log scale."""
    colors = _colors(stats)
    rows = [
        (f"{name}: {kind}" + (" (at ingest)" if where == "at_ingest" else ""), n, name)
        for name, r in stats.redactions.items()
        for where in ("at_ingest", "hygiene")
        for kind, n in sorted(getattr(r, where).items())
        if n
    ]
    modes = sorted({r.mode for r in stats.redactions.values()})
    with _figure(WIDTH, 1.6 + 0.4 * len(rows) if rows else 1.2) as fig:
        ax = fig.subplots()
        fig.suptitle(f"Secrets and PII found, by source and type (redact: {', '.join(modes) or 'none'})")
        if not rows:
            _note(ax, "nothing found")
            return fig
        y = np.arange(len(rows))
        ax.barh(y, [n for _, n, _ in rows], color=[colors.get(src) for _, _, src in rows], height=0.7)
        for yi, (_, n, _) in zip(y, rows):
            ax.text(n, float(yi), f" {n:,}", va="center", fontsize=11)
        _log_axis(ax, "x")
        ax.set_xlim(0.8, max(n for _, n, _ in rows) * 8)
        ax.set_yticks(y, [label for label, _, _ in rows])
        ax.invert_yaxis()
        ax.set_xlabel("occurrences (log scale)")
        ax.grid(axis="y", visible=False)
    return fig


SIGNAL_COLUMNS = 3


def signals_chart(stats: Statistics) -> Figure:
    """Per source, each numeric rule's signal: its histogram, the threshold in red, and how
    many documents the rule dropped (the first to hold) in the panel's title."""
    panels = [(source, h) for source, hists in stats.signals.items() for h in hists]
    rows = max(1, -(-len(panels) // SIGNAL_COLUMNS))
    height = 1.0 + 2.3 * rows
    with _figure(WIDTH, height, layout=None) as fig:  # a fixed grid: constrained layout costs seconds here
        fig.subplots_adjust(left=0.06, right=0.985, top=1 - 1.25 / height, bottom=0.35 / height, hspace=0.5, wspace=0.3)
        axes = fig.subplots(rows, SIGNAL_COLUMNS, squeeze=False).ravel()
        fig.suptitle("Quality signals per source: documents by value, the rule's threshold in red", y=1 - 0.3 / height)
        for ax in axes[len(panels) :]:
            ax.set_visible(False)
        if not panels:
            axes[0].set_visible(True)
            _note(axes[0], "no numeric quality rule")
            return fig
        for ax, (source, h) in zip(axes, panels):
            edges = np.asarray(h.edges)
            ax.stairs(h.counts, edges, fill=True, color=KEPT, alpha=0.8)
            at = float(np.log10(max(h.threshold, 0) + 1)) if h.log else h.threshold
            ax.axvline(at, color=REMOVED, linewidth=2)
            span = max(edges[-1], at) - min(edges[0], at)
            ax.set_xlim(min(edges[0], at) - 0.02 * span, max(edges[-1], at) + 0.02 * span)
            rule = f"{source} · {h.op} {h.threshold:g} · dropped {h.dropped:,}"
            ax.set_title(f"{h.signal}\n{rule}", fontsize=10, loc="left")
            ax.tick_params(labelsize=9)
            if h.log:
                ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _plain(10**x - 1)))
    return fig


def near_duplicates_chart(stats: Statistics) -> Figure:
    """Clusters by size (members), on a log scale."""
    sizes = stats.near_duplicate_clusters
    with _figure(WIDTH, 4.2 if sizes else 1.2) as fig:
        ax = fig.subplots()
        fig.suptitle("Near-duplicate clusters by size")
        if not sizes:
            _note(ax, "near dedup is off" if sizes is None else "no near-duplicate cluster")
            return fig
        x = np.arange(len(sizes))
        ax.bar(x, list(sizes.values()), color=KEPT, width=0.7)
        for xi, n in zip(x, sizes.values()):
            ax.text(float(xi), n, f"{n:,}", ha="center", va="bottom", fontsize=11)
        ax.set_xticks(x, list(sizes))
        _log_axis(ax, "y")
        ax.set_ylim(0.8, max(sizes.values()) * 3)
        ax.set_xlabel("documents in the cluster")
        ax.set_ylabel("clusters (log scale)")
        ax.grid(axis="x", visible=False)
    return fig


def fim_chart(stats: Statistics) -> Figure:
    """Per split, each source's share of FIM documents against the configured rate."""
    colors = _colors(stats)
    splits = list(stats.fim)
    sources = [n for n in stats.funnel if any(n in f.sources for f in stats.fim.values())]
    width = 0.8 / max(len(sources), 1)
    with _figure(WIDTH, 4.6) as fig:
        ax = fig.subplots()
        fig.suptitle("Fill-in-the-Middle share per split and source (configured rate dashed)")
        x = np.arange(len(splits))
        for i, name in enumerate(sources):
            shares = [stats.fim[s].sources.get(name, 0.0) for s in splits]
            pos = x - 0.4 + width * (i + 0.5)
            ax.bar(pos, shares, width=width * 0.92, color=colors.get(name), label=name)
            for px, share in zip(pos, shares):
                ax.text(px, share, f"{share:.0%}", ha="center", va="bottom", fontsize=11)
        for xi, split in zip(x, splits):
            ax.hlines(stats.fim[split].rate, xi - 0.45, xi + 0.45, colors="#333333", linestyles="--", linewidth=1.2)
        ticks = [f"{s} ({f.share:.1%} of {f.rows:,})" if f.enabled else f"{s} (FIM off)" for s, f in stats.fim.items()]
        ax.set_xticks(x, ticks)
        ax.set_ylim(0, 1.08)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        ax.set_ylabel("documents rewritten as FIM")
        fig.legend(loc="outside lower center", frameon=False, ncols=min(len(sources), 5))
        ax.grid(axis="x", visible=False)
    return fig


def sequences_chart(stats: Statistics) -> Figure:
    """Per corpus: its sequence slots filled and padded, and the spread of per-sequence fill."""
    names = list(stats.sequences)
    with _figure(WIDTH, 1.9 + 0.5 * max(len(names), 2)) as fig:
        left, right = fig.subplots(1, 2, sharey=True, width_ratios=(3, 2))
        fig.suptitle("Sequence fill and padding per corpus")
        y = np.arange(len(names))
        facts = [stats.sequences[n] for n in names]
        filled = [1 - f.pad_fraction if f.sequences else 0.0 for f in facts]
        left.barh(y, filled, color=KEPT, height=0.65, label="tokens")
        left.barh(y, [f.pad_fraction for f in facts], left=filled, color=PAD, height=0.65, label="padding")
        for yi, f in zip(y, facts):
            text = f" {f.sequences:,} × {f.seq_len:,}; {f.dropped_tokens:,} tokens dropped"
            text += f", {f.cut_fraction:.0%} of docs cut"
            left.text(0.01, float(yi), text, va="center", fontsize=11, color="white" if f.sequences else "#333333")
        left.set_xlim(0, 1)
        left.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        left.set_xlabel("share of the sequence slots")
        left.set_yticks(y, names)
        left.invert_yaxis()
        left.legend(loc="lower left", bbox_to_anchor=(0, 1), frameon=False, ncols=2)
        for yi, f in zip(y, facts):
            if f.fill is None:
                continue
            q = f.fill.quantiles
            lo, mid, hi = (q[k] / f.seq_len for k in ("p10", "p50", "p90"))
            right.plot([lo, hi], [yi, yi], color=KEPT, linewidth=2)
            right.plot([mid], [yi], "o", color=KEPT)
        right.set_xlim(-0.02, 1.02)
        right.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        right.set_xlabel("fill per sequence: p10 to p90, median dot")
        for ax in (left, right):
            ax.grid(axis="y", visible=False)
    return fig


DRAW: dict[str, Callable[[Statistics], Figure]] = {
    "lengths_chars.png": lambda s: lengths_chart(s, "chars", "characters"),
    "lengths_tokens.png": lambda s: lengths_chart(s, "tokens", "tokens"),
    "funnel.png": funnel_chart,
    "redactions.png": redactions_chart,
    "signals.png": signals_chart,
    "near_duplicates.png": near_duplicates_chart,
    "fim.png": fim_chart,
    "sequences.png": sequences_chart,
}
"""How each chart of `facts.CHARTS` is drawn, by its file name."""


def render(name: str, stats: Statistics) -> bytes:
    """The chart `name` of `stats` as PNG bytes."""
    return png_bytes(DRAW[name](stats))
