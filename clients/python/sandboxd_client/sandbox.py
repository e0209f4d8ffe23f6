"""GatewaySandbox: the SandboxApi over sandboxd's wire (wire.md), one
instance per (base URL, token, tenant, session). Every request carries
``Authorization``, ``X-Tenant-Id`` and ``X-Session-Key``."""
from __future__ import annotations

import asyncio
import base64
import math
import secrets
import ssl
import time
from typing import (Any, AsyncGenerator, Awaitable, AsyncIterable, AsyncIterator, Dict, Iterable, List, Mapping, Optional, Sequence,
                    Union, cast)

from . import _http
from ._http import Request, SourceError, Transport
from .errors import SandboxError, SandboxUnavailable
from .types import (Bytes, FileChange, FileStat, ProducedFile, RunResult, ShellResult, Source,
                    UploadResult, WriteResult)

EXEC_TIMEOUT_MAX_S = 3600  # the server's default exec-timeout-max-s
EXEC_MARGIN_S = 60.0  # an exec's deadline: its timeout plus this
CANCEL_TIMEOUT_S = 10.0
DEFAULT_MAX_FILE_BYTES = 1 << 20

Wire = Dict[str, Any]
CodeFiles = Union[Mapping[str, Union[str, Bytes]], Sequence["tuple[str, Union[str, Bytes]]"]]


def make_exec_id() -> str:
    """An exec id as libsandboxd makes them: ``c`` and 32 random hex digits."""
    return "c" + secrets.token_hex(16)


def _seconds(v: Optional[float]) -> Optional[int]:
    return None if v is None else max(1, math.ceil(v))


def _result_fields(o: Wire) -> Dict[str, Any]:
    def s(k: str) -> str:
        v = o.get(k)
        return v if isinstance(v, str) else ""

    def opt_s(k: str) -> Optional[str]:
        v = o.get(k)
        return v if isinstance(v, str) else None

    def opt_b(k: str) -> Optional[bool]:
        v = o.get(k)
        return v if isinstance(v, bool) else None

    changes = o.get("files_changed")
    return dict(
        id=s("id"), stdout=s("stdout"), stderr=s("stderr"),
        exit_code=o["exit_code"] if isinstance(o.get("exit_code"), int) else -1,
        timed_out=o.get("timed_out") is True, cancelled=o.get("cancelled") is True,
        truncated=o.get("truncated") is True,
        stdout_bytes=int(o.get("stdout_bytes") or 0), stderr_bytes=int(o.get("stderr_bytes") or 0),
        stdout_spill=opt_s("stdout_spill"), stderr_spill=opt_s("stderr_spill"),
        started_at=s("started_at"), finished_at=s("finished_at"),
        duration_ms=int(o.get("duration_ms") or 0),
        idle=opt_b("idle"), oom_killed=opt_b("oom_killed"),
        files_changed=[FileChange(str(c["path"]), str(c["kind"]), int(c.get("size") or 0),
                                  c.get("sha256")) for c in changes]
        if isinstance(changes, list) else None,
        raw=o)


def _stat(o: Wire) -> FileStat:
    size, mtime, mode = o.get("size"), o.get("mtime"), o.get("mode")
    return FileStat(path=str(o["path"]), type=str(o["type"]), is_symlink=o.get("is_symlink") is True,
                    size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                    mtime=mtime if isinstance(mtime, str) else None,
                    mode=mode if isinstance(mode, str) else None)


async def _aiter(source: Source) -> AsyncGenerator[bytes, None]:
    if isinstance(source, AsyncIterable):
        async for c in source:
            yield bytes(c)
    else:
        for c in source:
            yield bytes(c)


