#!/usr/bin/env python3
"""Plots bench/throughput-scaling.sh's CSV: pods/s and scheduler CPU per pod against the node
count, kube-scheduler and Loadstar, as two panels of one hand-written SVG (no plotting
library needed). Lines join the median of each size's rounds, each figure's median taken on
its own; every round is a dot; the pods/s panel names at each size the median of the rounds'
ratios (each round pairs the two schedulers, as bench/scheduler-throughput.sh reports them),
and the CPU panel draws Loadstar's CPU with ingest (dashed) beside its CPU without (solid).
Usage: throughput-plot.py scaling.csv out.svg"""
import csv
import statistics
import sys

rows = list(csv.DictReader(open(sys.argv[1])))
if not rows:
    sys.exit(f"{sys.argv[1]} has no rows to plot")
# (scheduler, figure) -> nodes -> [values, one per round]
points = {}


def add(name, figure, nodes, value):
    points.setdefault((name, figure), {}).setdefault(nodes, []).append(value)


for r in rows:
    n, who = int(r["nodes"]), r["scheduler"]
    add(who, "pods", n, float(r["pods_per_second"]))
    if who == "loadstar":
        add(who, "cpu", n, float(r["scheduler_cpu_ms_per_pod_without_ingest"]))
        add(who, "cpu_with_ingest", n, float(r["scheduler_cpu_ms_per_pod"]))
    else:
        add(who, "cpu", n, float(r["scheduler_cpu_ms_per_pod"]))
nodes = sorted({int(r["nodes"]) for r in rows})
# The rounds' ratios per size: Loadstar's pods/s over kube-scheduler's in the same round.
paired = {}
for r in rows:
    paired.setdefault((int(r["nodes"]), r["round"]), {})[r["scheduler"]] = float(r["pods_per_second"])
ratios = {}
for (n, _), by in paired.items():
    if "loadstar" in by and by.get("kube-scheduler"):
        ratios.setdefault(n, []).append(by["loadstar"] / by["kube-scheduler"])
rounds = max(len(v) for by in points.values() for v in by.values())
colours = {"kube-scheduler": "#c05621", "loadstar": "#2b6cb0"}
W, H, M, GAP = 900, 440, 60, 60
PW = (W - 2 * M - GAP) / 2
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       '<rect width="100%" height="100%" fill="white"/>',
       f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">Scheduling throughput against cluster size '
       f'(agents at 1 Hz; lines: median of {rounds} round{"s" if rounds > 1 else ""}, dots: each round)</text>']
x0, x1 = min(nodes), max(nodes)
panels = [("pods/s, start → all bound", ["pods"]),
          ("scheduler CPU ms per pod (Loadstar: without ingest; dashed: with)", ["cpu", "cpu_with_ingest"])]
for k, (title, figures) in enumerate(panels):
    left = M + k * (PW + GAP)
    top, bottom = 50, H - M - 10
    ymax = max(v for (_, f), by in points.items() if f in figures for vs in by.values() for v in vs) * 1.15
    sx = lambda x: left + 20 + (x - x0) / max(x1 - x0, 1) * (PW - 40)
    sy = lambda y: bottom - y / ymax * (bottom - top)
    svg.append(f'<text x="{left + PW / 2}" y="{top - 8}" text-anchor="middle">{title}</text>')
    svg.append(f'<line x1="{left}" y1="{bottom}" x2="{left + PW}" y2="{bottom}" stroke="#333"/>')
    svg.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#333"/>')
    for n in nodes:
        svg.append(f'<text x="{sx(n)}" y="{bottom + 16}" text-anchor="middle">{n}</text>')
    for i in range(6):
        v = ymax * i / 5
        svg.append(f'<line x1="{left}" y1="{sy(v)}" x2="{left + PW}" y2="{sy(v)}" stroke="#eee"/>')
        svg.append(f'<text x="{left - 6}" y="{sy(v) + 4}" text-anchor="end">{v:.0f}</text>' if ymax > 20 else
                   f'<text x="{left - 6}" y="{sy(v) + 4}" text-anchor="end">{v:.1f}</text>')
    svg.append(f'<text x="{left + PW / 2}" y="{bottom + 34}" text-anchor="middle">nodes</text>')
    for (name, figure), by in points.items():
        if figure not in figures:
            continue
        c = colours.get(name, "#333")
        dash = ' stroke-dasharray="6,4"' if figure == "cpu_with_ingest" else ""
        medians = [(n, statistics.median(by[n])) for n in sorted(by)]
        path = " ".join(f"{sx(n):.1f},{sy(m):.1f}" for n, m in medians)
        svg.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        for n in sorted(by):
            for v in by[n]:
                svg.append(f'<circle cx="{sx(n):.1f}" cy="{sy(v):.1f}" r="3" fill="{c}" fill-opacity="0.45"/>')
        if figure == "cpu_with_ingest":
            continue
        for n, m in medians:
            label = f"{m:.0f}" if figure == "pods" else f"{m:.2f}"
            svg.append(f'<text x="{sx(n) + 6:.1f}" y="{sy(m) - 6:.1f}" fill="{c}">{label}</text>')
    if figures == ["pods"]:
        for n in nodes:
            if n in ratios:
                ratio = statistics.median(ratios[n])
                svg.append(f'<text x="{sx(n):.1f}" y="{top + 14}" text-anchor="middle" font-weight="bold">{ratio:.2f}×</text>')
for i, (name, c) in enumerate(colours.items()):
    svg.append(f'<rect x="{M + i * 160}" y="{H - 18}" width="14" height="4" fill="{c}"/>')
    svg.append(f'<text x="{M + i * 160 + 20}" y="{H - 12}">{name}</text>')
svg.append(f'<text x="{M + 2 * 160}" y="{H - 12}"><tspan font-weight="bold">1.00×</tspan>: median of the rounds\' ratios, Loadstar\'s pods/s over kube-scheduler\'s</text>')
svg.append("</svg>")
open(sys.argv[2], "w").write("\n".join(svg) + "\n")
