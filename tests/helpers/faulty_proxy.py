"""A reverse proxy in front of an S3 server (moto's) that fails the way S3 does under load.

Why: S3 throttles in bursts (``503 SlowDown`` for every request for a while, when a prefix's request
rate climbs) and drops the odd connection; every client queuelake uses on a lake (pyarrow's S3 client,
delta-rs's object_store, Spark's s3a) must ride that out with its retries. moto never fails, so the
tests put this in front of it:

- during a burst (``burst`` seconds of every ``period``, counted from ``start``, or with
  ``from_first_request`` from the first request) every request gets ``503`` with S3's ``SlowDown``
  error body;
- besides, a request gets that at random with probability ``error_rate``, and with probability
  ``reset_rate`` its connection is reset (RST, no reply) instead; both before anything is forwarded, so
  the store never acts on a request its client saw fail, as with S3's throttling;
- every other request is forwarded to the store and its reply sent back.

HTTP/1.1 with keep-alive (the AWS SDKs and object_store reuse connections), request bodies framed by
``Content-Length`` or chunked (read whole, forwarded with a ``Content-Length``), ``Expect:
100-continue`` answered here. The random draws are seeded: a failing run can be replayed.
"""

from __future__ import annotations

import collections
import http.client
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
    b"<RequestId>QLFAULTYPROXY</RequestId></Error>"
)
# hop-by-hop headers (RFC 9110 7.6.1) and the framing this proxy sets itself
_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "expect"}


class FaultyProxy:
    """Start with ``start()`` (returns the proxy's URL), stop with ``stop()``; or use as a context.
    ``faults = False`` makes it a plain proxy (a test's setup and checks through it cannot fail).
    Counters: ``requests``, ``throttled`` (503s sent), ``resets``; ``throttled_by`` counts the 503s
    by client (``client_of``'s name for the User-Agent), to show each client met the faults."""

    def __init__(
        self,
        target: str,
        *,
        burst: float = 2.0,
        period: float = 6.0,
        error_rate: float = 0.02,
        reset_rate: float = 0.0,
        seed: int = 0,
        from_first_request: bool = False,
        small_reads: int = 0,
    ) -> None:
        parsed = urlparse(target)
        self.target_host, self.target_port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.burst, self.period = burst, period
        self.error_rate, self.reset_rate = error_rate, reset_rate
        self.faults = True
        # the plan's clock starts at the first request, not at ``start``: a test whose first request must
        # meet a burst's start does not depend on how long its client took to set up
        self.from_first_request = from_first_request
        # this many ranged GETs shorter than the SlowDown body are throttled, whatever the plan: S3's
        # throttling of a small read (a column chunk), whose error body the client's buffer cannot hold
        self.small_reads = small_reads
        # a request (method and path matching this regex) forwarded to the store, then its reply dropped
        # (RST): the store acted, the client cannot know it did. Once, then cleared
        self.reset_after: str | None = None
        # a request (method and path matching this regex) forwarded to the store, and its reply sent
        # ``slow_seconds`` later: a slow store. Once, then cleared
        self.slow_reply: str | None = None
        self.slow_seconds = 0.0
        self.slowed = 0
        self.released = 0  # held replies sent at the end of their hold
        self.requests = self.throttled = self.resets = 0
        self.throttled_by: collections.Counter[str] = collections.Counter()
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> str:
        proxy = self

        class Handler(_Handler):
            owner = proxy

        server = _Server(("127.0.0.1", 0), Handler)
        self._server = server
        self._start = time.monotonic()
        self._thread = threading.Thread(target=server.serve_forever, name="faulty-s3-proxy", daemon=True)
        self._thread.start()
        return self.url

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FaultyProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ the fault plan

    def in_burst(self) -> bool:
        return (time.monotonic() - self._start) % self.period < self.burst

    def throttles_small_read(self, method: str, byte_range: str, user_agent: str = "") -> bool:
        """Whether this request is one of the ``small_reads`` to throttle (counted as throttled)."""
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", byte_range.strip())
        with self._lock:
            if method != "GET" or match is None or self.small_reads <= 0:
                return False
            if int(match.group(2)) - int(match.group(1)) + 1 >= len(SLOW_DOWN):
                return False
            self.small_reads -= 1
            self.requests += 1
            self.throttled += 1
            self.throttled_by[client_of(user_agent)] += 1
            return True

    def resets_after(self, method: str, path: str) -> bool:
        """Whether this request's reply is dropped after forwarding it (``reset_after``; counted as a reset)."""
        with self._lock:
            if self.reset_after is None or not re.search(self.reset_after, f"{method} {path}"):
                return False
            self.reset_after = None
            self.resets += 1
            return True

    def slows(self, method: str, path: str) -> float:
        """Seconds to hold this request's reply (``slow_reply``; counted), else 0."""
        with self._lock:
            if self.slow_reply is None or not re.search(self.slow_reply, f"{method} {path}"):
                return 0.0
            self.slow_reply = None
            self.slowed += 1
            return self.slow_seconds

    def verdict(self, user_agent: str = "") -> str:
        """``forward``, ``throttle`` or ``reset`` for the next request (counted)."""
        with self._lock:
            if self.from_first_request and self.requests == 0:
                self._start = time.monotonic()
            self.requests += 1
            draw = self._random.random()
            if not self.faults:
                return "forward"
            if self.in_burst() or draw < self.error_rate:
                self.throttled += 1
                self.throttled_by[client_of(user_agent)] += 1
                return "throttle"
            if draw < self.error_rate + self.reset_rate:
                self.resets += 1
                return "reset"
            return "forward"


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hung up mid-reply (one that read a Parquet footer and dropped the rest, one
        whose retry timer fired) is the traffic a proxy sees; anything else is a bug here: printed."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def client_of(user_agent: str) -> str:
    """pyarrow (the AWS SDK for C++), delta-rs (object_store), s3a (the AWS SDK for Java) or other."""
    agent = user_agent.lower()
    for mark, name in (("aws-sdk-cpp", "pyarrow"), ("object_store", "delta-rs"), ("aws-sdk-java", "s3a")):
        if mark in agent:
            return name
    return "other"


