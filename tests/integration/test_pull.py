"""`1bit pull` and the -hf flags against a local stand-in for the Hugging Face Hub
(hubfixture.py): the file chosen by quantization tag, the huggingface_hub cache layout
(and huggingface_hub finding our files, and we finding its), resume after a dropped
connection and after a killed process, retries on 429, a server that ignores Range, a
wrong checksum, a missing repo or file, an unreachable Hub, a full disk, a split model (that loads),
the token kept from the CDN, the progress bar, and `serve -hf` answering /health."""
import hashlib
import os
import pty
import random
import shutil
import subprocess
import sys
import threading
import time

import pytest
import requests

from hubfixture import Hub
from serverutil import BIN, ROOT, free_port

TINY = os.path.join(ROOT, "tests", "fixtures", "models", "llama.gguf")


def blob(n, seed):
    return b"GGUF" + random.Random(seed).randbytes(n - 4)


def split_gguf(src, stem, max_tensors, tmp):
    """src rewritten as a split GGUF by gguf-py (NAME-0000i-of-0000N.gguf): {name: bytes}."""
    import gguf
    r = gguf.GGUFReader(src)
    out = tmp / ("split-" + stem)
    out.mkdir()
    w = gguf.GGUFWriter(str(out / (stem + ".gguf")), r.fields["general.architecture"].contents(),
                        split_max_tensors=max_tensors)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), f.types[0], sub_type=sub)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    files = {n: (out / n).read_bytes() for n in sorted(os.listdir(out))}
    assert len(files) > 1 and all("-of-%05d.gguf" % len(files) in n for n in files), list(files)
    return files


@pytest.fixture
def hub():
    h = Hub()
    yield h
    h.close()


@pytest.fixture
def env(hub, tmp_path):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("HF_", "HUGGINGFACE_")) and k not in ("XDG_CACHE_HOME",)}
    e.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"))
    return e


def hub_cache(env):
    return os.path.join(env["HF_HOME"], "hub")


def pull(env, *args, timeout=120, **kw):
    return subprocess.run([BIN, "pull", *args], env=env, capture_output=True, text=True, timeout=timeout, **kw)


def error_lines(r):
    return [ln for ln in r.stderr.splitlines() if ln.startswith("1bit pull:")]


def repo_dir(env, repo):
    return os.path.join(hub_cache(env), "models--" + repo.replace("/", "--"))


def leftovers(env, repo):
    """Every file under the repo's blobs folder."""
    d = os.path.join(repo_dir(env, repo), "blobs")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


QUANTS = {
    "tiny-Q8_0.gguf": blob(300_000, 1),
    "tiny-Q4_K_M.gguf": blob(200_000, 2),
    "tiny-IQ4_XS.gguf": blob(150_000, 3),
    "mmproj-tiny-f16.gguf": blob(50_000, 4),
    "README.md": b"# tiny\n",
}


def test_pull_picks_the_file_and_keeps_the_hub_cache_layout(hub, env):
    commit = hub.add("org/tiny-GGUF", QUANTS, lfs={p for p in QUANTS if p.endswith(".gguf")})
    r = pull(env, "org/tiny-GGUF")
    assert r.returncode == 0, r.stderr
    path = r.stdout.strip()
    base = repo_dir(env, "org/tiny-GGUF")
    # the default is Q4_K_M, at snapshots/<commit>/<file> -> ../../blobs/<sha256>
    assert path == os.path.join(base, "snapshots", commit, "tiny-Q4_K_M.gguf")
    sha = hashlib.sha256(QUANTS["tiny-Q4_K_M.gguf"]).hexdigest()
    assert os.readlink(path) == "../../blobs/" + sha
    assert open(path, "rb").read() == QUANTS["tiny-Q4_K_M.gguf"]
    assert open(os.path.join(base, "refs", "main")).read() == commit
    assert leftovers(env, "org/tiny-GGUF") == [sha]
    # the API call carried blobs=true; the file came from the CDN the Hub redirected to
    assert any("blobs=true" in q["path"] for q in hub.requests("api", "/api/models/org/tiny-GGUF"))
    assert len(hub.requests("cdn")) == 1
    # a tag picks case-insensitively, and only a whole word (IQ4_XS is not Q4_XS)
    r = pull(env, "org/tiny-GGUF:q8_0")
    assert r.returncode == 0 and r.stdout.strip().endswith("/tiny-Q8_0.gguf"), r.stderr
    r = pull(env, "org/tiny-GGUF:Q4_XS")
    assert r.returncode == 1 and len(error_lines(r)) == 1 and "IQ4_XS" in r.stderr and "Q4_K_M" in r.stderr
    # an explicit file, also one not in LFS (its etag is the git blob id; no sha256 to check)
    r = pull(env, "org/tiny-GGUF/README.md")
    assert r.returncode == 0, r.stderr
    assert os.readlink(r.stdout.strip()).endswith(hashlib.sha1(b"blob 7\0# tiny\n").hexdigest())
    r = pull(env, "org/tiny-GGUF", "-hff", "tiny-IQ4_XS.gguf")
    assert r.returncode == 0 and r.stdout.strip().endswith("/tiny-IQ4_XS.gguf"), r.stderr
    # pulled again: one API call, no file transfer, the same path
    n_cdn = len(hub.requests("cdn"))
    r = pull(env, "org/tiny-GGUF")
    assert r.returncode == 0 and r.stdout.strip() == path
    assert len(hub.requests("cdn")) == n_cdn


