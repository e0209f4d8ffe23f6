"""HTTP/1.1 over asyncio streams, with libsandboxd's retry rules.

One request, attempt after attempt (docs/clients.md): at most
``max_retries`` retries within the call's deadline, only where the
contract makes them safe:

- 429 and 503, after ``Retry-After`` (else 200 ms doubling with a little
  jitter, at most ``max_backoff_s``), unless an upload's body was already
  being read (it cannot be replayed);
- a connection that could not be made (nothing was sent);
- a connection that broke before an answer, for idempotent requests only
  (reads, ``PUT /fs/write``, cancel), and not once an upload's body was
  being read.

A wait that would pass the deadline is not made: the answer we have beats
a timeout. Connections are kept alive and reused (per event loop, idle for
at most a few seconds); a reused connection the server had closed is
replaced once, at no cost to the retries, when nothing of the request can
have been acted upon twice. Uploads are chunked with ``Expect:
100-continue``, so a refusal arrives before the first byte is pulled from
the caller's source.
"""
from __future__ import annotations

import asyncio
import json
import random
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import AsyncIterator, Awaitable, Dict, List, Mapping, Optional, Tuple, TypeVar, Union

from .errors import SandboxError, SandboxUnavailable, refusal

USER_AGENT = "sandboxd-client-python/0.1.0"
BUF = 1 << 18  # bytes read or written at a time; a stream holds a few of these
HEAD_MAX = 64 * 1024
IDLE_REUSE_S = 4.0  # well below any server's keep-alive timeout
IDLE_MAX = 8
CONTINUE_WAIT_S = 1.0  # RFC 9110: send the body anyway after a short wait for 100
BACKOFF_FIRST_S = 0.2

T = TypeVar("T")
Query = Mapping[str, Union[str, int, bool, None]]


@dataclass
class Request:
    method: str
    path: str
    query: Optional[Query] = None
    headers: Dict[str, str] = field(default_factory=dict)
    body: Optional[bytes] = None
    content_type: Optional[str] = None
    # A chunked upload pulled from this iterator (never replayed).
    stream: Optional[AsyncIterator[bytes]] = None
    idempotent: bool = False
    # Safe to send again on a fresh connection when a reused one turns out
    # closed: idempotent requests, and execs (their id makes a second
    # POST answer with the first run).
    replayable: bool = False
    auth: bool = True


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.loop = asyncio.get_running_loop()
        self.idle_since = 0.0

    def usable(self) -> bool:
        return (self.loop is asyncio.get_running_loop() and not self.reader.at_eof()
                and not self.writer.is_closing()
                and time.monotonic() - self.idle_since < IDLE_REUSE_S)

    def abort(self) -> None:
        try:
            self.writer.transport.abort()
            self.writer.close()
        except RuntimeError:  # its loop is closed
            pass


