"""A mock Hugging Face Hub on 127.0.0.1 that answers as the real one does (what huggingface_hub's
file_download.py / hf_api.py send and read):

- GET /api/models/{repo}/revision/{rev}[?blobs=true]: {"id", "sha", "gated", "siblings": [{"rfilename"
  [, "blobId", "size", "lfs": {"sha256", "size", "pointerSize"}]}]}
- GET /api/models/{repo}/tree/{rev}?recursive=true: [{"type": "file", "oid", "size", "path", "lfs"}],
  paginated by a Link: <...>; rel="next" header (2 entries a page when `page_size` is set)
- HEAD/GET /{repo}/resolve/{rev}/{path}: X-Repo-Commit; small files in place (ETag = git blob sha1,
  Range / 206); LFS files (*.safetensors) a 302 to a second origin (another port, "the CDN") with
  X-Linked-Etag = sha256 and X-Linked-Size
- errors with X-Error-Code / X-Error-Message: RepoNotFound (401), RevisionNotFound (404),
  EntryNotFound (404), GatedRepo (401 without a token, 403 with one that has no access)

Faults for tests: `slow[path] = s` delays the CDN's answer; `cut[path] = n` sends n bytes of the next CDN answer for that file, then drops the
connection; `tamper.add(path)` serves that file with one byte changed. Every request is logged
(method, origin "hub"/"cdn", path, headers)."""
import hashlib
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(path):
    return path.endswith(".safetensors")


class Repo:
    def __init__(self, files, gated=False):
        self.commits = {}    # commit -> {path: bytes}
        self.refs = {}       # branch or tag -> commit
        self.gated = gated
        self.add_commit("main", files)

    def add_commit(self, ref, files):
        commit = hashlib.sha1(json.dumps(sorted((p, hashlib.sha256(d).hexdigest()) for p, d in files.items()))
                              .encode() + ref.encode()).hexdigest()
        self.commits[commit] = dict(files)
        self.refs[ref] = commit
        return commit

    def resolve(self, rev):
        if rev in self.refs:
            return self.refs[rev]
        return rev if rev in self.commits else None


