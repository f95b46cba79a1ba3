#!/usr/bin/env python3
"""`1bit census` over every model fixture and the encoder fixtures on one device (ctest:
census_cpu, census_vulkan). Fails on any row that fails: a node off the device, a request
not answered, an error. A gap the project knows of is listed in KNOWN with its reason and
reported as XFAIL; one that no longer fails must leave the list (the test says so).

usage: census_fixtures.py BIN DEVICE   (DEVICE: cpu, vulkan; exit 77: the build or the
machine lacks the device)"""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENCODERS = ["bert", "nomic-bert", "jina-bert-v2", "bert-rerank", "xlmr-rerank"]

# (device, arch) -> why its rows fail today; empty while every fixture passes everywhere
KNOWN = {}

# Sizes that keep CI short: on the CPU a 2,048-token long prompt (8,192 tripled the time under
# ASan, for attention that test_models already checks at 2,048); lavapipe runs the tiny
# fixtures at tens of tokens a second and builds each pipeline on first use, so there a
# 64-token long prompt and 4 tokens a reply
SIZES = {"cpu": ["--long", "2048"], "vulkan": ["--long", "64", "-n", "4"]}


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    binary, device = sys.argv[1], sys.argv[2]
    env = dict(os.environ)
    if device.startswith("vulkan"):
        env["ONEBIT_VULKAN_ALLOW_CPU"] = "1"  # lavapipe where there is no GPU
        info = subprocess.run([binary, "info"], env=env, capture_output=True, text=True).stdout
        if "vulkan: not built" in info:
            print("SKIPPED: this build has no Vulkan backend")
            return 77
    models = [os.path.join(ROOT, "tests/fixtures/models")]
    models += [os.path.join(ROOT, "tests/fixtures/embed", e) for e in ENCODERS]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "census.json")
        # each model drafts for itself, and always drafts, so the speculative path runs
        cmd = [binary, "census", "--device", device, "--models", ",".join(models), "--json", out,
               "--draft", "self", "--draft-p-min", "0"] + SIZES.get(device.split(":")[0], [])
        t0 = time.time()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        took = time.time() - t0
        sys.stdout.write(p.stdout)
        if not os.path.exists(out):
            sys.stdout.write(p.stderr[-4000:])
            print("FAIL: the census wrote no JSON (exit %d)" % p.returncode)
            return 1
        rows = json.load(open(out))
    no_device = ("vulkan: no Vulkan driver", "vulkan: no usable device", "vulkan: no Vulkan device",
                 "Vulkan loader is older")
    if device.startswith("vulkan") and rows and all(any(s in r["note"] for s in no_device) for r in rows):
        print("SKIPPED: no Vulkan device: %s" % rows[0]["note"])
        return 77
    bad, xfail, fixed = [], [], set()
    failing = {(r["device"], r["arch"]) for r in rows if r["status"] == "fail"}
    for r in rows:
        broken = r["status"] == "fail" or (r["off_device"] or 0) > 0 or r["answered"] is False
        key = (device, r["arch"])
        if broken and key in KNOWN:
            xfail.append(r)
        elif broken:
            bad.append(r)
    for key, why in KNOWN.items():
        if key[0] == device and any(r["arch"] == key[1] for r in rows) and key not in failing:
            fixed.add(key)
    for r in xfail:
        print("XFAIL %s %s %s: %s (%s)" % (r["arch"], r["file"], r["mode"], r["note"], KNOWN[(device, r["arch"])]))
    for r in bad:
        print("FAIL %s %s %s: %s" % (r["arch"], r["file"], r["mode"], r["note"]))
    for key in sorted(fixed):
        print("FAIL %s on %s runs now: take it out of KNOWN in %s" % (key[1], key[0], __file__))
    n = {s: sum(r["status"] == s for r in rows) for s in ("ok", "n/a", "fail")}
    print("census on %s: %d rows (%d ok, %d n/a, %d fail of which %d known) in %.1f s" %
          (device, len(rows), n["ok"], n["n/a"], n["fail"], len(xfail), took))
    if p.returncode not in (0, 1):
        sys.stdout.write(p.stderr[-4000:])
        print("FAIL: the census exited %d" % p.returncode)
        return 1
    return 1 if bad or fixed else 0


if __name__ == "__main__":
    sys.exit(main())