class _Broken(Exception):
    """The connection broke (or closed) before a whole answer head arrived."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause) or type(cause).__name__)
        self.cause = cause
        # Part of an answer came: not a connection the server had closed.
        self.answered = isinstance(cause, asyncio.IncompleteReadError) and bool(cause.partial)


def _retry_after(v: Optional[str]) -> Optional[float]:
    if v is None or not v.strip().isdigit():
        return None
    s = int(v.strip())
    return float(s) if s < 86400 else None


def backoff_s(max_backoff_s: float, n: int, retry_after: Optional[float]) -> float:
    if retry_after is not None:
        s = retry_after
    else:
        s = BACKOFF_FIRST_S * 2 ** min(n, 16)
        s += random.uniform(0, s / 4)
    return min(max(s, 0.05), max_backoff_s)


class SourceError(Exception):
    """The caller's upload source raised ``error``: the upload is abandoned."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class Response:
    """A 2xx answer whose body is read with :meth:`read` or :meth:`chunks`."""

    def __init__(self, transport: "Transport", conn: _Conn, status: int,
                 headers: Dict[str, str], keep: bool, head_only: bool) -> None:
        self._t = transport
        self._conn: Optional[_Conn] = conn
        self.status = status
        self.headers = headers
        self._keep = keep
        te = headers.get("transfer-encoding", "").lower()
        self._chunked = "chunked" in te
        cl = headers.get("content-length")
        self._length: Optional[int] = None
        if head_only or status in (204, 304):
            self._length = 0
        elif not self._chunked and cl is not None and cl.strip().isdigit():
            self._length = int(cl)
        elif not self._chunked:
            self._keep = False  # the body ends with the connection

    @property
    def request_id(self) -> Optional[str]:
        return self.headers.get("x-request-id")

    def close(self) -> None:
        """Ends the answer; a body not read to its end costs the connection."""
        if self._conn is not None:
            self._conn.abort()
            self._conn = None

    def _done(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            if self._keep:
                self._t._put(conn)
            else:
                conn.abort()

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, a piece (at most BUF bytes) at a time."""
        conn = self._conn
        if conn is None:
            return
        r = conn.reader
        try:
            if self._chunked:
                while True:
                    line = await r.readuntil(b"\r\n")
                    size = int(line.split(b";", 1)[0].strip(), 16)
                    if size == 0:
                        while (await r.readuntil(b"\r\n")) != b"\r\n":
                            pass  # trailers
                        break
                    async for data in _exactly(r, size):
                        yield data
                    if await r.readexactly(2) != b"\r\n":
                        raise ValueError("bad chunk framing")
            elif self._length is not None:
                async for data in _exactly(r, self._length):
                    yield data
            else:
                while True:
                    data = await r.read(BUF)
                    if not data:
                        break
                    yield data
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
            self.close()
            raise SandboxUnavailable(self.status, "connection_broken",
                                     f"the answer broke off: {e}",
                                     request_id=self.request_id) from e
        except BaseException:
            self.close()
            raise
        self._done()

    async def read(self) -> bytes:
        out = bytearray()
        async for c in self.chunks():
            out += c
        return bytes(out)

    async def json(self) -> object:
        data = await self.read()
        try:
            return json.loads(data)
        except ValueError:
            raise SandboxError(self.status, "bad_response", "the answer is not JSON", None,
                               self.request_id) from None


async def _exactly(r: asyncio.StreamReader, n: int) -> AsyncIterator[bytes]:
    """The next n bytes, a piece (at most BUF) at a time."""
    while n:
        data = await r.read(min(n, BUF))
        if not data:
            raise asyncio.IncompleteReadError(b"", n)
        n -= len(data)
        yield data


async def _within(aw: Awaitable[T], end: Optional[float]) -> T:
    if end is None:
        return await aw
    return await asyncio.wait_for(aw, max(0.0, end - time.monotonic()))


async def _read_head(r: asyncio.StreamReader) -> Tuple[int, Dict[str, str], bool]:
    """The next answer head: (status, headers, HTTP/1.1 keep-alive)."""
    try:
        raw = await r.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError as e:
        raise ValueError("answer head too large") from e
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP answer: {lines[0][:80]!r}")
    headers: Dict[str, str] = {}
    for ln in lines[1:]:
        if not ln:
            continue
        k, _, v = ln.partition(":")
        headers[k.strip().lower()] = v.strip()
    keep = parts[0] == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
    return int(parts[1]), headers, keep


class Transport:
    """A base URL, the headers every request carries, and idle connections."""

    def __init__(self, base_url: str, headers: Mapping[str, str], *, max_retries: int,
                 max_backoff_s: float, ssl_context: Optional[ssl.SSLContext],
                 connect_timeout_s: float) -> None:
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"base_url must be http(s)://host[:port][/prefix], not {base_url!r}")
        self.base_url = base_url
        self.tls = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.tls else 80)
        self.prefix = u.path.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if u.port is None else f"{host}:{u.port}"
        self.headers = dict(headers)
        self.max_retries = max_retries
        self.max_backoff_s = max_backoff_s
        self.ssl_context = ssl_context if ssl_context is not None else (
            ssl.create_default_context() if self.tls else None)
        self.connect_timeout_s = connect_timeout_s
        self._idle: List[_Conn] = []

    def target(self, path: str, query: Optional[Query] = None) -> str:
        t = self.prefix + path
        q = {k: ("true" if v is True else "false" if v is False else str(v))
             for k, v in (query or {}).items() if v is not None}
        if q:
            t += "?" + urllib.parse.urlencode(q, quote_via=urllib.parse.quote, safe="/")
        return t

    def _take(self) -> Optional[_Conn]:
        while self._idle:
            c = self._idle.pop()
            if c.usable():
                return c
            c.abort()
        return None

    def _put(self, c: _Conn) -> None:
        c.idle_since = time.monotonic()
        self._idle.append(c)
        while len(self._idle) > IDLE_MAX:
            self._idle.pop(0).abort()

    def close(self) -> None:
        """Closes the idle connections."""
        while self._idle:
            self._idle.pop().abort()

    async def _connect(self, end: Optional[float]) -> _Conn:
        limit = self.connect_timeout_s
        if end is not None:
            limit = min(limit, max(0.0, end - time.monotonic()))
        r, w = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, ssl=self.ssl_context, limit=BUF,
                                    server_hostname=self.host if self.tls else None),
            limit)
        sock = w.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Conn(r, w)

    def _head(self, req: Request) -> bytes:
        h = {"host": self.host_header, "user-agent": USER_AGENT}
        h.update(self.headers if req.auth else
                 {k: v for k, v in self.headers.items() if k != "authorization"})
        h.update(req.headers)
        if req.stream is not None:
            h["content-type"] = req.content_type or "application/octet-stream"
            h["transfer-encoding"] = "chunked"
            h["expect"] = "100-continue"
        elif req.body is not None:
            if req.content_type:
                h["content-type"] = req.content_type
            h["content-length"] = str(len(req.body))
        elif req.method in ("POST", "PUT"):
            h["content-length"] = "0"
        lines = [f"{req.method} {self.target(req.path, req.query)} HTTP/1.1"]
        lines += [f"{k}: {v}" for k, v in h.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _upload(self, c: _Conn, req: Request, pulled: List[bool],
                      head: "asyncio.Task[Tuple[int, Dict[str, str], bool]]") -> bool:
        """Sends the chunked body, stopping early (False) if the server answers."""
        assert req.stream is not None
        w = c.writer
        while True:
            pulled[0] = True
            try:
                chunk = await req.stream.__anext__()
            except StopAsyncIteration:
                break
            except Exception as e:
                raise SourceError(e) from e
            if head.done():
                return False  # answered (refused) while we were sending
            if chunk:
                w.write(b"%x\r\n" % len(chunk))
                w.write(chunk)
                w.write(b"\r\n")
                await w.drain()
        w.write(b"0\r\n\r\n")
        await w.drain()
        return True

    async def _attempt(self, c: _Conn, req: Request, pulled: List[bool],
                       end: Optional[float]) -> Tuple[int, Dict[str, str], bool]:
        w, r = c.writer, c.reader
        try:
            w.write(self._head(req))
            if req.body:
                w.write(req.body)
            await _within(w.drain(), end)
            if req.stream is None:
                status, headers, keep = await _within(_read_head(r), end)
                while 100 <= status < 200:
                    status, headers, keep = await _within(_read_head(r), end)
                return status, headers, keep
            head = asyncio.ensure_future(_read_head(r))
            try:
                done, _ = await asyncio.wait({head}, timeout=CONTINUE_WAIT_S)
                if head in done:
                    status, headers, keep = head.result()
                    if status != 100:
                        return status, headers, False  # refused before the body
                    head = asyncio.ensure_future(_read_head(r))
                finished = False
                try:
                    finished = await self._upload(c, req, pulled, head)
                except OSError:
                    if not head.done():
                        raise
                status, headers, keep = await _within(head, end)
                while 100 <= status < 200:
                    status, headers, keep = await _within(_read_head(r), end)
                return status, headers, keep and finished
            finally:
                if not head.done():
                    head.cancel()
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            raise _Broken(e) from e

    async def send(self, req: Request, deadline_s: Optional[float]) -> Response:
        """Sends req; a 2xx Response with its body unread, or SandboxError /
        SandboxUnavailable. Cancelling the calling task closes the connection."""
        end = None if deadline_s is None else time.monotonic() + deadline_s
        pulled = [False]
        replaced = False
        n = 0
        while True:
            c = self._take()
            reused = c is not None
            if c is None:
                try:
                    c = await self._connect(end)
                except ssl.SSLError as e:
                    raise SandboxUnavailable(None, "tls_failed", f"TLS with {self.host}: {e}",
                                             attempts=n + 1) from e
                except (OSError, asyncio.TimeoutError) as e:
                    timed_out = isinstance(e, asyncio.TimeoutError) and end is not None \
                        and time.monotonic() >= end
                    wait = backoff_s(self.max_backoff_s, n, None)
                    if not timed_out and n < self.max_retries and (
                            end is None or time.monotonic() + wait < end):
                        await asyncio.sleep(wait)
                        n += 1
                        continue
                    raise SandboxUnavailable(
                        None, "timeout" if timed_out else "connection_refused",
                        f"cannot connect to {self.host}:{self.port}: {e or type(e).__name__}",
                        attempts=n + 1) from e
            try:
                status, headers, keep = await self._attempt(c, req, pulled, end)
            except asyncio.TimeoutError as e:
                c.abort()
                raise SandboxUnavailable(None, "timeout",
                                         f"no answer from {req.method} {req.path} within the call's deadline",
                                         attempts=n + 1) from e
            except _Broken as b:
                c.abort()
                if (reused and not replaced and not b.answered and not pulled[0]
                        and (req.replayable or req.idempotent)):
                    replaced = True  # the server had closed it while idle
                    continue
                wait = backoff_s(self.max_backoff_s, n, None)
                if (req.idempotent and not pulled[0] and n < self.max_retries
                        and (end is None or time.monotonic() + wait < end)):
                    await asyncio.sleep(wait)
                    n += 1
                    continue
                raise SandboxUnavailable(None, "connection_broken",
                                         f"the connection broke: {req.method} {req.path} ({b})",
                                         attempts=n + 1) from b.cause
            except BaseException:
                c.abort()
                raise
            res = Response(self, c, status, headers, keep, req.method == "HEAD")
            if 200 <= status < 300:
                return res
            # An error answer: its JSON, within the deadline.
            try:
                body = await _within(res.read(), end)
            except (SandboxUnavailable, asyncio.TimeoutError):
                body = b""
            code, message, hint = _wire_error(status, body)
            rid = headers.get("x-request-id")
            if status in (429, 503):
                ra = _retry_after(headers.get("retry-after"))
                wait = backoff_s(self.max_backoff_s, n, ra)
                if not pulled[0] and n < self.max_retries and (
                        end is None or time.monotonic() + wait < end):
                    await asyncio.sleep(wait)
                    n += 1
                    continue
                raise SandboxUnavailable(status, code, message, retry_hint=hint, retry_after_s=ra,
                                         request_id=rid, attempts=n + 1)
            if status >= 500 and status != 507:
                raise SandboxUnavailable(status, code, message, retry_hint=hint, request_id=rid,
                                         attempts=n + 1)
            raise refusal(status, code, message, hint, rid)


def _wire_error(status: int, body: bytes) -> Tuple[str, str, Optional[str]]:
    """The wire's ``{"error": {code, message, retry_hint}}``, or what there is."""
    try:
        e = json.loads(body)["error"]
        if isinstance(e.get("code"), str):
            msg = e.get("message")
            hint = e.get("retry_hint")
            return (e["code"], msg if isinstance(msg, str) else e["code"],
                    hint if isinstance(hint, str) else None)
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    text = body[:200].decode("utf-8", "replace")
    return f"http_{status}", f"HTTP {status}" + (f": {text}" if text else ""), None


def json_bytes(o: object) -> bytes:
    return json.dumps(o, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def quote(segment: str) -> str:
    """A path segment, percent-encoded."""
    return urllib.parse.quote(segment, safe="")
