"""sandboxd-client: the SandboxApi of a gateway over sandboxd's HTTP wire.

    from sandboxd_client import GatewaySandbox

    async with GatewaySandbox("https://sandboxd.example", token, "acme") as api:
        await api.write_file("hello.py", "print('hi')")
        r = await api.exec("python3 hello.py", timeout_s=30)
        print(r.exit_code, r.stdout)

See docs/clients.md in the sandboxd repository.
"""
from .errors import (SandboxError, SandboxExists, SandboxNotFound, SandboxOutsideWorkspace,
                     SandboxUnavailable)
from .sandbox import GatewaySandbox, make_exec_id
from .scoped import ScopedSessionEnv, create_scoped_session_env
from .sync import SyncGatewaySandbox
from .types import (FileChange, FileStat, ProducedFile, RunResult, SandboxApi, ShellResult,
                    UploadResult, WriteResult)

__version__ = "0.1.0"
__all__ = [
    "GatewaySandbox", "SyncGatewaySandbox", "ScopedSessionEnv", "create_scoped_session_env",
    "make_exec_id", "SandboxApi", "SandboxError", "SandboxNotFound", "SandboxExists",
    "SandboxOutsideWorkspace", "SandboxUnavailable", "ShellResult", "RunResult", "FileStat",
    "FileChange", "ProducedFile", "WriteResult", "UploadResult",
]
