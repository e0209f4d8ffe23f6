"""A real sandboxd on 127.0.0.1 for the client tests, and a recording proxy.

Sandboxd: a fresh data directory with tenant acme, tokens minted by
``sandboxd token``, ``serve`` started as a child process (SANDBOXD_BIN names
the binary). Proxy: an HTTP/1.1 proxy in front of it that records every
request head and can lose the first answer to a route behind a 503, as a
balancer might.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Dict, List, Optional, Tuple, TypeVar

T = TypeVar("T")
BIN = os.environ.get("SANDBOXD_BIN", "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def until(what: str, cond: Callable[[], Awaitable[Optional[T]]],
                deadline_s: float = 60.0) -> T:
    """Polls cond() until it gives something truthy; fails after a generous
    deadline (conditions are awaited, latencies never asserted)."""
    end = time.monotonic() + deadline_s
    while True:
        v = await cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.025)


class Sandboxd:
    def __init__(self, *extra: str) -> None:
        if not BIN:
            raise RuntimeError("SANDBOXD_BIN must name the sandboxd binary")
        self.dir = tempfile.mkdtemp(prefix="sandboxd-py-")
        os.chmod(self.dir, 0o755)
        self.extra = list(extra)
        self.proc: Optional[subprocess.Popen[bytes]] = None
        # A uid range of its own (the Node suites use 2400000 + ...).
        self.uid_base = 4100000 + (os.getpid() % 100000) * 16
        self.cli("tenant", "add", "acme")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def cli(self, *args: str) -> str:
        return subprocess.run([BIN, *args, "--data-dir", self.dir], check=True,
                              stdout=subprocess.PIPE).stdout.decode().strip()

    def token(self, tenant: str = "acme", scope: Optional[str] = None) -> str:
        return self.cli("token", "--tenant", tenant, *(["--scope", scope] if scope else []))

    def start(self) -> str:
        log = open(os.path.join(self.dir, "server.log"), "ab")
        self.proc = subprocess.Popen(
            [BIN, "serve", "--data-dir", self.dir, "--listen", f"127.0.0.1:{self.port}",
             "--backend", "bwrap", "--set", f"uid-base={self.uid_base}", "--set",
             "disk-quota=none", *self.extra], stdout=log, stderr=log)
        log.close()
        end = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sandboxd exited at start ({self.proc.returncode}); "
                                   f"see {self.dir}/server.log")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=5) as r:
                    if r.status == 200:
                        return self.url
            except OSError:
                pass
            if time.monotonic() > end:
                raise RuntimeError("sandboxd did not answer /healthz")
            time.sleep(0.025)

    def put_json(self, path: str, token: str, body: object) -> Tuple[int, str]:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="PUT",
                                     headers={"authorization": f"Bearer {token}",
                                              "content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            rc = self.proc.wait(timeout=60)
            self.proc = None
            if rc != 0:
                raise RuntimeError(f"sandboxd exited {rc} on SIGTERM; see {self.dir}/server.log")
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Seen:
    method: str
    target: str
    headers: Dict[str, str]
    body: bytes


@dataclass
class Proxy:
    """HTTP/1.1 in front of upstream_port, one exchange at a time per
    connection. ``lose`` names a (method, path) whose first answer is
    replaced by a 503 after the upstream has acted on the request."""

    upstream_port: int
    lose: Optional[Tuple[str, str]] = None
    seen: List[Seen] = field(default_factory=list)
    lost: int = 0
    port: int = 0
    server: Optional[asyncio.AbstractServer] = None
    tasks: "set[asyncio.Task[None]]" = field(default_factory=set)

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{self.port}"

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            for t in self.tasks:
                t.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            await self.server.wait_closed()

    @staticmethod
    async def _head(r: asyncio.StreamReader) -> Tuple[bytes, Dict[str, str]]:
        head = await r.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        return head, {k.strip().lower(): v.strip()
                      for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}

    @staticmethod
    async def _body(r: asyncio.StreamReader, headers: Dict[str, str]) -> bytes:
        body = b""
        if "chunked" in headers.get("transfer-encoding", ""):
            while True:
                size = int((await r.readuntil(b"\r\n")).split(b";")[0], 16)
                data = await r.readexactly(size + 2)
                body += data[:-2]
                if size == 0:
                    return body
        if headers.get("content-length"):
            return await r.readexactly(int(headers["content-length"]))
        return body

    async def _serve(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        ur, uw = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        try:
            while True:
                try:
                    head, headers = await self._head(cr)
                except asyncio.IncompleteReadError:
                    return
                line = head.split(b"\r\n", 1)[0].decode()
                method, target, _ = line.split(" ", 2)
                if headers.get("expect", "").lower() == "100-continue":
                    cw.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    await cw.drain()
                body = await self._body(cr, headers)
                self.seen.append(Seen(method, target, headers, body))
                fwd = {k: v for k, v in headers.items() if k not in ("expect", "transfer-encoding")}
                fwd["content-length"] = str(len(body))
                uw.write(f"{line}\r\n".encode() +
                         "".join(f"{k}: {v}\r\n" for k, v in fwd.items()).encode() + b"\r\n" + body)
                await uw.drain()
                while True:
                    rhead, rheaders = await self._head(ur)
                    if rhead.startswith(b"HTTP/1.1 1"):
                        continue
                    rbody = await self._body(ur, rheaders)
                    break
                path = target.split("?", 1)[0]
                if self.lose == (method, path) and self.lost == 0:
                    self.lost += 1
                    lost = json.dumps({"error": {"code": "backend_unavailable", "message": "lost",
                                                 "retry_hint": "retry"}}).encode()
                    rhead = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                             b"retry-after: 0\r\ncontent-length: %d\r\n\r\n" % len(lost))
                    rbody = lost
                elif "chunked" in rheaders.get("transfer-encoding", ""):
                    keep = [ln for ln in rhead.split(b"\r\n")[1:] if ln and not
                            ln.lower().startswith(b"transfer-encoding")]
                    rhead = b"\r\n".join([rhead.split(b"\r\n", 1)[0], *keep,
                                          b"content-length: %d" % len(rbody)]) + b"\r\n\r\n"
                cw.write(rhead + rbody)
                await cw.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            uw.close()
            cw.close()
