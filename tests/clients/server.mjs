// A real sandboxd on 127.0.0.1 for the client tests: a fresh data directory
// with tenant acme, tokens minted by `sandboxd token`, and `serve` started
// (and restarted on the same port) as a child process of the test.
// SANDBOXD_BIN names the binary (CTest sets it).
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, chmodSync, openSync, closeSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const bin = process.env.SANDBOXD_BIN;
if (!bin) throw new Error('SANDBOXD_BIN must name the sandboxd binary');

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Waits for cond() to be truthy (polled), failing after a generous deadline:
// conditions are awaited, latencies are never asserted.
export async function until(what, cond, deadlineMs = 60000) {
  const end = Date.now() + deadlineMs;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export class Sandboxd {
  constructor(extra = []) {
    this.dir = mkdtempSync(join(tmpdir(), 'sandboxd-clients-'));
    chmodSync(this.dir, 0o755);
    this.extra = extra;
    this.proc = null;
    // A uid range of our own (as tests/integration/it_exec.h does).
    this.uidBase = 2400000 + (process.pid % 100000) * 16;
    execFileSync(bin, ['tenant', 'add', 'acme', '--data-dir', this.dir], { stdio: ['ignore', 'ignore', 'inherit'] });
  }

  token(scope) {
    const args = ['token', '--tenant', 'acme', '--data-dir', this.dir];
    if (scope) args.push('--scope', scope);
    return execFileSync(bin, args, { encoding: 'utf8' }).trim();
  }

  async start(port) {
    this.port = port ?? this.port ?? (await freePort());
    this.url = `http://127.0.0.1:${this.port}`;
    const log = openSync(join(this.dir, 'server.log'), 'a');
    this.proc = spawn(bin, ['serve', '--data-dir', this.dir, '--listen', `127.0.0.1:${this.port}`,
      '--backend', 'bwrap', '--set', `uid-base=${this.uidBase}`, '--set', 'disk-quota=none', ...this.extra],
    { stdio: ['ignore', log, log] });
    closeSync(log);
    const proc = this.proc;
    let exited = null;
    proc.on('exit', (code, sig) => { exited = { code, sig }; });
    this.exited = new Promise((r) => proc.on('exit', (code, sig) => r({ code, sig })));
    await until('sandboxd to answer /healthz', async () => {
      if (exited) throw new Error(`sandboxd exited at start (${JSON.stringify(exited)}); see ${this.dir}/server.log`);
      try {
        return (await fetch(`${this.url}/healthz`)).ok;
      } catch {
        return false;
      }
    });
    return this.url;
  }

  // SIGTERM, and the exit status (0 expected).
  async stop() {
    if (!this.proc) return null;
    const p = this.proc;
    this.proc = null;
    p.kill('SIGTERM');
    return this.exited;
  }

  async close() {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
