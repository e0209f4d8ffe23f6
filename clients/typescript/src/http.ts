// One request, attempt after attempt, with libsandboxd's retry rules
// (docs/clients.md): at most maxRetries retries within the call's
// deadline, only where the contract makes them safe:
//   - 429 and 503, after Retry-After (else 200 ms doubling with a little
//     jitter, at most maxBackoffMs), unless an upload's body was already
//     being read (it cannot be replayed);
//   - a connection that could not be made (nothing was sent);
//   - a connection that broke before an answer, for idempotent requests
//     only (reads, PUT /fs/write, cancel), and not once an upload's body
//     was being read.
// A wait that would pass the deadline is not made: the answer we have
// beats a timeout.
import { SandboxError, SandboxUnavailableError, abortError } from './errors.js';

export interface Transport {
  baseUrl: string;
  headers: Record<string, string>;
  maxRetries: number;
  maxBackoffMs: number;
  fetch: typeof fetch;
}

export interface Req {
  method: string;
  path: string;
  query?: Record<string, string | number | boolean | undefined>;
  headers?: Record<string, string>;
  /** A JSON body. */
  json?: unknown;
  /** Raw bytes. */
  bytes?: Uint8Array | string;
  /** A streamed body, made anew per attempt; `read()` says whether any attempt pulled from it. */
  stream?: { make: () => ReadableStream<Uint8Array>; read: () => boolean };
  idempotent: boolean;
  /** Milliseconds for the whole call, retries included; null: none. */
  deadlineMs: number | null;
  signal?: AbortSignal;
}

const BACKOFF_FIRST_MS = 200;
// Connection errors (undici's cause codes) where nothing was sent.
const CONNECT_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);

export function backoffMs(t: Transport, n: number, retryAfterS: number | null): number {
  let ms = retryAfterS !== null ? retryAfterS * 1000 : BACKOFF_FIRST_MS * 2 ** Math.min(n, 16);
  if (retryAfterS === null) ms += Math.floor(Math.random() * (ms / 4 + 1));
  return Math.min(Math.max(ms, 50), t.maxBackoffMs);
}

function parseRetryAfter(v: string | null): number | null {
  if (v === null || !/^\d+$/.test(v.trim())) return null;
  const s = Number(v.trim());
  return s < 86400 ? s : null;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal.reason));
    const onAbort = () => { clearTimeout(t); reject(abortError(signal?.reason)); };
    const t = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve(); }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

function errCode(e: unknown): string | undefined {
  for (let c: unknown = e, i = 0; c && i < 4; c = (c as { cause?: unknown }).cause, i++) {
    const code = (c as { code?: unknown }).code;
    if (typeof code === 'string') return code;
  }
  return undefined;
}

export function url(t: Transport, path: string, query?: Req['query']): string {
  const u = new URL(t.baseUrl.replace(/\/+$/, '') + path);
  for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) u.searchParams.set(k, String(v));
  return u.toString();
}

/** Reads an error answer: the wire's `{"error": {code, message, retry_hint}}`, or what there is. */
async function wireError(res: Response): Promise<{ code: string; message: string; hint: string | null }> {
  let text = '';
  try {
    text = await res.text();
  } catch { /* the body broke: the status still says it */ }
  try {
    const e = (JSON.parse(text) as { error?: { code?: unknown; message?: unknown; retry_hint?: unknown } }).error;
    if (e && typeof e.code === 'string')
      return { code: e.code, message: typeof e.message === 'string' ? e.message : e.code,
        hint: typeof e.retry_hint === 'string' ? e.retry_hint : null };
  } catch { /* not JSON */ }
  return { code: `http_${res.status}`, message: `HTTP ${res.status}${text ? `: ${text.slice(0, 200)}` : ''}`, hint: null };
}

export interface Answer {
  res: Response;
  /** Ends the call's deadline and signal watch: call it once the body is read. */
  release: () => void;
}

/**
 * Sends req; resolves with the 2xx Response (its body unread: the
 * deadline and the signal go on bounding its reading until release()), or
 * rejects with SandboxError, SandboxUnavailableError or an AbortError.
 */
