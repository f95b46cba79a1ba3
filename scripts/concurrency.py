#!/usr/bin/env python3
"""Batch invariance as a client sees it: the same requests to a running `1bit serve` (or
llama-server) one at a time, then all at once twice, and seeded sampling all at once twice.

    scripts/concurrency.py --port 8080 [--n 64] [--predict 32] [--label cuda]

Prints one line: how many of the n greedy texts sent all at once equal the text of the
same request sent alone, how many equal between the two concurrent runs, how many seeded
(temperature 0.8, seed = request index) texts equal between two concurrent runs and the
solo run, and the aggregate throughput of the concurrent greedy runs (generated tokens
over wall time). Standard library only; the server must be up (it waits for /health).
"""
import argparse
import json
import threading
import time
import urllib.request


def post(port, body, timeout):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        j = json.loads(r.read())
    return j.get("content", ""), int(j.get("tokens_predicted", 0) or 0)


def prompt(i):
    # distinct prompts of different lengths, so prefill and decode steps of different
    # requests mix in the server's batches
    words = ["river", "copper", "lantern", "orbit", "meadow", "signal", "harbor", "quartz", "ember", "willow"]
    return f"request {i}: " + " ".join(words[(i * 7 + k) % len(words)] for k in range(3 + i % 13))


def body(i, a, seeded):
    b = {"prompt": prompt(i), "n_predict": a.predict, "temperature": 0.0, "cache_prompt": False}
    if seeded:
        b.update({"temperature": 0.8, "top_k": 40, "top_p": 0.95, "seed": 1000 + i})
    return b


def all_at_once(a, seeded):
    out, toks = [None] * a.n, [0] * a.n
    errs = []

    def one(i):
        try:
            out[i], toks[i] = post(a.port, body(i, a, seeded), a.timeout)
        except Exception as e:  # noqa: BLE001 - reported, counted as a mismatch
            errs.append(f"{i}: {e}")

    th = [threading.Thread(target=one, args=(i,)) for i in range(a.n)]
    t0 = time.time()
    for t in th:
        t.start()
    for t in th:
        t.join()
    return out, sum(toks) / max(time.time() - t0, 1e-9), errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--predict", type=int, default=32)
    ap.add_argument("--label", default="")
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{a.port}/health", timeout=2)
            break
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.5)
    solo = [post(a.port, body(i, a, False), a.timeout)[0] for i in range(a.n)]
    solo_s = [post(a.port, body(i, a, True), a.timeout)[0] for i in range(a.n)]
    c1, tps1, e1 = all_at_once(a, False)
    c2, tps2, e2 = all_at_once(a, False)
    s1, _, e3 = all_at_once(a, True)
    s2, _, e4 = all_at_once(a, True)
    same = lambda x, y: sum(1 for u, v in zip(x, y) if u is not None and u == v)  # noqa: E731
    errs = e1 + e2 + e3 + e4
    print(f"{a.label}: greedy concurrent = solo {same(c1, solo)}/{a.n} and {same(c2, solo)}/{a.n}, "
          f"run = run {same(c1, c2)}/{a.n}; seeded run = run {same(s1, s2)}/{a.n}, = solo {same(s1, solo_s)}/{a.n}; "
          f"{tps1:.1f} and {tps2:.1f} tok/s aggregate; {len(set(solo))} distinct texts; "
          f"{len(errs)} request errors{': ' + errs[0] if errs else ''}", flush=True)


if __name__ == "__main__":
    main()
