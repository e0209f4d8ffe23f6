// The few node: built-ins gateway.test.ts uses, typed here so that the
// type-check needs no @types/node (the generated client itself needs only
// the DOM's fetch types).
declare module 'node:test' {
  export function test(name: string, fn: () => Promise<void> | void): void;
  export function after(fn: () => Promise<void> | void): void;
}
declare module 'node:assert/strict' {
  interface Assert {
    (value: unknown, message?: string): asserts value;
    ok(value: unknown, message?: string): asserts value;
    equal<T>(actual: unknown, expected: T, message?: string): asserts actual is T;
    deepEqual<T>(actual: unknown, expected: T, message?: string): void;
    match(value: string, re: RegExp, message?: string): void;
  }
  const assert: Assert;
  export default assert;
}
declare module 'node:crypto' {
  interface Hash {
    update(data: Uint8Array): Hash;
    digest(enc: 'hex'): string;
  }
  export function createHash(alg: 'sha256'): Hash;
  export function randomFillSync<T extends Uint8Array>(buf: T): T;
}
