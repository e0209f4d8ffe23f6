// A gateway written only against the TypeScript client that
// @hey-api/openapi-ts generates from openapi/openapi.yaml (run.sh generates
// it into generated/ and type-checks this file with it), driving a real
// sandboxd: every file route, exec (sync, timeout, cancel, idempotent
// retry), 100 MiB each way through the transfer routes, audit paging, and
// `stream: true`. Every request goes through a generated function.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomFillSync } from 'node:crypto';
import { client } from './generated/client.gen';
import * as api from './generated/sdk.gen';
import type { Exec, ShellResult } from './generated/types.gen';
import { Sandboxd, until } from './server.mjs';

const srv = new Sandboxd(['--set', 'heartbeat-ms=500']);
await srv.start();
client.setConfig({ baseUrl: srv.url, auth: srv.token('fs:read fs:write exec audit:read') });
after(() => srv.close());

const SESSION = { 'X-Session-Key': 'gateway:1' };

test('every file route', async () => {
  const w = await api.writeFile({ query: { path: 'notes/a.txt' }, body: new Blob(['hello']), headers: SESSION });
  assert.equal(w.response.status, 200);
  assert.equal(w.data?.size, 5);
  assert.match(w.data!.path, /^\/workspace\/sessions\/gateway_1-[0-9a-z]+\/notes\/a\.txt$/);
  // No body at all: an empty file.
  const e = await api.writeFile({ query: { path: 'empty.txt' }, headers: SESSION });
  assert.equal(e.response.status, 200);
  assert.equal(e.data?.size, 0);

  const r = await api.readFile({ query: { path: 'notes/a.txt' }, headers: SESSION });
  assert.equal(r.data, 'hello');
  const b = await api.readFileBuffer({ query: { path: 'notes/a.txt' }, headers: SESSION });
  assert.equal(await (b.data as Blob).text(), 'hello');
  const part = await api.readFileBuffer({ query: { path: 'notes/a.txt' }, headers: { ...SESSION, Range: 'bytes=1-2' } });
  assert.equal(part.response.status, 206);
  assert.equal(await (part.data as Blob).text(), 'el');

  const st = await api.stat({ query: { path: 'notes/a.txt' }, headers: SESSION });
  assert.equal(st.data?.type, 'file');
  assert.equal(st.data?.size, 5);
  const ls = await api.readdir({ query: { path: 'notes' }, headers: SESSION });
  assert.deepEqual(ls.data?.entries, ['a.txt']);
  assert.equal((await api.exists({ query: { path: 'notes/a.txt' }, headers: SESSION })).data?.exists, true);
  assert.equal((await api.exists({ query: { path: 'nope' }, headers: SESSION })).data?.exists, false);

  const mk = await api.mkdir({ body: { path: 'd1/d2', recursive: true }, headers: SESSION });
  assert.equal(mk.response.status, 201);
  const mv = await api.move({ body: { from: 'notes/a.txt', to: 'd1/d2/b.txt' }, headers: SESSION });
  assert.equal(mv.response.status, 200);
  assert.match(mv.data!.path, /\/d1\/d2\/b\.txt$/);
  const clash = await api.move({ body: { from: 'empty.txt', to: 'd1/d2/b.txt' }, headers: SESSION });
  assert.equal(clash.response.status, 409);
  assert.equal(clash.error?.error.code, 'exists');
  const gone = await api.readFile({ query: { path: 'notes/a.txt' }, headers: SESSION });
  assert.equal(gone.response.status, 404);
  assert.equal(gone.error?.error.code, 'not_found');
  const rm = await api.rm({ body: { path: 'd1', recursive: true }, headers: SESSION });
  assert.equal(rm.data?.removed, true);
  assert.equal((await api.exists({ query: { path: 'd1' }, headers: SESSION })).data?.exists, false);

  const spec = await api.getOpenapi({ parseAs: 'text' });
  assert.match(spec.data as string, /^openapi: 3\.1/);
});

