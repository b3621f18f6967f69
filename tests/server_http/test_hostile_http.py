"""Hostile clients at the HTTP layer (issue 28), over raw loopback sockets: slow and idle
connections, pipelining, request smuggling, size limits, compressed and chunked bodies, Host,
HTTP/1.0, 401 bodies, key handling, Range, log escaping, CORS. Every wait is bounded; the server
runs with short timeouts so the suite stays well under a minute."""
import gzip
import json
import os
import socket
import subprocess
import threading
import time

import httpx
import pytest

from conftest import FP4LM, Server

KEY = "rt%41key"  # percent signs: a server that percent-decodes the header would accept rt%2541key
LIMITS = ["--header-timeout", "2", "--keep-alive-timeout", "2", "--max-body-bytes", "65536", "--body-silence-timeout", "1"]


@pytest.fixture(scope="module")
def srv(tiny_model, logs):
    s = Server(tiny_model, "--served-model-name", "tiny", *LIMITS, log_dir=logs, name="hostile")
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def keyed(tiny_model, logs):
    s = Server(tiny_model, "--served-model-name", "tiny", "--api-key", KEY, *LIMITS, log_dir=logs, name="hostile-key")
    yield s
    assert s.stop() == 0, s.log()


def connect(s, source="127.0.0.1"):
    c = socket.create_connection(("127.0.0.1", s.port), timeout=10, source_address=(source, 0))
    return c


class Reader:
    """Reads HTTP/1.1 responses off a socket (Content-Length, chunked or close-delimited)."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self):
        status = int(self._line().split(b" ")[1])
        headers = {}
        while (line := self._line()):
            k, v = line.split(b":", 1)
            headers[k.decode().lower()] = v.decode().strip()
        if "content-length" in headers:
            body = self._take(int(headers["content-length"]))
        elif headers.get("transfer-encoding") == "chunked":
            body = b""
            while (size := int(self._line(), 16)):
                body += self._take(size)
                self._take(2)
            self._take(2)
        else:
            body = self.rest()
        return status, headers, body

    def rest(self):
        try:
            while True:
                self._fill()
        except (EOFError, ConnectionResetError):
            pass
        out, self.buf = self.buf, b""
        return out

    def closed(self):
        """True once the server has closed the connection (bounded by the socket timeout)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


def exchange(s, raw, source="127.0.0.1"):
    """Sends `raw` on a new connection and reads one response; the Reader (and its open socket)
    comes back for what follows."""
    c = connect(s, source)
    c.sendall(raw)
    r = Reader(c)
    status, headers, body = r.response()
    return status, headers, body, r


def post(path, body, extra=""):
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


# /health must answer while hostile clients hold connections. The figure (within 1 s under
# 40 streams + 500 idle + 40 slow connections) is measured on a quiet machine and recorded in
# docs/BENCHMARKS.md; here the bound only has to tell "answered" from "blocked" (cpp-httplib's
# front end took 13.8 s, or ~100 s behind idle connections) on a shared, loaded CI machine.
HEALTH_BOUND_S = float(os.environ.get("FP4LM_HEALTH_BOUND_S", "5"))


def health_seconds(s):
    t0 = time.monotonic()
    assert httpx.get(s.url + "/health", timeout=30).status_code == 200
    return time.monotonic() - t0


# --- slow, idle and many connections ---------------------------------------------------------

def test_slowloris_connections_are_cut_at_the_header_deadline_and_block_nobody(srv):
    conns = [connect(srv) for _ in range(40)]
    for c in conns:
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    t0 = time.monotonic()
    for _ in range(3):  # a header line every 0.5 s: inside any per-read timeout
        time.sleep(0.5)
        assert health_seconds(srv) < HEALTH_BOUND_S
        for c in conns:
            try:
                c.sendall(b"X-Slow: 1\r\n")
            except OSError:
                pass
    for c in conns:  # the 2 s header deadline is total, not per line
        c.settimeout(max(0.1, 6 - (time.monotonic() - t0)))
        assert Reader(c).closed()
        c.close()
    assert time.monotonic() - t0 < 6


