#!/usr/bin/env python3
"""Plots the real-node autoscaling run's replica timelines (the CSV the e2e test
`the_step_scaler_and_the_hpa_on_a_real_node` prints) as an SVG: replicas of the StepScaler's
and the HPA's twin workloads over time, with the shared demand behind them.
Usage: bench/autoscale-timeline-plot.py IN.csv OUT.svg (std only: no plotting library here)."""
import csv
import sys

src, dst = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(open(src)))
if not rows:
    sys.exit(f"{src}: no rows")
t = [float(r["t_s"]) for r in rows]
series = [
    ("StepScaler replicas", [int(r["stepscaler_replicas"]) for r in rows], "#1f77b4"),
    ("HPA replicas (kube-controller-manager 1.20.2)", [int(r["hpa_replicas"]) for r in rows], "#d62728"),
    ("demand / 100m (pods needed at 100 %)", [float(r["demand_m"]) / 100 for r in rows], "#7f7f7f"),
]
W, H, L, R, T, B = 760, 380, 50, 20, 30, 100
xmax = max(t)
ymax = max(max(v) for _, v, _ in series) + 1
x = lambda v: L + (W - L - R) * v / xmax
y = lambda v: H - B - (H - T - B) * v / ymax
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{L}" y="18" font-size="14">Replicas under a stepped demand (100m → 420m → 100m; pods request 100m; target 60 %)</text>']
for k in range(0, int(ymax) + 1):
    out.append(f'<line x1="{L}" x2="{W - R}" y1="{y(k):.1f}" y2="{y(k):.1f}" stroke="#eee"/>')
    out.append(f'<text x="{L - 8}" y="{y(k) + 4:.1f}" text-anchor="end">{k}</text>')
for s in range(0, int(xmax) + 1, 60):
    out.append(f'<text x="{x(s):.1f}" y="{H - B + 16}" text-anchor="middle">{s}</text>')
out.append(f'<text x="{(L + W - R) / 2}" y="{H - B + 32}" text-anchor="middle">seconds</text>')
for i, (name, vals, color) in enumerate(series):
    pts = []
    for j, v in enumerate(vals):
        if j:
            pts.append(f"{x(t[j]):.1f},{y(vals[j - 1]):.1f}")
        pts.append(f"{x(t[j]):.1f},{y(v):.1f}")
    dash = ' stroke-dasharray="4,3"' if i == 2 else ""
    out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{" ".join(pts)}"/>')
    ly = H - 52 + i * 16
    out.append(f'<line x1="{L + 10}" x2="{L + 30}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/>')
    out.append(f'<text x="{L + 35}" y="{ly + 4}">{name}</text>')
out.append("</svg>")
open(dst, "w").write("\n".join(out) + "\n")
print(f"wrote {dst}")
