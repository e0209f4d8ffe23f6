// @sandboxd/client: a gateway's SandboxApi over sandboxd's HTTP wire.
export { GatewaySandbox, makeExecId } from './sandbox.js';
export { createScopedSessionEnv, ScopedSessionEnv } from './scoped.js';
export { SandboxError, SandboxUnavailableError } from './errors.js';
export type * from './types.js';
