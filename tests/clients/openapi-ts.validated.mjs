// @hey-api/openapi-ts configuration of the validated client
// (events-validated.test.ts): the fetch client, zod schemas, and an SDK
// whose every response, each server-sent event's data included, is parsed
// by them. The input is the spec the running server serves (SPEC_URL, set
// by run.sh), not the file in the tree.
export default {
  input: process.env.SPEC_URL ?? '../../openapi/openapi.yaml',
  output: { path: 'generated-validated' },
  plugins: ['@hey-api/client-fetch', 'zod', { name: '@hey-api/sdk', validator: { response: 'zod' } }],
};
