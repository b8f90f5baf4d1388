#!/usr/bin/env python3
"""Draws tbcoll's benchmark results (Debian's python3-matplotlib; tools/setup.sh installs it).

  benchmarks/plot.py perf FILE.csv [FILE.csv ...] [--peers PEERS.csv] --out DIR
      tbcoll-perf --csv results: time and busbw against size, one line per file and algorithm (out of place);
      tbcoll-perf --compare CSVs: one line per algorithm, auto (and measured) drawn thick; --peers: other libraries'
      figures on the same axes, dashed (a CSV with columns label,size,time_us and optionally busbw_gbs; '#' lines
      are comments)
  benchmarks/plot.py sweep DIR --out DIR
      benchmarks/tuner_sweep.sh's --out DIR: per link, time against size of every forced algorithm and auto at each
      world size; and auto / best forced against size, unmeasurable cells (twins more than 5 % apart) hollow
  benchmarks/plot.py dllama FILE.csv --out DIR [--title TEXT]
      benchmarks/dllama_bench.py --csv results: per model, nodes and placement, tbcoll's tokens/s (auto and tcp)
      over dllama's better own sync (medians over the rounds), quiet and with one busy process side by side
  --format png|svg (default png), --prefix NAME (file names start with it; default the command's name)
Prints the files it wrote, one a line.
"""
import argparse
import csv
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dllama_bench import OWN_MODES  # noqa: E402  (this folder: the harness's names for dllama's own syncs)

BUS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
       "reduce_scatter": lambda n: (n - 1) / n}
TUNED = ("auto", "measured")


def size_label(b):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b / scale:g} {unit}"
    return f"{b:g} B"


def size_axis(ax, sizes):
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))
    if len(ticks) > 8:
        ticks = ticks[:: math.ceil(len(ticks) / 8)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_label(t) for t in ticks], rotation=30, fontsize=7)
    ax.set_xlabel("size")
    ax.grid(True, which="major", alpha=0.3)


def read(path):
    with open(path, newline="") as f:  # '#' lines are comments
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def series_of(path):
    """(label, algorithm, [(size, us, busbw GB/s)]) per line of one tbcoll-perf CSV."""
    rows = read(path)
    if not rows:
        sys.exit(f"plot.py: {path}: no rows")
    out = {}
    if "paired_vs_best" in rows[0]:  # --compare: one line per algorithm
        for r in rows:
            n, size, us = int(r["ranks"]), int(r["size"]), float(r["median_us"])
            bus = size / us / 1e3 * BUS.get(r["collective"], lambda n: 1)(n)
            out.setdefault(r["algo"], []).append((size, us, bus))
        base = f"{rows[0]['ranks']} ranks {rows[0]['transport']}"
        return [(f"{base} {a}", a, sorted(p)) for a, p in out.items()]
    if "busbw" not in rows[0]:
        sys.exit(f"plot.py: {path}: neither a tbcoll-perf --csv nor a --compare CSV (no busbw, no paired_vs_best)")
    points = [(int(r["size"]), float(r["median_us"]), float(r["busbw"])) for r in rows if r.get("inplace", "0") == "0"]
    return [(f"tbcoll {rows[0]['ranks']} ranks {rows[0]['transport']}", "tbcoll", sorted(points))]


def labelled_series(path):
    """{label: [(size, us, busbw GB/s)]} of a CSV with columns label,size,time_us[,busbw_gbs] (busbw nan if absent)."""
    by_label = {}
    for r in read(path):
        busbw = r.get("busbw_gbs") or "nan"
        by_label.setdefault(r["label"], []).append((int(r["size"]), float(r["time_us"]), float(busbw)))
    return by_label


def finish(fig, ax_time, ax_bus, sizes, title, fontsize):
    """The axes of a time / busbw pair against size, the legend and the title."""
    for ax in (ax_time, ax_bus):
        size_axis(ax, sizes)
    ax_time.set_yscale("log")
    ax_time.set_ylabel("time (us)")
    ax_bus.set_ylabel("busbw (GB/s)")
    ax_time.legend(fontsize=7)
    fig.suptitle(title, fontsize=fontsize, wrap=True)
    fig.tight_layout()


def draw(ax_time, ax_bus, label, points, style):
    sizes = [p[0] for p in points]
    ax_time.plot(sizes, [p[1] for p in points], label=label, **style)
    ax_bus.plot(sizes, [p[2] for p in points], label=label, **style)


