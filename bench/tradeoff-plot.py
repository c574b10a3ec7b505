#!/usr/bin/env python3
"""Plots bench/profile-tradeoff.sh's studies: each profile's change in CPU spread against its
change in hot node-minutes (any resource), paired by seed against requests-only scheduling,
with 95 % intervals, one colour per scenario; the goal's corner (≤ −50 %, ≤ −35 %) shaded.
Writes DIR/tradeoff.svg (hand-written SVG: no plotting library needed)."""
import csv
import sys
from pathlib import Path

out = Path(sys.argv[1])
studies = {}
for sc in ["cluster100", "io"]:
    rows = list(csv.DictReader(open(out / sc / "seeds.csv")))
    pts = {}
    for r in rows:
        if r["profile"] == "loadstar-requests":
            continue
        key = {"cpu_sigma_pp": "y", "hot_any_node_minutes": "x"}.get(r["figure"])
        if key:
            p = pts.setdefault(r["profile"], {})
            p[key] = (float(r["vs_baseline_pct_mean"]), float(r["vs_baseline_pct_ci95"]))
    studies[sc] = pts

W, H, M = 760, 520, 70
x0, x1, y0, y1 = -80.0, 20.0, -60.0, 0.0
sx = lambda x: M + (x - x0) / (x1 - x0) * (W - 2 * M)
sy = lambda y: H - M - (y - y0) / (y1 - y0) * (H - 2 * M)
colours = {"cluster100": "#2b6cb0", "io": "#c05621"}
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       '<rect width="100%" height="100%" fill="white"/>',
       f'<rect x="{sx(x0)}" y="{sy(-35)}" width="{sx(-50) - sx(x0)}" height="{sy(y0) - sy(-35)}" fill="#e6ffed"/>',
       f'<text x="{sx(x0) + 6}" y="{sy(y0) - 6}" fill="#276749">goal: hot any ≤ −50 %, cpu σ ≤ −35 %</text>']
for v in range(int(x0), int(x1) + 1, 10):
    svg.append(f'<line x1="{sx(v)}" y1="{sy(y0)}" x2="{sx(v)}" y2="{sy(y1)}" stroke="#eee"/>')
    svg.append(f'<text x="{sx(v)}" y="{H - M + 16}" text-anchor="middle">{v}</text>')
for v in range(int(y0), int(y1) + 1, 10):
    svg.append(f'<line x1="{sx(x0)}" y1="{sy(v)}" x2="{sx(x1)}" y2="{sy(v)}" stroke="#eee"/>')
    svg.append(f'<text x="{M - 8}" y="{sy(v) + 4}" text-anchor="end">{v}</text>')
svg.append(f'<text x="{W / 2}" y="{H - 20}" text-anchor="middle">hot node-minutes in any resource vs requests-only, % (mean ± 95 %)</text>')
svg.append(f'<text x="18" y="{H / 2}" transform="rotate(-90 18 {H / 2})" text-anchor="middle">CPU σ vs requests-only, %</text>')
for i, (sc, pts) in enumerate(studies.items()):
    c = colours[sc]
    svg.append(f'<text x="{W - M - 150}" y="{M + 16 * i}" fill="{c}">● {sc}</text>')
    for name, p in pts.items():
        if "x" not in p or "y" not in p:
            continue
        (x, ex), (y, ey) = p["x"], p["y"]
        X, Y = sx(max(x0, min(x1, x))), sy(max(y0, min(y1, y)))
        svg.append(f'<line x1="{sx(x - ex)}" y1="{Y}" x2="{sx(x + ex)}" y2="{Y}" stroke="{c}"/>')
        svg.append(f'<line x1="{X}" y1="{sy(y - ey)}" x2="{X}" y2="{sy(y + ey)}" stroke="{c}"/>')
        svg.append(f'<circle cx="{X}" cy="{Y}" r="4" fill="{c}"/>')
        label = name.replace("tradeoff-loadratio-", "LR×").replace("koordinator-load-aware", "koordinator")
        svg.append(f'<text x="{X + 6}" y="{Y - 6}" fill="{c}">{label}</text>')
svg.append("</svg>")
(out / "tradeoff.svg").write_text("\n".join(svg) + "\n")
print(f"wrote {out / 'tradeoff.svg'}")
