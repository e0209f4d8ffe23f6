#!/usr/bin/env node
// Validates responses recorded by the integration harness (tests/integration/
// harness.c, SANDBOXD_RECORD_DIR: one JSON line per response, {"method",
// "path", "status", "content_type", "body", "suite"[, "body_error"]}) against
// openapi/openapi.yaml. For each record: the (method, path) must map to an
// operation (path templates such as /exec/{id}; HEAD is answered as GET), the
// status must be documented for it (or be one of the errors the spec's
// description documents for every route), the Content-Type must be one the
// response lists, and an application/json body must validate against the
// response's schema (JSON Schema 2020-12, $refs into components resolved).
// Error bodies must also carry a code of their status (wire.md's table) and
// a retry_hint that is a string exactly for 410, 413, 422, 429, 503, 507.
// Other media types (event streams, octets, text, YAML, HTML, NDJSON) are
// not parsed. Exit 1 when anything fails or no record is found.
//
// Usage: node validate-responses.mjs [--spec openapi.yaml] DIR|FILE...
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
let specPath = join(here, '../../openapi/openapi.yaml');
const inputs = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--spec') specPath = args[++i];
  else inputs.push(args[i]);
}
if (inputs.length === 0) {
  console.error('usage: validate-responses.mjs [--spec openapi.yaml] DIR|FILE...');
  process.exit(2);
}

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
const SPEC_ID = 'urn:sandboxd:openapi';
const spec = parseYaml(readFileSync(specPath, 'utf8'));

// wire.md's error table (and the spec's 416): the codes each status may carry.
const CODES_BY_STATUS = {
  400: ['bad_request'],
  401: ['unauthorized'],
  403: ['insufficient_scope', 'outside_workspace', 'forbidden'],
  404: ['not_found', 'parent_missing', 'docs_not_installed'], // the third: GET /docs/{path}, the spec's
  405: ['method_not_allowed'],
  409: ['exists', 'not_empty', 'not_a_directory', 'is_a_directory', 'conflict'],
  410: ['token_used', 'token_expired'],
  413: ['too_large'],
  416: ['range_not_satisfiable'],
  422: ['not_text', 'unsupported_language', 'unknown_image'], // the second: POST /code (docs/decisions.md)
  429: ['too_many_requests'],
  500: ['internal'],
  503: ['backend_unavailable', 'store_unavailable'],
  507: ['insufficient_storage', 'quota_exceeded', 'store_budget_exceeded'], // quota_exceeded (issue 13), store_budget_exceeded (issue 26): the spec's, not in wire.md's table
};

// The spec's "Errors": retry_hint is a string for these, otherwise null.
const HINTED_STATUSES = [410, 413, 422, 429, 503, 507];

// Errors the spec's info.description documents for every route without
// repeating them per operation: a malformed X-Session-Key (400), an
// oversized body on a route that takes none (413), an internal failure
// (500); an unknown path is 404 and a known path with another method 405.
const GLOBAL_RESPONSES = {
  400: '#/components/responses/BadRequest',
  413: '#/components/responses/TooLarge',
  500: { description: 'internal', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } },
};
const UNKNOWN_PATH = '#/components/responses/NotFound';
const WRONG_METHOD = '#/components/responses/MethodNotAllowed';

// --- The schemas: components.schemas become $defs of one schema document. ---
function rewriteRefs(node) {
  if (Array.isArray(node)) return node.map(rewriteRefs);
  if (node && typeof node === 'object') {
    const out = {};
    for (const [k, v] of Object.entries(node)) {
      if (k === '$ref' && typeof v === 'string') {
        const m = /^#\/components\/schemas\/(.+)$/.exec(v);
        if (!m) throw new Error(`unsupported $ref in a schema: ${v}`);
        out[k] = `${SPEC_ID}#/$defs/${m[1]}`;
      } else {
        out[k] = rewriteRefs(v);
      }
    }
    return out;
  }
  return node;
}

const ajv = new Ajv2020({ strict: true, allErrors: true, allowUnionTypes: true });
addFormats(ajv);
ajv.addKeyword('example');
ajv.addFormat('binary', true);
ajv.addSchema({ $id: SPEC_ID, $defs: rewriteRefs(spec.components?.schemas ?? {}) });
const compiled = new Map();
function validatorFor(schema) {
  const key = JSON.stringify(schema);
  if (!compiled.has(key)) compiled.set(key, ajv.compile(rewriteRefs(schema)));
  return compiled.get(key);
}