def test_a_body_that_stops_short_of_its_length_is_a_408_after_the_silence_timeout(srv):
    """Issue 41: a body that stops before its Content-Length (or its last chunk) is answered 408
    and closed once the client has been silent for --body-silence-timeout (1 s here), not held
    for the whole --body-timeout; a body that keeps coming, slowly, is read."""
    for head, part in [(b"Content-Length: 100\r\n", b'{"prompt": "x"'),
                       (b"Transfer-Encoding: chunked\r\n", b"5\r\n{\"pro\r\n")]:
        c = connect(srv)
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + head + b"\r\n"
                  + part)
        t0 = time.monotonic()
        c.settimeout(10)
        status, headers, body = Reader(c).response()
        waited = time.monotonic() - t0
        assert status == 408, body
        assert 0.8 < waited < 4, waited
        assert b"request body" in body
        assert Reader(c).closed()
        c.close()
    # Pauses shorter than the silence timeout: the request is served.
    data = json.dumps({"prompt": "x", "max_tokens": 1}).encode()
    c = connect(srv)
    c.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(data))
    for i in range(0, len(data), 8):
        time.sleep(0.3)
        c.sendall(data[i:i + 8])
    c.settimeout(10)
    status, _, _ = Reader(c).response()
    assert status == 200
    c.close()


def test_idle_flood_gives_way_to_new_clients(tiny_model, logs):
    s = Server(tiny_model, "--max-connections", "100", "--max-connections-per-ip", "60", log_dir=logs, name="flood")
    try:
        idle = [connect(s, f"127.0.0.{2 + i % 3}") for i in range(300)]  # more than both caps
        assert health_seconds(s) < HEALTH_BOUND_S  # the longest-idle connection made room
        for _ in range(5):
            assert health_seconds(s) < HEALTH_BOUND_S
        for c in idle:
            c.close()
    finally:
        assert s.stop() == 0, s.log()


def test_health_within_a_second_under_40_streams_500_idle_and_40_slow(tiny_model, logs):
    s = Server(tiny_model, "--max-num-seqs", "8", "--header-timeout", "30", "--keep-alive-timeout", "30",
               log_dir=logs, name="done-when")
    stop = threading.Event()
    try:
        def stream():
            body = {"prompt": "x", "max_tokens": 200, "ignore_eos": True, "stream": True}
            while not stop.is_set():
                with httpx.stream("POST", s.url + "/v1/completions", json=body, timeout=60) as r:
                    for _ in r.iter_lines():
                        if stop.is_set():
                            break
        threads = [threading.Thread(target=stream) for _ in range(40)]
        for t in threads:
            t.start()
        idle = [connect(s, f"127.0.1.{1 + i % 4}") for i in range(500)]
        slow = [connect(s, "127.0.2.1") for _ in range(40)]
        for c in slow:
            c.sendall(b"GET /health HTTP/1.1\r\n")
        time.sleep(1.0)
        times = [health_seconds(s) for _ in range(10)]
        print(f"/health under 40 streams + 500 idle + 40 slow: worst {max(times):.3f} s, "
              f"median {sorted(times)[5]:.3f} s")
        assert max(times) < HEALTH_BOUND_S, times
        stop.set()
        for c in idle + slow:
            c.close()
        for t in threads:
            t.join(timeout=60)
    finally:
        stop.set()
        assert s.stop(timeout=60) == 0, s.log()


# --- message framing -------------------------------------------------------------------------

def test_pipelined_requests_are_all_answered_in_order(srv):
    raw = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + post("/tokenize", {"prompt": "ab"}) +
           b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" + post("/detokenize", {"tokens": [104, 105]}))
    with connect(srv) as c:
        c.sendall(raw)
        r = Reader(c)
        assert r.response()[0] == 200
        assert json.loads(r.response()[2])["tokens"] == [97, 98]
        assert json.loads(r.response()[2])["data"][0]["id"] == "tiny"
        assert json.loads(r.response()[2])["prompt"] == "hi"


@pytest.mark.parametrize("head,status", [
    ("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", 400),
    ("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", 400),
    ("Content-Length: 5\r\nContent-Length: 6\r\n", 400),
    ("Content-Length: 5, 6\r\n", 400),
    ("Transfer-Encoding: gzip\r\n", 501),
    ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400),
    ("Content-Length: -5\r\n", 400),
])
def test_smuggling_ambiguities_are_a_400_and_close(srv, head, status):
    raw = f"POST /tokenize HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode() + b"0\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    got, headers, _, r = exchange(srv, raw)
    assert got == status
    assert headers["connection"] == "close"
    assert r.rest() == b""  # the smuggled request got no answer


def test_bad_chunk_syntax_is_a_400(srv):
    raw = b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"
    assert exchange(srv, raw)[0] == 400


