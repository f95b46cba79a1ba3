"""Decode speed with and without a JSON schema (grammar-constrained sampling).

Starts `1bit serve` (ONEBIT_BIN, default build/1bit) on the default model (Gemma 3 270M)
with -np N and alternates plain and schema-constrained chat requests (n = N choices, the
same prompt and sampling settings); prints one row per configuration: requests, generated
tokens, the mean and best tok/s (one stream: the server's predicted_per_second; N > 1:
all choices' tokens over the request's wall time), and the schema/plain ratio of the
means. Alternating keeps other load on a shared machine from favouring one side.

    python3 bench/grammar_speed.py [reps] [max_tokens] [N]
"""
import os
import statistics
import sys
import time

import requests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
from serverutil import Server  # noqa: E402

SCHEMA = {  # nested: an object holding an array of objects holding an array
    "type": "object",
    "properties": {
        "team": {"type": "string", "maxLength": 40},
        "members": {"type": "array", "maxItems": 20, "items": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 40},
                           "age": {"type": "integer", "minimum": 18, "maximum": 99},
                           "role": {"enum": ["dev", "ops", "lead", "qa"]},
                           "skills": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 8}},
            "required": ["name", "age", "role", "skills"]}},
    },
    "required": ["team", "members"],
}
PROMPT = "Write a JSON description of a software team of ten people with their skills."


def run(srv, schema, seed, max_tokens, n):
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens, "seed": seed,
            "temperature": 0.8, "ignore_eos": True, "n": n}
    if schema:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "team", "schema": schema}}
    t0 = time.time()
    r = requests.post(srv.url + "/v1/chat/completions", json=body, timeout=600).json()
    wall = time.time() - t0
    tokens = r["usage"]["completion_tokens"]
    return tokens, r["timings"]["predicted_per_second"] if n == 1 else tokens / wall


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    max_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 160
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    srv = Server(["-np", str(n), "-c", str(2048 * n)])
    try:
        run(srv, None, 0, 8, 1)  # warm-up
        rows = {"plain": [], "schema": []}
        for rep in range(reps):
            for name, schema in (("plain", None), ("schema", SCHEMA)):
                rows[name].append(run(srv, schema, rep, max_tokens, n))
    finally:
        srv.stop()
    print(f"{'config':8} {'reqs':>4} {'tokens':>7} {'mean tok/s':>10} {'best tok/s':>10}")
    means = {}
    for name, r in rows.items():
        means[name] = statistics.mean(t for _, t in r)
        print(f"{name:8} {len(r):4d} {sum(n for n, _ in r):7d} {means[name]:10.2f} {max(t for _, t in r):10.2f}")
    print(f"schema / plain: {means['schema'] / means['plain']:.3f}")


if __name__ == "__main__":
    main()