// The same schemas closed (unevaluatedProperties: false on every object
// with properties), to note fields the server sends that the spec does not
// document. Response objects may gain fields, so these are notes, not
// failures.
function closeObjects(node) {
  if (Array.isArray(node)) return node.map(closeObjects);
  if (node && typeof node === 'object') {
    const out = {};
    for (const [k, v] of Object.entries(node)) out[k] = k === 'properties' ? Object.fromEntries(
      Object.entries(v).map(([pk, pv]) => [pk, closeObjects(pv)])) : closeObjects(v);
    if (out.properties && out.additionalProperties === undefined && out.unevaluatedProperties === undefined)
      out.unevaluatedProperties = false;
    return out;
  }
  return node;
}
const ajvClosed = new Ajv2020({ strict: true, allErrors: true, allowUnionTypes: true });
addFormats(ajvClosed);
ajvClosed.addKeyword('example');
ajvClosed.addFormat('binary', true);
ajvClosed.addSchema({ $id: SPEC_ID, $defs: closeObjects(rewriteRefs(spec.components?.schemas ?? {})) });
const compiledClosed = new Map();
function closedValidatorFor(schema) {
  const key = JSON.stringify(schema);
  if (!compiledClosed.has(key)) compiledClosed.set(key, ajvClosed.compile(closeObjects(rewriteRefs(schema))));
  return compiledClosed.get(key);
}
const notes = new Map(); // "where: field" -> count

// --- OpenAPI objects: $refs to components (responses, parameters...). ---
function deref(obj) {
  const seen = new Set();
  while (obj && typeof obj === 'object' && typeof obj.$ref === 'string') {
    if (seen.has(obj.$ref)) throw new Error(`$ref cycle at ${obj.$ref}`);
    seen.add(obj.$ref);
    if (!obj.$ref.startsWith('#/')) throw new Error(`external $ref not supported: ${obj.$ref}`);
    let target = spec;
    for (const part of obj.$ref.slice(2).split('/'))
      target = target?.[part.replace(/~1/g, '/').replace(/~0/g, '~')];
    if (target === undefined) throw new Error(`unresolved $ref ${obj.$ref}`);
    obj = target;
  }
  return obj;
}

// --- Routes: literal segments win over templated ones. ---
const routes = Object.entries(spec.paths ?? {}).map(([tpl, item]) => {
  const segs = tpl.split('/');
  // x-path-tail: the last {param} takes the rest of the path, '/'s
  // included, or nothing (GET /docs/{path}; the route's RF_TAIL).
  const item_ = deref(item);
  return { tpl, item: item_, segs, tail: item_['x-path-tail'] === true,
    literal: segs.filter((s) => !/^\{.+\}$/.test(s)).length };
}).sort((a, b) => b.literal - a.literal);

function matchRoute(path) {
  const segs = path.split('/');
  for (const r of routes) {
    if (r.tail && segs.length >= r.segs.length &&
        r.segs.slice(0, -1).every((s, i) => s === segs[i])) return r;
    if (r.segs.length !== segs.length) continue;
    if (r.segs.every((s, i) => (/^\{.+\}$/.test(s) ? segs[i] !== '' : s === segs[i]))) return r;
  }
  return null;
}

const essence = (ct) => (ct ?? '').split(';')[0].trim().toLowerCase();
const isJson = (ct) => {
  const e = essence(ct);
  return e === 'application/json' || e.endsWith('+json');
};

// --- Read the records. ---
const files = [];
for (const p of inputs) {
  if (statSync(p).isDirectory())
    for (const f of readdirSync(p).sort()) {
      if (f.endsWith('.ndjson')) files.push(join(p, f));
    }
  else files.push(p);
}
const records = [];
const failures = new Map(); // message -> {count, example}
function fail(rec, msg) {
  const key = `${rec.method} ${rec.path} -> ${rec.status}: ${msg}`;
  const f = failures.get(key);
  if (f) f.count++;
  else failures.set(key, { count: 1, rec });
}
for (const f of files) {
  readFileSync(f, 'utf8').split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    try {
      records.push({ ...JSON.parse(line), file: f });
    } catch (e) {
      fail({ method: '?', path: `${f}:${i + 1}`, status: '?' }, `unreadable record: ${e.message}`);
    }
  });
}

