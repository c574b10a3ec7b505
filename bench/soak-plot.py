#!/usr/bin/env python3
"""Plots the soak's samples (bench/soak.sh): each replica's RSS over time, with its leader
spells marked, and the pods bound. Standard library only: writes SVG by hand.
Usage: soak-plot.py SOAK.csv OUT.svg"""
import csv
import sys

rows = list(csv.DictReader(open(sys.argv[1])))
if not rows:
    sys.exit("no samples in " + sys.argv[1])
W, H, L, R, T, B = 900, 420, 70, 70, 40, 50
t_max = max(float(r["elapsed_s"]) for r in rows) or 1.0
rss_max = max(float(r["rss_mib"]) for r in rows) * 1.15 or 1.0
bound_max = max(int(r["pods_bound"]) for r in rows) or 1


def x(t):
    return L + (W - L - R) * t / t_max


def y(v, top):
    return H - B - (H - T - B) * v / top


colours = {"soak-a": "#1f77b4", "soak-b": "#d62728"}
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{W/2}" y="20" text-anchor="middle" font-size="14">Soak: scorer RSS per replica slot (left), pods bound (right, grey)</text>',
       f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
       f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>',
       f'<line x1="{W-R}" y1="{T}" x2="{W-R}" y2="{H-B}" stroke="grey"/>']
for i in range(6):
    v = rss_max * i / 5
    out.append(f'<text x="{L-6}" y="{y(v, rss_max)+4:.1f}" text-anchor="end">{v:.0f}</text>')
    b = bound_max * i / 5
    out.append(f'<text x="{W-R+6}" y="{y(b, bound_max)+4:.1f}" fill="grey">{b:.0f}</text>')
    t = t_max * i / 5
    out.append(f'<text x="{x(t):.1f}" y="{H-B+18}" text-anchor="middle">{t/60:.0f}</text>')
out.append(f'<text x="{W/2}" y="{H-10}" text-anchor="middle">minutes</text>')
out.append(f'<text x="16" y="{H/2}" transform="rotate(-90 16 {H/2})" text-anchor="middle">RSS (MiB)</text>')
bound_pts = sorted({(float(r["elapsed_s"]), int(r["pods_bound"])) for r in rows})
out.append('<polyline fill="none" stroke="#999" stroke-width="1.5" points="' +
           " ".join(f"{x(t):.1f},{y(b, bound_max):.1f}" for t, b in bound_pts) + '"/>')
for ident, colour in colours.items():
    series = [r for r in rows if r["slot"] == ident]
    # One line per process (a kill starts a new one in the slot).
    by_pid = {}
    for r in series:
        by_pid.setdefault(r["pid"], []).append(r)
    for pts in by_pid.values():
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="' +
                   " ".join(f'{x(float(r["elapsed_s"])):.1f},{y(float(r["rss_mib"]), rss_max):.1f}' for r in pts) + '"/>')
        for r in pts:
            if r["leader"] == "true":
                out.append(f'<circle cx="{x(float(r["elapsed_s"])):.1f}" cy="{y(float(r["rss_mib"]), rss_max):.1f}" r="2.5" fill="{colour}"/>')
for i, (ident, colour) in enumerate(colours.items()):
    out.append(f'<text x="{L+10}" y="{T+16+16*i}" fill="{colour}">{ident} (dots: leader)</text>')
out.append("</svg>")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