// POST /exec answers a ShellResult (200), or with `background: true` its
// exec (202): a generated client sees the union and narrows it.
const isResult = (d: ShellResult | Exec | undefined): d is ShellResult => d !== undefined && 'exit_code' in d;
const sync = async (p: ReturnType<typeof api.runExec>) => {
  const r = await p;
  return { ...r, data: isResult(r.data) ? r.data : undefined };
};

test('exec: sync, timeout, cancel from another call, idempotent retry', async () => {
  const ok = await sync(api.runExec({ body: { command: 'echo hi; echo err >&2' }, headers: SESSION }));
  assert.equal(ok.data?.exit_code, 0);
  assert.equal(ok.data?.stdout, 'hi\n');
  assert.equal(ok.data?.stderr, 'err\n');

  const to = await sync(api.runExec({ body: { command: 'echo before; sleep 60', timeout_s: 1 } }));
  assert.equal(to.data?.timed_out, true);
  assert.equal(to.data?.exit_code, 124);
  assert.equal(to.data?.stdout, 'before\n');

  const id = 'gw-cancel';
  const running = sync(api.runExec({ body: { id, command: 'while [ ! -e /workspace/.never ]; do sleep 0.05; done' } }));
  await until('the exec to run', async () => (await api.getExec({ path: { id } })).data?.state === 'running');
  const c = await api.cancelExec({ path: { id } });
  assert.equal(c.response.status, 202);
  const cancelled = await running;
  assert.equal(cancelled.data?.cancelled, true);
  assert.equal((await api.getExec({ path: { id } })).data?.state, 'cancelled');

  const req = { id: 'gw-idem', command: 'cat /proc/sys/kernel/random/uuid' };
  const first = await sync(api.runExec({ body: req }));
  const again = await sync(api.runExec({ body: req }));
  assert.equal(first.data?.exit_code, 0);
  assert.deepEqual(again.data, first.data); // not run again: the same uuid
  const other = await api.runExec({ body: { ...req, command: 'true' } });
  assert.equal(other.response.status, 409);
  assert.equal(other.error?.error.code, 'conflict');
  const listed = await api.listExecs({ query: { limit: 100 } });
  assert.ok(listed.data?.execs.some((x) => x.id === 'gw-idem'));
});

test('agent runs: code with files_changed, a background REPL fed through stdin', async () => {
  const code = await api.runCode({
    // network and wait are ExecRequest fields /code takes too: the
    // generated body type must have them (tsc's excess-property check).
    body: { language: 'sh', code: 'cat in.txt > out.txt', files: [{ path: 'in.txt', content: 'abc' }],
      network: false, wait: true },
    headers: SESSION,
  });
  assert.equal(code.response.status, 200);
  const res = isResult(code.data) ? code.data : undefined;
  assert.equal(res?.exit_code, 0);
  assert.deepEqual(res?.files_changed?.map((f) => [f.kind, f.size, f.sha256]),
    [['created', 3, createHash('sha256').update(new TextEncoder().encode('abc')).digest('hex')]]);

  const bg = await api.runExec({ body: { id: 'gw-bg', command: 'cat', background: true, stdin_pipe: true } });
  assert.equal(bg.response.status, 202);
  assert.equal((bg.data as Exec).state, 'running');
  const w = await api.writeExecStdin({ path: { id: 'gw-bg' }, body: { data: 'ping\n', eof: true } });
  assert.equal(w.data?.accepted, 5);
  await until('the exec to end', async () => (await api.getExec({ path: { id: 'gw-bg' } })).data?.state === 'exited');
  assert.equal((await api.getExec({ path: { id: 'gw-bg' } })).data?.result?.stdout, 'ping\n');
});

