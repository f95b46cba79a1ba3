"""`1bit info --env`: every tuning and diagnostic switch of the backends built in, with its
value or default and one line of help, read from each backend's one table (src/core/env.c);
a value that does not parse says so instead of being taken."""
import os
import subprocess

from serverutil import BIN


def info_env(**env):
    r = subprocess.run([BIN, "info", "--env"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, **env))
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_lists_every_backend_and_the_test_switch():
    out = info_env()
    assert "ONEBIT_TEST_FAULT" in out
    for backend, prefix in (("cuda", "ONEBIT_CUDA_"), ("vulkan", "ONEBIT_VULKAN_")):
        # a backend is either listed with its switches or named as not built
        assert (f"{backend}:\n  {prefix}" in out) or (f"{backend}: not built" in out), out


def test_values_and_bad_values_show():
    out = info_env(ONEBIT_TEST_FAULT="blk.0.attn_q")
    assert "blk.0.attn_q" in out.split("ONEBIT_TEST_FAULT", 1)[1].splitlines()[0]
    if "ONEBIT_VK_SPIN_US" in out:
        line = [ln for ln in info_env(ONEBIT_VK_SPIN_US="banana").splitlines() if "ONEBIT_VK_SPIN_US" in ln][0]
        assert "bad" in line, line
    if "ONEBIT_CUDA_ATTN_H" in out:
        line = [ln for ln in info_env(ONEBIT_CUDA_ATTN_H="7").splitlines() if "ONEBIT_CUDA_ATTN_H" in ln][0]
        assert "bad" in line, line  # outside its range 0..2
