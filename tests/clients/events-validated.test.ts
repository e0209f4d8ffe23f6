// Server-sent events through a client that @hey-api/openapi-ts generated
// from the served spec with zod response validation on (gen-served.mjs):
// the validator parses each event's `data` with the schema the spec gives
// the text/event-stream response, so that schema must describe the data
// payload, not the stream. Read through it: an exec's events
// (GET /exec/{id}/events, live and replayed), the tenant feed
// (GET /events), and POST /exec with `stream: true`.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { client } from './generated-validated/client.gen';
import * as api from './generated-validated/sdk.gen';
import { zExecStreamEventData } from './generated-validated/zod.gen';
import { Sandboxd, until } from './server.mjs';

const srv = new Sandboxd(['--set', 'heartbeat-ms=300']);
await srv.start();
client.setConfig({ baseUrl: srv.url, auth: srv.token('fs:read fs:write exec audit:read') });
after(() => srv.close());

type Seen = { event?: string; id?: string; data: unknown };

// Reads a generated SSE stream to its end (or until stop() says so),
// recording every named event and every error the client reported (a
// validation failure is one: the generated client reports it, then
// retries). `seen` fills as events arrive; `done` resolves at the end.
type Open = (o: {
  onSseEvent: (e: { event?: string; id?: string; data: unknown }) => void;
  onSseError: (e: unknown) => void; sseMaxRetryAttempts: number; signal: AbortSignal;
}) => Promise<{ stream: AsyncGenerator<unknown> }>;
function collect(open: Open, stop: (seen: Seen[]) => boolean = () => false) {
  const seen: Seen[] = [];
  const errors: unknown[] = [];
  const yielded: unknown[] = [];
  const ac = new AbortController();
  const done = (async () => {
    const { stream } = await open({
      onSseEvent: (e) => { if (e.event) seen.push({ event: e.event, id: e.id, data: e.data }); },
      onSseError: (e) => errors.push(e),
      sseMaxRetryAttempts: 1,
      signal: ac.signal,
    });
    try {
      for await (const d of stream) {
        yielded.push(d);
        if (stop(seen)) break;
      }
    } finally {
      ac.abort();
    }
    return { seen, errors, yielded };
  })();
  return { seen, errors, done };
}

const names = (s: Seen[]) => s.map((e) => e.event);
const noErrors = (errors: unknown[]) =>
  assert.deepEqual(errors.map((e) => String((e as Error)?.message ?? e).slice(0, 400)), []);

test('GET /exec/{id}/events: start, heartbeats, exit, each data validated', async () => {
  const id = 'val-live';
  const run = api.runExec({ body: { id, command: 'echo hi; while [ ! -e go ]; do sleep 0.05; done', timeout_s: 120 } });
  await until('the exec to run', async () => (await api.getExec({ path: { id } })).data?.state === 'running');
  const live = collect((o) => api.execEvents({ path: { id }, ...o }));
  // Heartbeats pass through the validator while the command runs (or the
  // first failure ends the stream).
  await until('two heartbeats or an error', () => live.errors.length > 0 ||
    live.seen.filter((e) => e.event === 'heartbeat').length >= 2);
  noErrors(live.errors);
  assert.equal((await api.writeFile({ query: { path: 'go' }, body: new Blob(['']) })).response.status, 200);
  const res = await run;
  assert.equal(res.response.status, 200);
  const { seen, errors, yielded } = await live.done;
  noErrors(errors);
  assert.equal(seen[0]?.event, 'start');
  assert.equal(seen.at(-1)?.event, 'exit');
  assert.ok(names(seen).includes('heartbeat'), names(seen).join(' '));
  assert.equal(yielded.length, seen.length);
  assert.equal((seen.at(-1)!.data as { exit_code: number }).exit_code, 0);

  // Replayed after the end: start and exit again, validated too.
  const replay = await collect((o) => api.execEvents({ path: { id }, ...o })).done;
  noErrors(replay.errors);
  assert.deepEqual(names(replay.seen), ['start', 'exit']);
  assert.equal(replay.yielded.length, 2);
});

test('GET /events: the tenant feed, each data validated', async () => {
  const id = 'val-feed';
  const feed = collect((o) => api.tenantEvents({ ...o }),
    (seen) => seen.some((e) => e.event === 'exit' && (e.data as { id?: string }).id === id));
  // The feed is open once it carries an exec started after it: run
  // commands until one is seen, then the one we wait for.
  let n = 0;
  await until('the feed to carry an exec', async () => {
    const pre = `${id}-pre${n++}`;
    assert.equal((await api.runExec({ body: { id: pre, command: 'true' } })).response.status, 200);
    return feed.errors.length > 0 || feed.seen.some((e) => (e.data as { id?: string }).id?.startsWith(`${id}-pre`));
  });
  noErrors(feed.errors);
  const r = await api.runExec({ body: { id, command: 'echo feed' } });
  assert.equal(r.response.status, 200);
  const { seen, errors } = await feed.done;
  noErrors(errors);
  const ours = seen.filter((e) => (e.data as { id?: string }).id === id).map((e) => e.event);
  assert.deepEqual(ours.filter((n) => n !== 'heartbeat'), ['start', 'exit']);
});

// The generated runExec reads JSON (its validator is the application/json
// union); a stream is read with the generated client's SSE reader and the
// generated schema of the text/event-stream response.
test('POST /exec with stream: true: start, output, exit, each data validated', async () => {
  const { seen, errors } = await collect((o) => client.sse.post({
    url: '/exec',
    security: [{ scheme: 'bearer', type: 'http' }],
    body: { id: 'val-stream', command: 'echo one; echo two >&2', stream: true },
    headers: { 'Content-Type': 'application/json' },
    responseValidator: async (d: unknown) => await zExecStreamEventData.parseAsync(d),
    ...o,
  })).done;
  noErrors(errors);
  assert.equal(seen[0]?.event, 'start');
  assert.equal(seen.at(-1)?.event, 'exit');
  assert.ok(names(seen).includes('output'));
  assert.equal((seen.at(-1)!.data as { stdout: string }).stdout, 'one\n');
});
