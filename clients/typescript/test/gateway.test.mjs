// The gateway scenario through @sandboxd/client (built into dist/) against
// a real sandboxd on 127.0.0.1 (tests/clients/server.mjs, bwrap backend):
// the eleven methods, 1 GiB each way in constant memory, timeout, a cancel
// through AbortSignal, a retry with the same id running once, a real 503
// (a tenant served by a remote backend that is down) surfaced as
// SandboxUnavailableError, and sessions isolated by directory.
// Run: SANDBOXD_BIN=build/sandboxd node --test clients/typescript/test/
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { writeFileSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import v8 from 'node:v8';
import vm from 'node:vm';
import { GatewaySandbox, SandboxError, SandboxUnavailableError, createScopedSessionEnv } from '../dist/index.js';
import { Sandboxd, until, freePort } from '../../../tests/clients/server.mjs';

const bin = process.env.SANDBOXD_BIN;
const srv = new Sandboxd(['--set', 'heartbeat-ms=500', '--set', 'backends=bwrap,remote']);
for (const args of [['globex'], ['ops', '--operator']])
  execFileSync(bin, ['tenant', 'add', ...args, '--data-dir', srv.dir], { stdio: 'ignore' });
await srv.start();
after(() => srv.close());
const token = srv.token('fs:read fs:write exec audit:read');

// Every request the client makes, with its headers and body.
function recorder() {
  const seen = [];
  const f = async (input, init = {}) => {
    seen.push({ method: init.method, url: String(input), headers: new Headers(init.headers),
      body: typeof init.body === 'string' ? init.body : undefined });
    return fetch(input, init);
  };
  return { seen, fetch: f };
}

const sbx = (sessionKey, extra = {}) => new GatewaySandbox(srv.url, token, 'acme', { sessionKey, ...extra });

test('the eleven methods, each request carrying token, tenant and session', async () => {
  const rec = recorder();
  const api = sbx('ts:files', { fetch: rec.fetch });
  // writeFile makes parents; readFile / readFileBuffer (a range) read it back.
  const w = await api.writeFile('notes/deep/a.txt', 'hello');
  assert.equal(w.size, 5);
  assert.match(w.path, /^\/workspace\/sessions\/ts_files-[0-9a-z]+\/notes\/deep\/a\.txt$/);
  assert.equal(await api.readFile('notes/deep/a.txt'), 'hello');
  assert.deepEqual(await api.readFileBuffer('notes/deep/a.txt', { offset: 1, length: 3 }), new TextEncoder().encode('ell'));
  const bin = new Uint8Array([0, 255, 1, 254]);
  await api.writeFile('bin.dat', bin);
  assert.deepEqual(await api.readFileBuffer('bin.dat'), bin);
  await assert.rejects(api.readFile('bin.dat'), (e) => e instanceof SandboxError && e.code === 'not_text' && e.status === 422);

  // stat: a file has every field; a dangling symlink only what is known.
  const st = await api.stat('notes/deep/a.txt');
  assert.equal(st.type, 'file');
  assert.equal(st.size, 5);
  assert.equal(st.isSymlink, false);
  assert.match(st.mode, /^0[0-7]{3}$/);
  assert.match(st.mtime, /^\d{4}-\d\d-\d\dT/);
  const ln = await api.exec({ command: 'ln -s /nowhere dangling' });
  assert.equal(ln.exitCode, 0, ln.stderr);
  const dl = await api.stat('dangling');
  assert.deepEqual(Object.keys(dl).sort(), ['isSymlink', 'path', 'type']);
  assert.equal(dl.type, 'symlink');
  assert.equal(dl.isSymlink, true);

  assert.equal(await api.mkdir('d1/d2', { recursive: true }), `${w.path.replace(/\/notes\/deep\/a\.txt$/, '')}/d1/d2`);
  await assert.rejects(api.mkdir('d1/d2'), (e) => e instanceof SandboxError && e.code === 'exists' && e.status === 409);
  await api.writeFile('d1/b', '');
  await api.writeFile('d1/B', '');
  assert.deepEqual(await api.readdir('d1'), ['B', 'b', 'd2']);
  assert.equal(await api.exists('d1/b'), true);
  assert.equal(await api.exists('nope'), false);
  assert.equal(await api.rm('d1', { recursive: true }), true);
  assert.equal(await api.rm('d1', { force: true }), false);
  await assert.rejects(api.rm('d1'), (e) => e instanceof SandboxError && e.code === 'not_found');
  await assert.rejects(api.readFile('/etc/passwd'), (e) => e instanceof SandboxError && e.code === 'outside_workspace');

  // exec: output, env, cwd; a non-zero exit is a result.
  const r = await api.exec({ command: 'echo "$X"; pwd; echo err >&2; exit 3', env: { X: 'x1' }, cwd: 'notes' });
  assert.equal(r.exitCode, 3);
  assert.equal(r.stdout, `x1\n${w.path.replace(/\/deep\/a\.txt$/, '')}\n`);
  assert.equal(r.stderr, 'err\n');
  assert.equal(r.timedOut, false);
  assert.match(r.id, /^c[0-9a-f]{32}$/);

  // Streams, small: the parent must exist for writeFileStream.
  async function* chunks() { yield new TextEncoder().encode('ab'); yield new TextEncoder().encode('cd'); }
  const up = await api.writeFileStream('notes/s.txt', chunks());
  assert.equal(up.size, 4);
  assert.equal(up.sha256, createHash('sha256').update('abcd').digest('hex'));
  await assert.rejects(api.writeFileStream('nodir/s.txt', chunks()),
    (e) => e instanceof SandboxError && e.code === 'parent_missing' && e.status === 404);
  let got = '';
  for await (const c of api.readFileStream('notes/s.txt')) got += new TextDecoder().decode(c);
  assert.equal(got, 'abcd');
  got = '';
  for await (const c of api.readFileStream('notes/s.txt', { offset: 2 })) got += new TextDecoder().decode(c);
  assert.equal(got, 'cd');

  assert.ok(rec.seen.length > 20);
  for (const q of rec.seen) {
    assert.equal(q.headers.get('authorization'), `Bearer ${token}`, q.url);
    assert.equal(q.headers.get('x-tenant-id'), 'acme', q.url);
    assert.equal(q.headers.get('x-session-key'), 'ts:files', q.url);
  }
});

test('1 GiB each way through the stream routes in constant memory', async () => {
  const api = sbx('ts:big');
  const CHUNK = 1 << 18, N = 4096; // 1 GiB in 256 KiB chunks
  const want = createHash('sha256');
  // What the client holds, not what V8 has yet to collect: a full
  // collection before each sample (every 64 chunks).
  v8.setFlagsFromString('--expose-gc');
  const gc = globalThis.gc ?? vm.runInNewContext('gc');
  gc();
  const base = process.memoryUsage().rss;
  let peak = base;
  const sample = () => { gc(); const r = process.memoryUsage().rss; if (r > peak) peak = r; };
  async function* source() {
    for (let i = 0; i < N; i++) {
      const c = new Uint8Array(CHUNK);
      c.fill(i & 0xff);
      new DataView(c.buffer).setUint32(0, i);
      want.update(c);
      if ((i & 63) === 0) sample();
      yield c;
    }
  }
  const up = await api.writeFileStream('big.bin', source());
  const upGrowth = (peak - base) / (1 << 20);
  assert.equal(up.size, CHUNK * N);
  assert.equal(up.sha256, want.digest('hex'));
  const h = createHash('sha256');
  let n = 0, k = 0;
  for await (const c of api.readFileStream('big.bin')) {
    h.update(c);
    n += c.length;
    if ((k++ & 63) === 0) sample();
  }
  sample();
  assert.equal(n, CHUNK * N);
  assert.equal(h.digest('hex'), up.sha256);
  const growth = (peak - base) / (1 << 20);
  console.log(`# 1 GiB up and down: rss grew by ${growth.toFixed(1)} MiB at most (${upGrowth.toFixed(1)} MiB up)`);
  assert.ok(growth < 64, `rss grew by ${growth.toFixed(1)} MiB`);
  assert.equal(await api.rm('big.bin'), true);
});

test('exec: timeout is a result; an AbortSignal cancels mid-flight', async () => {
  const rec = recorder();
  const api = sbx('ts:exec', { fetch: rec.fetch });
  const to = await api.exec({ command: 'echo before; sleep 60', timeoutS: 1 });
  assert.equal(to.timedOut, true);
  assert.equal(to.exitCode, 124);
  assert.equal(to.stdout, 'before\n');

  const ac = new AbortController();
  const p = api.exec({ command: 'echo started; while [ ! -e /workspace/.never ]; do sleep 0.05; done', signal: ac.signal });
  const sent = await until('the POST /exec', () => rec.seen.find((q) => q.url.endsWith('/exec') && q.body?.includes('.never')));
  const { id } = JSON.parse(sent.body);
  assert.match(id, /^c[0-9a-f]{32}$/);
  await until('the exec to run', async () => (await api.getExec(id).catch(() => null))?.state === 'running');
  ac.abort();
  await assert.rejects(p, (e) => e.name === 'AbortError');
  assert.ok(rec.seen.some((q) => q.method === 'POST' && q.url.endsWith(`/exec/${id}/cancel`)), 'cancel sent');
  const x = await until('the exec to end', async () => { const g = await api.getExec(id); return g.state !== 'running' && g; });
  assert.equal(x.state, 'cancelled');
  assert.equal(x.result.cancelled, true);
  // Aborted before it starts: nothing is sent.
  const before = rec.seen.length;
  await assert.rejects(api.exec({ command: 'true', signal: AbortSignal.abort() }), (e) => e.name === 'AbortError');
  assert.equal(rec.seen.length, before);
});

test('a retry with the same id runs the command once', async () => {
  // The first answer is lost behind a 503 (as from a balancer): the client
  // retries with the same id and gets the first run's result.
  let execs = 0;
  const lossy = async (input, init = {}) => {
    const res = await fetch(input, init);
    if (String(input).endsWith('/exec') && execs++ === 0) {
      await res.text();
      return new Response(JSON.stringify({ error: { code: 'backend_unavailable', message: 'lost', retry_hint: 'retry' } }),
        { status: 503, headers: { 'content-type': 'application/json', 'retry-after': '0' } });
    }
    return res;
  };
  const api = sbx('ts:once', { fetch: lossy });
  const r = await api.exec({ command: 'echo run >> runs.log; cat /proc/sys/kernel/random/uuid' });
  assert.equal(execs, 2);
  assert.equal(r.exitCode, 0);
  assert.equal(await api.readFile('runs.log'), 'run\n');
  // The same id again, by the caller: the same result, still one run.
  const again = await api.exec({ command: 'echo run >> runs.log; cat /proc/sys/kernel/random/uuid', id: r.id });
  assert.equal(again.stdout, r.stdout);
  assert.equal(await api.readFile('runs.log'), 'run\n');
  await assert.rejects(api.exec({ command: 'true', id: r.id }), (e) => e instanceof SandboxError && e.code === 'conflict');
});

test('infrastructure failures are SandboxUnavailableError: a real 503 with its hint, and no server', async () => {
  // Tenant globex served by a remote backend where nothing listens.
  const ops = execFileSync(bin, ['token', '--tenant', 'ops', '--scope', 'admin', '--data-dir', srv.dir], { encoding: 'utf8' }).trim();
  const gtok = execFileSync(bin, ['token', '--tenant', 'globex', '--data-dir', srv.dir], { encoding: 'utf8' }).trim();
  const tokFile = join(srv.dir, 'globex-back-token');
  writeFileSync(tokFile, gtok);
  chmodSync(tokFile, 0o600);
  const pol = await fetch(`${srv.url}/tenants/globex/policy`, {
    method: 'PUT', headers: { authorization: `Bearer ${ops}`, 'content-type': 'application/json' },
    body: JSON.stringify({ backend: 'remote', remote_url: `http://127.0.0.1:${await freePort()}`, remote_token_file: tokFile }),
  });
  assert.equal(pol.status, 200, await pol.text());
  let attempts = 0;
  const counting = (input, init) => { attempts++; return fetch(input, init); };
  // maxBackoffMs bounds the wait that Retry-After asks for.
  const g = new GatewaySandbox(srv.url, gtok, 'globex', { maxRetries: 1, maxBackoffMs: 200, fetch: counting });
  const e = await g.exists('x').then(() => null, (err) => err);
  assert.ok(e instanceof SandboxUnavailableError, String(e));
  assert.ok(!(e instanceof SandboxError));
  assert.equal(e.status, 503);
  assert.equal(e.code, 'backend_unavailable');
  assert.equal(typeof e.retryHint, 'string');
  assert.ok(e.retryAfterS >= 1, `Retry-After ${e.retryAfterS}`);
  assert.match(e.requestId, /.+/);
  assert.equal(e.attempts, 2);
  assert.equal(attempts, 2);
  const ex = await g.withSession('other').exec({ command: 'true' }).then(() => null, (err) => err);
  assert.ok(ex instanceof SandboxUnavailableError && ex.code === 'backend_unavailable', String(ex));

  const down = new GatewaySandbox(`http://127.0.0.1:${await freePort()}`, token, 'acme', { maxRetries: 2, maxBackoffMs: 100 });
  const c = await down.readFile('x').then(() => null, (err) => err);
  assert.ok(c instanceof SandboxUnavailableError, String(c));
  assert.equal(c.code, 'connection_refused');
  assert.equal(c.status, null);
  assert.equal(c.attempts, 3);
});

test('sessions are isolated by directory, and so are scoped views', async () => {
  const a = sbx('ts:a'), b = sbx('ts:b');
  await a.writeFile('same.txt', 'A');
  await b.writeFile('same.txt', 'B');
  assert.equal(await a.readFile('same.txt'), 'A');
  assert.equal(await b.readFile('same.txt'), 'B');
  assert.notEqual((await a.stat('same.txt')).path, (await b.stat('same.txt')).path);
  assert.equal((await b.exec({ command: 'cat same.txt' })).stdout, 'B');

  const s1 = createScopedSessionEnv(a, 'agents/one'), s2 = createScopedSessionEnv(a, 'agents/two');
  const p = await s1.exec({ command: 'pwd' });
  assert.match(p.stdout, /\/sessions\/ts_a-[0-9a-z]+\/agents\/one\n$/);
  await s1.writeFile('x.txt', '1');
  assert.equal(await s2.exists('x.txt'), false);
  assert.equal(await a.readFile('agents/one/x.txt'), '1');
  async function* one() { yield new TextEncoder().encode('s'); }
  await s2.writeFileStream('y.bin', one()); // its directory is made on first use
  assert.deepEqual(await s2.readdir('.'), ['y.bin']);
  assert.throws(() => s1.resolve('../two/y.bin'), (e) => e instanceof SandboxError && e.code === 'outside_workspace');
  await assert.rejects(s1.readFile('../two/y.bin'), (e) => e.code === 'outside_workspace');
});

test('run: code with input files, produced files read back', async () => {
  const api = sbx('ts:code');
  const r = await api.run({
    language: 'sh', code: 'tr a-z A-Z < in.txt > out.txt; cat in.bin > copy.bin; echo done',
    files: { 'in.txt': 'abc', 'in.bin': new Uint8Array([0, 1, 2, 255]) }, timeoutS: 30, maxOutputBytes: 1000,
    env: { LANG: 'C' },
  });
  assert.equal(r.exitCode, 0, r.stderr);
  assert.equal(r.stdout, 'done\n');
  const byName = Object.fromEntries(r.files.map((f) => [f.path.split('/').at(-1), f]));
  assert.deepEqual(Object.keys(byName).sort(), ['copy.bin', 'out.txt']);
  assert.equal(byName['out.txt'].kind, 'created');
  assert.equal(new TextDecoder().decode(byName['out.txt'].content), 'ABC');
  assert.deepEqual(byName['copy.bin'].content, new Uint8Array([0, 1, 2, 255]));
  const scoped = createScopedSessionEnv(api, 'work');
  const s = await scoped.run({ language: 'sh', code: 'pwd; cat in.txt', files: { 'in.txt': 'scoped' } });
  assert.match(s.stdout, /\/work\nscoped$/);
});