def test_a_chunked_body_is_decoded_and_cannot_pass_the_body_limit(srv):
    data = json.dumps({"prompt": "ab"}).encode()
    ok = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
          b"".join(b"%x\r\n%s\r\n" % (1, data[i:i + 1]) for i in range(len(data))) + b"0\r\n\r\n")
    status, _, body, _ = exchange(srv, ok)
    assert status == 200 and json.loads(body)["tokens"] == [97, 98]
    big = b"%x\r\n%s\r\n" % (40000, b"a" * 40000)  # two chunks: 80000 bytes > 65536
    raw = b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + big + big + b"0\r\n\r\n"
    assert exchange(srv, raw)[0] == 413


def test_body_over_the_limit_is_a_413_before_it_is_read(srv):
    raw = b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n"
    status, headers, _, _ = exchange(srv, raw)
    assert status == 413 and headers["connection"] == "close"


def test_a_gzip_bomb_is_refused_unread(srv):
    bomb = gzip.compress(b'{"prompt": "' + b"a" * 10_000_000 + b'"}')  # ~10 KB -> 10 MB
    raw = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
           b"Content-Length: %d\r\n\r\n" % len(bomb)) + bomb
    assert exchange(srv, raw)[0] == 415


@pytest.mark.parametrize("raw,status", [
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n", 431),
    (b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Many: aaaaaaaaaaaaaaaaaaaa\r\n" * 1000 + b"\r\n", 431),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01b\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nBad Name: a\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nHost: x\r\n Folded: a\r\n\r\n", 400),
    (b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 505),
])
def test_line_and_header_limits_and_syntax(srv, raw, status):
    assert exchange(srv, raw)[0] == status


def test_a_head_section_without_end_is_bounded_while_reading(srv):
    with connect(srv) as c:
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        sent = 0
        try:
            for _ in range(64):  # 1 MiB of header lines, never ending the section
                c.sendall(b"X-Fill: " + b"a" * 16000 + b"\r\n")
                sent += 1
        except OSError:
            pass  # refused and closed while we were still sending
        assert sent < 64 or Reader(c).response()[0] == 431


@pytest.mark.parametrize("host,status", [
    (None, 400), ("a b", 400), ("x/y", 400), ("h:99999999", 400), ("[::1]:8000", 200), ("example.com:80", 200),
])
def test_host_is_required_and_valid_on_http_1_1(srv, host, status):
    head = "" if host is None else f"Host: {host}\r\n"
    assert exchange(srv, f"GET /health HTTP/1.1\r\n{head}\r\n".encode())[0] == status


