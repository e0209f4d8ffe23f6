// The two kinds of failure a gateway must tell apart (wire.md "Errors"):
// the environment is down, retry later (SandboxUnavailableError), and the
// request was refused (SandboxError). A command that exits non-zero, times
// out or is cancelled is neither: it is a ShellResult.

/** A refusal with a wire error code (`not_found`, `outside_workspace`, `too_large`, ...). */
export class SandboxError extends Error {
  override readonly name: string = 'SandboxError';
  /** The HTTP status (0 when the refusal was made here, before any request). */
  readonly status: number;
  /** The wire `code`, e.g. `not_found`. */
  readonly code: string;
  /** The server's `retry_hint` (which route to use instead, ...), or null. */
  readonly retryHint: string | null;
  /** The answer's `X-Request-Id`, for the server's audit and log. */
  readonly requestId: string | null;

  constructor(status: number, code: string, message: string, retryHint: string | null = null,
    requestId: string | null = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryHint = retryHint;
    this.requestId = requestId;
  }
}

/**
 * The sandbox environment is not available: a 503 (`backend_unavailable`,
 * `store_unavailable`), a 429 (`too_many_requests`) still refused after the
 * retries, a connection that could not be made or broke, or no answer
 * before the call's deadline. Not the caller's fault: retry later, after
 * `retryAfterS` when the server said.
 */
export class SandboxUnavailableError extends Error {
  override readonly name: string = 'SandboxUnavailableError';
  /** The HTTP status, or null when no answer came. */
  readonly status: number | null;
  /** The wire code, or `connection_refused`, `connection_broken`, `timeout` when no answer came. */
  readonly code: string;
  /** The server's `retry_hint`, or null. */
  readonly retryHint: string | null;
  /** The last answer's `Retry-After` in seconds, or null. */
  readonly retryAfterS: number | null;
  /** The last answer's `X-Request-Id`, or null. */
  readonly requestId: string | null;
  /** How many requests were made (the first and the retries). */
  readonly attempts: number;

  constructor(o: {
    status: number | null; code: string; message: string; retryHint?: string | null;
    retryAfterS?: number | null; requestId?: string | null; attempts: number; cause?: unknown;
  }) {
    super(o.message, o.cause === undefined ? undefined : { cause: o.cause });
    this.status = o.status;
    this.code = o.code;
    this.retryHint = o.retryHint ?? null;
    this.retryAfterS = o.retryAfterS ?? null;
    this.requestId = o.requestId ?? null;
    this.attempts = o.attempts;
  }
}

/** What a call aborted by its AbortSignal rejects with (`name` is `AbortError`). */
export function abortError(reason?: unknown): Error {
  const e = new DOMException('the call was aborted', 'AbortError');
  if (reason !== undefined) Object.defineProperty(e, 'cause', { value: reason });
  return e;
}
