"""The two kinds of failure a gateway must tell apart (wire.md "Errors").

:class:`SandboxUnavailable`: the environment is down; retry later (after
``retry_after_s`` when the server said). :class:`SandboxError`: the request
was refused (a wire error code such as ``not_found``). A command that exits
non-zero, times out or is cancelled is neither: it is a ``ShellResult``.
"""
from __future__ import annotations

from typing import Dict, Optional, Type


class SandboxError(Exception):
    """A refusal with a wire error code (``not_found``, ``outside_workspace``, ...).

    Attributes: ``status`` (the HTTP status; 0 when refused here, before
    any request), ``code`` (the wire code), ``message``, ``retry_hint``
    (the server's hint, e.g. which route to use instead, or None) and
    ``request_id`` (the answer's ``X-Request-Id``, for the server's audit).
    """

    def __init__(self, status: int, code: str, message: str,
                 retry_hint: Optional[str] = None,
                 request_id: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_hint = retry_hint
        self.request_id = request_id

    def __str__(self) -> str:
        where = f" ({self.status})" if self.status else ""
        return f"{self.code}{where}: {self.message}"


class SandboxNotFound(SandboxError, FileNotFoundError):
    """``not_found`` or ``parent_missing`` (404): also a FileNotFoundError."""


class SandboxExists(SandboxError, FileExistsError):
    """``exists`` (409): also a FileExistsError."""


class SandboxOutsideWorkspace(SandboxError, PermissionError):
    """``outside_workspace`` (403, or refused here by a scoped view): also a PermissionError."""


_BY_CODE: Dict[str, Type[SandboxError]] = {
    "not_found": SandboxNotFound,
    "parent_missing": SandboxNotFound,
    "exists": SandboxExists,
    "outside_workspace": SandboxOutsideWorkspace,
}


def refusal(status: int, code: str, message: str, retry_hint: Optional[str] = None,
            request_id: Optional[str] = None) -> SandboxError:
    """The SandboxError (or its subclass for the code) of a refusal."""
    return _BY_CODE.get(code, SandboxError)(status, code, message, retry_hint, request_id)


class SandboxUnavailable(Exception):
    """The sandbox environment is not available; not the caller's fault.

    A 503 (``backend_unavailable``, ``store_unavailable``), a 429
    (``too_many_requests``) still refused after the retries, a connection
    that could not be made or broke, or no answer before the call's
    deadline. Attributes: ``status`` (None when no answer came), ``code``
    (the wire code, or ``connection_refused``, ``connection_broken``,
    ``timeout``), ``retry_hint``, ``retry_after_s`` (the last answer's
    ``Retry-After``), ``request_id`` and ``attempts`` (requests made, the
    first and the retries).
    """

    def __init__(self, status: Optional[int], code: str, message: str, *,
                 retry_hint: Optional[str] = None, retry_after_s: Optional[float] = None,
                 request_id: Optional[str] = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_hint = retry_hint
        self.retry_after_s = retry_after_s
        self.request_id = request_id
        self.attempts = attempts

    def __str__(self) -> str:
        where = f" ({self.status})" if self.status is not None else ""
        return f"{self.code}{where}: {self.message}"
