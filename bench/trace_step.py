#!/usr/bin/env python3
"""Where a captured decode step's time goes, from a cupti_trace.c timeline.

    python3 bench/trace_step.py trace.tsv [--skip 4] [--layer 20]

Takes the graph with the most kernel records, cuts it into steps at each occurrence of
its first kernel, drops the first --skip steps, and prints: the step's wall time, the sum
of its kernel durations, each kernel name's time per step, and one layer's launches in
order with each one's duration and the gap since the previous one ended (negative: the
two overlapped under programmatic dependent launch)."""
import collections
import statistics
import subprocess
import sys


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                             check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        out = names
    short = {}
    for n, d in zip(names, out):
        base = d.split("(")[0]
        short[n] = base if len(base) < 90 else base[:90]
    return short


def main():
    args = sys.argv[1:]
    path = args[0]
    skip = int(args[args.index("--skip") + 1]) if "--skip" in args else 4
    layer = int(args[args.index("--layer") + 1]) if "--layer" in args else 20
    recs = []
    with open(path) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) < 8:
                continue
            recs.append((int(p[0]), int(p[1]), int(p[2]), int(p[3]), int(p[4]), int(p[5]), int(p[6]), p[7]))
    by_graph = collections.defaultdict(list)
    for r in recs:
        by_graph[r[6]].append(r)
    gid = max((g for g in by_graph if g != 0), key=lambda g: len(by_graph[g]), default=None)
    if gid is None:
        sys.exit("no graph records")
    rs = sorted(by_graph[gid])
    first = rs[0][7]
    steps, cur = [], []
    for r in rs:
        if r[7] == first and cur:
            steps.append(cur)
            cur = []
        cur.append(r)
    steps.append(cur)
    n = collections.Counter(len(s) for s in steps).most_common(1)[0][0]
    steps = [s for s in steps if len(s) == n][skip:]
    if not steps:
        sys.exit("no whole steps")
    short = demangle(sorted({r[7] for r in rs}))
    wall = [(s[-1][1] - s[0][0]) / 1e3 for s in steps]
    busy = [sum(r[1] - r[0] for r in s) / 1e3 for s in steps]
    print(f"graph {gid}: {len(steps)} steps of {n} kernels; step wall {statistics.median(wall):.1f} us "
          f"(min {min(wall):.1f}), kernel time summed {statistics.median(busy):.1f} us")
    # consecutive steps: the time between one step's end and the next one's start
    between = [(b[0][0] - a[-1][1]) / 1e3 for a, b in zip(steps, steps[1:])]
    if between:
        print(f"between steps (host side: sampling, the next launch): median {statistics.median(between):.1f} us")
    per = collections.defaultdict(list)
    for i in range(n):
        per[short[steps[0][i][7]]].append(i)
    print(f"{'kernel':60} {'per step':>8} {'us each':>8} {'us/step':>8} {'gap us':>7}")
    rows = []
    for name, idx in per.items():
        d = [statistics.median((s[i][1] - s[i][0]) / 1e3 for s in steps) for i in idx]
        g = [statistics.median((s[i][0] - s[i - 1][1]) / 1e3 for s in steps) for i in idx if i > 0]
        rows.append((sum(d), name, len(idx), statistics.mean(d), statistics.mean(g) if g else 0.0))
    for tot, name, cnt, each, gap in sorted(rows, reverse=True):
        print(f"{name[:60]:60} {cnt:8d} {each:8.2f} {tot:8.1f} {gap:7.2f}")
    # one layer in order: the launches between two occurrences of the step's most frequent name
    names = [short[r[7]] for r in steps[0]]
    common = collections.Counter(names).most_common(1)[0][0]
    marks = [i for i, x in enumerate(names) if x == common]
    if len(marks) > layer + 1:
        lo, hi = marks[layer], marks[layer + 1]
        print(f"\nlayer {layer} (positions {lo}-{hi - 1}):")
        for i in range(lo, hi + 1):
            d = statistics.median((s[i][1] - s[i][0]) / 1e3 for s in steps)
            g = statistics.median((s[i][0] - s[i - 1][1]) / 1e3 for s in steps)
            r = steps[0][i]
            print(f"  {names[i][:60]:60} {d:7.2f} us  gap {g:6.2f}  grid {r[2]} x {r[3]} regs {r[4]} smem {r[5]}")
    # the tail: the last launches of the step (final norm, output matvec, sampling)
    print("\nstep tail:")
    for i in range(max(1, n - 5), n):
        d = statistics.median((s[i][1] - s[i][0]) / 1e3 for s in steps)
        g = statistics.median((s[i][0] - s[i - 1][1]) / 1e3 for s in steps)
        print(f"  {names[i][:60]:60} {d:7.2f} us  gap {g:6.2f}")


if __name__ == "__main__":
    main()