// --- Check each record. ---
const covered = new Set();
let validated = 0, skipped = 0, byRule = 0;
for (const rec of records) {
  const { method, path, status } = rec;
  if (typeof method !== 'string' || typeof path !== 'string' || !Number.isInteger(status)) {
    fail(rec, 'malformed record');
    continue;
  }
  const route = matchRoute(path);
  const m = method.toLowerCase();
  const opMethod = m === 'head' && !route?.item.head ? 'get' : m;
  const op = route?.item[opMethod];
  let response;
  let where;
  if (!route) {
    if (status !== 404) {
      fail(rec, 'no path of the spec matches, and the answer is not 404');
      continue;
    }
    response = deref({ $ref: UNKNOWN_PATH });
    where = 'unknown path';
    byRule++;
  } else if (!op || !METHODS.includes(opMethod)) {
    if (status !== 405) {
      fail(rec, `${route.tpl} has no ${method} operation, and the answer is not 405`);
      continue;
    }
    response = deref({ $ref: WRONG_METHOD });
    where = `${route.tpl} (no ${method})`;
    byRule++;
  } else {
    where = `${opMethod.toUpperCase()} ${route.tpl}`;
    const rs = op.responses ?? {};
    const raw = rs[String(status)] ?? rs[`${String(status)[0]}XX`] ?? rs.default;
    if (raw) {
      response = deref(raw);
      covered.add(`${where} ${rs[String(status)] ? status : 'default'}`);
    } else if (GLOBAL_RESPONSES[status]) {
      const g = GLOBAL_RESPONSES[status];
      response = deref(typeof g === 'string' ? { $ref: g } : g);
      byRule++;
    } else {
      fail(rec, `status ${status} is not documented for ${where} (operationId ${op.operationId})`);
      continue;
    }
  }

  const content = response.content ?? {};
  const types = Object.keys(content);
  const ct = rec.content_type;
  const media = types.find((t) => essence(t) === essence(ct));
  if (types.length === 0) {
    if (ct && m !== 'head') fail(rec, `${where} ${status} documents no body, but the answer has Content-Type ${ct}`);
    continue;
  }
  if (!media) {
    fail(rec, `Content-Type ${JSON.stringify(ct ?? null)} is not among ${where} ${status}'s: ${types.join(', ')}`);
    continue;
  }
  if (m === 'head' || !isJson(media)) {
    skipped++;
    continue;
  }
  if (rec.body_error) {
    fail(rec, `${where} ${status}: ${rec.body_error}`);
    continue;
  }
  const schema = content[media].schema;
  if (!schema) {
    skipped++;
    continue;
  }
  const validate = validatorFor(schema);
  validated++;
  if (!validate(rec.body)) {
    const errs = validate.errors.map((e) => `${e.instancePath || '(body)'} ${e.message}${
      e.params && Object.keys(e.params).length ? ` ${JSON.stringify(e.params)}` : ''}`);
    fail(rec, `body does not match ${where} ${status} (${media}):\n      ${errs.join('\n      ')}`);
    continue;
  }
  const closed = closedValidatorFor(schema);
  if (!closed(rec.body))
    for (const e of closed.errors)
      if (e.keyword === 'unevaluatedProperties') {
        const k = `${where} ${status}: ${e.instancePath || '(body)'}/${e.params.unevaluatedProperty}`;
        notes.set(k, (notes.get(k) ?? 0) + 1);
      }
  const err = rec.body?.error;
  if (typeof err?.code === 'string') {
    if (CODES_BY_STATUS[status] && !CODES_BY_STATUS[status].includes(err.code))
      fail(rec, `error code "${err.code}" is not one of status ${status}'s (${CODES_BY_STATUS[status].join(', ')})`);
    // The spec's "Errors": retry_hint is a string for these statuses, else null.
    const hinted = HINTED_STATUSES.includes(status);
    if (hinted !== (typeof err.retry_hint === 'string'))
      fail(rec, `retry_hint must be ${hinted ? 'a string' : 'null'} for status ${status}`);
  }
}

// --- Report. ---
const allOps = [];
for (const r of routes)
  for (const mm of METHODS)
    if (r.item[mm]) allOps.push(`${mm.toUpperCase()} ${r.tpl}`);
const opsSeen = new Set([...covered].map((c) => c.replace(/ \S+$/, '')));
const missing = allOps.filter((o) => !opsSeen.has(o));

let nfail = 0;
for (const [msg, { count, rec }] of failures) {
  nfail += count;
  const body = rec.body === undefined ? '' : JSON.stringify(rec.body);
  console.log(`FAIL ${msg}${count > 1 ? `  (x${count})` : ''}`);
  console.log(`    recorded by ${rec.suite ?? '?'} (${rec.file ?? '?'}): Content-Type ${rec.content_type ?? '(none)'}`);
  if (body) console.log(`    body: ${body.length > 600 ? `${body.slice(0, 600)}...` : body}`);
}
for (const [k, count] of notes)
  console.log(`NOTE undocumented field ${k}${count > 1 ? `  (x${count})` : ''}`);
console.log(`validate-responses: ${records.length} records from ${files.length} files; ` +
  `${validated} JSON bodies validated, ${skipped} non-JSON or HEAD answers checked for status and Content-Type only, ` +
  `${byRule} answered by the spec's route-independent errors`);
console.log(`validate-responses: ${opsSeen.size}/${allOps.length} operations and ${covered.size} (operation, status) pairs seen` +
  (missing.length ? `; not seen: ${missing.join(', ')}` : ''));
if (records.length === 0) {
  console.log('validate-responses: no records found (was SANDBOXD_RECORD_DIR set for the integration suites?)');
  process.exit(1);
}
console.log(`${records.length - nfail} passed, ${nfail} failed`);
process.exit(nfail ? 1 : 0);
