"""create_scoped_session_env: a SandboxApi whose paths (and commands' cwd)
resolve against one directory, made the first time it is needed. Paths that
would leave it (``..``, an absolute path elsewhere) are refused here, before
any request, with SandboxOutsideWorkspace; the server confines everything
to the workspace in any case."""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, List, Mapping, Optional, Union

from .errors import SandboxError, SandboxOutsideWorkspace
from .sandbox import CodeFiles, GatewaySandbox
from .types import Bytes, FileStat, RunResult, SandboxApi, ShellResult, Source, UploadResult, WriteResult


def _normalise(p: str) -> str:
    absolute = p.startswith("/")
    out: List[str] = []
    for seg in p.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if not out or out[-1] == "..":
                if not absolute:
                    out.append("..")
            else:
                out.pop()
        else:
            out.append(seg)
    joined = "/".join(out)
    return ("/" + joined) if absolute else (joined or ".")


class ScopedSessionEnv:
    """A session's view: every relative path resolves against ``root``,
    which is made (recursively) on first use by a method that writes or
    runs."""

    def __init__(self, api: SandboxApi, per_session_cwd: str) -> None:
        if not per_session_cwd:
            raise SandboxError(0, "bad_request", "a scoped session needs a directory")
        self.api = api
        self.root = _normalise(per_session_cwd)
        if ".." in self.root.split("/"):
            raise SandboxOutsideWorkspace(0, "outside_workspace",
                                          f"{per_session_cwd} leaves the session directory")
        self._made: Optional["asyncio.Future[str]"] = None

    def resolve(self, path: str) -> str:
        """The path ``path`` names inside the scope, or SandboxOutsideWorkspace."""
        r = _normalise(path if path.startswith("/") else f"{self.root}/{path}")
        prefix = "/" if self.root == "/" else self.root + "/"
        if (r != self.root and not r.startswith(prefix)) or ".." in r.split("/"):
            raise SandboxOutsideWorkspace(0, "outside_workspace", f"{path} is outside {self.root}")
        return r

    async def _ensure(self) -> None:
        if self._made is None or (self._made.done() and self._made.exception() is not None):
            self._made = asyncio.ensure_future(self.api.mkdir(self.root, recursive=True))
        await asyncio.shield(self._made)

    async def read_file(self, path: str) -> str:
        return await self.api.read_file(self.resolve(path))

    async def read_file_buffer(self, path: str, offset: int = 0,
                               length: Optional[int] = None) -> bytes:
        return await self.api.read_file_buffer(self.resolve(path), offset, length)

    async def write_file(self, path: str, content: Union[str, Bytes]) -> WriteResult:
        return await self.api.write_file(self.resolve(path), content)

    async def stat(self, path: str) -> FileStat:
        return await self.api.stat(self.resolve(path))

    async def readdir(self, path: str) -> List[str]:
        return await self.api.readdir(self.resolve(path))

    async def exists(self, path: str) -> bool:
        return await self.api.exists(self.resolve(path))

    async def mkdir(self, path: str, recursive: bool = False) -> str:
        p = self.resolve(path)
        if p != self.root:
            await self._ensure()
        return await self.api.mkdir(p, recursive)

    async def rm(self, path: str, recursive: bool = False, force: bool = False) -> bool:
        return await self.api.rm(self.resolve(path), recursive, force)

    async def exec(self, command: str, cwd: Optional[str] = None,
                   env: Optional[Mapping[str, str]] = None, timeout_s: Optional[float] = None,
                   **more: Any) -> ShellResult:
        """Runs in the scope's directory (or ``cwd`` inside it); the extra
        keywords of GatewaySandbox.exec pass through."""
        where = self.resolve(cwd if cwd is not None else ".")
        await self._ensure()
        if more:
            return await self._gateway("exec").exec(command, where, env, timeout_s, **more)
        return await self.api.exec(command, where, env, timeout_s)

    async def read_file_stream(self, path: str, offset: int = 0) -> AsyncIterator[bytes]:
        # Refused when iterated, as the download itself starts then.
        it = self.api.read_file_stream(self.resolve(path), offset)
        async for chunk in it:
            yield chunk

    async def write_file_stream(self, path: str, source: Source) -> UploadResult:
        p = self.resolve(path)
        await self._ensure()
        return await self.api.write_file_stream(p, source)

    async def run(self, code: str, language: str, files: Optional[CodeFiles] = None, *,
                  cwd: Optional[str] = None, **more: Any) -> RunResult:
        """The code tool in this directory; input file paths resolve in it too."""
        items = list(files.items()) if isinstance(files, Mapping) else list(files or [])
        where = self.resolve(cwd if cwd is not None else ".")
        await self._ensure()
        return await self._gateway("run").run(code, language, [(self.resolve(p), c) for p, c in items],
                                              cwd=where, **more)

    def _gateway(self, what: str) -> GatewaySandbox:
        if not isinstance(self.api, GatewaySandbox):
            raise SandboxError(0, "bad_request", f"{what} with these options needs a GatewaySandbox")
        return self.api


def create_scoped_session_env(api: SandboxApi, per_session_cwd: str) -> ScopedSessionEnv:
    """A scoped session view of ``api``: relative paths resolve against
    ``per_session_cwd`` (relative to the session directory, or an absolute
    workspace path), and commands run there by default."""
    return ScopedSessionEnv(api, per_session_cwd)
