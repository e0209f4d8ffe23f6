// Generates the validated client (openapi-ts.validated.mjs) from the spec a
// real sandboxd serves at GET /openapi.yaml: what a third party would
// download, not the file in the tree.
import { execFileSync } from 'node:child_process';
import { Sandboxd } from './server.mjs';

const srv = new Sandboxd();
try {
  await srv.start();
  execFileSync('npx', ['--no-install', 'openapi-ts', '-f', 'openapi-ts.validated.mjs', '-s'],
    { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, SPEC_URL: `${srv.url}/openapi.yaml` } });
} finally {
  await srv.close();
}
