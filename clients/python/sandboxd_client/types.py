"""The public shapes: the eleven-method SandboxApi of a gateway and what its
methods take and give. Wire fields keep their names; a field the wire left
out is None here (never invented)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import (Any, AsyncIterable, AsyncIterator, Dict, Iterable, List, Mapping, Optional,
                    Protocol, Union)

Bytes = Union[bytes, bytearray, memoryview]
#: What write_file_stream takes: chunks, from an async or a plain iterable.
Source = Union[AsyncIterable[Bytes], Iterable[Bytes]]


@dataclass
class FileStat:
    """``GET /fs/stat``: optional fields are None when the server did not send them
    (a dangling symlink has only ``path``, ``type`` and ``is_symlink``)."""

    path: str
    type: str  # "file", "directory", "symlink" or "other"
    is_symlink: bool
    size: Optional[int] = None
    mtime: Optional[str] = None  # RFC 3339, UTC
    mode: Optional[str] = None  # octal, e.g. "0644"


@dataclass
class WriteResult:
    path: str
    size: int


@dataclass
class UploadResult:
    path: str
    size: int
    sha256: str  # hex, of what the server stored


@dataclass
class FileChange:
    path: str
    kind: str  # "created", "modified" or "deleted"
    size: int
    sha256: Optional[str]


@dataclass
class ShellResult:
    """``POST /exec``'s result. A non-zero exit, a timeout and a cancel are
    results, not errors: ``exit_code`` is 124 on timeout, 128+N when killed
    by signal N."""

    stdout: str
    stderr: str
    exit_code: int
    id: str = ""
    timed_out: bool = False
    cancelled: bool = False
    truncated: bool = False  # some output was left out; the spill files have it
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_spill: Optional[str] = None
    stderr_spill: Optional[str] = None
    started_at: str = ""
    finished_at: str = ""
    duration_ms: int = 0
    idle: Optional[bool] = None  # stopped by idle_timeout_s
    oom_killed: Optional[bool] = None
    #: ``run`` (POST /code): what the code created, modified or deleted.
    files_changed: Optional[List[FileChange]] = None
    #: The wire object as received, every field (``egress_denied``, ``networked``, ...).
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class ProducedFile(FileChange):
    """A file ``run`` reported, with its bytes when it still exists and fits."""

    content: Optional[bytes] = None


@dataclass
class RunResult(ShellResult):
    """``run``'s result: the ShellResult and the files the code produced."""

    files: List[ProducedFile] = field(default_factory=list)
    files_changed_truncated: bool = False


class SandboxApi(Protocol):
    """The sandbox layer of a gateway: eleven methods (all coroutines but the
    stream reader, an async iterator)."""

    async def read_file(self, path: str) -> str:
        """``GET /fs/read``: UTF-8 text (SandboxError ``not_text`` otherwise)."""

    async def read_file_buffer(self, path: str, offset: int = 0,
                               length: Optional[int] = None) -> bytes:
        """``GET /fs/read_buffer``: bytes, optionally a range."""

    async def write_file(self, path: str, content: Union[str, Bytes]) -> WriteResult:
        """``PUT /fs/write``: replaces the file atomically; missing parents are made."""

    async def stat(self, path: str) -> FileStat:
        """``GET /fs/stat``."""

    async def readdir(self, path: str) -> List[str]:
        """``GET /fs/readdir``: every name, sorted bytewise."""

    async def exists(self, path: str) -> bool:
        """``GET /fs/exists``."""

    async def mkdir(self, path: str, recursive: bool = False) -> str:
        """``POST /fs/mkdir``: the absolute path made."""

    async def rm(self, path: str, recursive: bool = False, force: bool = False) -> bool:
        """``POST /fs/rm``: whether something was removed."""

    async def exec(self, command: str, cwd: Optional[str] = None,
                   env: Optional[Mapping[str, str]] = None,
                   timeout_s: Optional[float] = None) -> ShellResult:
        """``POST /exec``; cancelling the task cancels the command."""

    def read_file_stream(self, path: str, offset: int = 0) -> AsyncIterator[bytes]:
        """``GET /fs/read_stream``: the file in chunks, in constant memory."""

    async def write_file_stream(self, path: str, source: Source) -> UploadResult:
        """``PUT /fs/write_stream``: the chunks become the file; the parent must exist."""
