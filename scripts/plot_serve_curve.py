#!/usr/bin/env python3
"""Draws the latency-throughput curve of a serving sweep as an SVG (no plotting library needed).

Input: bench-serve --json lines (one per request rate or concurrency). Two panels share the x axis
(delivered output tokens/s): time to first token and time per output token, p50 and p99, one line
per sweep (request rates, concurrencies), each point labelled with its rate or concurrency.

    scripts/plot_serve_curve.py sweep.jsonl curve.svg [--title TEXT]
"""
import argparse
import json
import math

W, H, PAD_L, PAD_R, PAD_T, PAD_B, GAP = 760, 580, 70, 20, 66, 50, 40
SERIES = [("p50", ""), ("p99", "6,4")]  # percentile, dash
COLORS = {"rate": "#1f77b4", "concurrency": "#2ca02c"}  # one line per sweep kind ("mode")
PANELS = ["time to first token (ms)", "time per output token (ms)"]


def LABEL(r):  # a point's label
    return f"{r['rate']:g}/s" if r["mode"] == "rate" else f"c={r['concurrency']}"


def nice_ticks(lo, hi, n=5):
    span = max(hi - lo, 1e-9)
    step = 10 ** math.floor(math.log10(span / n))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    start = math.floor(lo / step) * step
    ticks, t = [], start
    while t <= hi + step * 1e-6:
        ticks.append(round(t, 10))
        t += step
    return ticks


def panel(out, rows, key, title, top, height, x_max, label_key):
    ys = [r[key][s] for r in rows for s, _ in SERIES]
    y_max = max(ys + [1e-9]) * 1.1
    left, width = PAD_L, W - PAD_L - PAD_R
    sx = lambda x: left + x / x_max * width
    # Latencies that span more than two decades read better on a log axis.
    y_min = min(y for y in ys if y > 0) if any(y > 0 for y in ys) else 1e-9
    log = y_max / y_min > 100
    if log:
        lo, hi = math.floor(math.log10(y_min)), math.ceil(math.log10(y_max))
        sy = lambda y: top + height - (math.log10(max(y, 10 ** lo)) - lo) / (hi - lo) * height
        ticks = [10 ** e for e in range(lo, hi + 1)]
        title += " (log scale)"
    else:
        sy = lambda y: top + height - y / y_max * height
        ticks = [t for t in nice_ticks(0, y_max) if t <= y_max]
    out.append(f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#999"/>')
    out.append(f'<text x="{left}" y="{top - 8}" font-size="13" font-weight="bold">{title}</text>')
    for t in ticks:
        out.append(f'<line x1="{left}" x2="{left + width}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{sy(t) + 4:.1f}" font-size="11" text-anchor="end">{t:g}</text>')
    for (mode, color), (name, dash) in [(m, s) for m in COLORS.items() for s in SERIES]:
        sweep = [r for r in rows if r["mode"] == mode]
        pts = [(sx(r["output_tokens_per_s"]), sy(r[key][name])) for r in sweep]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>')
        for (x, y), r in zip(pts, sweep):
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>')
            if name == "p50":
                out.append(f'<text x="{x + 4:.1f}" y="{y - 6:.1f}" font-size="10" fill="#555">{label_key(r)}</text>')
    return sx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep")
    ap.add_argument("svg")
    ap.add_argument("--title", default="deepinfer serve: latency vs delivered throughput")
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(a.sweep) if line.strip()]
    rows.sort(key=lambda r: r["output_tokens_per_s"])
    x_max = max(r["output_tokens_per_s"] for r in rows) * 1.1
    h = (H - PAD_T - PAD_B - GAP) / 2
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif">',
           f'<rect width="{W}" height="{H}" fill="white"/>', f'<text x="{W / 2}" y="18" font-size="14" text-anchor="middle">{a.title}</text>']
    panel(out, rows, "ttft_ms", PANELS[0], PAD_T, h, x_max, LABEL)
    sx = panel(out, rows, "tpot_ms", PANELS[1], PAD_T + h + GAP, h, x_max, LABEL)
    base = PAD_T + 2 * h + GAP
    for t in nice_ticks(0, x_max):
        if t <= x_max:
            out.append(f'<text x="{sx(t):.1f}" y="{base + 16:.1f}" font-size="11" text-anchor="middle">{t:g}</text>')
    out.append(f'<text x="{W / 2}" y="{H - 8}" font-size="12" text-anchor="middle">delivered output tokens/s</text>')
    legend = [(f"{mode} {name}", color, dash) for mode, color in COLORS.items() if any(r["mode"] == mode for r in rows)
              for name, dash in SERIES]
    for i, (text, color, dash) in enumerate(legend):
        x = W - PAD_R - 130 * len(legend) + i * 130
        out.append(f'<line x1="{x}" x2="{x + 20}" y1="34" y2="34" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>')
        out.append(f'<text x="{x + 24}" y="38" font-size="11">{text}</text>')
    out.append("</svg>")
    with open(a.svg, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
