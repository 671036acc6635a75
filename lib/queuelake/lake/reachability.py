"""Say at once when an object store does not answer, rather than after its clients' retries.

Why: an S3 endpoint that refuses connections, or whose name does not resolve, is retried by every client
(object_store up to ``retry_timeout``, pyarrow ``max_retries`` times) before the command fails with a
clear error: 34-51 s in which nothing was logged (a review). One TCP connect in a background thread, as
an engine opens an ``s3://`` root, logs a warning within seconds when it fails; the command goes on (a
store being restarted may come back within the retries) and the clients' final error stays the error.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Mapping
from urllib.parse import urlparse

from queuelake.report import log

CONNECT_SECONDS = 5.0
_PROBED: set[tuple[str, int]] = set()
_GUARD = threading.Lock()


def endpoint_of(options: Mapping[str, str]) -> tuple[str, int, str]:
    """(host, port, scheme://host:port) the lake's S3 clients connect to: ``AWS_ENDPOINT_URL`` (or
    ``AWS_ENDPOINT``), else AWS's regional endpoint (us-east-1 when no region is set). The URL is built
    again from its parts, never logged as given: an endpoint may carry a user and password."""
    endpoint = options.get("AWS_ENDPOINT_URL") or options.get("AWS_ENDPOINT")
    if endpoint:
        parsed = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
        try:
            port = parsed.port or (80 if parsed.scheme == "http" else 443)
        except ValueError:  # a port out of range: no probe (an empty host); the clients say what is wrong
            return "", 0, f"{parsed.scheme}://"
        host = parsed.hostname or ""
        shown = f"[{host}]" if ":" in host else host  # an IPv6 address in brackets, as a URL writes it
        return host, port, f"{parsed.scheme}://{shown}:{port}"
    region = options.get("AWS_REGION") or options.get("AWS_DEFAULT_REGION") or "us-east-1"
    host = f"s3.{region}.amazonaws.com"
    return host, 443, f"https://{host}"


_PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")


def behind_a_proxy(options: Mapping[str, str]) -> bool:
    """Whether the clients reach the store through a proxy (the environment's, or object_store's
    ``proxy_url``): a direct connection then says nothing about the store, and may be refused where the
    proxy is not."""
    if any(options.get(key) for key in ("proxy_url", "PROXY_URL")):
        return True
    return any(os.environ.get(name) or os.environ.get(name.lower()) for name in _PROXY_VARIABLES)


def probe_in_background(options: Mapping[str, str]) -> threading.Thread | None:
    """Start the probe of the store ``options`` name (once per endpoint and process); None when it was
    probed already, or the clients go through a proxy."""
    if behind_a_proxy(options):
        return None
    host, port, url = endpoint_of(options)
    with _GUARD:
        if not host or (host, port) in _PROBED:
            return None
        _PROBED.add((host, port))
    retry_timeout = options.get("retry_timeout", "180s")
    thread = threading.Thread(target=_probe, args=(host, port, url, retry_timeout), name="store-probe", daemon=True)
    thread.start()
    return thread


def _probe(host: str, port: int, url: str, retry_timeout: str) -> None:
    try:
        socket.create_connection((host, port), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        if isinstance(exc, TimeoutError) or isinstance(exc, socket.timeout):
            reason = f"no answer within {CONNECT_SECONDS:.0f}s"
        log.warning(
            "lake: the object store at %s does not answer (%s); its clients retry it for up to %s"
            " (retry_timeout, max_retries in lake.storage_options) before they give up",
            url,
            reason,
            retry_timeout,
        )
