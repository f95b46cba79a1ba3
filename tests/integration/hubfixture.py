"""A local stand-in for the Hugging Face Hub, for the `1bit pull` tests: the API route that
lists a repo's files, the resolve route (an LFS file answers with a redirect to a CDN on
another port, carrying X-Repo-Commit, X-Linked-Etag and X-Linked-Size as the Hub sends
them; a small file answers itself with its git blob id as ETag), and the CDN (Range
requests answered with 206). It misbehaves on cue: drops the connection mid-file, answers
429 with Retry-After, serves bytes whose checksum is not the listed one, ignores Range,
says a repo is gated. Every request is logged with its headers."""
import hashlib
import http.server
import json
import socket
import threading
import urllib.parse


def git_blob_oid(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Hub:
    def __init__(self):
        self.repos = {}      # "org/name" -> {"commit": str, "files": {path: bytes}, "lfs": set}
        self.log = []        # {"server", "method", "path", "headers"} in arrival order
        self.lock = threading.Lock()
        self.drop = 0        # the next N CDN answers stop halfway and close the connection
        self.statuses = {"api": [], "resolve": [], "cdn": []}  # answers to give first (429, 503, ...)
        self.bad_sum = False  # the CDN flips the last byte of every file
        self.no_range = False  # the CDN answers 200 with the whole file to a Range request
        self.gated = set()   # repos whose files answer 401 GatedRepo
        self.api_srv = self._start("api")
        self.cdn_srv = self._start("cdn")
        self.url = "http://127.0.0.1:%d" % self.api_srv.server_address[1]
        self.cdn_url = "http://127.0.0.1:%d" % self.cdn_srv.server_address[1]

    def add(self, repo, files, lfs=True, commit=None):
        """files: {path: bytes}; lfs: True (every file), False, or a set of paths."""
        commit = commit or hashlib.sha1(repr((repo, sorted(files.items()))).encode()).hexdigest()
        lfs_set = set(files) if lfs is True else set(lfs or ())
        self.repos[repo] = {"commit": commit, "files": dict(files), "lfs": lfs_set}
        return commit

    def close(self):
        for s in (self.api_srv, self.cdn_srv):
            s.shutdown()
            s.server_close()

    def requests(self, server=None, contains=None):
        with self.lock:
            return [r for r in self.log if (server is None or r["server"] == server) and
                    (contains is None or contains in r["path"])]

    def _start(self, role):
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                self._route(head=False)

            def do_HEAD(self):
                self._route(head=True)

            def _send(self, status, headers=(), body=b"", head=False):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head and body:
                    self.wfile.write(body)

            def _error(self, status, code, msg, head):
                body = json.dumps({"error": msg}).encode()
                self._send(status, [("Content-Type", "application/json"), ("X-Error-Code", code),
                                    ("X-Error-Message", msg)], body, head)

            def _cued(self, kind, head):
                with hub.lock:
                    st = hub.statuses[kind].pop(0) if hub.statuses[kind] else None
                if st is None:
                    return False
                hdrs = [("Retry-After", "1")] if st in (429, 503) else []
                self._send(st, hdrs, b"busy", head)
                return True

            def _route(self, head):
                u = urllib.parse.urlsplit(self.path)
                path = urllib.parse.unquote(u.path)
                with hub.lock:
                    hub.log.append({"server": role, "method": self.command, "path": self.path,
                                    "headers": {k.lower(): v for k, v in self.headers.items()}})
                try:
                    if role == "cdn":
                        self._cdn(path, head)
                    else:
                        self._api(path, head)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            def _api(self, path, head):
                parts = path.strip("/").split("/")
                if parts[:2] == ["api", "models"] and len(parts) == 4:
                    if self._cued("api", head):
                        return
                    repo = hub.repos.get("/".join(parts[2:4]))
                    if repo is None:
                        return self._error(401, "RepoNotFound", "Repository not found", head)
                    sib = []
                    for name in sorted(repo["files"]):
                        data = repo["files"][name]
                        e = {"rfilename": name, "blobId": git_blob_oid(data), "size": len(data)}
                        if name in repo["lfs"]:
                            e["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                                        "pointerSize": 134}
                        sib.append(e)
                    body = json.dumps({"id": "/".join(parts[2:4]), "sha": repo["commit"], "private": False,
                                       "siblings": sib}).encode()
                    return self._send(200, [("Content-Type", "application/json")], body, head)
                if len(parts) >= 5 and parts[2] == "resolve":
                    if self._cued("resolve", head):
                        return
                    name = "/".join(parts[:2])
                    repo = hub.repos.get(name)
                    if repo is None:
                        return self._error(404, "RepoNotFound", "Repository not found", head)
                    if name in hub.gated:
                        return self._error(401, "GatedRepo", "Access to this model is restricted", head)
                    if parts[3] not in ("main", repo["commit"]):
                        return self._error(404, "RevisionNotFound", "Invalid rev id", head)
                    file = "/".join(parts[4:])
                    data = repo["files"].get(file)
                    if data is None:
                        return self._error(404, "EntryNotFound", "Entry not found", head)
                    common = [("X-Repo-Commit", repo["commit"]), ("Accept-Ranges", "bytes")]
                    if file in repo["lfs"]:
                        sha = hashlib.sha256(data).hexdigest()
                        loc = "%s/cdn/%s?X-Amz-Signature=s3cr3t-signature" % (hub.cdn_url, sha)
                        return self._send(302, common + [("Location", loc), ("ETag", '"%s"' % git_blob_oid(b"ptr" + data)),
                                                         ("X-Linked-Etag", '"%s"' % sha),
                                                         ("X-Linked-Size", str(len(data)))], b"", head)
                    return self._send(200, common + [("ETag", '"%s"' % git_blob_oid(data))], data, head)
                return self._error(404, "EntryNotFound", "no such route", head)

            def _cdn(self, path, head):
                if self._cued("cdn", head):
                    return
                sha = path.rsplit("/", 1)[-1]
                data = None
                for repo in hub.repos.values():
                    for d in repo["files"].values():
                        if hashlib.sha256(d).hexdigest() == sha:
                            data = d
                if data is None:
                    return self._send(404, [], b"NoSuchKey", head)
                if hub.bad_sum:
                    data = data[:-1] + bytes([data[-1] ^ 0xFF])
                start = 0
                rng = self.headers.get("Range")
                if rng and not hub.no_range and rng.startswith("bytes=") and rng.endswith("-"):
                    start = int(rng[6:-1])
                    if start >= len(data):
                        return self._send(416, [("Content-Range", "bytes */%d" % len(data))], b"", head)
                body = data[start:]
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("ETag", '"%s"' % sha)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if head:
                    return
                with hub.lock:
                    cut = hub.drop > 0
                    if cut:
                        hub.drop -= 1
                if cut:
                    self.wfile.write(body[:len(body) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                for i in range(0, len(body), 1 << 16):
                    self.wfile.write(body[i:i + (1 << 16)])

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        return srv