def test_two_host_fields_are_a_400(srv):
    assert exchange(srv, b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")[0] == 400


def test_http_1_0_gets_no_chunked_coding_and_a_close(srv):
    status, headers, _, r = exchange(srv, b"GET /v1/models HTTP/1.0\r\n\r\n")
    assert status == 200 and "content-length" in headers and headers["connection"] == "close"
    assert r.closed()
    data = json.dumps({"prompt": "ab", "max_tokens": 3, "ignore_eos": True, "stream": True}).encode()
    raw = b"POST /v1/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n" % len(data) + data
    status, headers, body, _ = exchange(srv, raw)  # close-delimited: read to the end
    assert status == 200 and "transfer-encoding" not in headers and headers["connection"] == "close"
    events = [line[6:] for line in body.decode().split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"


def test_http_1_0_keep_alive_and_1_1_connection_close(srv):
    with connect(srv) as c:
        c.sendall(b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /health HTTP/1.0\r\n\r\n")
        r = Reader(c)
        assert r.response()[1]["connection"] == "keep-alive"
        assert r.response()[1]["connection"] == "close"
        assert r.closed()
    status, headers, _, r = exchange(srv, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status == 200 and headers["connection"] == "close" and r.closed()


def test_range_is_ignored_on_metrics_and_generated_responses(srv):
    r = httpx.get(srv.url + "/metrics", headers={"Range": "bytes=0-0,0-0,0-0"})
    assert r.status_code == 200 and "content-range" not in r.headers and len(r.content) > 100
    r = httpx.post(srv.url + "/v1/completions", headers={"Range": "bytes=0-1"},
                   json={"prompt": "ab", "max_tokens": 2, "ignore_eos": True})
    assert r.status_code == 200 and "content-range" not in r.headers and r.json()["usage"]["completion_tokens"] == 2


def test_request_data_is_escaped_in_the_log(srv):
    assert exchange(srv, b"GET /\x1b[31mred HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 400
    assert exchange(srv, b"GET /a\xc2\x9b31mb HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 404  # 8-bit CSI
    log = srv.log()
    assert "\x1b" not in log and "\x9b" not in log
    assert "/a\\xc2\\x9b31mb" in log


def test_client_hang_up_is_seen_and_pipelined_bytes_are_not_one(srv):
    # A pipelined request sent while the first runs is answered after it (not taken for a hang-up).
    data = json.dumps({"prompt": "ab", "max_tokens": 20, "ignore_eos": True}).encode()
    first = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(data) + data
    with connect(srv) as c:
        c.sendall(first)
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        r = Reader(c)
        status, _, body, = r.response()
        assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 20
        assert r.response()[0] == 200


# --- authentication ----------------------------------------------------------------------------

def test_the_body_of_a_401_never_runs_as_a_request(keyed):
    inner = post("/tokenize", {"prompt": "ab"}, f"Authorization: Bearer {KEY}\r\n")
    raw = (f"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: {len(inner)}\r\n\r\n").encode() + inner
    status, headers, _, r = exchange(keyed, raw)
    assert status == 401 and headers["connection"] == "close"
    assert r.rest() == b""
    log = keyed.log()
    assert '"POST /tokenize" 200' not in log


@pytest.mark.parametrize("auth,status", [
    (f"Bearer {KEY}", 200), ("Bearer rt%2541key", 401), ("Bearer rtAkey", 401), (f"bearer {KEY}", 401),
    (f"Bearer  {KEY}", 401), (f"Bearer {KEY[:-1]}", 401), ("", 401),
])
def test_the_key_is_compared_raw(keyed, auth, status):
    raw = f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n\r\n".encode()
    assert exchange(keyed, raw)[0] == status


def test_health_stays_open_and_preflight_comes_before_the_key(keyed):
    assert exchange(keyed, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200
    raw = (b"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://app.example\r\n"
           b"Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, content-type\r\n\r\n")
    status, headers, _, _ = exchange(keyed, raw)
    assert status == 200
    assert headers["access-control-allow-origin"] == "*"
    assert "POST" in headers["access-control-allow-methods"]
    assert headers["access-control-allow-headers"] == "authorization, content-type"


@pytest.mark.parametrize("how", ["flag", "env", "file"])
def test_an_empty_key_is_a_usage_error(tiny_model, tmp_path, how):
    args, env = [FP4LM, "serve", "--model", str(tiny_model), "--port", "0"], dict(os.environ)
    if how == "flag":
        args += ["--api-key", ""]
    elif how == "env":
        env["FP4LM_API_KEY"] = ""
    else:
        (tmp_path / "key").write_text("\n")
        args += ["--api-key-file", str(tmp_path / "key")]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert "empty" in r.stderr


@pytest.mark.parametrize("how", ["env", "file"])
def test_the_key_from_the_environment_or_a_file(tiny_model, tmp_path, logs, how, monkeypatch):
    args = []
    if how == "env":
        monkeypatch.setenv("FP4LM_API_KEY", "k-env")
        key = "k-env"
    else:
        (tmp_path / "key").write_text("k-file\n")
        args, key = ["--api-key-file", str(tmp_path / "key")], "k-file"
    s = Server(tiny_model, *args, log_dir=logs, name=f"key-{how}")
    try:
        assert httpx.get(s.url + "/v1/models").status_code == 401
        assert httpx.get(s.url + "/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    finally:
        assert s.stop() == 0, s.log()


# --- CORS ---------------------------------------------------------------------------------------

def test_cors_flags(tiny_model, logs):
    s = Server(tiny_model, "--allowed-origins", '["http://a.example"]', "--allowed-methods", "GET,POST",
               "--allowed-headers", "content-type", "--allow-credentials", log_dir=logs, name="cors")
    try:
        def preflight(origin, method="POST", headers="content-type"):
            return httpx.options(s.url + "/v1/completions", headers={
                "Origin": origin, "Access-Control-Request-Method": method,
                "Access-Control-Request-Headers": headers})
        r = preflight("http://a.example")
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "http://a.example"
        assert r.headers["access-control-allow-credentials"] == "true"
        assert r.headers["access-control-allow-methods"] == "GET, POST"
        assert preflight("http://b.example").status_code == 400
        assert preflight("http://a.example", method="DELETE").status_code == 400
        assert preflight("http://a.example", headers="x-secret").status_code == 400
        r = httpx.get(s.url + "/v1/models", headers={"Origin": "http://a.example"})
        assert r.headers["access-control-allow-origin"] == "http://a.example"
        r = httpx.get(s.url + "/v1/models", headers={"Origin": "http://b.example"})
        assert "access-control-allow-origin" not in r.headers
    finally:
        assert s.stop() == 0, s.log()