def test_default_falls_back_to_q8_then_the_first_gguf(hub, env):
    hub.add("org/a", {"m-F16.gguf": blob(1000, 5), "m-Q8_0.gguf": blob(1000, 6)})
    hub.add("org/b", {"m-BF16.gguf": blob(1000, 7), "m-F16.gguf": blob(1000, 8)})
    assert pull(env, "org/a").stdout.strip().endswith("/m-Q8_0.gguf")
    assert pull(env, "org/b").stdout.strip().endswith("/m-BF16.gguf")


def test_cached_copy_is_used_without_the_network(hub, env):
    hub.add("org/tiny", QUANTS)
    first = pull(env, "org/tiny").stdout.strip()
    assert first
    n = len(hub.log)
    r = pull(env, "org/tiny", "--offline")
    assert r.returncode == 0 and r.stdout.strip() == first and len(hub.log) == n
    off = dict(env, HF_HUB_OFFLINE="1")
    r = pull(off, "org/tiny:Q8_0")  # not pulled yet: not in the cache
    assert r.returncode == 1 and len(error_lines(r)) == 1 and "cache" in r.stderr
    # the Hub unreachable: the cached copy, with a notice
    down = dict(env, HF_ENDPOINT="http://127.0.0.1:%d" % free_port())
    r = pull(down, "org/tiny")
    assert r.returncode == 0 and r.stdout.strip() == first
    assert "cannot reach" in r.stderr and "cached" in r.stderr


