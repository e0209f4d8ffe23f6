"""sandboxd_client in a gateway: write a script, run it, read what it made.

    SANDBOXD_URL=http://127.0.0.1:8080 SANDBOXD_TOKEN=... SANDBOXD_TENANT=acme \\
        python3 examples/gateway.py
"""
import asyncio
import os
import sys

from sandboxd_client import GatewaySandbox, SandboxUnavailable, create_scoped_session_env


async def main() -> int:
    async with GatewaySandbox(os.environ["SANDBOXD_URL"], os.environ["SANDBOXD_TOKEN"],
                              os.environ.get("SANDBOXD_TENANT", "acme"),
                              session_key="example") as api:
        work = create_scoped_session_env(api, "job-1")  # this job's directory
        try:
            await work.write_file("count.sh", "ls / | wc -l > lines.txt; echo counted")
            r = await work.exec("sh count.sh", timeout_s=30)
            if r.exit_code != 0:  # the command failed: a result, not an exception
                print(f"exit {r.exit_code}: {r.stderr}", file=sys.stderr)
                return 1
            print(r.stdout.strip(), (await work.read_file("lines.txt")).strip())
            out = await work.run("print(6 * 7)", "python", timeout_s=30)
            print("python says", out.stdout.strip())
        except SandboxUnavailable as e:  # the sandbox is down: retry later
            print(f"unavailable ({e.code}), retry after {e.retry_after_s}s: {e.retry_hint}",
                  file=sys.stderr)
            return 75
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
