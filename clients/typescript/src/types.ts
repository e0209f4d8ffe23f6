// The public shapes: the eleven-method SandboxApi of a gateway, and what
// its methods take and give. Wire fields are camelCased; a field the wire
// leaves out is left out here too (never invented).

/** Options every call takes. */
export interface CallOptions {
  /** Aborts the call: it rejects with an AbortError (an exec is cancelled on the server first). */
  signal?: AbortSignal;
  /** Milliseconds for the whole call, retries included (default: the sandbox's timeoutMs; streams have none). */
  timeoutMs?: number;
}

export type FileType = 'file' | 'directory' | 'symlink' | 'other';

/** `GET /fs/stat`: optional fields are present only when the server sent them. */
export interface FileStat {
  /** The absolute, normalised workspace path. */
  path: string;
  type: FileType;
  /** True when the path itself is a symlink (followed when its target stays inside the workspace). */
  isSymlink: boolean;
  size?: number;
  /** RFC 3339, UTC. */
  mtime?: string;
  /** Permission bits as an octal string, e.g. `0644`. */
  mode?: string;
}

export interface WriteResult {
  path: string;
  size: number;
}

export interface UploadResult {
  path: string;
  size: number;
  /** The SHA-256 (hex) of what the server stored. */
  sha256: string;
}

export interface FileChange {
  path: string;
  kind: 'created' | 'modified' | 'deleted';
  size: number;
  sha256: string | null;
}

/** `POST /exec`'s ShellResult. A non-zero exit, a timeout and a cancel are results, not errors. */
export interface ShellResult {
  id: string;
  stdout: string;
  stderr: string;
  /** 124 on timeout, 128+N when killed by signal N. */
  exitCode: number;
  timedOut: boolean;
  cancelled: boolean;
  /** Some output was left out (the spill files have all of it). */
  truncated: boolean;
  stdoutBytes: number;
  stderrBytes: number;
  stdoutSpill: string | null;
  stderrSpill: string | null;
  startedAt: string;
  finishedAt: string;
  durationMs: number;
  /** Stopped by idle_timeout_s. */
  idle?: boolean;
  oomKilled?: boolean;
  /** `run` (POST /code): the files the code created, modified or deleted. */
  filesChanged?: FileChange[];
  /** The wire object as received, with every field (egress_denied, networked, ...). */
  raw: Record<string, unknown>;
}

export interface ExecOptions extends CallOptions {
  /** Run by `/bin/sh -c` (POSIX sh). */
  command: string;
  /** Default: the session directory. Relative paths resolve against it. */
  cwd?: string;
  env?: Record<string, string>;
  /** Seconds; at the timeout the command is stopped and the result has `timedOut: true`, `exitCode: 124`. */
  timeoutS?: number;
  idleTimeoutS?: number;
  stdin?: string;
  maxOutputBytes?: number;
  network?: boolean;
  /** The exec id, `[A-Za-z0-9_-]{1,64}`: an idempotency key. Default: `c` and 32 random hex digits. */
  id?: string;
}

export interface ReadBufferOptions extends CallOptions {
  /** First byte (default 0). */
  offset?: number;
  /** Bytes from offset (default: to the end). */
  length?: number;
}

export interface StreamOptions {
  signal?: AbortSignal;
}

export interface ReadStreamOptions extends StreamOptions {
  /** Resume from this byte (a `Range` request). */
  offset?: number;
}

/** The sandbox layer of a gateway: eleven methods. */
export interface SandboxApi {
  /** `GET /fs/read`: UTF-8 text (422 `not_text` otherwise: use readFileBuffer). */
  readFile(path: string, opts?: CallOptions): Promise<string>;
  /** `GET /fs/read_buffer`: bytes, optionally a range. */
  readFileBuffer(path: string, opts?: ReadBufferOptions): Promise<Uint8Array>;
  /** `PUT /fs/write`: replaces the file atomically; missing parent directories are made. */
  writeFile(path: string, content: string | Uint8Array, opts?: CallOptions): Promise<WriteResult>;
  /** `GET /fs/stat`. */
  stat(path: string, opts?: CallOptions): Promise<FileStat>;
  /** `GET /fs/readdir`: every name, sorted bytewise (pages followed). */
  readdir(path: string, opts?: CallOptions): Promise<string[]>;
  /** `GET /fs/exists`. */
  exists(path: string, opts?: CallOptions): Promise<boolean>;
  /** `POST /fs/mkdir`: the absolute path made. */
  mkdir(path: string, opts?: CallOptions & { recursive?: boolean }): Promise<string>;
  /** `POST /fs/rm`: whether something was removed (false only with `force` and no such path). */
  rm(path: string, opts?: CallOptions & { recursive?: boolean; force?: boolean }): Promise<boolean>;
  /** `POST /exec`. */
  exec(opts: ExecOptions): Promise<ShellResult>;
  /** `GET /fs/read_stream`: the file in chunks, in constant memory. */
  readFileStream(path: string, opts?: ReadStreamOptions): AsyncIterable<Uint8Array>;
  /** `PUT /fs/write_stream`: the chunks become the file (atomically, at the end); the parent must exist. */
  writeFileStream(path: string, source: AsyncIterable<Uint8Array>, opts?: StreamOptions): Promise<UploadResult>;
}

/** An input file of `run`: text (UTF-8) or bytes. */
export interface CodeFile {
  path: string;
  content: string | Uint8Array;
}

export interface RunOptions extends CallOptions {
  code: string;
  /** `python`, `node`, `bash` or `sh` (what `GET /readyz` lists). */
  language: string;
  /** Written before the run (and not listed among the produced files). */
  files?: CodeFile[] | Record<string, string | Uint8Array>;
  args?: string[];
  cwd?: string;
  timeoutS?: number;
  maxOutputBytes?: number;
  network?: boolean;
  env?: Record<string, string>;
  stdin?: string;
  id?: string;
  /** Read back each created or modified file up to this many bytes (default 1 MiB; 0: none). */
  maxFileBytes?: number;
}

/** A file the code produced; `content` when it was read back (created or modified, not over maxFileBytes). */
export interface ProducedFile extends FileChange {
  content?: Uint8Array;
}

export interface RunResult extends ShellResult {
  filesChanged: FileChange[];
  /** Every file the run changed, with the content of those read back. */
  files: ProducedFile[];
  /** More files changed than the server lists. */
  filesChangedTruncated: boolean;
}

export interface GatewaySandboxOptions {
  /** `X-Session-Key` of every request (default `default`): a session owns a directory. */
  sessionKey?: string;
  /** Retries of a call where they are safe (default 4). */
  maxRetries?: number;
  /** The longest wait between attempts (default 30000 ms). */
  maxBackoffMs?: number;
  /** Deadline of a buffered call, retries included (default 60000 ms). */
  timeoutMs?: number;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
}
