#!/usr/bin/env node
// A command-line MCP client built on the official TypeScript SDK (@modelcontextprotocol/client
// v2), for the end-to-end tests: it connects over Streamable HTTP, calls one tool, prints ONE JSON
// line on stdout and exits.
//
//   node mcp_client.mjs --url URL [--header 'Name: value']... [--mode legacy|auto|2026-07-28]
//        [--call TOOL --args JSON] [--list] [--sampling-reply TEXT] [--elicit-reply JSON]
//        [--roots JSON] [--progress] [--timeout SECONDS] [--modules DIR]
//
// --mode: legacy (default) runs the 2025 `initialize` handshake (versionNegotiation 'legacy');
//   auto probes `server/discover` and falls back to `initialize`; 2026-07-28 pins the stateless
//   revision (versionNegotiation {pin: '2026-07-28'}: discover must offer it, no fallback).
// --sampling-reply / --elicit-reply / --roots: declare the client capability (sampling,
//   elicitation (form), roots) and answer sampling/createMessage with that text (model
//   "test-model"), elicitation/create with {action: "accept", content: JSON}, roots/list with
//   {roots: JSON}. Without the flag the capability is not declared and no handler is set. On the
//   2026-07-28 era the SDK fulfils `input_required` results through the same handlers.
// --progress: asks for progress (a progressToken) and records each notifications/progress.
// --list: also lists the tools (all pages) before the call; their names go to "tools".
// --timeout: bounds the connect, the call and the close (seconds, default 30); the whole run gets
//   that plus 10 s, after which it prints an error and exits 1.
// --modules: the directory tests/setup-node.sh installed into (default: $SWITCHBOARD_NODE, else
//   ${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/node).
// --oauth-user USER --oauth-redirect URI: the SDK's OAuth client signs USER in (password in
//   $MCP_OAUTH_PASSWORD, never on the command line): it registers dynamically, and the browser
//   step is done here by filling in the identity provider's login form (Keycloak's) and reading
//   the redirect to URI (nothing listens there); then finishAuth and a new connection. The output
//   gets "oauth": {"registered", "signedIn"}.
//
// Output, on success (exit 0):
//   {"result": CallToolResult, "notifications": [{"method", "params", "t"}...],
//    "handled": {"sampling": n, "elicitation": n, "roots": n}, "protocolVersion": "...",
//    "era": "legacy"|"modern", "tools": [...]?, "http": [{"method", "rpc", "status", ...}...],
//    "resultAt": t}
// `t` is milliseconds on a monotonic clock (performance.now()) since the process started; "http"
// lists every HTTP exchange the transport made (the request's HTTP method and JSON-RPC method, the
// response status, content type and Mcp-Session-Id, and the body of any non-2xx response).
// On failure (exit 1): {"error": {"name", "message", "code"?, "data"?}, "notifications", "handled",
//   "http"} — the same line shape, so the caller can show what went over the wire.

import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

const USAGE =
  'usage: node mcp_client.mjs --url URL [--header "Name: value"]... [--mode legacy|auto|2026-07-28] ' +
  '[--call TOOL --args JSON] [--list] [--sampling-reply TEXT] [--elicit-reply JSON] [--roots JSON] ' +
  '[--progress] [--timeout SECONDS] [--modules DIR] [--oauth-user USER --oauth-redirect URI]';

const notifications = [];
const handled = { sampling: 0, elicitation: 0, roots: 0 };
const http = [];
// With --oauth-user: whether the client registered and whom it signed in.
let oauth;
let printed = false;

const now = () => Math.round(performance.now() * 1000) / 1000;

function emit(obj, code) {
  if (printed) return;
  printed = true;
  process.stdout.write(JSON.stringify(obj) + '\n', () => process.exit(code));
}

