// GatewaySandbox: the SandboxApi over sandboxd's wire (wire.md), one
// instance per (base URL, token, tenant, session). Each request carries
// Authorization, X-Tenant-Id and X-Session-Key.
import { SandboxError, SandboxUnavailableError, abortError } from './errors.js';
import { Transport, Req, send, json, text, bytes } from './http.js';
import type {
  CallOptions, ExecOptions, FileChange, FileStat, FileType, GatewaySandboxOptions, ProducedFile,
  ReadBufferOptions, ReadStreamOptions, RunOptions, RunResult, SandboxApi, ShellResult, StreamOptions,
  UploadResult, WriteResult,
} from './types.js';

const EXEC_TIMEOUT_MAX_S = 3600; // the server's default exec-timeout-max-s
const EXEC_MARGIN_MS = 60000; // an exec's deadline: its timeout plus this
const CANCEL_TIMEOUT_MS = 10000;
const DEFAULT_MAX_FILE_BYTES = 1 << 20;

let webcrypto: { getRandomValues<T extends Uint8Array>(a: T): T } | undefined =
  (globalThis as { crypto?: typeof webcrypto }).crypto;

async function randomBytes(n: number): Promise<Uint8Array> {
  if (!webcrypto) {
    const name = 'node:crypto'; // Node 18 has no global crypto
    webcrypto = ((await import(name)) as { webcrypto: typeof webcrypto }).webcrypto;
  }
  return webcrypto!.getRandomValues(new Uint8Array(n));
}

/** An exec id as libsandboxd makes them: `c` and 32 random hex digits. */
export async function makeExecId(): Promise<string> {
  return 'c' + Array.from(await randomBytes(16), (b) => b.toString(16).padStart(2, '0')).join('');
}

type Wire = Record<string, unknown>;

function toResult(o: Wire): ShellResult {
  const r: ShellResult = {
    id: String(o.id ?? ''),
    stdout: typeof o.stdout === 'string' ? o.stdout : '',
    stderr: typeof o.stderr === 'string' ? o.stderr : '',
    exitCode: typeof o.exit_code === 'number' ? o.exit_code : -1,
    timedOut: o.timed_out === true,
    cancelled: o.cancelled === true,
    truncated: o.truncated === true,
    stdoutBytes: Number(o.stdout_bytes ?? 0),
    stderrBytes: Number(o.stderr_bytes ?? 0),
    stdoutSpill: typeof o.stdout_spill === 'string' ? o.stdout_spill : null,
    stderrSpill: typeof o.stderr_spill === 'string' ? o.stderr_spill : null,
    startedAt: String(o.started_at ?? ''),
    finishedAt: String(o.finished_at ?? ''),
    durationMs: Number(o.duration_ms ?? 0),
    raw: o,
  };
  if (typeof o.idle === 'boolean') r.idle = o.idle;
  if (typeof o.oom_killed === 'boolean') r.oomKilled = o.oom_killed;
  if (Array.isArray(o.files_changed)) r.filesChanged = o.files_changed as FileChange[];
  return r;
}

function toStat(o: Wire): FileStat {
  const st: FileStat = { path: String(o.path), type: o.type as FileType, isSymlink: o.is_symlink === true };
  if (typeof o.size === 'number') st.size = o.size;
  if (typeof o.mtime === 'string') st.mtime = o.mtime;
  if (typeof o.mode === 'string') st.mode = o.mode;
  return st;
}

