"""SyncGatewaySandbox: GatewaySandbox for code without an event loop.

Calls block; each runs on a private event loop in a daemon thread. An
interrupt (Ctrl-C's KeyboardInterrupt, or any exception raised in the
waiting thread) cancels the call as a task cancel would: an exec is
cancelled on the server before the interrupt goes on.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Awaitable, Callable, Iterator, List, Mapping, Optional, TypeVar, Union

from .sandbox import GatewaySandbox
from .scoped import ScopedSessionEnv
from .types import Bytes, FileStat, RunResult, ShellResult, Source, UploadResult, WriteResult

T = TypeVar("T")


class _Loop:
    """One event loop in a daemon thread, shared by a sandbox and its sessions."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="sandboxd-client",
                                       daemon=True)
        self.thread.start()

    def run(self, aw: Awaitable[T]) -> T:
        fut: "concurrent.futures.Future[T]" = asyncio.run_coroutine_threadsafe(
            _coro(aw), self.loop)
        try:
            return fut.result()
        except BaseException:
            if not fut.done():
                fut.cancel()  # the task is cancelled in the loop: exec forwards it
                try:
                    fut.result(timeout=15)
                except BaseException:
                    pass
            raise

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)
        if not self.loop.is_running():
            self.loop.close()


async def _coro(aw: Awaitable[T]) -> T:
    return await aw


class SyncGatewaySandbox:
    """The eleven methods (and ``run``) of :class:`GatewaySandbox`, blocking.

    Takes GatewaySandbox's arguments. Safe to call from several threads.
    :meth:`close` (or a ``with`` block) stops its thread.
    """

    def __init__(self, base_url: str, auth_token: str, tenant_id: str, **options: Any) -> None:
        self._loop = _Loop()
        self._owner = True
        self.api = GatewaySandbox(base_url, auth_token, tenant_id, **options)

    @classmethod
    def _wrap(cls, api: Any, loop: _Loop) -> "SyncGatewaySandbox":
        s = cls.__new__(cls)
        s._loop, s._owner, s.api = loop, False, api
        return s

    def with_session(self, session_key: str) -> "SyncGatewaySandbox":
        """Another session of the same sandbox, on the same thread."""
        return self._wrap(self.api.with_session(session_key), self._loop)

    def scoped(self, per_session_cwd: str) -> "SyncGatewaySandbox":
        """A scoped session view (create_scoped_session_env), blocking."""
        return self._wrap(ScopedSessionEnv(self.api, per_session_cwd), self._loop)

    def close(self) -> None:
        if self._owner:
            self._loop.run(self.api.aclose())
            self._loop.stop()

    def __enter__(self) -> "SyncGatewaySandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, f: Callable[..., Awaitable[T]], *args: Any, **kw: Any) -> T:
        return self._loop.run(f(*args, **kw))

    def read_file(self, path: str) -> str:
        return self._run(self.api.read_file, path)

    def read_file_buffer(self, path: str, offset: int = 0, length: Optional[int] = None) -> bytes:
        return self._run(self.api.read_file_buffer, path, offset, length)

    def write_file(self, path: str, content: Union[str, Bytes]) -> WriteResult:
        return self._run(self.api.write_file, path, content)

    def stat(self, path: str) -> FileStat:
        return self._run(self.api.stat, path)

    def readdir(self, path: str) -> List[str]:
        return self._run(self.api.readdir, path)

    def exists(self, path: str) -> bool:
        return self._run(self.api.exists, path)

    def mkdir(self, path: str, recursive: bool = False) -> str:
        return self._run(self.api.mkdir, path, recursive)

    def rm(self, path: str, recursive: bool = False, force: bool = False) -> bool:
        return self._run(self.api.rm, path, recursive, force)

    def exec(self, command: str, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
             timeout_s: Optional[float] = None, **more: Any) -> ShellResult:
        return self._run(self.api.exec, command, cwd, env, timeout_s, **more)

    def run(self, code: str, language: str, files: Any = None, **more: Any) -> RunResult:
        return self._run(self.api.run, code, language, files, **more)

    def read_file_stream(self, path: str, offset: int = 0) -> Iterator[bytes]:
        """The file in chunks, in constant memory: a plain iterator."""
        it = self.api.read_file_stream(path, offset)
        try:
            while True:
                try:
                    yield self._loop.run(it.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            aclose = getattr(it, "aclose", None)
            if aclose is not None:
                self._loop.run(aclose())

    def write_file_stream(self, path: str, source: Source) -> UploadResult:
        """The chunks of ``source`` (a plain iterable is pulled on the client's
        thread, one chunk at a time) become the file."""
        return self._run(self.api.write_file_stream, path, source)
