// The WhatWG `eventsource` package against a real sandboxd, through TCP
// relays this test controls (node:net), so connections can be cut and
// refused at will. Proves, with EventSource reconnecting by itself:
//   - an exec's stream cut mid-way resumes (Last-Event-ID) with exactly the
//     events, ids and data an uninterrupted subscriber saw, ends with
//     `exit`, and the reconnect after the end gets 204: CLOSED, no loop;
//   - the tenant feed across a server restart: ids only rise (a `gap` or a
//     contiguous replay, never ids going backwards);
//   - a subscriber away while more events passed than are kept gets a
//     `gap` naming the first id it can have.
// Commands wait on files the test creates: nothing depends on speed.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, connect } from 'node:net';
import { EventSource } from 'eventsource';
import { Sandboxd, until, sleep } from './server.mjs';

const srv = new Sandboxd(['--set', 'heartbeat-ms=500', '--set', 'events-replay=4']);
await srv.start();
const tok = srv.token('exec fs:write fs:read');
after(() => srv.close());

class Relay {
  constructor(port) {
    this.port = port;
    this.connections = 0;
    this.refused = 0;
    this.down = false;
    this.pairs = new Set();
  }

  listen() {
    this.server = createServer((c) => {
      this.connections++;
      if (this.down) {
        this.refused++;
        c.destroy();
        return;
      }
      const u = connect(this.port, '127.0.0.1');
      const pair = [c, u];
      this.pairs.add(pair);
      const end = () => { c.destroy(); u.destroy(); this.pairs.delete(pair); };
      c.on('error', end).on('close', end);
      u.on('error', end).on('close', end);
      c.pipe(u);
      u.pipe(c);
    });
    return new Promise((r) => this.server.listen(0, '127.0.0.1', () => r(this.server.address().port)));
  }

  cut() {
    for (const [c, u] of this.pairs) { c.destroy(); u.destroy(); }
    this.pairs.clear();
  }

  close() {
    this.cut();
    this.server.close();
  }
}

const NAMES = ['start', 'heartbeat', 'exit', 'gap', 'exec_error', 'output'];

// An EventSource through a relay, recording every event and every request
// it makes (with the Last-Event-ID it sent).
async function watch(path) {
  const relay = new Relay(srv.port);
  const port = await relay.listen();
  const sep = path.includes('?') ? '&' : '?';
  const w = { relay, events: [], requests: [] };
  w.es = new EventSource(`http://127.0.0.1:${port}${path}${sep}access_token=${tok}`, {
    fetch: (input, init) => {
      const h = new Headers(init?.headers ?? {});
      w.requests.push(h.get('last-event-id'));
      return fetch(input, init);
    },
  });
  for (const name of NAMES)
    w.es.addEventListener(name, (e) => w.events.push({ event: name, id: e.lastEventId, data: JSON.parse(e.data) }));
  return w;
}

async function api(method, path, body, headers = {}) {
  const r = await fetch(`${srv.url}${path}`, {
    method, body, headers: { authorization: `Bearer ${tok}`, ...headers },
  });
  const text = await r.text();
  return { status: r.status, body: text && r.headers.get('content-type')?.includes('json') ? JSON.parse(text) : text };
}

const exec = (command, id) => api('POST', '/exec', JSON.stringify({ command, id, timeout_s: 300 }),
  { 'content-type': 'application/json' });
const touch = (path) => api('PUT', `/fs/write?path=${encodeURIComponent(path)}`, '');
const summary = (evs) => evs.map((e) => `${e.event}#${e.id}`).join(' ');