class GatewaySandbox:
    """The SandboxApi of one tenant's session on a sandboxd.

    ``GatewaySandbox(base_url, auth_token, tenant_id)``; keyword options:
    ``session_key`` (default ``"default"``: the session directory every call
    works in), ``timeout_s`` (each buffered call, retries included; default
    60; an exec's is its own timeout plus a minute; streams have none),
    ``max_retries`` (4), ``max_backoff_s`` (30), ``ssl_context`` (TLS is
    verified against the system's CAs by default) and ``connect_timeout_s``
    (10). Safe to share between the tasks of one event loop; use it as an
    ``async with`` block, or call :meth:`aclose`, to close idle connections.
    """

    def __init__(self, base_url: str, auth_token: str, tenant_id: str, *,
                 session_key: str = "default", timeout_s: float = 60.0, max_retries: int = 4,
                 max_backoff_s: float = 30.0, ssl_context: Optional[ssl.SSLContext] = None,
                 connect_timeout_s: float = 10.0) -> None:
        self.base_url = base_url
        self.tenant_id = tenant_id
        self.session_key = session_key
        self.timeout_s = timeout_s
        self._t = Transport(base_url, {"authorization": f"Bearer {auth_token}",
                                       "x-tenant-id": tenant_id},
                            max_retries=max_retries, max_backoff_s=max_backoff_s,
                            ssl_context=ssl_context, connect_timeout_s=connect_timeout_s)

    def with_session(self, session_key: str) -> "GatewaySandbox":
        """The same sandbox, another session (another directory); it shares
        this one's connections."""
        other = GatewaySandbox.__new__(GatewaySandbox)
        other.__dict__.update(self.__dict__)
        other.session_key = session_key
        return other

    async def aclose(self) -> None:
        """Closes the idle connections, of every session made by with_session
        too (calls made later open new ones)."""
        self._t.close()

    def _send(self, req: Request, deadline_s: Optional[float]) -> "Awaitable[_http.Response]":
        req.headers["x-session-key"] = self.session_key
        return self._t.send(req, deadline_s)

    async def __aenter__(self) -> "GatewaySandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # The plumbing: one request, its answer read within the same deadline.

    async def _call(self, req: Request, *, deadline_s: "Optional[float] | str" = "default",
                    as_json: bool = True) -> Any:
        """Sends req and reads the whole answer, both within deadline_s
        (None: no deadline; default: the sandbox's timeout_s)."""
        d = self.timeout_s if deadline_s == "default" else cast(Optional[float], deadline_s)
        end = None if d is None else time.monotonic() + d
        res = await self._send(req, d)
        try:
            left = None if end is None else max(0.0, end - time.monotonic())
            body: Any = await asyncio.wait_for(res.json() if as_json else res.read(), left)
        except asyncio.TimeoutError:
            res.close()
            raise SandboxUnavailable(res.status, "timeout",
                                     f"the answer to {req.method} {req.path} did not end within the deadline",
                                     request_id=res.request_id) from None
        if as_json and not isinstance(body, dict):
            raise SandboxError(res.status, "bad_response", f"{req.path} answered no JSON object",
                               None, res.request_id)
        return body

    async def _get(self, route: str, path: str, **query: Any) -> Wire:
        return cast(Wire, await self._call(Request("GET", route, {"path": path, **query},
                                                   idempotent=True)))

    async def _post(self, route: str, body: Wire, idempotent: bool = False) -> Wire:
        return cast(Wire, await self._call(Request("POST", route, body=_http.json_bytes(body),
                                                   content_type="application/json",
                                                   idempotent=idempotent)))

    # The eleven methods.

    async def read_file(self, path: str) -> str:
        """``GET /fs/read``: the file as text (SandboxError ``not_text`` if it is
        not UTF-8: use :meth:`read_file_buffer`)."""
        data = await self._call(Request("GET", "/fs/read", {"path": path}, idempotent=True),
                                as_json=False)
        return cast(bytes, data).decode("utf-8")

    async def read_file_buffer(self, path: str, offset: int = 0,
                               length: Optional[int] = None) -> bytes:
        """``GET /fs/read_buffer``: the bytes, from ``offset``, ``length`` of them
        (default: to the end)."""
        headers = {}
        if length is not None and length > 0:
            headers["range"] = f"bytes={offset}-{offset + length - 1}"
        elif offset > 0:
            headers["range"] = f"bytes={offset}-"
        return cast(bytes, await self._call(
            Request("GET", "/fs/read_buffer", {"path": path}, headers=headers, idempotent=True),
            as_json=False))

    async def write_file(self, path: str, content: Union[str, Bytes]) -> WriteResult:
        """``PUT /fs/write``: replaces the file atomically; the server makes
        missing parent directories."""
        raw = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        # Writing the same bytes twice is writing them once: idempotent.
        o = await self._call(Request("PUT", "/fs/write", {"path": path}, body=raw,
                                     content_type="application/octet-stream", idempotent=True))
        return WriteResult(str(o["path"]), int(o["size"]))

    async def stat(self, path: str) -> FileStat:
        """``GET /fs/stat``; fields the server left out are None."""
        return _stat(await self._get("/fs/stat", path))

    async def readdir(self, path: str) -> List[str]:
        """``GET /fs/readdir``: every name (pages followed), sorted bytewise."""
        names: List[str] = []
        after: Optional[str] = None
        while True:
            page = await self._get("/fs/readdir", path, limit=10000, after=after)
            names += [str(n) for n in page["entries"]]
            if not page.get("more") or not page.get("next"):
                break
            after = str(page["next"])
        return sorted(names, key=lambda n: n.encode("utf-8", "surrogateescape"))

    async def exists(self, path: str) -> bool:
        """``GET /fs/exists``."""
        return (await self._get("/fs/exists", path)).get("exists") is True

    async def mkdir(self, path: str, recursive: bool = False) -> str:
        """``POST /fs/mkdir``: the absolute path made (SandboxExists if it is there)."""
        return str((await self._post("/fs/mkdir", {"path": path, "recursive": recursive}))["path"])

    async def rm(self, path: str, recursive: bool = False, force: bool = False) -> bool:
        """``POST /fs/rm``: whether something was removed (False only with
        ``force`` and no such path). A symlink is removed, never followed."""
        o = await self._post("/fs/rm", {"path": path, "recursive": recursive, "force": force})
        return o.get("removed") is True

    async def move(self, src: str, dst: str, overwrite: bool = False) -> str:
        """``POST /fs/move``: an atomic rename inside the workspace."""
        return str((await self._post("/fs/move", {"from": src, "to": dst,
                                                  "overwrite": overwrite}))["path"])

    async def exec(self, command: str, cwd: Optional[str] = None,
                   env: Optional[Mapping[str, str]] = None, timeout_s: Optional[float] = None, *,
                   idle_timeout_s: Optional[float] = None, stdin: Optional[str] = None,
                   max_output_bytes: Optional[int] = None, network: Optional[bool] = None,
                   id: Optional[str] = None) -> ShellResult:
        """``POST /exec``: runs ``command`` with ``/bin/sh -c``.

        ``timeout_s`` (whole seconds, rounded up) stops it as a result
        (``timed_out``, exit 124). Cancelling the task that awaits this
        (``task.cancel()``, ``asyncio.wait_for``, a TaskGroup) sends
        ``POST /exec/{id}/cancel`` before the CancelledError goes on; the
        server's timeout and the cancel race, and whichever fires first
        wins. ``id`` (default: made here) is an idempotency key: a retry
        with it is answered by the one command.
        """
        if not isinstance(command, str) or not command:
            raise SandboxError(0, "bad_request", "exec needs a command")
        body: Wire = {"command": command}
        _set(body, cwd=cwd, env=dict(env) if env is not None else None,
             timeout_s=_seconds(timeout_s), idle_timeout_s=_seconds(idle_timeout_s), stdin=stdin,
             max_output_bytes=max_output_bytes, network=network)
        return ShellResult(**_result_fields(await self._exec_like("/exec", body, id, timeout_s)))

    def read_file_stream(self, path: str, offset: int = 0) -> AsyncIterator[bytes]:
        """``GET /fs/read_stream``: the file in chunks (at most 256 KiB each), in
        constant memory; from ``offset`` to resume a broken download. No
        deadline: closing the iterator (or leaving ``async for``) ends the
        download."""
        return self._read_stream(path, offset)

    async def _read_stream(self, path: str, offset: int) -> AsyncIterator[bytes]:
        headers = {"range": f"bytes={offset}-"} if offset > 0 else {}
        res = await self._send(Request("GET", "/fs/read_stream", {"path": path}, headers=headers,
                                         idempotent=True), None)
        try:
            async for chunk in res.chunks():
                yield chunk
        finally:
            res.close()

    async def write_file_stream(self, path: str, source: Source) -> UploadResult:
        """``PUT /fs/write_stream``: the chunks of ``source`` (an async or plain
        iterable of bytes) become the file, pulled one at a time as the
        connection takes them. The file appears atomically when the source
        ends; an interrupted upload leaves the old file. Unlike
        :meth:`write_file`, the parent directory must exist (SandboxNotFound
        ``parent_missing``). An error raised by ``source`` abandons the upload
        and is raised as it was."""
        it = _aiter(source)
        try:
            o = await self._call(Request("PUT", "/fs/write_stream", {"path": path}, stream=it),
                                 deadline_s=None)
        except SourceError as e:
            raise e.error from e.error.__cause__
        finally:
            await it.aclose()
        return UploadResult(str(o["path"]), int(o["size"]), str(o["sha256"]))

    # Execs beyond the eleven.

    async def cancel_exec(self, id: str) -> None:
        """``POST /exec/{id}/cancel``: the command stops as by a timeout;
        cancelling twice is cancelling once."""
        await self._call(Request("POST", f"/exec/{_http.quote(id)}/cancel", idempotent=True),
                         deadline_s=CANCEL_TIMEOUT_S, as_json=False)

    async def get_exec(self, id: str) -> Wire:
        """``GET /exec/{id}``: ``{id, state, command, session, cwd, started_at, result}``."""
        return cast(Wire, await self._call(Request("GET", f"/exec/{_http.quote(id)}",
                                                   idempotent=True)))

    async def _exec_like(self, route: str, body: Wire, id: Optional[str],
                         timeout_s: Optional[float]) -> Wire:
        eid = id or make_exec_id()
        body["id"] = eid
        t = timeout_s if timeout_s and timeout_s > 0 else EXEC_TIMEOUT_MAX_S
        req = Request("POST", route, body=_http.json_bytes(body), content_type="application/json",
                      replayable=True)
        try:
            return cast(Wire, await self._call(req, deadline_s=t + EXEC_MARGIN_S))
        except asyncio.CancelledError:
            # The connection is closed already, which the server takes as a
            # cancel too; the explicit one also reaches a command a balancer
            # keeps running. Shielded: a second cancel of this task stops
            # the waiting, not the request.
            try:
                await asyncio.shield(self._cancel_quietly(eid))
            except asyncio.CancelledError:
                pass
            raise

    async def _cancel_quietly(self, eid: str) -> None:
        try:
            await self.cancel_exec(eid)
        except (SandboxError, SandboxUnavailable):
            pass  # it ended already, or the server is gone (and so is the command)

    async def run(self, code: str, language: str, files: Optional[CodeFiles] = None, *,
                  timeout_s: Optional[float] = None, max_output_bytes: Optional[int] = None,
                  network: Optional[bool] = None, env: Optional[Mapping[str, str]] = None,
                  args: Optional[Sequence[str]] = None, cwd: Optional[str] = None,
                  stdin: Optional[str] = None, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                  id: Optional[str] = None) -> RunResult:
        """The code tool: ``POST /code`` writes ``files`` (path to text or
        bytes), runs ``code`` with the language's interpreter (``python``,
        ``node``, ``bash``, ``sh``: what ``GET /readyz`` lists) in the session
        directory, and answers with the files the run created, modified or
        deleted; those still there and at most ``max_file_bytes`` are read
        back into ``RunResult.files``. Cancelling the task cancels the run,
        as for :meth:`exec`."""
        items = list(files.items()) if isinstance(files, Mapping) else list(files or [])
        body: Wire = {"language": language, "code": code}
        if items:
            body["files"] = [{"path": p, "content": c} if isinstance(c, str) else
                             {"path": p, "content": base64.b64encode(bytes(c)).decode(),
                              "encoding": "base64"} for p, c in items]
        _set(body, args=list(args) if args is not None else None, cwd=cwd,
             env=dict(env) if env is not None else None, timeout_s=_seconds(timeout_s),
             max_output_bytes=max_output_bytes, network=network, stdin=stdin)
        o = await self._exec_like("/code", body, id, timeout_s)
        fields = _result_fields(o)
        changed: List[FileChange] = fields["files_changed"] or []
        fields["files_changed"] = changed
        produced: List[ProducedFile] = []
        for f in changed:
            p = ProducedFile(f.path, f.kind, f.size, f.sha256)
            if f.kind != "deleted" and 0 < max_file_bytes and f.size <= max_file_bytes:
                try:
                    p.content = await self.read_file_buffer(f.path)
                except SandboxError as e:
                    if e.code != "not_found":
                        raise  # else gone since
            produced.append(p)
        return RunResult(**fields, files=produced,
                         files_changed_truncated=o.get("files_changed_truncated") is True)


def _set(body: Wire, **fields: Any) -> None:
    body.update({k: v for k, v in fields.items() if v is not None})
