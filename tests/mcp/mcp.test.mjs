// POST /mcp as a third party reaches it: the official MCP TypeScript SDK's
// Client over StreamableHTTPClientTransport with a bearer token, against a
// real sandboxd (bwrap backend) started here (tests/clients/server.mjs).
// Every wait has a deadline (until); nothing sleeps a fixed time.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError, ErrorCode } from '@modelcontextprotocol/sdk/types.js';

import { Sandboxd, until } from '../clients/server.mjs';

const bin = process.env.SANDBOXD_BIN;
let srv;
let tok; // fs:read fs:write exec
const clients = [];

async function connect({ token = tok, session = 'mcp-main' } = {}) {
  const headers = { Authorization: `Bearer ${token}`, 'X-Session-Key': session };
  const transport = new StreamableHTTPClientTransport(new URL(`${srv.url}/mcp`), { requestInit: { headers } });
  const client = new Client({ name: 'sandboxd-test', version: '1.0.0' });
  await client.connect(transport);
  clients.push(client);
  return client;
}

// The REST view of the same tenant, for checking from outside.
async function rest(path, token = tok, init = {}) {
  const res = await fetch(`${srv.url}${path}`, { ...init, headers: { Authorization: `Bearer ${token}`, ...(init.headers ?? {}) } });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : null };
}

