"""A kernel that faults on a GPU ends the process with one line that names the op, the node
and the kernel (CUDA) or shader (Vulkan), and never hangs: in `1bit run` and in `1bit serve`,
which answers the request in flight with an error and exits.

ONEBIT_TEST_FAULT=<node> (a test-only knob) makes that node's launch fault: on CUDA its first
source points at unmapped memory, so its kernel makes a real illegal access and the context
dies; on Vulkan a dispatch that never finishes follows it, and ONEBIT_VK_TIMEOUT_S (here 5 s)
bounds the wait. A backend this build lacks, or a device this machine lacks, is SKIPPED."""
import os
import subprocess
import tempfile
import time

import pytest
import requests

from serverutil import BIN, default_model, free_port

# ONEBIT_FAULT_MODEL: another model (the GPU machine has no PyPI: scripts/device_check.sh
# passes a fixture)
MODEL = os.environ.get("ONEBIT_FAULT_MODEL")
NODE = "output"  # the logits MATMUL: a launch of its own in every architecture
# what names the kernel in each backend's line
KERNEL_WORD = {"cuda": "kernel k_", "vulkan": "shader"}
# the fault itself, as each backend words it (counted: it must appear once)
FAULT_WORDS = ("illegal memory access", "device lost", "no progress", "was lost")


def device_or_skip(dev):
    r = subprocess.run([BIN, "run", "-m", (MODEL or default_model()), "--device", dev, "-p", "Hi", "-n", "2"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"SKIPPED: no {dev} device in this build or on this machine ({last})")


def fault_env():
    return dict(os.environ, ONEBIT_TEST_FAULT=NODE, ONEBIT_VK_TIMEOUT_S="5")


def check_one_line(dev, text):
    hits = [ln for ln in text.splitlines() if any(w in ln for w in FAULT_WORDS)]
    assert len(hits) == 1, text
    line = hits[0]
    assert f"MATMUL {NODE}" in line and KERNEL_WORD[dev] in line, line
    return line


@pytest.mark.parametrize("dev", ["cuda", "vulkan"])
def test_run_fault_is_one_line(dev):
    device_or_skip(dev)
    t0 = time.time()
    r = subprocess.run([BIN, "run", "-m", (MODEL or default_model()), "--device", dev, "-p", "Hi", "-n", "4"],
                       env=fault_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode != 0, r.stderr
    print(check_one_line(dev, r.stderr), f"({time.time() - t0:.1f} s)")


@pytest.mark.parametrize("dev", ["cuda", "vulkan"])
def test_serve_fault_answers_and_exits(dev):
    device_or_skip(dev)
    port = free_port()
    log = tempfile.TemporaryFile()  # a file, not a pipe: the server can never block on it
    proc = subprocess.Popen([BIN, "serve", "-m", (MODEL or default_model()), "--device", dev, "--port", str(port)],
                            env=fault_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 300
        healthy = False
        while time.time() < deadline and proc.poll() is None:
            try:
                healthy = requests.get(url + "/health", timeout=2).status_code == 200
            except requests.RequestException:
                pass
            if healthy:
                break
            time.sleep(0.2)
        if healthy:
            # the request in flight gets an error, not silence
            try:
                r = requests.post(url + "/completion", json={"prompt": "Hi", "n_predict": 4}, timeout=120)
                assert r.status_code >= 500, r.text
            except requests.ConnectionError:
                pass  # the process may end before the answer is out; the exit below is the point
        proc.wait(timeout=120)  # it ends by itself: no signal sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log.seek(0)
    out = log.read().decode(errors="replace")
    assert proc.returncode != 0, out
    print(check_one_line(dev, out))