function fail(err, code = 1) {
  const error = { name: err?.name ?? 'Error', message: String(err?.message ?? err) };
  if (err?.code !== undefined) error.code = err.code;
  if (err?.data !== undefined) error.data = err.data;
  if (err?.cause !== undefined) error.cause = String(err.cause?.message ?? err.cause);
  emit({ error, notifications, handled, http, oauth }, code);
}

function parseJson(flag, text) {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Error(`${flag} is not valid JSON: ${e.message}`);
  }
}

/** Imports the SDK from the directory tests/setup-node.sh installed it into. */
async function loadSdk(dir) {
  // The package's exports map has no ./package.json entry, so find it on disk (npm ci lays it
  // out flat) and import the ESM entry its exports name.
  const pkgJson = join(dir, 'node_modules', '@modelcontextprotocol', 'client', 'package.json');
  if (!existsSync(pkgJson)) {
    throw new Error(
      `@modelcontextprotocol/client is not installed in ${dir}: run tests/setup-node.sh ` +
        '(tests/run-all.sh e2e does it)'
    );
  }
  const pkg = JSON.parse(readFileSync(pkgJson, 'utf8'));
  const entry = pkg.exports?.['.']?.import?.default ?? pkg.exports?.['.']?.import ?? pkg.module;
  const sdk = await import(pathToFileURL(join(pkgJson, '..', entry)).href);
  return { sdk, version: pkg.version };
}

/** A fetch that records each exchange (never the headers we sent: they hold the key). */
function recordingFetch() {
  return async (input, init) => {
    const started = now();
    let rpc;
    try {
      const body = typeof init?.body === 'string' ? JSON.parse(init.body) : undefined;
      rpc = Array.isArray(body) ? body.map(m => m.method ?? 'response') : body?.method ?? (body ? 'response' : undefined);
    } catch {
      rpc = undefined;
    }
    const entry = { method: init?.method ?? 'GET', rpc, t: started };
    http.push(entry);
    let response;
    try {
      response = await fetch(input, init);
    } catch (e) {
      entry.error = String(e?.cause?.message ?? e?.message ?? e);
      throw e;
    }
    entry.status = response.status;
    entry.contentType = response.headers.get('content-type') ?? undefined;
    const sid = response.headers.get('mcp-session-id');
    if (sid) entry.sessionId = sid;
    if (response.status >= 300) {
      try {
        entry.body = (await response.clone().text()).slice(0, 2000);
      } catch {
        /* body unreadable: leave it out */
      }
    }
    return response;
  };
}

/** Keycloak's login form, filled in as a person would: the redirect's code and issuer. */
async function browserLogin(authorizationUrl, user, password) {
  const cookies = new Map();
  const keep = response => {
    for (const c of response.headers.getSetCookie()) {
      const [pair] = c.split(';');
      const i = pair.indexOf('=');
      cookies.set(pair.slice(0, i), pair.slice(i + 1));
    }
  };
  const cookie = () => [...cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  const page = await fetch(authorizationUrl, { redirect: 'manual' });
  keep(page);
  const html = await page.text();
  const form = /<form[^>]*id="kc-form-login"[^>]*action="([^"]+)"/.exec(html);
  if (page.status !== 200 || !form) throw new Error(`no login form at the authorization endpoint (HTTP ${page.status})`);
  const action = form[1].replaceAll('&amp;', '&');
  const answer = await fetch(action, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: cookie() },
    body: new URLSearchParams({ username: user, password, credentialId: '' })
  });
  const location = answer.headers.get('location');
  if (answer.status !== 302 || !location) throw new Error(`the login was not accepted (HTTP ${answer.status})`);
  const query = new URL(location).searchParams;
  if (!query.get('code')) throw new Error(`the identity provider sent no code: ${query.get('error') ?? 'no error either'}`);
  return { code: query.get('code'), iss: query.get('iss') ?? undefined };
}

