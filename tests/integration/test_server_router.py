"""Router mode (issue 44, llama-server's "using multiple models"): `llama-server` with no
model, or `1bit serve` with a --models-* flag, lists models from --models-dir,
--models-preset and the Hugging Face cache and runs each in a child `1bit serve`: listing
with status, loading on demand, chat relayed (whole and streamed) equal to a server of the
model itself, unload, --models-max evicting the least recently used, --no-models-autoload,
errors, preset reload, the API key kept by the router, downloads and removal through the
Hub's cache (hubfixture.py), and no child left once the router stops."""
import json
import os
import signal
import subprocess
import tempfile
import threading
import time

import pytest
import requests
from openai import OpenAI

from hubfixture import Hub
from serverutil import BIN, ROOT, Server, default_model, free_port

LLAMA_SERVER = os.path.join(os.path.dirname(BIN), "llama-server")
TINY = os.path.join(ROOT, "tests", "fixtures", "models", "llama.gguf")
CHAT = {"messages": [{"role": "user", "content": "Name three colors."}], "max_tokens": 12, "temperature": 0}


class Router:
    """A router on a free port (no -m), healthy when the constructor returns."""

    def __init__(self, args, env=None, binary=LLAMA_SERVER, key=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.key = key
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "-c", "512", *args], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("router exited: " + self.output())
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("router did not become healthy")

    def headers(self):
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def get(self, path, **kw):
        return requests.get(self.url + path, headers=self.headers(), timeout=120, **kw)

    def post(self, path, body, **kw):
        return requests.post(self.url + path, json=body, headers=self.headers(), timeout=120, **kw)

    def models(self, reload=False):
        r = self.get("/models" + ("?reload=1" if reload else ""))
        assert r.status_code == 200, r.text
        return {m["id"]: m for m in r.json()["data"]}

    def status(self, model):
        return self.models()[model]["status"]["value"]

    def wait(self, model, want, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.status(model)
            if s == want:
                return
            time.sleep(0.1)
        raise AssertionError(f"{model} is {s}, not {want}")

    def children(self):
        """The pids whose parent is the router."""
        out = []
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    with open(f"/proc/{p}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                            out.append(int(p))
                except (OSError, IndexError, ValueError):
                    pass
        return out

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        out = self.output()
        # a sanitizer build (the router's and its children's reports all land here)
        assert "Sanitizer" not in out and "runtime error:" not in out, out
        return self.proc.returncode, out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    os.symlink(default_model(), d / "gemma-a.gguf")
    os.symlink(default_model(), d / "gemma-b.gguf")
    os.symlink(TINY, d / "tiny.gguf")
    return str(d)


@pytest.fixture(scope="module")
def reference():
    """The greedy answer of a server of the model itself."""
    s = Server(["-c", "512"])
    try:
        r = requests.post(s.url + "/v1/chat/completions", json=CHAT, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["message"]["content"]
    finally:
        s.stop()


@pytest.fixture
def hub_env(tmp_path):
    """A Hub cache of our own (and no route to the real Hub)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_")) and k != "XDG_CACHE_HOME"}
    e["HF_HOME"] = str(tmp_path / "hf")
    return e


def test_list_load_chat_unload_and_stop(models_dir, reference, hub_env):
    rt = Router(["--models-dir", models_dir], env=hub_env)
    try:
        props = rt.get("/props").json()
        assert props["role"] == "router" and props["max_instances"] == 4 and props["models_autoload"] is True
        ms = rt.models()
        assert set(ms) == {"gemma-a", "gemma-b", "tiny"}
        assert all(m["status"]["value"] == "unloaded" and m["source"] == "models_dir" for m in ms.values())
        assert ms["gemma-a"]["path"].endswith("gemma-a.gguf") and ms["gemma-a"]["can_remove"] is False
        assert {m["id"] for m in rt.get("/v1/models").json()["data"]} == set(ms)

        events = []
        sse = requests.get(rt.url + "/models/sse", stream=True, timeout=60)
        assert sse.status_code == 200 and sse.headers["Content-Type"].startswith("text/event-stream")

        def listen():  # until the router stops, which ends the stream
            try:
                for line in sse.iter_lines():
                    if line.startswith(b"data: "):
                        events.append(json.loads(line[6:]))
            except requests.RequestException:
                pass
        threading.Thread(target=listen, daemon=True).start()

        # the first request loads gemma-a; greedy, it answers as the model's own server does
        client = OpenAI(base_url=rt.url + "/v1", api_key="none")
        r = client.chat.completions.create(model="gemma-a", **CHAT)
        assert r.choices[0].message.content == reference and r.model == "gemma-a"
        m = rt.models()["gemma-a"]
        assert m["status"]["value"] == "loaded" and "meta" in m  # the child's own /v1/models entry
        assert "--alias" in m["status"]["args"] and "512" in m["status"]["args"]
        assert rt.status("gemma-b") == "unloaded"
        # streamed, relayed as it comes
        text = "".join(c.choices[0].delta.content or "" for c in
                       client.chat.completions.create(model="gemma-a", stream=True, **CHAT) if c.choices)
        assert text == reference
        # GET routes name their model with ?model=; a missing or unknown model is llama-server's 400
        assert rt.get("/props?model=gemma-a").json()["model_alias"] == "gemma-a"
        r = rt.post("/v1/chat/completions", dict(CHAT, model="no-such-model"))
        assert r.status_code == 400 and "not found" in r.json()["error"]["message"]
        r = rt.post("/v1/chat/completions", CHAT)
        assert r.status_code == 400 and "missing" in r.json()["error"]["message"]
        assert rt.get("/slots").status_code == 400
        assert rt.post("/models/load", {"model": "gemma-a"}).status_code == 400  # already running
        assert rt.post("/models/load", {"model": "nope"}).status_code == 404
        assert rt.post("/models/unload", {"model": "gemma-b"}).status_code == 400  # not running
        assert rt.get("/no-such-route").status_code == 404
        # what changes the models takes JSON only: a page of another origin cannot send it unasked
        r = requests.post(rt.url + "/models/load", data='{"model": "tiny"}', headers={"Content-Type": "text/plain"},
                          timeout=30)
        assert r.status_code == 415 and rt.status("tiny") == "unloaded"

        # a client that leaves mid-stream ends the child's request: the next one is served
        with requests.post(rt.url + "/v1/completions", stream=True, timeout=60,
                           json={"model": "gemma-a", "prompt": "Once", "max_tokens": 400, "stream": True}) as s:
            next(s.iter_lines())
        r = rt.post("/v1/chat/completions", dict(CHAT, model="gemma-a"))
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == reference

        # a second model runs beside the first
        r = rt.post("/v1/chat/completions", dict(CHAT, model="gemma-b"))
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == reference
        kids = rt.children()
        assert len(kids) == 2
        assert rt.post("/models/unload", {"model": "gemma-a"}).json() == {"success": True}
        rt.wait("gemma-a", "unloaded")
        assert rt.status("gemma-b") == "loaded" and len(rt.children()) == 1

        seen = [(e["model"], e["event"], e.get("data", {}).get("status")) for e in events]
        for want in [("gemma-a", "status_change", "loading"), ("gemma-a", "status_change", "loaded"),
                     ("gemma-a", "status_change", "unloaded")]:
            assert want in seen, seen

        # a child that dies is reported unloaded, failed, with its exit code
        b = [p for p in rt.children()][0]
        os.kill(b, signal.SIGKILL)
        rt.wait("gemma-b", "unloaded")
        st = rt.models()["gemma-b"]["status"]
        assert st["failed"] is True and st["exit_code"] == 128 + signal.SIGKILL
        # and is loaded again by the next request
        assert rt.post("/v1/chat/completions", dict(CHAT, model="gemma-b")).status_code == 200
        kids = rt.children()
        assert len(kids) == 1
    finally:
        code, out = rt.stop()
    assert code == 0, out
    deadline = time.time() + 10
    while time.time() < deadline and any(alive(p) for p in kids):
        time.sleep(0.1)
    assert not any(alive(p) for p in kids), out
    assert "[gemma-a] " in out  # the children's output, relayed line by line


def test_models_max_evicts_the_least_recently_used(models_dir, hub_env):
    rt = Router(["--models-max", "2", "--models-dir", models_dir], env=hub_env)
    try:
        for m in ("gemma-a", "tiny"):
            assert rt.post("/models/load", {"model": m}).json() == {"success": True}
            rt.wait(m, "loaded")
        # gemma-a was used last: tiny is the one to go
        assert rt.post("/v1/completions", {"model": "gemma-a", "prompt": "Hi", "max_tokens": 2}).status_code == 200
        r = rt.post("/v1/completions", {"model": "gemma-b", "prompt": "Hi", "max_tokens": 2})
        assert r.status_code == 200, r.text
        ms = rt.models()
        assert [ms[m]["status"]["value"] for m in ("gemma-a", "gemma-b", "tiny")] == ["loaded", "loaded", "unloaded"]
        assert ms["tiny"]["status"].get("failed") is None  # asked to go, not failed
        assert len(rt.children()) == 2
    finally:
        rt.stop()


def test_no_autoload(models_dir, hub_env):
    rt = Router(["--no-models-autoload", "--models-dir", models_dir], binary=BIN, env=hub_env)
    try:
        assert rt.get("/props").json()["models_autoload"] is False
        r = rt.post("/v1/chat/completions", dict(CHAT, model="tiny", max_tokens=2))
        assert r.status_code == 400 and "not loaded" in r.json()["error"]["message"]
        assert rt.status("tiny") == "unloaded" and rt.children() == []
        # ?autoload=true loads it for this request
        r = requests.post(rt.url + "/v1/completions?autoload=true", json={"model": "tiny", "prompt": "a", "max_tokens": 2},
                          timeout=60)
        assert r.status_code == 200, r.text
        assert rt.post("/models/unload", {"model": "tiny"}).status_code == 200
        rt.wait("tiny", "unloaded")
        rt.post("/models/load", {"model": "tiny"})
        rt.wait("tiny", "loaded")
        assert rt.post("/v1/completions", {"model": "tiny", "prompt": "a", "max_tokens": 2}).status_code == 200
    finally:
        rt.stop()


def test_preset_and_reload(tmp_path, hub_env):
    preset = tmp_path / "models.ini"
    preset.write_text(f"""version = 1
; the options every model gets
[*]
n-predict = 3

[chat-a]
model = {default_model()}
c = 256
alias = first,primary
tags = small
load-on-startup = true

[tiny-b]
m = {TINY}
jinja = true
""")
    rt = Router(["--models-preset", str(preset)], env=hub_env)
    try:
        ms = rt.models()
        assert set(ms) == {"chat-a", "tiny-b"}
        a = ms["chat-a"]
        assert a["source"] == "preset" and a["aliases"] == ["first", "primary"] and a["tags"] == ["small"]
        assert "n-predict = 3" in a["status"]["preset"] and "c = 256" in a["status"]["preset"]
        args = a["status"]["args"]
        # precedence: [*], then the model's section, then the router's own command line (-c 512)
        assert args[args.index("--n-predict") + 1] == "3"
        assert args.index("256") < len(args) - 1 - args[::-1].index("512")
        assert "--jinja" in ms["tiny-b"]["status"]["args"]
        rt.wait("chat-a", "loaded")  # load-on-startup
        # an alias names the model; [*]'s n-predict bounds the reply
        r = rt.post("/completion", {"model": "primary", "prompt": "Once upon a time"})
        assert r.status_code == 200 and r.json()["tokens_predicted"] == 3, r.text

        preset.write_text(f"""[tiny-b]
m = {TINY}
jinja = true

[tiny-c]
model = {TINY}
""")
        ids = set(rt.models(reload=True))
        assert ids == {"tiny-b", "tiny-c"}
        deadline = time.time() + 15
        while rt.children() and time.time() < deadline:  # chat-a, gone from the preset, was unloaded
            time.sleep(0.1)
        assert rt.children() == []
        preset.write_text(f"[tiny-d]\nmodel = {TINY}\n")
        assert [m["id"] for m in rt.post("/models/reload", {}).json()["data"]] == ["tiny-d"]
        # a preset that no longer reads leaves the list as it was
        preset.write_text("[broken\n")
        r = rt.get("/models?reload=1")
        assert r.status_code == 500 and "section" in r.json()["error"]["message"]
        assert set(rt.models()) == {"tiny-d"}
    finally:
        rt.stop()


@pytest.mark.parametrize("text,needle", [
    ("[x]\nc = 256\n", "names no model"),
    ("[x]\nmodel = m.gguf\nbogus-flag = 1\n", "--bogus-flag"),
    ("[x]\nmodel = m.gguf\nload-on-startup = true\n[y]\nmodel = n.gguf\nload-on-startup = true\n", "--models-max 1"),
])
def test_preset_errors_stop_the_start(tmp_path, text, needle):
    preset = tmp_path / "p.ini"
    preset.write_text(text)
    r = subprocess.run([LLAMA_SERVER, "--port", str(free_port()), "--models-max", "1", "--models-preset", str(preset)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and needle in r.stderr, r.stderr


def test_router_flags_need_no_model():
    r = subprocess.run([BIN, "serve", "-m", default_model(), "--models-dir", "."], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "--models-dir" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_api_key_is_the_routers(models_dir, hub_env, tmp_path):
    kf = tmp_path / "keys.txt"
    kf.write_text("sk-from-file\n")
    rt = Router(["--api-key", "sk-router", "--api-key-file", str(kf), "--models-dir", models_dir], env=hub_env,
                key="sk-router")
    try:
        # listing is open, as in llama-server; everything else needs the key
        assert requests.get(rt.url + "/models", timeout=30).status_code == 200
        for method, path, body in [("post", "/v1/chat/completions", dict(CHAT, model="tiny")),
                                   ("post", "/models/load", {"model": "tiny"}), ("post", "/models", {"model": "a/b"}),
                                   ("delete", "/models?model=tiny", None), ("get", "/props", None)]:
            r = getattr(requests, method)(rt.url + path, json=body, timeout=30)
            assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error", (path, r.text)
        assert rt.children() == []
        r = rt.post("/v1/completions", {"model": "tiny", "prompt": "a", "max_tokens": 2})
        assert r.status_code == 200, r.text
        args = rt.models()["tiny"]["status"]["args"]
        assert "--api-key" not in args and "sk-router" not in args  # the child has no key, only the router
        assert "--api-key-file" not in args and str(kf) not in args
        r = requests.post(rt.url + "/v1/completions", json={"model": "tiny", "prompt": "a", "max_tokens": 2},
                          headers={"Authorization": "Bearer sk-from-file"}, timeout=300)
        assert r.status_code == 200, r.text
    finally:
        rt.stop()


def test_hub_cache_download_and_delete(models_dir, hub_env):
    hub = Hub()
    try:
        with open(TINY, "rb") as f:
            tiny = f.read()
        hub.add("org/tiny-GGUF", {"tiny-F16.gguf": tiny, "tiny-mmproj-F16.gguf": b"GGUF" + b"\0" * 100,
                                  "README.md": b"# tiny\n"}, lfs={"tiny-F16.gguf", "tiny-mmproj-F16.gguf"})
        env = dict(hub_env, HF_ENDPOINT=hub.url)
        rt = Router(["--models-dir", models_dir], env=env)
        try:
            events = []
            ready = threading.Event()

            def listen():
                try:
                    with requests.get(rt.url + "/models/sse", stream=True, timeout=60) as s:
                        ready.set()
                        for line in s.iter_lines():
                            if line.startswith(b"data: "):
                                events.append(json.loads(line[6:]))
                except requests.RequestException:
                    pass
            threading.Thread(target=listen, daemon=True).start()
            assert ready.wait(10)
            assert rt.post("/models", {"model": "org/tiny-GGUF:F16"}).json() == {"success": True}
            deadline = time.time() + 60
            while time.time() < deadline and not any(e["event"].startswith("download_") and e["event"] != "download_progress"
                                                     for e in events):
                time.sleep(0.1)
            kinds = [e["event"] for e in events if e["model"] == "org/tiny-GGUF:F16"]
            assert "download_progress" in kinds and kinds[-1] == "download_finished", events
            prog = [e for e in events if e["event"] == "download_progress"][-1]["data"]["progress"]
            assert prog["tiny-F16.gguf"] == {"done": len(tiny), "total": len(tiny)}
            # listed from the cache as llama-server names it, and served
            m = rt.models()["org/tiny-GGUF:F16"]
            assert m["source"] == "cache" and m["can_remove"] is True and m["status"]["value"] == "unloaded"
            r = rt.post("/v1/completions", {"model": "org/tiny-GGUF:F16", "prompt": "a", "max_tokens": 2})
            assert r.status_code == 200, r.text
            assert rt.post("/models", {"model": "org/tiny-GGUF:F16"}).status_code == 400  # already there

            # a model the Hub lacks: the download fails, and says so
            assert rt.post("/models", {"model": "org/missing-GGUF:Q4_K_M"}).status_code == 200
            deadline = time.time() + 30
            while time.time() < deadline and not any(e["event"] == "download_failed" for e in events):
                time.sleep(0.1)
            failed = [e for e in events if e["event"] == "download_failed"]
            assert failed and failed[0]["model"] == "org/missing-GGUF:Q4_K_M" and failed[0]["data"]["error"]
            assert "org/missing-GGUF:Q4_K_M" not in rt.models()

            # DELETE stops the child and takes the files out of the cache
            repo = os.path.join(env["HF_HOME"], "hub", "models--org--tiny-GGUF")
            r = requests.delete(rt.url + "/models", params={"model": "org/tiny-GGUF:F16"}, timeout=30)
            assert r.status_code == 200 and r.json() == {"success": True}, r.text
            assert "org/tiny-GGUF:F16" not in rt.models(reload=True)
            snap = os.path.join(repo, "snapshots")
            left = [f for _, _, fs in os.walk(snap) for f in fs]
            assert left == [] or "tiny-F16.gguf" not in left
            assert len(os.listdir(os.path.join(repo, "blobs"))) == 0  # nothing else linked the blob
            assert any(e["event"] == "model_remove" for e in events)
            assert requests.delete(rt.url + "/models", params={"model": "tiny"}, timeout=30).status_code == 400
            assert requests.delete(rt.url + "/models", params={"model": "nope"}, timeout=30).status_code == 404
        finally:
            rt.stop()
    finally:
        hub.close()