test('an exec followed across a cut connection sees what an uninterrupted subscriber sees, then stops', async () => {
  const id = 'es-cut';
  const run = exec('echo started; while [ ! -e /workspace/.go-cut ]; do sleep 0.05; done; echo done', id);
  await until('the exec to be known', async () => (await api('GET', `/exec/${id}`)).status === 200);
  const ref = await watch(`/exec/${id}/events`);
  const cut = await watch(`/exec/${id}/events`);
  // Mid-way: after start and a heartbeat, the relay cuts and refuses.
  await until('start and a heartbeat through the relay', () => cut.events.some((e) => e.event === 'heartbeat'));
  cut.relay.down = true;
  cut.relay.cut();
  const seenAtCut = cut.events.length;
  // Events pass while it is away (heartbeats, kept in the exec's replay).
  await until('3 more heartbeats for the uninterrupted subscriber',
    () => ref.events.filter((e) => e.event === 'heartbeat').length >= seenAtCut + 2);
  await until('a refused reconnect attempt', () => cut.relay.refused >= 1);
  cut.relay.down = false;
  await until('the cut subscriber to catch up', () => cut.events.length > seenAtCut &&
    cut.events.length >= ref.events.length - 1 && cut.es.readyState === EventSource.OPEN);
  assert.equal((await touch('/workspace/.go-cut')).status, 200);
  const res = await run;
  assert.equal(res.status, 200);
  assert.equal(res.body.exit_code, 0);
  // The server ends the stream after exit; EventSource reconnects once with
  // the exit's id, gets 204 and stops for good.
  await until('both EventSources CLOSED', () => ref.es.readyState === EventSource.CLOSED &&
    cut.es.readyState === EventSource.CLOSED);
  assert.deepEqual(summary(cut.events), summary(ref.events));
  assert.deepEqual(cut.events, ref.events);
  assert.equal(ref.events[0].event, 'start');
  assert.equal(ref.events.at(-1).event, 'exit');
  assert.equal(ref.events.at(-1).data.exit_code, 0);
  assert.ok(cut.events.length > seenAtCut + 2, 'events passed during the cut were replayed');
  const ids = ref.events.map((e) => Number(e.id));
  for (let i = 1; i < ids.length; i++) assert.ok(ids[i] > ids[i - 1], `ids rise: ${ids}`);
  // Requests: the uninterrupted one opened once, then got 204 with the
  // exit's id; the cut one also resumed with Last-Event-ID after the cut.
  const exitId = ref.events.at(-1).id;
  assert.deepEqual(ref.requests, [null, exitId]);
  assert.equal(cut.requests[0], null);
  assert.equal(cut.requests.at(-1), exitId);
  assert.ok(cut.requests.slice(1).every((h) => h !== null), 'every reconnect sent Last-Event-ID');
  // The first request, the refused attempts, the resume, the 204.
  assert.equal(cut.requests.length, 3 + cut.relay.refused, `requests: ${JSON.stringify(cut.requests)}`);
  // No reconnect loop: CLOSED stays CLOSED (well past the stream's retry: 2000).
  const counts = [ref.requests.length, cut.requests.length, ref.relay.connections, cut.relay.connections];
  await sleep(3000);
  assert.deepEqual([ref.requests.length, cut.requests.length, ref.relay.connections, cut.relay.connections], counts);
  ref.relay.close();
  cut.relay.close();
});

test('the tenant feed across a server restart: ids never go backwards', async () => {
  const w = await watch('/events');
  await until('the feed to open', () => w.es.readyState === EventSource.OPEN);
  assert.equal((await exec('true', 'feed-before')).status, 200);
  await until('exit of feed-before', () => w.events.some((e) => e.event === 'exit' && e.data.id === 'feed-before'));
  const st = await srv.stop();
  assert.deepEqual(st, { code: 0, sig: null });
  await srv.start(); // same port: the relay's target
  assert.equal((await exec('true', 'feed-after')).status, 200);
  await until('exit of feed-after', () => w.events.some((e) => e.event === 'exit' && e.data.id === 'feed-after'),
    120000);
  assert.ok(w.requests.length >= 2 && w.requests.slice(1).every((h) => h !== null), 'resumed with Last-Event-ID');
  let last = 0;
  for (const e of w.events) {
    if (e.event === 'gap') {
      assert.ok(e.data.first_id > last, `gap first_id ${e.data.first_id} after id ${last}`);
      continue;
    }
    assert.ok(Number(e.id) > last, `feed ids rise: ${summary(w.events)}`);
    last = Number(e.id);
  }
  const order = w.events.filter((e) => e.event !== 'heartbeat' && e.event !== 'gap')
    .map((e) => `${e.event}:${e.data.id}`);
  assert.deepEqual(order.slice(-4), ['start:feed-before', 'exit:feed-before', 'start:feed-after', 'exit:feed-after']);
  w.es.close();
  w.relay.close();
});

test('a subscriber away while more events passed than are kept is told so with a gap', async () => {
  const w = await watch('/events');
  await until('the feed to open', () => w.es.readyState === EventSource.OPEN);
  assert.equal((await exec('true', 'gap-0')).status, 200);
  await until('exit of gap-0', () => w.events.some((e) => e.event === 'exit' && e.data.id === 'gap-0'));
  const lastSeen = Number(w.events.at(-1).id);
  const before = w.events.length;
  w.relay.down = true;
  w.relay.cut();
  // 4 commands, 8 events: more than the 4 the tenant's replay keeps.
  for (let i = 1; i <= 4; i++) assert.equal((await exec('true', `gap-${i}`)).status, 200);
  await until('a refused reconnect attempt', () => w.relay.refused >= 1);
  w.relay.down = false;
  await until('exit of gap-4', () => w.events.some((e) => e.event === 'exit' && e.data.id === 'gap-4'));
  const resumed = w.events.slice(before);
  assert.equal(resumed[0].event, 'gap', summary(resumed));
  const first = resumed[0].data.first_id;
  assert.ok(first > lastSeen + 1, `gap first_id ${first} after ${lastSeen}`);
  for (const e of resumed.slice(1)) assert.ok(Number(e.id) >= first, summary(resumed));
  assert.ok(!resumed.some((e) => e.data.id === 'gap-1'), 'gap-1 was not kept');
  w.es.close();
  w.relay.close();
});