/** An OAuthClientProvider kept in memory, whose browser step is browserLogin. */
class LoginProvider {
  constructor(user, password, redirect, record) {
    Object.assign(this, { user, password, redirect, record });
  }
  get redirectUrl() {
    return this.redirect;
  }
  get clientMetadata() {
    return {
      client_name: 'switchboard-e2e-ts',
      redirect_uris: [this.redirect],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none'
    };
  }
  clientInformation() {
    return this.client;
  }
  saveClientInformation(client) {
    this.client = client;
    this.record.registered = true;
  }
  tokens() {
    return this.saved;
  }
  saveTokens(tokens) {
    this.saved = tokens;
    this.record.signedIn = this.user;
  }
  saveCodeVerifier(verifier) {
    this.verifier = verifier;
  }
  codeVerifier() {
    return this.verifier;
  }
  // Kept with the code verifier, so the SDK checks that the code comes back from the
  // authorization server the flow started at (SEP-2352).
  saveDiscoveryState(state) {
    this.discovery = state;
  }
  discoveryState() {
    return this.discovery;
  }
  async redirectToAuthorization(url) {
    this.login = await browserLogin(url.href, this.user, this.password);
  }
}

async function main() {
  let opts;
  try {
    ({ values: opts } = parseArgs({
      options: {
        url: { type: 'string' },
        header: { type: 'string', multiple: true, default: [] },
        mode: { type: 'string', default: 'legacy' },
        call: { type: 'string' },
        args: { type: 'string', default: '{}' },
        list: { type: 'boolean', default: false },
        'sampling-reply': { type: 'string' },
        'elicit-reply': { type: 'string' },
        roots: { type: 'string' },
        progress: { type: 'boolean', default: false },
        timeout: { type: 'string', default: '30' },
        modules: { type: 'string' },
        'oauth-user': { type: 'string' },
        'oauth-redirect': { type: 'string' }
      },
      strict: true
    }));
  } catch (e) {
    return fail(new Error(`${e.message}\n${USAGE}`), 2);
  }
  if (!opts.url) return fail(new Error(`--url is required\n${USAGE}`), 2);
  if (!opts.call && !opts.list) return fail(new Error(`give --call TOOL and/or --list\n${USAGE}`), 2);
  const timeoutMs = Number(opts.timeout) * 1000;
  if (!(timeoutMs > 0)) return fail(new Error(`--timeout must be a positive number of seconds`), 2);
  // The last word on every wait: whatever hangs, the process ends.
  setTimeout(() => fail(new Error(`timed out after ${opts.timeout}s (+10s grace): the run did not finish`)), timeoutMs + 10_000).unref();

  const headers = {};
  for (const h of opts.header) {
    const i = h.indexOf(':');
    if (i <= 0) return fail(new Error(`--header must be "Name: value", got ${JSON.stringify(h)}`), 2);
    headers[h.slice(0, i).trim()] = h.slice(i + 1).trim();
  }
  const toolArgs = parseJson('--args', opts.args);
  const elicitContent = opts['elicit-reply'] !== undefined ? parseJson('--elicit-reply', opts['elicit-reply']) : undefined;
  const roots = opts.roots !== undefined ? parseJson('--roots', opts.roots) : undefined;

  let negotiation;
  if (opts.mode === 'legacy') negotiation = { mode: 'legacy' };
  else if (opts.mode === 'auto') negotiation = { mode: 'auto', probe: { timeoutMs } };
  else if (/^\d{4}-\d{2}-\d{2}$/.test(opts.mode)) negotiation = { mode: { pin: opts.mode }, probe: { timeoutMs } };
  else return fail(new Error(`--mode must be legacy, auto or a revision like 2026-07-28, got ${opts.mode}`), 2);

  const dir =
    opts.modules ??
    process.env.SWITCHBOARD_NODE ??
    join(process.env.SWITCHBOARD_CACHE ?? join(homedir(), '.cache', 'switchboard'), 'node');
  const { sdk, version: sdkVersion } = await loadSdk(dir);
  const { Client, StreamableHTTPClientTransport } = sdk;

  const capabilities = {};
  if (opts['sampling-reply'] !== undefined) capabilities.sampling = {};
  if (elicitContent !== undefined) capabilities.elicitation = { form: {} };
  if (roots !== undefined) capabilities.roots = { listChanged: false };

  oauth = opts['oauth-user'] !== undefined ? { registered: false, signedIn: null } : undefined;
  let provider;
  if (oauth) {
    const password = process.env.MCP_OAUTH_PASSWORD;
    if (!password || !opts['oauth-redirect']) return fail(new Error(`--oauth-user needs --oauth-redirect and $MCP_OAUTH_PASSWORD`), 2);
    provider = new LoginProvider(opts['oauth-user'], password, opts['oauth-redirect'], oauth);
  }
  const errors = [];
  const newClient = () => {
    const c = new Client(
      { name: 'switchboard-e2e-ts', version: '0' },
      { capabilities, versionNegotiation: negotiation }
    );
    if (capabilities.sampling) {
      c.setRequestHandler('sampling/createMessage', async () => {
        handled.sampling += 1;
        return { model: 'test-model', role: 'assistant', content: { type: 'text', text: opts['sampling-reply'] } };
      });
    }
    if (capabilities.elicitation) {
      c.setRequestHandler('elicitation/create', async () => {
        handled.elicitation += 1;
        return { action: 'accept', content: elicitContent };
      });
    }
    if (capabilities.roots) {
      c.setRequestHandler('roots/list', async () => {
        handled.roots += 1;
        return { roots };
      });
    }
    c.setNotificationHandler('notifications/message', n => {
      notifications.push({ method: 'notifications/message', params: n.params, t: now() });
    });
    c.onerror = e => errors.push(String(e?.message ?? e));
    return c;
  };
  let client = newClient();

  const newTransport = () => new StreamableHTTPClientTransport(new URL(opts.url), {
    requestInit: { headers },
    fetch: recordingFetch(),
    authProvider: provider,
    // A dropped stream is an error to report, not something to paper over.
    reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 1000, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1 }
  });
  const transport = newTransport();

  const out = { sdk: `@modelcontextprotocol/client@${sdkVersion}`, notifications, handled, http, oauth };
  try {
    try {
      await client.connect(transport, { timeout: timeoutMs });
    } catch (e) {
      // The interactive OAuth flow: the provider has been to the login page; hand the code to
      // the transport and connect again (the way the SDK documents for a redirect flow).
      if (!provider?.login || e?.name !== 'UnauthorizedError') throw e;
      await transport.finishAuth(provider.login.code, provider.login.iss);
      client = newClient();
      await client.connect(newTransport(), { timeout: timeoutMs });
    }
    out.protocolVersion = client.getNegotiatedProtocolVersion();
    out.era = client.getProtocolEra();
    if (opts.list) {
      const listed = await client.listTools(undefined, { timeout: timeoutMs });
      out.tools = listed.tools.map(t => t.name);
    }
    if (opts.call) {
      const callOpts = { timeout: timeoutMs, maxTotalTimeout: timeoutMs };
      if (opts.progress) {
        callOpts.onprogress = p => notifications.push({ method: 'notifications/progress', params: p, t: now() });
      }
      out.result = await client.callTool({ name: opts.call, arguments: toolArgs }, callOpts);
      out.resultAt = now();
    }
  } catch (e) {
    if (errors.length) e.data = { ...(e.data ?? {}), onerror: errors };
    try {
      await Promise.race([client.close(), new Promise(r => setTimeout(r, 5000))]);
    } catch {
      /* closing after a failure: nothing more to report */
    }
    return fail(e);
  }
  try {
    await Promise.race([client.close(), new Promise(r => setTimeout(r, 5000))]);
  } catch (e) {
    errors.push(`close: ${e?.message ?? e}`);
  }
  if (errors.length) out.onerror = errors;
  emit(out, 0);
}

main().catch(e => fail(e));