export async function send(t: Transport, req: Req): Promise<Answer> {
  const end = req.deadlineMs === null ? Infinity : Date.now() + req.deadlineMs;
  const target = url(t, req.path, req.query);
  for (let n = 0; ; n++) {
    if (req.signal?.aborted) throw abortError(req.signal.reason);
    const headers: Record<string, string> = { ...t.headers, ...req.headers };
    let body: BodyInit | undefined;
    if (req.json !== undefined) {
      body = JSON.stringify(req.json);
      headers['content-type'] = 'application/json';
    } else if (req.bytes !== undefined) {
      body = req.bytes as BodyInit;
      headers['content-type'] = 'application/octet-stream';
    } else if (req.stream) {
      body = req.stream.make();
      headers['content-type'] = 'application/octet-stream';
    }
    // The caller's signal and the deadline abort the attempt.
    const ac = new AbortController();
    let timedOut = false;
    const onAbort = () => ac.abort(req.signal?.reason);
    req.signal?.addEventListener('abort', onAbort, { once: true });
    const timer = end === Infinity ? undefined : setTimeout(() => { timedOut = true; ac.abort(); }, Math.max(0, end - Date.now()));
    const release = () => {
      clearTimeout(timer);
      req.signal?.removeEventListener('abort', onAbort);
    };
    let res: Response;
    const init: RequestInit & { duplex?: 'half' } = { method: req.method, headers, body, signal: ac.signal };
    if (req.stream) {
      init.duplex = 'half';
      // Fetch clones a request that may be redirected, and a clone of a
      // streamed body is a tee whose unread half keeps every chunk: no
      // redirects, no window, no clone (undici), and the memory stays
      // constant.
      init.redirect = 'error';
      init.window = null;
    }
    try {
      res = await t.fetch(target, init);
    } catch (e) {
      release();
      if (req.signal?.aborted) throw abortError(req.signal.reason);
      if (timedOut)
        throw new SandboxUnavailableError({ status: null, code: 'timeout', attempts: n + 1, cause: e,
          message: `no answer from ${req.method} ${req.path} within the call's deadline` });
      const code = errCode(e);
      const connect = code !== undefined && CONNECT_CODES.has(code);
      const pulled = req.stream?.read() ?? false;
      const retryable = connect || (req.idempotent && !pulled);
      const wait = backoffMs(t, n, null);
      if (retryable && n < t.maxRetries && Date.now() + wait < end) {
        await sleep(wait, req.signal);
        continue;
      }
      throw new SandboxUnavailableError({ status: null, code: connect ? 'connection_refused' : 'connection_broken',
        attempts: n + 1, cause: e,
        message: `${connect ? 'cannot connect' : 'the connection broke'}: ${req.method} ${req.path}${code ? ` (${code})` : ''}` });
    }
    if (res.ok) return { res, release };
    const requestId = res.headers.get('x-request-id');
    const retryAfterS = parseRetryAfter(res.headers.get('retry-after'));
    const { code, message, hint } = await wireError(res);
    release();
    const infra = res.status === 429 || res.status === 503;
    if (infra) {
      const pulled = req.stream?.read() ?? false;
      const wait = backoffMs(t, n, retryAfterS);
      if (!pulled && n < t.maxRetries && Date.now() + wait < end) {
        await sleep(wait, req.signal);
        continue;
      }
      throw new SandboxUnavailableError({ status: res.status, code, message, retryHint: hint, retryAfterS,
        requestId, attempts: n + 1 });
    }
    throw new SandboxError(res.status, code, message, hint, requestId);
  }
}

// Reads the body with f, then releases the call; a failure to read it is
// SandboxUnavailableError (the connection broke or the deadline passed),
// or the AbortError of the caller's signal.
async function readBody<T>(a: Answer, what: string, signal: AbortSignal | undefined, f: (r: Response) => Promise<T>): Promise<T> {
  try {
    return await f(a.res);
  } catch (e) {
    if (signal?.aborted) throw abortError(signal.reason);
    throw new SandboxUnavailableError({ status: a.res.status, code: 'connection_broken', attempts: 1, cause: e,
      requestId: a.res.headers.get('x-request-id'), message: `the answer to ${what} broke off (or the deadline passed)` });
  } finally {
    a.release();
  }
}

/** The body as text, then released. */
export function text(a: Answer, what: string, signal?: AbortSignal): Promise<string> {
  return readBody(a, what, signal, (r) => r.text());
}

/** The body as bytes, then released. */
export function bytes(a: Answer, what: string, signal?: AbortSignal): Promise<Uint8Array> {
  return readBody(a, what, signal, async (r) => new Uint8Array(await r.arrayBuffer()));
}

/** The body as JSON, then released. */
export async function json<T>(a: Answer, what: string, signal?: AbortSignal): Promise<T> {
  const res = a.res;
  const body = await text(a, what, signal);
  try {
    return JSON.parse(body) as T;
  } catch {
    throw new SandboxError(res.status, 'bad_response', `the answer to ${what} is not JSON`, null,
      res.headers.get('x-request-id'));
  }
}
