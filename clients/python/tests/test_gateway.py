"""The gateway scenario through sandboxd_client against a real sandboxd on
127.0.0.1 (bwrap backend): the eleven methods, each request carrying token,
tenant and session; 1 GiB each way in constant memory; timeout as a
result; a mid-flight cancel through task.cancel(); a retry with the same id
running once; a real 503 (a tenant served by a remote backend that is down)
surfaced as SandboxUnavailable with its hint; sessions isolated by
directory; the code tool; the sync wrapper, interrupted.

Run: SANDBOXD_BIN=build/sandboxd python3 -m unittest discover -s clients/python/tests -v
(tests/clients/python.sh runs it against the installed package).
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import struct
import subprocess
import sys
import threading
import unittest
from typing import Any, AsyncIterator, Dict, Iterator, Optional

from sandboxd_client import (GatewaySandbox, SandboxError, SandboxExists, SandboxNotFound,
                             SandboxOutsideWorkspace, SandboxUnavailable, SyncGatewaySandbox,
                             create_scoped_session_env, make_exec_id)

from _server import Proxy, Sandboxd, free_port, until


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


SRV: Sandboxd
TOKEN: str


def setUpModule() -> None:
    global SRV, TOKEN
    SRV = Sandboxd("--set", "heartbeat-ms=500", "--set", "backends=bwrap,remote")
    SRV.cli("tenant", "add", "globex")
    SRV.cli("tenant", "add", "ops", "--operator")
    SRV.start()
    TOKEN = SRV.token(scope="fs:read fs:write exec audit:read")


def tearDownModule() -> None:
    SRV.close()


async def exec_state(api: GatewaySandbox, eid: str) -> Optional[Dict[str, Any]]:
    """GET /exec/{id}, or None before the server knows the id."""
    try:
        return await api.get_exec(eid)
    except SandboxNotFound:
        return None


async def exec_ended(api: GatewaySandbox, eid: str) -> Optional[Dict[str, Any]]:
    g = await exec_state(api, eid)
    return g if g is not None and g["state"] != "running" else None


class Gateway(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        # unittest runs the loop in debug mode; a 1 GiB stream's callbacks
        # are not slow, only many.
        asyncio.get_running_loop().slow_callback_duration = 5.0

    @property
    def srv(self) -> Sandboxd:
        return SRV

    @property
    def token(self) -> str:
        return TOKEN

    def sbx(self, session: str, url: Optional[str] = None, **kw: object) -> GatewaySandbox:
        return GatewaySandbox(url or self.srv.url, self.token, "acme", session_key=session,
                              **kw)  # type: ignore[arg-type]

    async def proxy(self, **kw: object) -> Proxy:
        p = Proxy(self.srv.port, **kw)  # type: ignore[arg-type]
        await p.start()
        self.addAsyncCleanup(p.close)
        return p

    async def test_eleven_methods(self) -> None:
        rec = await self.proxy()
        async with self.sbx("py:files", f"http://127.0.0.1:{rec.port}") as api:
            # write_file makes parents; read_file / read_file_buffer (a range) read back.
            w = await api.write_file("notes/deep/a.txt", "hello")
            self.assertEqual(w.size, 5)
            self.assertRegex(w.path, r"^/workspace/sessions/py_files-[0-9a-z]+/notes/deep/a\.txt$")
            home = w.path[: -len("/notes/deep/a.txt")]
            self.assertEqual(await api.read_file("notes/deep/a.txt"), "hello")
            self.assertEqual(await api.read_file_buffer("notes/deep/a.txt", 1, 3), b"ell")
            self.assertEqual(await api.read_file_buffer("notes/deep/a.txt", 2), b"llo")
            await api.write_file("bin.dat", bytes([0, 255, 1, 254]))
            self.assertEqual(await api.read_file_buffer("bin.dat"), bytes([0, 255, 1, 254]))
            with self.assertRaises(SandboxError) as cm:
                await api.read_file("bin.dat")
            self.assertEqual((cm.exception.code, cm.exception.status), ("not_text", 422))
            self.assertIsNotNone(cm.exception.retry_hint)

            # stat: a file has every field; a dangling symlink only what is known.
            st = await api.stat("notes/deep/a.txt")
            self.assertEqual((st.type, st.size, st.is_symlink), ("file", 5, False))
            self.assertRegex(st.mode or "", r"^0[0-7]{3}$")
            self.assertRegex(st.mtime or "", r"^\d{4}-\d\d-\d\dT")
            ln = await api.exec("ln -s /nowhere dangling")
            self.assertEqual(ln.exit_code, 0, ln.stderr)
            dl = await api.stat("dangling")
            self.assertEqual((dl.type, dl.is_symlink, dl.size, dl.mtime, dl.mode),
                             ("symlink", True, None, None, None))

            self.assertEqual(await api.mkdir("d1/d2", recursive=True), f"{home}/d1/d2")
            with self.assertRaises(SandboxExists) as ce:
                await api.mkdir("d1/d2")
            self.assertEqual((ce.exception.code, ce.exception.status), ("exists", 409))
            self.assertIsInstance(ce.exception, FileExistsError)
            await api.write_file("d1/b", "")
            await api.write_file("d1/B", "")
            self.assertEqual(await api.readdir("d1"), ["B", "b", "d2"])
            self.assertTrue(await api.exists("d1/b"))
            self.assertFalse(await api.exists("nope"))
            self.assertTrue(await api.rm("d1", recursive=True))
            self.assertFalse(await api.rm("d1", force=True))
            with self.assertRaises(SandboxNotFound) as cn:
                await api.rm("d1")
            self.assertIsInstance(cn.exception, FileNotFoundError)
            with self.assertRaises(SandboxOutsideWorkspace):
                await api.read_file("/etc/passwd")

            # exec: output, env, cwd; a non-zero exit is a result.
            r = await api.exec('echo "$X"; pwd; echo err >&2; exit 3', cwd="notes", env={"X": "x1"})
            self.assertEqual(r.exit_code, 3)
            self.assertEqual(r.stdout, f"x1\n{home}/notes\n")
            self.assertEqual(r.stderr, "err\n")
            self.assertFalse(r.timed_out)
            self.assertRegex(r.id, r"^c[0-9a-f]{32}$")

            # Streams, small: the parent must exist for write_file_stream.
            up = await api.write_file_stream("notes/s.txt", [b"ab", b"cd"])
            self.assertEqual((up.size, up.sha256), (4, hashlib.sha256(b"abcd").hexdigest()))
            with self.assertRaises(SandboxNotFound) as cp:
                await api.write_file_stream("nodir/s.txt", [b"x"])
            self.assertEqual((cp.exception.code, cp.exception.status), ("parent_missing", 404))
            self.assertEqual(b"".join([c async for c in api.read_file_stream("notes/s.txt")]), b"abcd")
            self.assertEqual(b"".join([c async for c in api.read_file_stream("notes/s.txt", 2)]), b"cd")

            # A source that fails abandons the upload: the old file stays.
            async def failing() -> AsyncIterator[bytes]:
                yield b"new"
                raise ValueError("source broke")
            with self.assertRaisesRegex(ValueError, "source broke"):
                await api.write_file_stream("notes/s.txt", failing())
            self.assertEqual(await api.read_file("notes/s.txt"), "abcd")

        self.assertGreater(len(rec.seen), 25)
        for q in rec.seen:
            self.assertEqual(q.headers.get("authorization"), f"Bearer {self.token}", q.target)
            self.assertEqual(q.headers.get("x-tenant-id"), "acme", q.target)
            self.assertEqual(q.headers.get("x-session-key"), "py:files", q.target)

    async def test_gib_each_way_constant_memory(self) -> None:
        api = self.sbx("py:big")
        chunk, n = 1 << 18, 4096  # 1 GiB in 256 KiB chunks
        want = hashlib.sha256()
        base = rss_bytes()
        peak = base

        def sample() -> None:
            nonlocal peak
            peak = max(peak, rss_bytes())

        def source() -> Iterator[bytes]:
            for i in range(n):
                c = struct.pack(">I", i) + bytes([i & 0xFF]) * (chunk - 4)
                want.update(c)
                if i % 64 == 0:
                    sample()
                yield c

        up = await api.write_file_stream("big.bin", source())
        up_growth = (peak - base) / (1 << 20)
        self.assertEqual(up.size, chunk * n)
        self.assertEqual(up.sha256, want.hexdigest())
        got, total, k = hashlib.sha256(), 0, 0
        async for c in api.read_file_stream("big.bin"):
            got.update(c)
            total += len(c)
            k += 1
            if k % 64 == 0:
                sample()
        sample()
        self.assertEqual(total, chunk * n)
        self.assertEqual(got.hexdigest(), up.sha256)
        growth = (peak - base) / (1 << 20)
        print(f"\n# 1 GiB up and down: rss grew by {growth:.1f} MiB at most ({up_growth:.1f} MiB up)")
        self.assertLess(growth, 64)
        self.assertTrue(await api.rm("big.bin"))
        await api.aclose()

    async def test_exec_timeout_and_cancel(self) -> None:
        rec = await self.proxy()
        api = self.sbx("py:exec", f"http://127.0.0.1:{rec.port}")
        to = await api.exec("echo before; sleep 60", timeout_s=1)
        self.assertEqual((to.timed_out, to.exit_code, to.stdout), (True, 124, "before\n"))

        eid = make_exec_id()
        task = asyncio.ensure_future(api.exec(
            "echo started; while [ ! -e /workspace/.never ]; do sleep 0.05; done", id=eid))

        async def running() -> bool:
            g = await exec_state(api, eid)
            return g is not None and g["state"] == "running"
        await until("the exec to run", running)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertTrue(any(q.method == "POST" and q.target.endswith(f"/exec/{eid}/cancel")
                            for q in rec.seen), "cancel sent")

        x = await until("the exec to end", lambda: exec_ended(api, eid))
        self.assertEqual(x["state"], "cancelled")
        self.assertIs(x["result"]["cancelled"], True)

        # asyncio.wait_for is a cancel too: the command stops on the server.
        eid2 = make_exec_id()
        with self.assertRaises(asyncio.TimeoutError):
            await asyncio.wait_for(api.exec("sleep 60", id=eid2), 1.0)
        y = await until("the timed-out wait's exec to end", lambda: exec_ended(api, eid2))
        self.assertEqual(y["state"], "cancelled")
        await api.aclose()

    async def test_retry_with_same_id_runs_once(self) -> None:
        # The first answer is lost behind a 503 (as from a balancer): the
        # client retries with the same id and gets the first run's result.
        lossy = await self.proxy(lose=("POST", "/exec"))
        api = self.sbx("py:once", f"http://127.0.0.1:{lossy.port}")
        cmd = "echo run >> runs.log; cat /proc/sys/kernel/random/uuid"
        r = await api.exec(cmd)
        self.assertEqual(lossy.lost, 1)
        posts = [q for q in lossy.seen if (q.method, q.target) == ("POST", "/exec")]
        self.assertEqual(len(posts), 2)
        self.assertEqual(posts[0].body, posts[1].body)
        self.assertEqual(r.exit_code, 0)
        self.assertEqual(await api.read_file("runs.log"), "run\n")
        again = await api.exec(cmd, id=r.id)
        self.assertEqual(again.stdout, r.stdout)
        self.assertEqual(await api.read_file("runs.log"), "run\n")
        with self.assertRaises(SandboxError) as cm:
            await api.exec("true", id=r.id)
        self.assertEqual((cm.exception.code, cm.exception.status), ("conflict", 409))
        await api.aclose()

    async def test_infrastructure_failures(self) -> None:
        # Tenant globex served by a remote backend where nothing listens.
        ops = self.srv.token("ops", "admin")
        gtok = self.srv.token("globex")
        tok_file = os.path.join(self.srv.dir, "globex-back-token")
        with open(os.open(tok_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(gtok)
        status, text = self.srv.put_json("/tenants/globex/policy", ops, {
            "backend": "remote", "remote_url": f"http://127.0.0.1:{free_port()}",
            "remote_token_file": tok_file})
        self.assertEqual(status, 200, text)
        rec = await self.proxy()
        # max_backoff_s bounds the wait that Retry-After asks for.
        g = GatewaySandbox(f"http://127.0.0.1:{rec.port}", gtok, "globex", max_retries=1,
                           max_backoff_s=0.2)
        with self.assertRaises(SandboxUnavailable) as cm:
            await g.exists("x")
        e = cm.exception
        self.assertNotIsInstance(e, SandboxError)
        self.assertEqual((e.status, e.code, e.attempts), (503, "backend_unavailable", 2))
        self.assertIsInstance(e.retry_hint, str)
        self.assertGreaterEqual(e.retry_after_s or 0, 1)
        self.assertTrue(e.request_id)
        self.assertEqual(len(rec.seen), 2)
        with self.assertRaises(SandboxUnavailable) as cx:
            await g.with_session("other").exec("true")
        self.assertEqual(cx.exception.code, "backend_unavailable")
        await g.aclose()

        down = GatewaySandbox(f"http://127.0.0.1:{free_port()}", self.token, "acme",
                              max_retries=2, max_backoff_s=0.1)
        with self.assertRaises(SandboxUnavailable) as cd:
            await down.read_file("x")
        self.assertEqual((cd.exception.code, cd.exception.status, cd.exception.attempts),
                         ("connection_refused", None, 3))

    async def test_sessions_and_scoped_views(self) -> None:
        a, b = self.sbx("py:a"), self.sbx("py:b")
        await a.write_file("same.txt", "A")
        await b.write_file("same.txt", "B")
        self.assertEqual(await a.read_file("same.txt"), "A")
        self.assertEqual(await b.read_file("same.txt"), "B")
        self.assertNotEqual((await a.stat("same.txt")).path, (await b.stat("same.txt")).path)
        self.assertEqual((await b.exec("cat same.txt")).stdout, "B")

        s1 = create_scoped_session_env(a, "agents/one")
        s2 = create_scoped_session_env(a, "agents/two")
        p = await s1.exec("pwd")
        self.assertRegex(p.stdout, r"/sessions/py_a-[0-9a-z]+/agents/one\n$")
        await s1.write_file("x.txt", "1")
        self.assertFalse(await s2.exists("x.txt"))
        self.assertEqual(await a.read_file("agents/one/x.txt"), "1")
        await s2.write_file_stream("y.bin", [b"s"])  # its directory is made on first use
        self.assertEqual(await s2.readdir("."), ["y.bin"])
        with self.assertRaises(SandboxOutsideWorkspace):
            s1.resolve("../two/y.bin")
        with self.assertRaises(SandboxOutsideWorkspace):
            await s1.read_file("../two/y.bin")
        await a.aclose()
        await b.aclose()

    async def test_run_code_with_files(self) -> None:
        api = self.sbx("py:code")
        r = await api.run("tr a-z A-Z < in.txt > out.txt; cat in.bin > copy.bin; echo done", "sh",
                          {"in.txt": "abc", "in.bin": bytes([0, 1, 2, 255])}, timeout_s=30,
                          max_output_bytes=1000, env={"LANG": "C"})
        self.assertEqual(r.exit_code, 0, r.stderr)
        self.assertEqual(r.stdout, "done\n")
        by_name = {f.path.rsplit("/", 1)[-1]: f for f in r.files}
        self.assertEqual(sorted(by_name), ["copy.bin", "out.txt"])
        self.assertEqual(by_name["out.txt"].kind, "created")
        self.assertEqual(by_name["out.txt"].content, b"ABC")
        self.assertEqual(by_name["copy.bin"].content, bytes([0, 1, 2, 255]))
        py = await api.run("import sys; print(sum(map(int, sys.argv[1:])))", "python",
                           args=["2", "3"])
        self.assertEqual(py.stdout, "5\n", py.stderr)
        scoped = create_scoped_session_env(api, "work")
        s = await scoped.run("pwd; cat in.txt", "sh", {"in.txt": "scoped"})
        self.assertRegex(s.stdout, r"/work\nscoped$")
        await api.aclose()


class Sync(unittest.TestCase):
    """The blocking wrapper: the same calls without an event loop, and an
    interrupt of the waiting thread cancelling the command on the server."""

    def test_sync_wrapper(self) -> None:
        with SyncGatewaySandbox(SRV.url, TOKEN, "acme", session_key="py:sync") as api:
            self.assertEqual(api.write_file("a/b.txt", "sync").size, 4)
            self.assertEqual(api.read_file("a/b.txt"), "sync")
            self.assertEqual(api.exec("cat a/b.txt; exit 2").exit_code, 2)
            self.assertEqual(b"".join(api.read_file_stream("a/b.txt")), b"sync")
            self.assertEqual(api.write_file_stream("a/c.bin", iter([b"1", b"2"])).size, 2)
            self.assertEqual(api.scoped("a").readdir("."), ["b.txt", "c.bin"])
            self.assertEqual(api.with_session("py:sync2").exists("a/b.txt"), False)
            self.assertEqual(api.run("echo hi", "sh").stdout, "hi\n")

            # An interrupt while exec waits (as Ctrl-C would be): cancelled there.
            class Interrupt(Exception):
                pass

            def on_signal(signum: int, frame: object) -> None:
                raise Interrupt()
            eid = make_exec_id()
            main = threading.get_ident()
            old = signal.signal(signal.SIGUSR1, on_signal)

            def interrupter() -> None:
                async def running() -> bool:
                    async with GatewaySandbox(SRV.url, TOKEN, "acme", session_key="py:sync") as p:
                        g = await exec_state(p, eid)
                        return g is not None and g["state"] == "running"
                asyncio.run(until("the exec to run", running))
                signal.pthread_kill(main, signal.SIGUSR1)
            t = threading.Thread(target=interrupter)
            try:
                t.start()
                with self.assertRaises(Interrupt):
                    api.exec("sleep 60", id=eid)
            finally:
                t.join()
                signal.signal(signal.SIGUSR1, old)
            async def ended() -> Optional[Dict[str, Any]]:
                async with GatewaySandbox(SRV.url, TOKEN, "acme", session_key="py:sync") as p:
                    return await exec_ended(p, eid)
            g = asyncio.run(until("the exec to end", ended))
            self.assertEqual(g["state"], "cancelled")


class Example(unittest.TestCase):
    def test_example_runs(self) -> None:
        here = os.path.dirname(os.path.abspath(__file__))
        env = dict(os.environ, SANDBOXD_URL=SRV.url, SANDBOXD_TOKEN=TOKEN, SANDBOXD_TENANT="acme")
        out = subprocess.run([sys.executable, os.path.join(here, "..", "examples", "gateway.py")],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        lines = out.stdout.decode().splitlines()
        self.assertEqual(len(lines), 2, lines)
        self.assertRegex(lines[0], r"^counted \d+$")
        self.assertEqual(lines[1], "python says 42")
