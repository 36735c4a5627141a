#!/usr/bin/env python3
"""Draws the mixed-load sweep of scripts/gpu_pd.sh as an SVG: one instance vs prefill/decode
disaggregation. x: delivered output tokens/s of both loads; top: time to first token of the long
prompts; bottom: time per output token of the long outputs; p50 and p99, one line per setup, each
point labelled with the long prompts' request rate.

    scripts/plot_pd_curve.py mixed.jsonl mixed.svg
"""
import sys

import plot_serve_curve as curve

if __name__ == "__main__":
    curve.COLORS.clear()
    curve.COLORS.update({"single": "#1f77b4", "pd": "#d62728"})
    curve.LABEL = lambda r: f"{r['rate']:g}/s"
    curve.PANELS[:] = ["time to first token of the long prompts (ms)", "time per output token of the long outputs (ms)"]
    sys.argv += ["--title", "one instance vs prefill + decode instances on one GPU (mixed load)"]
    curve.main()