async function rawMcp(body, headers = {}) {
  const res = await fetch(`${srv.url}/mcp`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${tok}`, 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...headers },
    body,
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text };
}

const shell = (r) => JSON.parse(r.content[0].text);

before(async () => {
  srv = new Sandboxd();
  // A second tenant whose every command waits for a person's approval.
  execFileSync(bin, ['tenant', 'add', 'gated', '--data-dir', srv.dir], { stdio: ['ignore', 'ignore', 'inherit'] });
  execFileSync(bin, ['tenant', 'set', 'gated', 'approval=always', '--data-dir', srv.dir], { stdio: ['ignore', 'ignore', 'inherit'] });
  execFileSync(bin, ['tenant', 'set-approver', 'gated', '--data-dir', srv.dir], { stdio: ['ignore', 'ignore', 'inherit'] });
  // And one that may run one command at a time, with no queue for more.
  execFileSync(bin, ['tenant', 'add', 'tight', '--data-dir', srv.dir], { stdio: ['ignore', 'ignore', 'inherit'] });
  execFileSync(bin, ['tenant', 'set', 'tight', 'max_execs=1', 'exec_queue=0', '--data-dir', srv.dir], { stdio: ['ignore', 'ignore', 'inherit'] });
  await srv.start();
  tok = srv.token();
});

after(async () => {
  for (const c of clients) await c.close().catch(() => {});
  if (!srv) return;
  // A clean exit: under ASan (the Debug build) a leak of any request's
  // state would make it non-zero.
  const exit = await srv.stop();
  const log = readFileSync(`${srv.dir}/server.log`, 'utf8');
  await srv.close();
  assert.deepEqual(exit, { code: 0, sig: null }, log.slice(-4000));
});

test('initialize and tools/list: seven tools with schemas and annotations', async () => {
  const c = await connect();
  assert.equal(c.getServerVersion().name, 'sandboxd');
  assert.ok(c.getServerCapabilities().tools);
  const { tools } = await c.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.deepEqual(Object.keys(byName).sort(), ['cancel', 'exec', 'list_dir', 'read_file', 'run_code', 'stat', 'write_file']);
  for (const t of tools) {
    assert.equal(t.inputSchema.type, 'object', t.name);
    for (const h of ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint'])
      assert.equal(typeof t.annotations[h], 'boolean', `${t.name}.${h}`);
  }
  assert.deepEqual(byName.exec.inputSchema.required, ['command']);
  assert.equal(byName.read_file.annotations.readOnlyHint, true);
  assert.equal(byName.write_file.annotations.destructiveHint, true);
  await c.ping();
});

test('every tool, called', async () => {
  const c = await connect();
  let r = await c.callTool({ name: 'exec', arguments: { command: 'echo out; echo err >&2; exit 3' } });
  assert.equal(r.isError, false);
  assert.deepEqual(shell(r), { stdout: 'out\n', stderr: 'err\n', exit_code: 3 });
  assert.match(r.structuredContent.id, /^mcp-[0-9a-f]{32}$/);

  r = await c.callTool({ name: 'write_file', arguments: { path: 'dir/hello.txt', content: 'hello mcp\n' } });
  assert.equal(r.isError, false, JSON.stringify(r));
  assert.equal(r.structuredContent.size, 10);
  assert.match(r.structuredContent.path, /^\/workspace\/sessions\/mcp-main-[0-9a-z]+\/dir\/hello\.txt$/);
  r = await c.callTool({ name: 'write_file', arguments: { path: 'dir/bin.dat', content: Buffer.from([0, 1, 2, 255]).toString('base64'), encoding: 'base64' } });
  assert.equal(r.structuredContent.size, 4);

  r = await c.callTool({ name: 'read_file', arguments: { path: 'dir/hello.txt' } });
  assert.equal(r.isError, false);
  assert.equal(r.content[0].text, 'hello mcp\n');

  r = await c.callTool({ name: 'list_dir', arguments: { path: 'dir' } });
  assert.deepEqual(r.structuredContent.entries, ['bin.dat', 'hello.txt']);
  r = await c.callTool({ name: 'list_dir', arguments: {} }); // the session directory
  assert.ok(r.structuredContent.entries.includes('dir'));

  r = await c.callTool({ name: 'stat', arguments: { path: 'dir/hello.txt' } });
  assert.equal(r.structuredContent.type, 'file');
  assert.equal(r.structuredContent.size, 10);

  // The command sees what the tools wrote: one path space.
  r = await c.callTool({ name: 'exec', arguments: { command: 'cat hello.txt', cwd: 'dir' } });
  assert.equal(shell(r).stdout, 'hello mcp\n');

  r = await c.callTool({ name: 'run_code', arguments: { language: 'sh', code: 'echo made > made.txt; echo ran "$1"', args: ['x'] } });
  assert.equal(r.isError, false, JSON.stringify(r));
  assert.equal(shell(r).stdout, 'ran x\n');
  assert.ok(r.structuredContent.files_changed.some((f) => f.path.endsWith('/made.txt') && f.kind === 'created'));

  // cancel of a command that has finished: a tool error (409), not a crash.
  r = await c.callTool({ name: 'cancel', arguments: { id: r.structuredContent.id } });
  assert.equal(r.isError, true);
  assert.equal(r.structuredContent.error.code, 'conflict');
});

test('errors: unknown tool, bad params, unknown method, tool-level failures', async () => {
  const c = await connect();
  await assert.rejects(c.callTool({ name: 'no_such_tool', arguments: {} }),
    (e) => e instanceof McpError && e.code === ErrorCode.InvalidParams && /unknown tool/.test(e.message));
  await assert.rejects(c.callTool({ name: 'exec', arguments: {} }),
    (e) => e instanceof McpError && e.code === ErrorCode.InvalidParams && /command/.test(e.message));
  await assert.rejects(c.callTool({ name: 'exec', arguments: { command: 'true', stream: true } }),
    (e) => e instanceof McpError && e.code === ErrorCode.InvalidParams && /unknown argument "stream"/.test(e.message));
  await assert.rejects(c.callTool({ name: 'exec', arguments: { command: 'true', timeout_s: 'soon' } }),
    (e) => e instanceof McpError && e.code === ErrorCode.InvalidParams);
  await assert.rejects(c.request({ method: 'resources/list', params: {} }, (await import('@modelcontextprotocol/sdk/types.js')).ListResourcesResultSchema),
    (e) => e instanceof McpError && e.code === ErrorCode.MethodNotFound);

  let r = await c.callTool({ name: 'read_file', arguments: { path: 'missing.txt' } });
  assert.equal(r.isError, true);
  assert.equal(r.structuredContent.error.code, 'not_found');
  for (const path of ['../../../etc/passwd', '/etc/passwd', '/workspace/../etc']) {
    r = await c.callTool({ name: 'stat', arguments: { path } });
    assert.equal(r.isError, true, path);
    assert.equal(r.structuredContent.error.code, 'outside_workspace', path);
  }
  // A symlink a command made that leads out is refused as well.
  await c.callTool({ name: 'exec', arguments: { command: 'ln -sf /etc escape' } });
  r = await c.callTool({ name: 'read_file', arguments: { path: 'escape/passwd' } });
  assert.equal(r.isError, true);
  assert.equal(r.structuredContent.error.code, 'outside_workspace');
  r = await c.callTool({ name: 'write_file', arguments: { path: 'escape/x', content: 'x' } });
  assert.equal(r.structuredContent.error.code, 'outside_workspace');
});

test('scopes are per tool: a missing one is a tool error, audited denied', async () => {
  const ro = await connect({ token: srv.token('fs:read'), session: 'mcp-ro' });
  let r = await ro.callTool({ name: 'exec', arguments: { command: 'touch /workspace/pwned' } });
  assert.equal(r.isError, true);
  assert.equal(r.structuredContent.error.code, 'insufficient_scope');
  assert.match(r.structuredContent.error.message, /needs the scope exec/);
  r = await ro.callTool({ name: 'write_file', arguments: { path: 'x.txt', content: 'x' } });
  assert.equal(r.structuredContent.error.code, 'insufficient_scope');
  r = await ro.callTool({ name: 'run_code', arguments: { language: 'sh', code: 'true' } });
  assert.equal(r.structuredContent.error.code, 'insufficient_scope');
  r = await ro.callTool({ name: 'list_dir', arguments: {} });
  assert.equal(r.isError, false);
  // exec alone does not grant run_code's input files (fs:write).
  const ex = await connect({ token: srv.token('exec'), session: 'mcp-ex' });
  r = await ex.callTool({ name: 'run_code', arguments: { language: 'sh', code: 'true', files: [{ path: 'a', content: 'b' }] } });
  assert.equal(r.structuredContent.error.code, 'insufficient_scope');
  // A token with none of the tools' scopes is refused at the door.
  const audit = srv.token('audit:read');
  const res = await fetch(`${srv.url}/mcp`, { method: 'POST', headers: { Authorization: `Bearer ${audit}`, 'Content-Type': 'application/json' }, body: '{"jsonrpc":"2.0","id":1,"method":"ping"}' });
  assert.equal(res.status, 403);
  // The refused exec is in the audit as 403 denied.
  const a = await rest('/audit?route=/mcp&outcome=denied&limit=50', audit);
  assert.equal(a.status, 200);
  assert.ok(a.body.records.some((x) => x.status === 403 && x.session === 'mcp-ro' && x.target === 'touch /workspace/pwned'),
    JSON.stringify(a.body.records));
  // Calls that ran are recorded as their route would be.
  const ok = await rest('/audit?route=/mcp&outcome=ok&session=mcp-main&limit=200', audit);
  assert.ok(ok.body.records.some((x) => x.target === 'echo out; echo err >&2; exit 3' && x.exit_code === 3), 'the exec call');
  assert.ok(ok.body.records.some((x) => /\/dir\/hello\.txt$/.test(x.target)), 'the write_file call');
});

test('a bad token is 401 naming the RFC 9728 metadata', async () => {
  const c = new Client({ name: 'bad', version: '1' });
  const t = new StreamableHTTPClientTransport(new URL(`${srv.url}/mcp`), { requestInit: { headers: { Authorization: 'Bearer not-a-jwt' } } });
  await assert.rejects(c.connect(t), (e) => e.code === 401);
  const res = await fetch(`${srv.url}/mcp`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
  assert.equal(res.status, 401);
  const m = /resource_metadata="([^"]+)"/.exec(res.headers.get('www-authenticate'));
  assert.ok(m, res.headers.get('www-authenticate'));
  const meta = await (await fetch(m[1])).json();
  assert.equal(meta.resource, `${srv.url}/mcp`);
  assert.deepEqual(meta.bearer_methods_supported, ['header']);
  assert.ok(meta.scopes_supported.includes('exec'));
});

test('a cancelled call cancels its command (notifications/cancelled)', async () => {
  const c = await connect({ session: 'mcp-cancel' });
  const ac = new AbortController();
  const call = c.callTool({ name: 'exec', arguments: { command: 'sleep 60' } }, undefined, { signal: ac.signal });
  const running = await until('the command to run', async () => {
    const l = await rest('/execs?state=running&session=mcp-cancel');
    return l.body.execs[0];
  }, 20000);
  ac.abort('the user gave up');
  await assert.rejects(call);
  const done = await until('the exec to end cancelled', async () => {
    const g = await rest(`/exec/${running.id}`);
    return g.body.state !== 'running' && g.body;
  }, 20000);
  assert.equal(done.state, 'cancelled');
  assert.equal(done.result.cancelled, true);
});

test('timeouts: the tool\'s timeout_s is a result; the client\'s request timeout cancels', async () => {
  const c = await connect({ session: 'mcp-timeout' });
  let r = await c.callTool({ name: 'exec', arguments: { command: 'echo started; sleep 30', timeout_s: 1 } });
  assert.equal(r.isError, false);
  assert.deepEqual(shell(r), { stdout: 'started\n', stderr: '', exit_code: 124, timed_out: true });
  assert.equal(r.structuredContent.timed_out, true);

  // The SDK's own request timeout sends notifications/cancelled as well
  // (4 s: long enough for the command to have started on a loaded machine;
  // a notification before its admission would find nothing to cancel).
  await assert.rejects(c.callTool({ name: 'exec', arguments: { command: 'sleep 60' } }, undefined, { timeout: 4000 }),
    (e) => e instanceof McpError && e.code === ErrorCode.RequestTimeout);
  const done = await until('the timed-out call\'s exec to end', async () => {
    const l = await rest('/execs?session=mcp-timeout&limit=1');
    const x = l.body.execs[0];
    return x && x.command === 'sleep 60' && x.state !== 'running' && x;
  }, 20000);
  assert.equal(done.state, 'cancelled');
});

test('approval: the call answers at once with the exec id; exec again collects, cancel withdraws', async () => {
  const gtok = execFileSync(bin, ['token', '--tenant', 'gated', '--data-dir', srv.dir], { encoding: 'utf8' }).trim();
  const c = await connect({ token: gtok, session: 'mcp-gated' });
  const args = { command: 'echo approved', id: 'mcp-approval-1' };
  let r = await c.callTool({ name: 'exec', arguments: args });
  assert.equal(r.isError, false);
  assert.equal(r.structuredContent.state, 'pending_approval');
  assert.equal(r.structuredContent.id, 'mcp-approval-1');
  assert.match(r.content[0].text, /mcp-approval-1/);
  // Asking again (the same id and arguments) is a poll: still waiting.
  r = await c.callTool({ name: 'exec', arguments: args });
  assert.equal(r.structuredContent.state, 'pending_approval');
  // Another tenant cannot cancel it: not found for them.
  const other = await connect({ session: 'mcp-gated' });
  r = await other.callTool({ name: 'cancel', arguments: { id: 'mcp-approval-1' } });
  assert.equal(r.isError, true);
  assert.equal(r.structuredContent.error.code, 'not_found');
  assert.equal((await rest('/exec/mcp-approval-1', gtok)).body.state, 'pending_approval');
  // Its own tenant can.
  r = await c.callTool({ name: 'cancel', arguments: { id: 'mcp-approval-1' } });
  assert.equal(r.isError, false);
  assert.equal(r.structuredContent.state, 'cancelling');
  await until('the withdrawn exec to end', async () => (await rest('/exec/mcp-approval-1', gtok)).body.state === 'cancelled', 20000);

  // Approved by a person (the approver key, over REST): calling again
  // with the id collects its result.
  const args2 = { command: 'echo approved', id: 'mcp-approval-2' };
  r = await c.callTool({ name: 'exec', arguments: args2 });
  assert.equal(r.structuredContent.state, 'pending_approval');
  const alice = execFileSync(bin, ['token', '--tenant', 'gated', '--scope', 'approve', '--sub', 'alice', '--data-dir', srv.dir], { encoding: 'utf8' }).trim();
  const ap = await rest('/exec/mcp-approval-2/approve', alice, { method: 'POST' });
  assert.equal(ap.status, 200, JSON.stringify(ap.body));
  r = await c.callTool({ name: 'exec', arguments: args2 });
  assert.equal(r.isError, false);
  assert.deepEqual(shell(r), { stdout: 'approved\n', stderr: '', exit_code: 0 });
  assert.equal(r.structuredContent.id, 'mcp-approval-2');
});

test('budgets: past the tenant\'s concurrent commands, a tool error with a retry hint', async () => {
  const ttok = execFileSync(bin, ['token', '--tenant', 'tight', '--data-dir', srv.dir], { encoding: 'utf8' }).trim();
  const c = await connect({ token: ttok, session: 'mcp-tight' });
  const first = c.callTool({ name: 'exec', arguments: { command: 'sleep 30', id: 'tight-1' } });
  await until('the first command to run', async () => (await rest('/execs?state=running', ttok)).body.execs.length === 1, 20000);
  const r = await c.callTool({ name: 'exec', arguments: { command: 'true' } });
  assert.equal(r.isError, true);
  assert.equal(r.structuredContent.error.code, 'too_many_requests');
  assert.ok(r.structuredContent.error.retry_hint);
  const x = await c.callTool({ name: 'cancel', arguments: { id: 'tight-1' } });
  assert.equal(x.structuredContent.state, 'cancelling');
  assert.equal(shell(await first).exit_code, 143);
  assert.equal((await first).structuredContent.cancelled, true);
});

test('sessions are isolated by X-Session-Key', async () => {
  const a = await connect({ session: 'mcp-a' });
  const b = await connect({ session: 'mcp-b' });
  await a.callTool({ name: 'write_file', arguments: { path: 'only-a.txt', content: 'a' } });
  const r = await b.callTool({ name: 'read_file', arguments: { path: 'only-a.txt' } });
  assert.equal(r.structuredContent.error.code, 'not_found');
});

test('hostile input: batches, nesting, oversized bodies, GET, other versions', async () => {
  let r = await rawMcp('[{"jsonrpc":"2.0","id":1,"method":"ping"}]');
  assert.equal(r.status, 400);
  assert.equal(JSON.parse(r.text).error.code, -32600);
  r = await rawMcp('['.repeat(100000) + ']'.repeat(100000));
  assert.equal(r.status, 400);
  assert.equal(JSON.parse(r.text).error.code, -32700);
  r = await rawMcp('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"exec","arguments":{"command":"true","env":' +
    '{"a":'.repeat(5000) + '1' + '}'.repeat(5000) + '}}}');
  assert.equal(r.status, 400); // deeper than the parser takes
  r = await rawMcp('not json');
  assert.equal(JSON.parse(r.text).error.code, -32700);
  r = await rawMcp('{"jsonrpc":"2.0","id":1,"method":"ping"}', { 'MCP-Protocol-Version': '1999-01-01' });
  assert.equal(r.status, 400);
  // Over the buffered limit (16 MiB): 413 before anything is parsed.
  const big = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"big","content":"' +
    'x'.repeat(17 << 20) + '"}}}';
  r = await rawMcp(big);
  assert.equal(r.status, 413);
  const g = await fetch(`${srv.url}/mcp`, { headers: { Authorization: `Bearer ${tok}`, Accept: 'text/event-stream' } });
  assert.equal(g.status, 405);
  assert.equal(g.headers.get('allow'), 'POST');
  // Notifications and responses: 202, no body.
  r = await rawMcp('{"jsonrpc":"2.0","method":"notifications/initialized"}');
  assert.equal(r.status, 202);
  assert.equal(r.text, '');
  r = await rawMcp('{"jsonrpc":"2.0","id":9,"result":{}}');
  assert.equal(r.status, 202);
  // Names quoted back are cut on a character, never mid-way (one that is
  // not valid UTF-8 could not be answered at all).
  r = await rawMcp(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'é'.repeat(100) } }));
  assert.equal(r.status, 200);
  assert.equal(JSON.parse(r.text).error.code, -32602);
  r = await rawMcp(JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'x'.repeat(119) + 'éé' }));
  assert.equal(JSON.parse(r.text).error.code, -32601);
  for (const params of [undefined, { name: 'exec', arguments: [1] }, { name: 7 }]) {
    r = await rawMcp(JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'tools/call', params }));
    assert.equal(JSON.parse(r.text).error.code, -32602, JSON.stringify(params));
  }
  // A Host that is not a host name never reaches the challenge header.
  const head = await new Promise((resolve, reject) => {
    const sock = tcpConnect(srv.port, '127.0.0.1', () =>
      sock.write('POST /mcp HTTP/1.1\r\nHost: x", evil="1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}'));
    let got = '';
    sock.on('data', (d) => { got += d; });
    sock.on('end', () => resolve(got));
    sock.on('error', reject);
  });
  assert.match(head, /^HTTP\/1\.1 401/);
  assert.match(head, /\r\nWWW-Authenticate: Bearer error="invalid_token"\r\n/i);
  // Still serving.
  assert.equal((await fetch(`${srv.url}/healthz`)).status, 200);
});