def test_huggingface_hub_finds_our_files_and_we_find_its(hub, env):
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        pytest.skip("SKIPPED: huggingface_hub is not installed (pip install huggingface_hub)")
    hub.add("org/tiny", QUANTS)
    ours = pull(env, "org/tiny").stdout.strip()
    code = ("import sys, huggingface_hub as h; "
            "print(h.try_to_load_from_cache('org/tiny', 'tiny-Q4_K_M.gguf', cache_dir=sys.argv[1]))")
    r = subprocess.run([sys.executable, "-c", code, hub_cache(env)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == ours, r.stderr
    # a file huggingface_hub downloads from the same Hub is found by us offline
    hub.add("org/other", {"x-Q4_K_M.gguf": blob(70_000, 9)})
    code = "import huggingface_hub as h; print(h.hf_hub_download('org/other', 'x-Q4_K_M.gguf'))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    theirs = r.stdout.strip().splitlines()[-1]
    r = pull(env, "org/other", "--offline")
    assert r.returncode == 0 and r.stdout.strip() == theirs, r.stderr
    n = len(hub.requests("cdn"))
    r = pull(env, "org/other")  # online: found up to date, nothing downloaded
    assert r.returncode == 0 and r.stdout.strip() == theirs and len(hub.requests("cdn")) == n


def test_dropped_connection_resumes_with_range(hub, env):
    data = blob(1_000_000, 10)
    hub.add("org/r", {"r-Q4_K_M.gguf": data})
    hub.drop = 1
    r = pull(env, "org/r")
    assert r.returncode == 0, r.stderr
    assert open(r.stdout.strip(), "rb").read() == data
    ranges = [q["headers"].get("range") for q in hub.requests("cdn")]
    assert ranges[0] is None and ranges[1] == "bytes=%d-" % (len(data) // 2), ranges


def test_killed_pull_resumes_on_the_next_run(hub, env):
    data = blob(3_000_000, 11)
    hub.add("org/k", {"k-Q4_K_M.gguf": data})
    sha = hashlib.sha256(data).hexdigest()
    part = os.path.join(repo_dir(env, "org/k"), "blobs", sha + ".incomplete")
    p = subprocess.Popen([BIN, "pull", "org/k", "--limit-rate", "400K"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    t0 = time.time()
    while not (os.path.exists(part) and os.path.getsize(part) >= 500_000) and time.time() - t0 < 60:
        time.sleep(0.05)
    p.kill()
    p.wait()
    p.stdout.close()
    p.stderr.close()
    have = os.path.getsize(part)
    assert 500_000 <= have < len(data)
    # nothing at the final path
    assert not os.path.exists(os.path.join(repo_dir(env, "org/k"), "blobs", sha))
    assert not os.path.exists(os.path.join(repo_dir(env, "org/k"), "snapshots"))
    r = pull(env, "org/k")
    assert r.returncode == 0, r.stderr
    assert "resuming" in r.stderr
    assert hub.requests("cdn")[-1]["headers"].get("range") == "bytes=%d-" % have
    assert open(r.stdout.strip(), "rb").read() == data


def test_two_pulls_of_one_file_share_the_download(hub, env):
    data = blob(2_000_000, 70)
    hub.add("org/c", {"c-Q4_K_M.gguf": data})
    ps = [subprocess.Popen([BIN, "pull", "org/c", "--limit-rate", "1M"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in ps]
    assert [p.returncode for p in ps] == [0, 0], outs
    assert outs[0][0] == outs[1][0] and open(outs[0][0].strip(), "rb").read() == data
    # the second waited on the blob's lock (huggingface_hub's lock file) and found it done
    assert len(hub.requests("cdn")) == 1
    assert any("waiting" in err for _, err in outs), outs


def test_rate_limit_takes_longer(hub, env):
    # curl averages the rate over its first second, so the file is a few seconds' worth
    data = blob(3_000_000, 12)
    hub.add("org/l", {"l-Q4_K_M.gguf": data})
    t0 = time.time()
    r = pull(env, "org/l", "--limit-rate", "600K")
    assert r.returncode == 0, r.stderr
    assert time.time() - t0 >= 2.0
    r = pull(env, "org/l", "--limit-rate", "fast")
    assert r.returncode == 2 and "--limit-rate" in r.stderr


def test_429_and_503_are_retried_after_retry_after(hub, env):
    data = blob(100_000, 13)
    hub.add("org/busy", {"b-Q4_K_M.gguf": data})
    hub.statuses["api"] = [429]
    hub.statuses["cdn"] = [503]
    t0 = time.time()
    r = pull(env, "org/busy")
    assert r.returncode == 0, r.stderr
    assert time.time() - t0 >= 2.0  # Retry-After: 1, twice
    assert "HTTP 429" in r.stderr and "HTTP 503" in r.stderr and "retrying" in r.stderr
    assert open(r.stdout.strip(), "rb").read() == data
    assert len(hub.requests("api", "/api/models/")) == 2 and len(hub.requests("cdn")) == 2


def test_server_ignoring_range_restarts_cleanly(hub, env):
    data = blob(800_000, 14)
    hub.add("org/nr", {"nr-Q4_K_M.gguf": data})
    hub.drop = 1
    hub.no_range = True
    r = pull(env, "org/nr")
    assert r.returncode == 0, r.stderr
    assert "ignored the range" in r.stderr
    assert open(r.stdout.strip(), "rb").read() == data
    assert hub.requests("cdn")[1]["headers"].get("range") == "bytes=%d-" % (len(data) // 2)


def test_wrong_checksum_is_an_error_and_leaves_nothing(hub, env):
    hub.add("org/bad", {"bad-Q4_K_M.gguf": blob(100_000, 15)})
    hub.bad_sum = True
    r = pull(env, "org/bad")
    assert r.returncode == 1 and r.stdout == ""
    assert len(error_lines(r)) == 1 and "checksum mismatch" in r.stderr, r.stderr
    assert leftovers(env, "org/bad") == []
    assert not os.path.exists(os.path.join(repo_dir(env, "org/bad"), "snapshots"))


def test_bad_input_is_one_line(hub, env):
    hub.add("org/tiny", QUANTS)
    cases = [
        (["nope/nope"], "not found"),
        (["org/tiny/nope.gguf"], "no file 'nope.gguf'"),
        (["not-a-repo"], "not a Hugging Face"),
        (["org/../etc"], "not a Hugging Face repo id"),
        (["org/tiny/../../x.gguf"], "not a file path"),
    ]
    for args, want in cases:
        r = pull(env, *args)
        assert r.returncode != 0 and r.stdout == "", (args, r.stderr)
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and want in lines[0], (args, r.stderr)
    # a file the listing has but resolve says is missing; a gated repo
    hub.gated.add("org/tiny")
    r = pull(env, "org/tiny")
    assert r.returncode == 1 and len(error_lines(r)) == 1 and "gated" in r.stderr and "HF_TOKEN" in r.stderr
    # the Hub unreachable, nothing cached
    r = pull(dict(env, HF_ENDPOINT="http://127.0.0.1:%d" % free_port()), "org/tiny")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and "cannot reach" in r.stderr, r.stderr


def test_split_model_comes_whole(hub, env):
    parts = {"Q4_K_M/big-Q4_K_M-%05d-of-00003.gguf" % i: blob(90_000 + i, 20 + i) for i in (1, 2, 3)}
    parts["big-Q8_0.gguf"] = blob(1000, 30)
    broken = {"s-Q4_K_M-00001-of-00002.gguf": blob(1000, 31)}
    commit = hub.add("org/split", parts)
    hub.add("org/broken", broken)
    r = pull(env, "org/split:Q4_K_M")
    assert r.returncode == 0, r.stderr
    snap = os.path.join(repo_dir(env, "org/split"), "snapshots", commit)
    assert r.stdout.strip() == os.path.join(snap, "Q4_K_M/big-Q4_K_M-00001-of-00003.gguf")
    for name, data in parts.items():
        if name.startswith("Q4_K_M/"):
            p = os.path.join(snap, name)
            assert os.readlink(p).startswith("../../../blobs/") and open(p, "rb").read() == data
    # naming a later part fetches the same set and prints the first
    r = pull(env, "org/split/Q4_K_M/big-Q4_K_M-00002-of-00003.gguf", "--offline")
    assert r.returncode == 0 and r.stdout.strip().endswith("-00001-of-00003.gguf"), r.stderr
    r = pull(env, "org/broken")
    assert r.returncode == 1 and "part 2 of the 2" in r.stderr


def test_token_goes_to_the_hub_not_to_the_cdn(hub, env):
    hub.add("org/private", {"p-Q4_K_M.gguf": blob(50_000, 40)})
    r = pull(dict(env, HF_TOKEN="hf_secret_token"), "org/private")
    assert r.returncode == 0, r.stderr
    assert "hf_secret_token" not in r.stderr + r.stdout
    for q in hub.requests("api"):
        assert q["headers"].get("authorization") == "Bearer hf_secret_token", q
    assert all("authorization" not in q["headers"] for q in hub.requests("cdn"))
    # huggingface_hub's token file, when HF_TOKEN is not set
    os.makedirs(env["HF_HOME"], exist_ok=True)
    with open(os.path.join(env["HF_HOME"], "token"), "w") as f:
        f.write("hf_file_token\n")
    n = len(hub.log)
    assert pull(env, "org/private:Q4_K_M").returncode == 0
    assert hub.log[n]["headers"].get("authorization") == "Bearer hf_file_token"


def test_progress_bar_only_on_a_terminal(hub, env):
    hub.add("org/p", {"p-Q4_K_M.gguf": blob(1_500_000, 41)})
    master, slave = pty.openpty()
    p = subprocess.Popen([BIN, "pull", "org/p", "--limit-rate", "1M"], env=env, stdout=subprocess.PIPE,
                         stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(60)
    os.close(master)
    text = out.decode(errors="replace")
    assert p.returncode == 0 and "ETA" in text and "%" in text and "/s" in text, text
    hub.add("org/q", {"q-Q4_K_M.gguf": blob(100_000, 42)})
    r = pull(env, "org/q")
    assert r.returncode == 0 and "ETA" not in r.stderr and "\r" not in r.stderr


def _mount_tmpfs(path, size):
    os.makedirs(path, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", str(path)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("SKIPPED: cannot mount a small tmpfs to fill (needs root): " + r.stderr.decode().strip())


def test_full_disk_is_one_line_and_leaves_no_blob(hub, env, tmp_path):
    small = tmp_path / "small"
    _mount_tmpfs(small, "2m")
    try:
        hub.add("org/big", {"big-Q4_K_M.gguf": blob(3_000_000, 50)})
        e = dict(env, HF_HUB_CACHE=str(small))
        r = pull(e, "org/big")
        assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and "not enough disk space" in r.stderr
        # space that runs out during the download: the part stays (to resume), no blob
        # curl lets the first second run at full speed: the file is larger than that burst
        hub.add("org/mid", {"mid-Q4_K_M.gguf": blob(1_900_000, 51)})
        sha = hashlib.sha256(hub.repos["org/mid"]["files"]["mid-Q4_K_M.gguf"]).hexdigest()
        part = small / "models--org--mid" / "blobs" / (sha + ".incomplete")
        p = subprocess.Popen([BIN, "pull", "org/mid", "--limit-rate", "100K"], env=e, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        t0 = time.time()
        while not (part.exists() and part.stat().st_size > 50_000) and time.time() - t0 < 30:
            time.sleep(0.05)
        with open(small / "filler", "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        out, err = p.communicate(timeout=60)
        assert p.returncode == 1 and out == ""
        lines = [ln for ln in err.splitlines() if ln.startswith("1bit pull:")]
        assert len(lines) == 1 and "No space left" in lines[0], err
        assert not (small / "models--org--mid" / "blobs" / sha).exists()
        assert not (small / "models--org--mid" / "snapshots").exists()
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)


def _wait_health(url, proc, log, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            log.seek(0)
            raise AssertionError("server exited: " + log.read().decode(errors="replace"))
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise AssertionError("server did not become healthy")


def test_serve_hf_loads_the_pulled_model(hub, env, tmp_path):
    hub.add("org/tiny-llama-GGUF", {"tiny-llama-Q8_0.gguf": open(TINY, "rb").read()})
    port = free_port()
    with open(tmp_path / "serve.log", "w+b") as log:
        p = subprocess.Popen([BIN, "serve", "-hf", "org/tiny-llama-GGUF", "--port", str(port), "-c", "256"], env=env,
                             stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_health("http://127.0.0.1:%d" % port, p, log)
        finally:
            p.terminate()
            p.wait(30)
    # llama-server's spelling, no subcommand, offline from the cache
    port = free_port()
    with open(tmp_path / "serve2.log", "w+b") as log:
        p = subprocess.Popen([BIN, "--hf-repo", "org/tiny-llama-GGUF", "--hf-file", "tiny-llama-Q8_0.gguf",
                              "-hfd", "org/tiny-llama-GGUF", "--offline", "--port", str(port), "-c", "256"], env=env,
                             stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_health("http://127.0.0.1:%d" % port, p, log)
        finally:
            p.terminate()
            p.wait(30)
    # a split model (gguf-py's writer, as llama.cpp's converter and gguf-split make them) loads
    # as one from the cache: the same greedy text as the whole file
    hub.add("org/sp", split_gguf(TINY, "sp-Q4_K_M", 4, tmp_path))
    cmd = ["run", "-p", "hello there", "-n", "12", "--temp", "0"]
    whole = subprocess.run([BIN, *cmd, "-m", TINY], env=env, capture_output=True, timeout=60)
    r = subprocess.run([BIN, *cmd, "-hf", "org/sp"], env=env, capture_output=True, timeout=60)
    assert whole.returncode == 0 and r.returncode == 0, r.stderr
    assert r.stdout == whole.stdout and len(whole.stdout) > 0


def test_run_hf_completes_a_prompt(hub, env):
    hub.add("org/tiny-llama-GGUF", {"tiny-llama-Q8_0.gguf": open(TINY, "rb").read()})
    r = subprocess.run([BIN, "run", "-hf", "org/tiny-llama-GGUF:Q8_0", "-p", "hello", "-n", "4", "--temp", "0",
                        "-c", "128"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([BIN, "run", "-hf", "org/tiny-llama-GGUF", "-m", TINY, "-p", "x"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "not both" in r.stderr