const enc = new TextEncoder();
function bytewise(a: string, b: string): number {
  const x = enc.encode(a), y = enc.encode(b);
  for (let i = 0; i < x.length && i < y.length; i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

function base64(b: Uint8Array): string {
  let s = '';
  for (let i = 0; i < b.length; i += 0x8000) s += String.fromCharCode(...b.subarray(i, i + 0x8000));
  return btoa(s);
}

/** The SandboxApi of one tenant's session on a sandboxd. */
export class GatewaySandbox implements SandboxApi {
  readonly baseUrl: string;
  readonly tenantId: string;
  readonly sessionKey: string;
  private readonly t: Transport;
  private readonly authToken: string;
  private readonly opts: GatewaySandboxOptions;
  private readonly timeoutMs: number;

  constructor(baseUrl: string, authToken: string, tenantId: string, opts: GatewaySandboxOptions = {}) {
    this.baseUrl = baseUrl;
    this.authToken = authToken;
    this.tenantId = tenantId;
    this.opts = opts;
    this.sessionKey = opts.sessionKey ?? 'default';
    this.timeoutMs = opts.timeoutMs ?? 60000;
    this.t = {
      baseUrl,
      headers: { authorization: `Bearer ${authToken}`, 'x-tenant-id': tenantId, 'x-session-key': this.sessionKey },
      maxRetries: opts.maxRetries ?? 4,
      maxBackoffMs: opts.maxBackoffMs ?? 30000,
      fetch: opts.fetch ?? ((...a) => fetch(...a)),
    };
  }

  /** The same sandbox, another session (another directory). */
  withSession(sessionKey: string): GatewaySandbox {
    return new GatewaySandbox(this.baseUrl, this.authToken, this.tenantId, { ...this.opts, sessionKey });
  }

  private req(r: Omit<Req, 'deadlineMs' | 'idempotent'> & { idempotent?: boolean }, o?: CallOptions): Promise<import('./http.js').Answer> {
    return send(this.t, { idempotent: false, ...r, deadlineMs: o?.timeoutMs ?? this.timeoutMs, signal: o?.signal });
  }

  private async getJson<T = Wire>(route: string, query: Req['query'], o?: CallOptions): Promise<T> {
    return json<T>(await this.req({ method: 'GET', path: route, query, idempotent: true }, o), route, o?.signal);
  }

  private async postJson<T = Wire>(route: string, body: unknown, o?: CallOptions, idempotent = false): Promise<T> {
    return json<T>(await this.req({ method: 'POST', path: route, json: body, idempotent }, o), route, o?.signal);
  }

  async readFile(path: string, opts?: CallOptions): Promise<string> {
    const a = await this.req({ method: 'GET', path: '/fs/read', query: { path }, idempotent: true }, opts);
    return text(a, '/fs/read', opts?.signal);
  }

  async readFileBuffer(path: string, opts: ReadBufferOptions = {}): Promise<Uint8Array> {
    const { offset = 0, length } = opts;
    const headers: Record<string, string> = {};
    if (length !== undefined && length > 0) headers.range = `bytes=${offset}-${offset + length - 1}`;
    else if (offset > 0) headers.range = `bytes=${offset}-`;
    const a = await this.req({ method: 'GET', path: '/fs/read_buffer', query: { path }, headers, idempotent: true }, opts);
    return bytes(a, '/fs/read_buffer', opts.signal);
  }

  async writeFile(path: string, content: string | Uint8Array, opts?: CallOptions): Promise<WriteResult> {
    // Replacing a file with the same bytes twice is the same as once: idempotent.
    const a = await this.req({ method: 'PUT', path: '/fs/write', query: { path }, bytes: content, idempotent: true }, opts);
    const o = await json<Wire>(a, '/fs/write', opts?.signal);
    return { path: String(o.path), size: Number(o.size) };
  }

  async stat(path: string, opts?: CallOptions): Promise<FileStat> {
    return toStat(await this.getJson('/fs/stat', { path }, opts));
  }

  async readdir(path: string, opts?: CallOptions): Promise<string[]> {
    const names: string[] = [];
    let after: string | undefined;
    for (;;) {
      const page = await this.getJson<{ entries: string[]; more?: boolean; next?: string | null }>(
        '/fs/readdir', { path, limit: 10000, after }, opts);
      names.push(...page.entries);
      if (!page.more || !page.next) break;
      after = page.next;
    }
    return names.sort(bytewise);
  }

  async exists(path: string, opts?: CallOptions): Promise<boolean> {
    return (await this.getJson<{ exists: boolean }>('/fs/exists', { path }, opts)).exists === true;
  }

  async mkdir(path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<string> {
    return String((await this.postJson('/fs/mkdir', { path, recursive: opts.recursive ?? false }, opts)).path);
  }

  async rm(path: string, opts: CallOptions & { recursive?: boolean; force?: boolean } = {}): Promise<boolean> {
    const o = await this.postJson('/fs/rm', { path, recursive: opts.recursive ?? false, force: opts.force ?? false }, opts);
    return o.removed === true;
  }

  async move(from: string, to: string, opts: CallOptions & { overwrite?: boolean } = {}): Promise<string> {
    return String((await this.postJson('/fs/move', { from, to, overwrite: opts.overwrite ?? false }, opts)).path);
  }

  /** `POST /exec/{id}/cancel` (202): the command stops as by a timeout; cancelling twice is cancelling once. */
  async cancelExec(id: string, opts?: CallOptions): Promise<void> {
    const a = await this.req({ method: 'POST', path: `/exec/${encodeURIComponent(id)}/cancel`, idempotent: true },
      { timeoutMs: CANCEL_TIMEOUT_MS, ...opts });
    await text(a, 'cancel');
  }

  /** `GET /exec/{id}`: `{id, state, command, session, cwd, started_at, result}` as the wire has it. */
  async getExec(id: string, opts?: CallOptions): Promise<Wire> {
    return this.getJson(`/exec/${encodeURIComponent(id)}`, undefined, opts);
  }

  // POST route with an exec id chosen here, so that a retry is answered by
  // the one command; the caller's signal cancels it on the server, then
  // ends the request.
  private async execLike(route: string, body: Wire, id: string, timeoutS: number | undefined, o: CallOptions): Promise<Wire> {
    const { signal } = o;
    if (signal?.aborted) throw abortError(signal.reason);
    const inner = new AbortController();
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () => {
        this.cancelExec(id).catch(() => { /* closing the connection cancels it too */ }).finally(() => {
          inner.abort(signal?.reason);
          reject(abortError(signal?.reason));
        });
      };
      signal?.addEventListener('abort', onAbort, { once: true });
    });
    const deadline = o.timeoutMs ?? (timeoutS && timeoutS > 0 ? timeoutS : EXEC_TIMEOUT_MAX_S) * 1000 + EXEC_MARGIN_MS;
    const call = (async () => json<Wire>(await send(this.t, { method: 'POST', path: route, json: { ...body, id },
      idempotent: false, deadlineMs: deadline, signal: inner.signal }), route, inner.signal))();
    call.catch(() => { /* reported through the race */ });
    aborted.catch(() => { /* idem */ });
    try {
      return await Promise.race([call, aborted]);
    } finally {
      if (onAbort) signal?.removeEventListener('abort', onAbort);
    }
  }

  async exec(opts: ExecOptions): Promise<ShellResult> {
    if (typeof opts?.command !== 'string' || opts.command === '')
      throw new SandboxError(0, 'bad_request', 'exec needs a command');
    const id = opts.id ?? (await makeExecId());
    const body: Wire = { command: opts.command };
    if (opts.cwd !== undefined) body.cwd = opts.cwd;
    if (opts.env !== undefined) body.env = opts.env;
    if (opts.timeoutS !== undefined) body.timeout_s = opts.timeoutS;
    if (opts.idleTimeoutS !== undefined) body.idle_timeout_s = opts.idleTimeoutS;
    if (opts.stdin !== undefined) body.stdin = opts.stdin;
    if (opts.maxOutputBytes !== undefined) body.max_output_bytes = opts.maxOutputBytes;
    if (opts.network !== undefined) body.network = opts.network;
    return toResult(await this.execLike('/exec', body, id, opts.timeoutS, opts));
  }

  /**
   * The code tool: `POST /code` writes `files`, runs `code` with the
   * language's interpreter in the session directory, and answers the
   * ShellResult with the files the run changed; those created or modified
   * are read back (up to maxFileBytes each).
   */
  async run(opts: RunOptions): Promise<RunResult> {
    const id = opts.id ?? (await makeExecId());
    const list = Array.isArray(opts.files) ? opts.files
      : Object.entries(opts.files ?? {}).map(([path, content]) => ({ path, content }));
    const body: Wire = { language: opts.language, code: opts.code };
    if (list.length)
      body.files = list.map((f) => typeof f.content === 'string' ? { path: f.path, content: f.content }
        : { path: f.path, content: base64(f.content), encoding: 'base64' });
    if (opts.args !== undefined) body.args = opts.args;
    if (opts.cwd !== undefined) body.cwd = opts.cwd;
    if (opts.env !== undefined) body.env = opts.env;
    if (opts.timeoutS !== undefined) body.timeout_s = opts.timeoutS;
    if (opts.maxOutputBytes !== undefined) body.max_output_bytes = opts.maxOutputBytes;
    if (opts.network !== undefined) body.network = opts.network;
    if (opts.stdin !== undefined) body.stdin = opts.stdin;
    const o = await this.execLike('/code', body, id, opts.timeoutS, opts);
    const res = toResult(o);
    const changed = res.filesChanged ?? [];
    const max = opts.maxFileBytes ?? DEFAULT_MAX_FILE_BYTES;
    const files: ProducedFile[] = [];
    for (const f of changed) {
      const p: ProducedFile = { ...f };
      if (f.kind !== 'deleted' && max > 0 && f.size <= max) {
        try {
          p.content = await this.readFileBuffer(f.path, { signal: opts.signal });
        } catch (e) {
          if (!(e instanceof SandboxError && e.code === 'not_found')) throw e; // gone since
        }
      }
      files.push(p);
    }
    return { ...res, filesChanged: changed, files, filesChangedTruncated: o.files_changed_truncated === true };
  }

  readFileStream(path: string, opts: ReadStreamOptions = {}): AsyncIterable<Uint8Array> {
    const { signal, offset = 0 } = opts;
    const t = this.t;
    return {
      async *[Symbol.asyncIterator]() {
        const a = await send(t, { method: 'GET', path: '/fs/read_stream', query: { path }, idempotent: true,
          headers: offset > 0 ? { range: `bytes=${offset}-` } : undefined, deadlineMs: null, signal });
        const reader = a.res.body!.getReader();
        let done = false;
        try {
          for (;;) {
            let r: ReadableStreamReadResult<Uint8Array>;
            try {
              r = await reader.read();
            } catch (e) {
              if (signal?.aborted) throw abortError(signal.reason);
              throw new SandboxUnavailableError({ status: a.res.status, code: 'connection_broken', attempts: 1,
                cause: e, requestId: a.res.headers.get('x-request-id'), message: `the download of ${path} broke off` });
            }
            if (r.done) {
              done = true;
              return;
            }
            yield r.value;
          }
        } finally {
          if (!done) await reader.cancel().catch(() => { /* already broken */ });
          a.release();
        }
      },
    };
  }

  async writeFileStream(path: string, source: AsyncIterable<Uint8Array>, opts: StreamOptions = {}): Promise<UploadResult> {
    const it = source[Symbol.asyncIterator]();
    let pulled = false;
    let sourceError: { e: unknown } | undefined;
    // Pulled one chunk at a time as the connection takes them: constant memory.
    const make = () => new ReadableStream<Uint8Array>({
      async pull(c) {
        pulled = true;
        try {
          const r = await it.next();
          if (r.done) c.close();
          else c.enqueue(r.value);
        } catch (e) {
          sourceError = { e };
          c.error(e);
        }
      },
      async cancel(reason) {
        await it.return?.(reason);
      },
    }, { highWaterMark: 0 });
    let a;
    try {
      a = await send(this.t, { method: 'PUT', path: '/fs/write_stream', query: { path }, idempotent: false,
        stream: { make, read: () => pulled }, deadlineMs: null, signal: opts.signal });
    } catch (e) {
      if (sourceError) throw sourceError.e;
      if (!pulled) await it.return?.();
      throw e;
    }
    const o = await json<Wire>(a, '/fs/write_stream', opts.signal);
    return { path: String(o.path), size: Number(o.size), sha256: String(o.sha256) };
  }
}
