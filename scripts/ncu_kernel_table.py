#!/usr/bin/env python3
"""Per-kernel device time of one decode step from Nsight Compute's CSV (gpu__time_duration.sum).

Usage: ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
           build-cuda/bin/bench_forward ... --decode-steps 2 --graphs off > ncu.csv
       scripts/ncu_kernel_table.py ncu.csv
Takes the kernels from the last embedding lookup (the start of the last forward step) to the end,
groups them by kernel name (template arguments dropped) and prints calls and µs per group,
largest first.
"""
import argparse
import collections
import csv
import re


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--step-start", default="embed_kernel", help="first kernel of a forward step")
    ap.add_argument("--order", type=int, default=0, help="also list the step's first N kernels in launch order")
    a = ap.parse_args()
    with open(a.csv) as f:
        rows = [r for r in csv.reader(line for line in f if line.startswith('"'))]
    head, body = rows[0], rows[1:]
    name_col, unit_col, value_col = head.index("Kernel Name"), head.index("Metric Unit"), head.index("Metric Value")
    def short(r):
        name = re.sub(r"\((anonymous namespace)\)::|<unnamed>::", "", r[name_col]).replace("void ", "")
        return re.sub(r"<.*", "", name).split("(")[0].split("::")[-1]

    starts = [i for i, r in enumerate(body) if short(r) == a.step_start]
    body = body[starts[-1]:] if starts else body
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    calls, total = collections.Counter(), collections.Counter()
    for r in body:
        name = short(r)
        calls[name] += 1
        total[name] += float(r[value_col].replace(",", "")) * scale.get(r[unit_col], 1.0)
    if a.order:
        print("| # | kernel (launch order) | µs |\n| --- | --- | --- |")
        for i, r in enumerate(body[:a.order]):
            print(f"| {i} | {short(r)} | {float(r[value_col].replace(',', '')) * scale.get(r[unit_col], 1.0):.1f} |")
    print(f"{len(body)} kernels, {sum(total.values()):.1f} µs")
    print("| kernel | calls | µs |\n| --- | --- | --- |")
    for name, us in total.most_common():
        print(f"| {name} | {calls[name]} | {us:.1f} |")


if __name__ == "__main__":
    main()
