// createScopedSessionEnv: a SandboxApi whose paths (and commands' cwd)
// resolve against one directory, made the first time it is needed. Paths
// that would leave it (`..`, an absolute path elsewhere) are refused here,
// before any request, with SandboxError `outside_workspace`; the server
// confines everything to the workspace in any case.
import { SandboxError } from './errors.js';
import type { GatewaySandbox } from './sandbox.js';
import type {
  CallOptions, ExecOptions, FileStat, ReadBufferOptions, ReadStreamOptions, RunOptions, RunResult, SandboxApi,
  ShellResult, StreamOptions, UploadResult, WriteResult,
} from './types.js';

function normalise(p: string): string {
  const abs = p.startsWith('/');
  const out: string[] = [];
  for (const seg of p.split('/')) {
    if (seg === '' || seg === '.') continue;
    if (seg === '..') {
      if (out.length === 0 || out[out.length - 1] === '..') {
        if (abs) continue;
        out.push('..');
      } else out.pop();
    } else out.push(seg);
  }
  return (abs ? '/' : '') + out.join('/') || (abs ? '/' : '.');
}

/** A session's view: every path relative to `root`, which is made (recursively) on first use. */
export class ScopedSessionEnv implements SandboxApi {
  readonly api: SandboxApi;
  /** The directory, normalised (relative ones resolve against the session directory on the server). */
  readonly root: string;
  private made: Promise<unknown> | undefined;

  constructor(api: SandboxApi, perSessionCwd: string) {
    if (!perSessionCwd) throw new SandboxError(0, 'bad_request', 'a scoped session needs a directory');
    this.api = api;
    this.root = normalise(perSessionCwd);
    if (this.root.split('/').includes('..'))
      throw new SandboxError(0, 'outside_workspace', `${perSessionCwd} leaves the session directory`);
  }

  /** The path p names inside the scope, or SandboxError outside_workspace. */
  resolve(p: string): string {
    const r = normalise(p.startsWith('/') ? p : `${this.root}/${p}`);
    const inside = r === this.root || r.startsWith(this.root === '/' ? '/' : `${this.root}/`);
    if (!inside || r.split('/').includes('..'))
      throw new SandboxError(0, 'outside_workspace', `${p} is outside ${this.root}`);
    return r;
  }

  private ensure(opts?: CallOptions): Promise<unknown> {
    if (!this.made) {
      this.made = this.api.mkdir(this.root, { recursive: true, signal: opts?.signal });
      this.made.catch(() => { this.made = undefined; });
    }
    return this.made;
  }

  async readFile(path: string, opts?: CallOptions): Promise<string> {
    return this.api.readFile(this.resolve(path), opts);
  }

  async readFileBuffer(path: string, opts?: ReadBufferOptions): Promise<Uint8Array> {
    return this.api.readFileBuffer(this.resolve(path), opts);
  }

  async writeFile(path: string, content: string | Uint8Array, opts?: CallOptions): Promise<WriteResult> {
    return this.api.writeFile(this.resolve(path), content, opts);
  }

  async stat(path: string, opts?: CallOptions): Promise<FileStat> {
    return this.api.stat(this.resolve(path), opts);
  }

  async readdir(path: string, opts?: CallOptions): Promise<string[]> {
    return this.api.readdir(this.resolve(path), opts);
  }

  async exists(path: string, opts?: CallOptions): Promise<boolean> {
    return this.api.exists(this.resolve(path), opts);
  }

  async mkdir(path: string, opts?: CallOptions & { recursive?: boolean }): Promise<string> {
    const p = this.resolve(path);
    if (p !== this.root) await this.ensure(opts);
    return this.api.mkdir(p, opts);
  }

  async rm(path: string, opts?: CallOptions & { recursive?: boolean; force?: boolean }): Promise<boolean> {
    return this.api.rm(this.resolve(path), opts);
  }

  async exec(opts: ExecOptions): Promise<ShellResult> {
    const cwd = this.resolve(opts.cwd ?? '.');
    await this.ensure(opts);
    return this.api.exec({ ...opts, cwd });
  }

  readFileStream(path: string, opts?: ReadStreamOptions): AsyncIterable<Uint8Array> {
    // Refused when iterated, as the download itself starts then.
    const self = this;
    return {
      async *[Symbol.asyncIterator]() {
        yield* self.api.readFileStream(self.resolve(path), opts);
      },
    };
  }

  async writeFileStream(path: string, source: AsyncIterable<Uint8Array>, opts?: StreamOptions): Promise<UploadResult> {
    const p = this.resolve(path);
    await this.ensure(opts);
    return this.api.writeFileStream(p, source, opts);
  }

  /** The code tool in this directory (needs a GatewaySandbox underneath). */
  async run(opts: RunOptions): Promise<RunResult> {
    const gw = this.api as Partial<GatewaySandbox>;
    if (typeof gw.run !== 'function') throw new SandboxError(0, 'bad_request', 'run needs a GatewaySandbox');
    const files = Array.isArray(opts.files) ? opts.files
      : Object.entries(opts.files ?? {}).map(([path, content]) => ({ path, content }));
    const cwd = this.resolve(opts.cwd ?? '.');
    await this.ensure(opts);
    return gw.run.call(this.api, { ...opts, cwd, files: files.map((f) => ({ ...f, path: this.resolve(f.path) })) });
  }
}

/**
 * A scoped session view of api: relative paths resolve against
 * perSessionCwd (relative to the session directory, or an absolute
 * workspace path), and commands run there by default.
 */
export function createScopedSessionEnv(api: SandboxApi, perSessionCwd: string): ScopedSessionEnv {
  return new ScopedSessionEnv(api, perSessionCwd);
}
