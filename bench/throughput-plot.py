#!/usr/bin/env python3
"""Plots bench/throughput-scaling.sh's CSV: pods/s and scheduler CPU per pod against the node
count, kube-scheduler and Loadstar, as two panels of one hand-written SVG (no plotting
library needed). Usage: throughput-plot.py scaling.csv out.svg"""
import csv
import sys

rows = list(csv.DictReader(open(sys.argv[1])))
series = {}
for r in rows:
    s = series.setdefault(r["scheduler"], [])
    s.append((int(r["nodes"]), float(r["pods_per_second"]), float(r["scheduler_cpu_ms_per_pod"])))
for s in series.values():
    s.sort()
nodes = sorted({p[0] for s in series.values() for p in s})
colours = {"kube-scheduler": "#c05621", "loadstar": "#2b6cb0"}
W, H, M, GAP = 900, 420, 60, 60
PW = (W - 2 * M - GAP) / 2
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       '<rect width="100%" height="100%" fill="white"/>',
       f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">Scheduling throughput against cluster size (agents reporting at 1 Hz)</text>']
x0, x1 = min(nodes), max(nodes)
for k, (title, idx) in enumerate([("pods/s, start → all bound", 1), ("scheduler CPU ms per pod", 2)]):
    left = M + k * (PW + GAP)
    top, bottom = 50, H - M
    ymax = max(p[idx] for s in series.values() for p in s) * 1.15
    sx = lambda x: left + (x - x0) / max(x1 - x0, 1) * PW
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
    for name, pts in series.items():
        c = colours.get(name, "#333")
        path = " ".join(f"{sx(p[0]):.1f},{sy(p[idx]):.1f}" for p in pts)
        svg.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
        for p in pts:
            svg.append(f'<circle cx="{sx(p[0]):.1f}" cy="{sy(p[idx]):.1f}" r="3.5" fill="{c}"/>')
            label = f"{p[idx]:.0f}" if idx == 1 else f"{p[idx]:.2f}"
            svg.append(f'<text x="{sx(p[0]) + 6:.1f}" y="{sy(p[idx]) - 6:.1f}" fill="{c}">{label}</text>')
for i, (name, c) in enumerate(colours.items()):
    svg.append(f'<rect x="{M + i * 160}" y="{H - 18}" width="14" height="4" fill="{c}"/>')
    svg.append(f'<text x="{M + i * 160 + 20}" y="{H - 12}">{name}</text>')
svg.append("</svg>")
open(sys.argv[2], "w").write("\n".join(svg) + "\n")