class _Handler(BaseHTTPRequestHandler):
    owner: FaultyProxy
    protocol_version = "HTTP/1.1"  # keep-alive; BaseHTTPRequestHandler answers Expect: 100-continue

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass  # quiet: thousands of requests per test

    def do_GET(self) -> None:
        self._serve()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after each chunk
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _serve(self) -> None:
        body = self._read_body()  # whole, whatever happens next: the connection stays in step
        agent = self.headers.get("User-Agent", "")
        if self.owner.throttles_small_read(self.command, self.headers.get("Range", ""), agent):
            self._reply(503, [("Content-Type", "application/xml"), ("x-amz-request-id", "QLFAULTYPROXY")], SLOW_DOWN)
            return
        verdict = self.owner.verdict(agent)
        if verdict == "reset":
            self._reset()
            return
        if verdict == "throttle":
            self._reply(503, [("Content-Type", "application/xml"), ("x-amz-request-id", "QLFAULTYPROXY")], SLOW_DOWN)
            return
        status, headers, reply = self._forward(body)
        if self.owner.resets_after(self.command, self.path):
            self._reset()
            return
        held = self.owner.slows(self.command, self.path)
        time.sleep(held)
        if held:
            self.owner.released += 1
        self._reply(status, headers, reply)

    def _reset(self) -> None:
        """SO_LINGER 0: close() sends RST, as a dropped connection looks to the client."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self.owner.target_host, self.owner.target_port, timeout=120)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in _HOP and name.lower() != "content-length":
                    conn.putheader(name, value)
            if body or self.command in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            response = conn.getresponse()
            reply = response.read()
            headers = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP]
            return response.status, headers, reply
        finally:
            conn.close()

    def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        head = self.command == "HEAD"
        for name, value in headers:
            if name.lower() == "content-length" and not head:
                continue  # set below from the body we send
            if name.lower() in ("date", "server"):
                continue  # send_response wrote its own
            self.send_header(name, value)
        if not head:
            self.send_header("Content-Length", str(len(body)))
        elif not any(name.lower() == "content-length" for name, _ in headers):
            self.send_header("Content-Length", "0")
        self.end_headers()
        if not head and body:
            self.wfile.write(body)
        self.wfile.flush()


def serve_in_a_process(
    target: str, reset_after: str | None = None, slow_reply: tuple[str, float] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """A faultless proxy in a process of its own that drops the reply of the one request ``reset_after``
    matches (``FaultyProxy.reset_after``), or holds the reply of the one ``slow_reply[0]`` matches for
    ``slow_reply[1]`` seconds: (the process, its URL); it prints ``resets N`` (replies dropped or held)
    when its stdin closes. Why a process: deltalake holds the interpreter lock through some of its calls to the store
    (``is_deltatable``, a commit's conflict check), and a proxy thread of the same process then cannot
    answer them (they time out after 60 s)."""
    code = (
        "import sys\n"
        "from tests.helpers.faulty_proxy import FaultyProxy\n"
        f"p = FaultyProxy({target!r}, burst=0.0, period=600.0, error_rate=0.0)\n"
        f"print(p.start(), flush=True)\n"
        f"p.reset_after = {reset_after!r}\n"
        f"p.slow_reply, p.slow_seconds = {slow_reply or (None, 0.0)!r}\n"
        "import threading, time\n"
        "def said_held():\n"
        "    while not p.slowed:\n"
        "        time.sleep(0.05)\n"
        "    print('held', flush=True)\n"
        "threading.Thread(target=said_held, daemon=True).start()\n"
        "sys.stdin.read()\n"
        "print('resets', p.resets + p.slowed, 'released', p.released, flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=str(Path(__file__).resolve().parents[2]),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def wait_until_held(proc: subprocess.Popen[str], timeout: float = 90.0) -> bool:
    """Whether a ``serve_in_a_process`` proxy began holding its ``slow_reply`` within ``timeout`` seconds:
    the moment to act on a command waiting for it (a fixed sleep sent a signal before the command reached
    the read on a loaded machine: a review)."""
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return bool(ready) and proc.stdout.readline().strip() == "held"


def resets_of(proc: subprocess.Popen[str]) -> int:
    """End a ``serve_in_a_process`` proxy; the replies it dropped or held."""
    return ended(proc)[0]


def ended(proc: subprocess.Popen[str]) -> tuple[int, int]:
    """End a ``serve_in_a_process`` proxy: (the replies it dropped or held, the held ones it had sent at the
    end of their hold by then): a command that ended before it took no reply it held."""
    out, _ = proc.communicate(timeout=30)
    words = out.split()
    return int(words[words.index("resets") + 1]), int(words[words.index("released") + 1])
