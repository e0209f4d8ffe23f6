// Types of server.mjs for gateway.test.ts.
export declare function until<T>(what: string, cond: () => T | Promise<T>, deadlineMs?: number): Promise<T>;
export declare class Sandboxd {
  constructor(extra?: string[]);
  url: string;
  token(scope?: string): string;
  start(port?: number): Promise<string>;
  stop(): Promise<{ code: number | null; sig: string | null } | null>;
  close(): Promise<void>;
}
