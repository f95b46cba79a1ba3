"""The service files (contrib/systemd/, docs/lemonade.md): `cmake --install` into a scratch
prefix puts the binary, the llama-server link, 1bit.service and Lemonade's drop-in where
systemd looks; the unit's ExecStart, expanded the way systemd expands it (${VAR} one word,
$VAR split on spaces) from the installed example environment file, starts a server that
answers; the drop-in points every Lemonade llama.cpp backend at the installed llama-server.
systemd itself is not needed (CI machines have no running systemd)."""
import os
import re
import shlex
import shutil
import subprocess
import time

import pytest
import requests

from serverutil import BIN, ROOT, free_port

BUILD = os.environ.get("ONEBIT_BUILD", os.path.dirname(BIN))
FIXTURE = os.path.join(ROOT, "tests/fixtures/models/qwen3.gguf")


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    if not shutil.which("cmake") or not os.path.exists(os.path.join(BUILD, "cmake_install.cmake")):
        pytest.skip(f"SKIPPED: no cmake or no configured build at {BUILD}")
    p = tmp_path_factory.mktemp("prefix")
    r = subprocess.run(["cmake", "--install", BUILD, "--prefix", str(p)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return p


def unit_sections(path):
    """A unit file's keys: {section: [(key, value), ...]}, in order (keys repeat)."""
    out, sec = {}, None
    for line in open(path):
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            sec = line.strip("[]")
            out.setdefault(sec, [])
        else:
            k, v = line.split("=", 1)
            out[sec].append((k.strip(), v.strip()))
    return out


def env_assignments(value):
    """An Environment= line's assignments (several per line, shell-like quoting)."""
    return dict(a.split("=", 1) for a in shlex.split(value))


def env_file(path):
    env = {}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            k, v = line.split("=", 1)
            env[k.strip()] = v.strip()
    return env


def expand(cmd, env):
    """systemd's ExecStart expansion: ${VAR} replaced as one word, $VAR split on spaces."""
    words = []
    for w in shlex.split(cmd):
        if re.fullmatch(r"\$[A-Za-z_][A-Za-z0-9_]*", w):
            words += env.get(w[1:], "").split()
        else:
            words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), w))
    return words


def test_install_layout(prefix):
    assert os.access(prefix / "bin/1bit", os.X_OK)
    assert os.path.islink(prefix / "bin/llama-server") and os.readlink(prefix / "bin/llama-server") == "1bit"
    assert (prefix / "lib/systemd/system/1bit.service").is_file()
    assert (prefix / "lib/systemd/system/lemond.service.d/onebit.conf").is_file()
    assert (prefix / "share/doc/onebit/1bit.env").is_file()
    assert (prefix / "share/doc/onebit/lemonade.md").is_file()


def test_unit_command_line_serves(prefix, tmp_path):
    unit = unit_sections(prefix / "lib/systemd/system/1bit.service")
    svc = dict(unit["Service"])  # last value of a repeated key, except Environment (below)
    assert unit["Install"] == [("WantedBy", "multi-user.target")]
    env = {}
    for k, v in unit["Service"]:
        if k == "Environment":
            env.update(env_assignments(v))
    assert env["ONEBIT_HOST"] == "127.0.0.1"  # loopback unless the admin says otherwise
    assert svc["EnvironmentFile"] == "-/etc/default/1bit"
    assert svc["KillSignal"] == "SIGINT"
    # the installed example stands in for /etc/default/1bit, with this test's model and port
    example = env_file(prefix / "share/doc/onebit/1bit.env")
    assert set(example) >= {"ONEBIT_MODEL", "ONEBIT_HOST", "ONEBIT_PORT", "ONEBIT_ARGS"}
    port = free_port()
    env.update(example, ONEBIT_MODEL=FIXTURE, ONEBIT_PORT=str(port))
    argv = expand(svc["ExecStart"], env)
    # configured with the default prefix; the scratch install holds the same files
    assert argv[0].endswith("/bin/1bit") and os.path.isabs(argv[0]), argv
    argv[0] = str(prefix / "bin/1bit")
    assert argv[1:4] == ["serve", "-m", FIXTURE] and "-np" in argv, argv  # $ONEBIT_ARGS split
    log = open(tmp_path / "serve.log", "w+")
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            assert p.poll() is None, open(tmp_path / "serve.log").read()
            try:
                if requests.get(url + "/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.1)
        r = requests.post(url + "/completion", json={"prompt": "hello", "n_predict": 4, "temperature": 0}, timeout=60)
        assert r.status_code == 200 and r.json()["tokens_predicted"] > 0, r.text
    finally:
        p.send_signal(2)  # KillSignal=SIGINT
        rc = p.wait(60)
    assert rc == 0, open(tmp_path / "serve.log").read()


def test_lemond_dropin(prefix):
    conf = unit_sections(prefix / "lib/systemd/system/lemond.service.d/onebit.conf")
    env = {}
    for k, v in conf["Service"]:
        assert k == "Environment", k
        env.update(env_assignments(v))
    for backend in ("CPU", "VULKAN", "ROCM", "CUDA"):
        path = env[f"LEMONADE_LLAMACPP_{backend}_BIN"]
        assert os.path.isabs(path) and path.endswith("/bin/llama-server"), path
    # the link it names answers as llama-server: flags only, no subcommand
    r = subprocess.run([str(prefix / "bin/llama-server"), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--port" in r.stdout + r.stderr
