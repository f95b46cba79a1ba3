"""Tokenizer encode throughput: onebit (libonebit via ctypes, one batch call) against
Hugging Face tokenizers pinned to one thread, on the same seeded corpus and vocabulary.

    ONEBIT_BUILD=build python3 bench/tokenizer.py [--repeat 3] [--only qwen3,llama3]

Prints one row per tokenizer: MB/s and tokens/s for both, and the ratio.
"""
import os
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"          # must precede the tokenizers import
os.environ["TOKENIZERS_PARALLELISM"] = "false"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))

import tokenizer_corpus as tc  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def best_of(fn, repeat):
    t = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = fn()
        t.append(time.perf_counter() - t0)
    return min(t), r


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument("--copies", type=int, default=4, help="corpus repeated this many times")
    a = ap.parse_args()
    texts = tc.corpus() * a.copies
    nbytes = sum(len(s.encode()) for s in texts)
    print(f"corpus: {len(texts)} strings, {nbytes / 1e6:.2f} MB; HF tokenizers single-threaded (RAYON_NUM_THREADS=1)")
    print(f"{'tokenizer':<14}{'onebit MB/s':>12}{'HF batch MB/s':>15}{'HF loop MB/s':>14}{'onebit Mtok/s':>15}{'ratio':>8}")
    for name, ours, ref in tc.cases():
        if a.only and name not in a.only.split(","):
            continue
        T = tc.Tok(ours)
        H = Tokenizer.from_file(ref)
        H.no_padding()
        H.no_truncation()
        t_ours, (ids, offs) = best_of(lambda: T.encode_batch(texts, add_special=True), a.repeat)
        t_hfb, enc = best_of(lambda: H.encode_batch(texts, add_special_tokens=True), a.repeat)
        t_hfl, _ = best_of(lambda: [H.encode(s, add_special_tokens=True) for s in texts], 1)
        ntok = offs[len(texts)]
        ntok_hf = sum(len(e.ids) for e in enc)
        flag = "" if ntok == ntok_hf else f"  (token counts differ: {ntok} vs {ntok_hf})"
        print(f"{name:<14}{nbytes / t_ours / 1e6:>12.2f}{nbytes / t_hfb / 1e6:>15.2f}{nbytes / t_hfl / 1e6:>14.2f}"
              f"{ntok / t_ours / 1e6:>15.2f}{t_hfb / t_ours:>8.2f}x{flag}")


if __name__ == "__main__":
    main()