test('100 MiB each way through the transfer routes, sha256 compared', async () => {
  const size = 100 * 1024 * 1024;
  const bytes = randomFillSync(new Uint8Array(size));
  const want = createHash('sha256').update(bytes).digest('hex');

  const up = await api.createTransfer({ body: { path: 'big.bin', direction: 'write' }, headers: SESSION });
  assert.equal(up.response.status, 201);
  const put = await api.streamUpload({ path: { token: up.data!.token }, body: new Blob([bytes]) });
  assert.equal(put.response.status, 201);
  assert.equal(put.data?.size, size);
  assert.equal(put.data?.sha256, want);

  const down = await api.createTransfer({ body: { path: 'big.bin', direction: 'read' }, headers: SESSION });
  const get = await api.streamDownload({ path: { token: down.data!.token }, parseAs: 'stream' });
  assert.equal(get.response.status, 200);
  const h = createHash('sha256');
  let n = 0;
  const reader = (get.data as unknown as ReadableStream<Uint8Array>).getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    h.update(value);
    n += value.length;
  }
  assert.equal(n, size);
  assert.equal(h.digest('hex'), want);
  // The token was single-use.
  const reuse = await api.streamDownload({ path: { token: down.data!.token } });
  assert.equal(reuse.response.status, 410);
  assert.equal(reuse.error?.error.code, 'token_used');
});

test('stream: true gives start ... exit, and execEvents replays a finished exec', async () => {
  const res = await api.runExec({
    body: { id: 'gw-stream', command: 'echo one; echo two >&2', stream: true }, parseAs: 'stream',
  });
  assert.equal(res.response.status, 200);
  assert.match(res.response.headers.get('content-type') ?? '', /^text\/event-stream/);
  let text = '';
  const dec = new TextDecoder();
  const reader = (res.data as unknown as ReadableStream<Uint8Array>).getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += dec.decode(value, { stream: true });
  }
  const events = text.split('\n\n').filter((f) => /^(event|data|id):/m.test(f)).map((f) => {
    const field = (k: string) => f.split('\n').find((l) => l.startsWith(`${k}:`))?.slice(k.length + 1).trim();
    return { event: field('event'), id: field('id'), data: JSON.parse(field('data') ?? 'null') };
  });
  assert.equal(events[0].event, 'start');
  const exit = events.at(-1)!;
  assert.equal(exit.event, 'exit');
  const result = exit.data as ShellResult;
  assert.equal(result.exit_code, 0);
  assert.equal(result.stdout, 'one\n');
  const out = events.filter((e) => e.event === 'output').map((e) => e.data.data).join('');
  assert.match(out, /one/);

  // The generated SSE function on the finished exec: start and exit with
  // their live ids, then the stream ends.
  const seen: string[] = [];
  const { stream } = await api.execEvents({
    path: { id: 'gw-stream' }, sseMaxRetryAttempts: 1,
    // The `retry: 2000` frame that opens the stream is reported too: no event name.
    onSseEvent: (e) => { if (e.event) seen.push(`${e.event}#${e.id}`); },
  });
  for await (const _ of stream) { /* data parsed by the client */ }
  assert.deepEqual(seen, [`start#${events[0].id}`, `exit#${exit.id}`]);
});

test('audit paging: limit and next until null', async () => {
  // Rows are group-committed: wait until this suite's writes are there.
  await until('the audit to hold the writes', async () =>
    ((await api.queryAudit({ query: { route: '/fs/write', limit: 10 } })).data?.records.length ?? 0) >= 2);
  const seen = new Set<string>();
  let after: string | undefined;
  let pages = 0;
  for (;;) {
    const page = await api.queryAudit({ query: { limit: 7, after } });
    assert.equal(page.response.status, 200);
    const recs = page.data!.records;
    assert.ok(recs.length <= 7);
    for (const r of recs) {
      assert.ok(!seen.has(String(r.id)), `record ${r.id} on two pages`);
      seen.add(String(r.id));
    }
    pages++;
    if (page.data!.next === null) break;
    after = page.data!.next;
  }
  assert.ok(pages >= 3, `${seen.size} records in ${pages} pages`);
  assert.ok(seen.size >= 14);
});