def style_of(algorithm, index):
    if algorithm == "tbcoll":  # a plain tbcoll-perf run: the tuner's choice at every size
        return {"color": f"C{index % 10}", "linewidth": 2.4, "marker": "o", "markersize": 4, "zorder": 5}
    if algorithm in TUNED:
        return {"color": "black" if algorithm == "auto" else "tab:red", "linewidth": 2.8, "marker": "o",
                "markersize": 4, "zorder": 5}
    return {"color": f"C{index % 10}", "linewidth": 1.2, "marker": ".", "alpha": 0.85}


def perf(args):
    fig, (ax_time, ax_bus) = plt.subplots(1, 2, figsize=(11, 4.2))
    sizes = []
    index = 0
    for path in args.files:
        for label, algorithm, points in series_of(path):
            if "@" in algorithm:
                continue  # a twin is a noise control, not a line of its own
            draw(ax_time, ax_bus, label, points, style_of(algorithm, index))
            sizes += [p[0] for p in points]
            index += 1
    if args.peers:
        for i, (label, points) in enumerate(labelled_series(args.peers).items()):
            draw(ax_time, ax_bus, label, sorted(points), {"color": f"C{(index + i) % 10}", "linestyle": "--",
                                                          "marker": "x"})
            sizes += [p[0] for p in points]
    finish(fig, ax_time, ax_bus, sizes, args.title or "tbcoll-perf", 10)
    return [save(fig, args, "perf")]


def sweep(args):
    cells = read(os.path.join(args.dir, "cells.csv"))
    if not cells:
        sys.exit(f"plot.py: {args.dir}/cells.csv has no cells (run benchmarks/tuner_sweep.sh --out {args.dir})")
    links = list(dict.fromkeys(c["link"] for c in cells))
    written = []
    for link in links:
        mine = [c for c in cells if c["link"] == link]
        ranks = list(dict.fromkeys(c["ranks"] for c in mine))
        fig, axes = plt.subplots(1, len(ranks), figsize=(3.6 * len(ranks), 3.6), squeeze=False)
        for ax, n in zip(axes[0], ranks):
            name = [f for f in os.listdir(args.dir) if f.endswith(f".{n}.csv") and f.startswith(link.replace(",", "_"))]
            if not name:
                continue
            index = 0
            for label, algorithm, points in series_of(os.path.join(args.dir, name[0])):
                if "@" in algorithm:
                    continue
                ax.plot([p[0] for p in points], [p[1] for p in points], label=algorithm, **style_of(algorithm, index))
                index += 1
            size_axis(ax, [int(c["size"]) for c in mine])
            ax.set_yscale("log")
            ax.set_title(f"{n} ranks", fontsize=9)
        axes[0][0].set_ylabel("time (us)")
        axes[0][-1].legend(fontsize=6)
        fig.suptitle(f"all_reduce over {mine[0]['emulation'] or link}", fontsize=8)
        fig.tight_layout()
        written.append(save(fig, args, f"sweep-{link.split(',')[0]}"))
    fig, axes = plt.subplots(1, len(links), figsize=(3.8 * len(links), 3.4), squeeze=False, sharey=True)
    for ax, link in zip(axes[0], links):
        mine = [c for c in cells if c["link"] == link]
        for i, n in enumerate(dict.fromkeys(c["ranks"] for c in mine)):
            at = [c for c in mine if c["ranks"] == n]
            sizes = [int(c["size"]) for c in at]
            ratios = [float(c["auto_vs_best"]) for c in at]
            ax.plot(sizes, ratios, color=f"C{i}", linewidth=1, label=f"{n} ranks")
            hollow = [c["measurable"] != "1" for c in at]
            ax.scatter([s for s, h in zip(sizes, hollow) if not h], [r for r, h in zip(ratios, hollow) if not h],
                       color=f"C{i}", s=14, zorder=3)
            ax.scatter([s for s, h in zip(sizes, hollow) if h], [r for r, h in zip(ratios, hollow) if h],
                       facecolors="none", edgecolors=f"C{i}", s=24, zorder=3)
        ax.axhline(1.15, color="red", linestyle="--", linewidth=1)
        size_axis(ax, [int(c["size"]) for c in mine])
        ax.set_title(link, fontsize=9)
    axes[0][0].set_ylabel("auto / best forced (paired)")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("the cost model's choice against the best forced algorithm; hollow: twins disagree (unmeasurable)",
                 fontsize=8)
    fig.tight_layout()
    written.append(save(fig, args, "sweep-auto-vs-best"))
    return written