class MockHub:
    def __init__(self):
        self.repos = {}
        self.tokens_with_access = set()   # tokens that may read gated repos
        self.known_tokens = set()         # every valid token
        self.cut = {}
        self.tamper = set()
        self.page_size = None
        self.fake_size = {}               # path -> the size the API claims (a disk that cannot hold it)
        self.slow = {}                    # path -> seconds the CDN waits before answering
        self.siblings_without_blobs = False  # the revision API leaves sizes and hashes out: the tree has them
        self.log = []
        self.lock = threading.Lock()
        self.hub = ThreadingHTTPServer(("127.0.0.1", 0), self._handler("hub"))
        self.cdn = ThreadingHTTPServer(("127.0.0.1", 0), self._handler("cdn"))
        self.hub.daemon_threads = self.cdn.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.hub.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self.cdn.server_address[1]}"
        self.blobs = {}  # sha256 -> (repo, path, bytes)
        for s in (self.hub, self.cdn):
            threading.Thread(target=s.serve_forever, daemon=True).start()

    def close(self):
        for s in (self.hub, self.cdn):
            s.shutdown()
            s.server_close()

    def add_repo(self, repo_id, files, gated=False):
        self.repos[repo_id] = Repo(files, gated)
        return self.repos[repo_id]

    def requests(self, origin=None, kind=None):
        with self.lock:
            return [r for r in self.log if (origin is None or r["origin"] == origin)
                    and (kind is None or kind in r["path"])]

    def clear_log(self):
        with self.lock:
            self.log.clear()

    def _handler(self, origin):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self._serve(head=True)

            def do_GET(self):
                self._serve(head=False)

            def _send(self, status, headers=None, body=b"", head=False):
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _error(self, status, code, message, head=False):
                self._send(status, {"X-Error-Code": code, "X-Error-Message": message,
                                    "Content-Type": "application/json"},
                           json.dumps({"error": message}).encode(), head)

            def _token(self):
                auth = self.headers.get("Authorization", "")
                return auth[len("Bearer "):] if auth.startswith("Bearer ") else None

            def _serve(self, head):
                url = urllib.parse.urlsplit(self.path)
                with hub.lock:
                    hub.log.append({"method": self.command, "origin": origin, "path": url.path,
                                    "query": url.query, "headers": dict(self.headers)})
                if origin == "cdn":
                    return self._cdn(url, head)
                token = self._token()
                if token is not None and token not in hub.known_tokens:
                    return self._error(401, "", "Invalid credentials in Authorization header", head)
                parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
                if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
                    return self._api(parts, urllib.parse.parse_qs(url.query), head)
                if len(parts) >= 5 and parts[2] == "resolve":
                    return self._resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]), token, head)
                self._send(404, body=b"not found", head=head)

            def _repo_rev(self, repo_id, rev, head):
                repo = hub.repos.get(repo_id)
                if repo is None:
                    self._error(401, "RepoNotFound", "Repository not found", head)
                    return None, None
                commit = repo.resolve(rev)
                if commit is None:
                    self._error(404, "RevisionNotFound", "Invalid rev id: " + rev, head)
                    return None, None
                return repo, commit

            def _entry(self, path, data, blobs, tree):
                e = {"rfilename": path} if not tree else {"type": "file", "path": path}
                if (blobs and not hub.siblings_without_blobs) or tree:
                    size = hub.fake_size.get(path, len(data))
                    e["oid" if tree else "blobId"] = git_blob_sha1(data)
                    e["size"] = size
                    if is_lfs(path):
                        sha = hashlib.sha256(data).hexdigest()
                        e["lfs"] = {("oid" if tree else "sha256"): sha, "size": size, "pointerSize": 134}
                return e

            def _api(self, parts, query, head):
                repo_id, what, rev = "/".join(parts[2:4]), parts[4], "/".join(parts[5:])
                repo, commit = self._repo_rev(repo_id, rev, head)
                if repo is None:
                    return
                files = repo.commits[commit]
                if what == "revision":
                    blobs = query.get("blobs", ["false"])[0].lower() == "true"
                    body = {"_id": "0", "id": repo_id, "modelId": repo_id, "sha": commit, "private": False,
                            "gated": "manual" if repo.gated else False, "disabled": False, "tags": [],
                            "siblings": [self._entry(p, d, blobs, False) for p, d in sorted(files.items())]}
                    return self._send(200, {"Content-Type": "application/json"}, json.dumps(body).encode(), head)
                entries = [self._entry(p, d, True, True) for p, d in sorted(files.items())]
                start = int(query.get("cursor", ["0"])[0])
                headers = {"Content-Type": "application/json"}
                if hub.page_size:
                    if start + hub.page_size < len(entries):
                        nxt = f"{hub.url}/api/models/{repo_id}/tree/{rev}?recursive=true&cursor={start + hub.page_size}"
                        headers["Link"] = f'<{nxt}>; rel="next"'
                    entries = entries[start:start + hub.page_size]
                self._send(200, headers, json.dumps(entries).encode(), head)

            def _resolve(self, repo_id, rev, path, token, head):
                repo, commit = self._repo_rev(repo_id, rev, head)
                if repo is None:
                    return
                if repo.gated and token not in hub.tokens_with_access:
                    status = 401 if token is None else 403
                    return self._error(status, "GatedRepo", f"Access to model {repo_id} is restricted.", head)
                data = repo.commits[commit].get(path)
                if data is None:
                    return self._error(404, "EntryNotFound", f"{path} does not exist on {rev}", head)
                if is_lfs(path):
                    sha = hashlib.sha256(data).hexdigest()
                    hub.blobs[sha] = (repo_id, path, data)
                    return self._send(302, {"Location": f"{hub.cdn_url}/blobs/{sha}?X-Amz-Signature=abc",
                                            "X-Repo-Commit": commit, "X-Linked-Etag": f'"{sha}"',
                                            "X-Linked-Size": str(len(data)), "ETag": f'"{git_blob_sha1(data)}"'},
                                      b"", head)
                self._ranged(data, path, {"X-Repo-Commit": commit, "ETag": f'"{git_blob_sha1(data)}"'}, head)

            def _cdn(self, url, head):
                parts = url.path.split("/")
                entry = hub.blobs.get(parts[-1]) if len(parts) == 3 and parts[1] == "blobs" else None
                if entry is None:
                    return self._send(404, body=b"no such blob", head=head)
                if entry[1] in hub.slow:
                    time.sleep(hub.slow[entry[1]])
                self._ranged(entry[2], entry[1], {"ETag": f'"{parts[-1]}"'}, head)

            def _ranged(self, data, path, headers, head):
                if path in hub.tamper:
                    data = bytes([data[0] ^ 1]) + data[1:]
                status, body = 200, data
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    a, _, b = rng[len("bytes="):].partition("-")
                    a = int(a)
                    if a >= len(data):
                        return self._send(416, {"Content-Range": f"bytes */{len(data)}"}, b"", head)
                    end = int(b) if b else len(data) - 1
                    status, body = 206, data[a:end + 1]
                    headers = dict(headers, **{"Content-Range": f"bytes {a}-{end}/{len(data)}"})
                headers = dict(headers, **{"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"})
                cut = hub.cut.pop(path, None) if not head else None
                if cut is None:
                    return self._send(status, headers, body, head)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[:cut])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)

        return Handler