DLLAMA_COLORS = {"tbcoll": "#1f77b4", "tbcoll-tcp": "#6baed6"}


def median(values):
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def dllama(args):
    runs = {}
    for row in read(args.file):
        key = (row["model"], int(row["nodes"]), row["placement"], row["load"], row["sync"])
        runs.setdefault(key, []).append(float(row["tok_s"]))
    groups = sorted({k[:3] for k in runs}, key=lambda g: (g[0] != "tiny", g[0], g[1], g[2]))
    loads = [load for load in ("quiet", "busy") if any(k[3] == load for k in runs)]
    fig, axes = plt.subplots(1, len(loads), figsize=(6.5 * len(loads), 4.5), squeeze=False)
    for ax, load in zip(axes[0], loads):
        for i, sync in enumerate(("tbcoll", "tbcoll-tcp")):
            xs, ys, labels = [], [], []
            for g, group in enumerate(groups):
                own = [median(runs[group + (load, s)]) for s in OWN_MODES
                       if group + (load, s) in runs]
                if not own or group + (load, sync) not in runs:
                    continue
                xs.append(g + (i - 0.5) * 0.4)
                ys.append(median(runs[group + (load, sync)]) / max(own))
            bars = ax.bar(xs, ys, 0.4, label=f"{sync} / dllama's better own sync", color=DLLAMA_COLORS[sync])
            for bar, y in zip(bars, ys):
                ax.annotate(f"{y:.2g}", (bar.get_x() + bar.get_width() / 2, y), ha="center", va="bottom", fontsize=6)
        ax.axhline(1.0, color="black", linewidth=1)
        ax.set_yscale("log")
        ticks = [0.5, 1, 2, 5, 10, 20, 50, 100, 200]
        ax.set_yticks(ticks)
        ax.set_yticklabels([f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_ylim(0.5, 200)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([f"{m}\n{n} nodes\n{p}" for m, n, p in groups], fontsize=7)
        ax.set_ylabel("tokens/s ratio (log; above 1: tbcoll faster)")
        ax.set_title(load + (": one busy process beside" if load == "busy" else ""), fontsize=9)
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(args.title or "distributed-llama on tbcoll against its own sync (medians over rounds)", fontsize=8,
                 wrap=True)
    fig.tight_layout()
    return [save(fig, args, "dllama")]


def save(fig, args, name):
    path = os.path.join(args.out, f"{args.prefix or name}{'' if not args.prefix else '-' + name}.{args.format}")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def figure(args):
    """One run's series of every library (benchmarks/readme_figure.sh's CSV: label, size, time_us, busbw_gbs):
    tbcoll's solid, the others dashed, a single-size series (the hand-written limit) as a star."""
    by_label = labelled_series(args.file)
    if not by_label:
        sys.exit(f"plot.py: {args.file}: no rows")
    fig, (ax_time, ax_bus) = plt.subplots(1, 2, figsize=(11, 4.4))
    sizes = []
    for i, (label, points) in enumerate(by_label.items()):
        points.sort()
        style = {"color": f"C{i % 10}"}
        if len(points) == 1:
            style.update(marker="*", markersize=12, linestyle="none", zorder=6)
        elif label.startswith("tbcoll"):
            style.update(linewidth=2.4, marker="o", markersize=4, zorder=5)
        else:
            style.update(linewidth=1.3, linestyle="--", marker="x", markersize=4)
        draw(ax_time, ax_bus, label, points, style)
        sizes += [p[0] for p in points]
    finish(fig, ax_time, ax_bus, sizes, args.title or args.file, 9)
    return [save(fig, args, "figure")]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("perf")
    p.add_argument("files", nargs="+")
    p.add_argument("--peers")
    p.add_argument("--title")
    s = sub.add_parser("sweep")
    s.add_argument("dir")
    d = sub.add_parser("dllama")
    d.add_argument("file")
    d.add_argument("--title")
    f = sub.add_parser("figure")
    f.add_argument("file")
    f.add_argument("--title")
    for q in (p, s, d, f):
        q.add_argument("--out", required=True)
        q.add_argument("--format", choices=("png", "svg"), default="png")
        q.add_argument("--prefix", default="")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    commands = {"perf": perf, "sweep": sweep, "dllama": dllama, "figure": figure}
    for path in commands[args.command](args):
        print(path)


if __name__ == "__main__":
    main()
