#!/usr/bin/env node
// An MCP Apps host for the end-to-end tests, built on the extension's reference SDK
// (@modelcontextprotocol/ext-apps: its host side `AppBridge` and its view side `App`) over the
// official TypeScript client (@modelcontextprotocol/client). It does what a host does with a
// tool that has a UI, through whatever endpoint it is given, and prints ONE JSON line:
//
//   node apps_host.mjs --url URL --key KEY --tool NAME --view-calls NAME [--mode legacy|2026-07-28]
//        [--modules DIR]
//
// 1. lists the tools and takes NAME's UI resource URI with the SDK's `getToolUiResourceUri`
//    (which refuses anything that is not a `ui://` URI), and the app-only tools
//    (`isToolVisibilityAppOnly`);
// 2. reads that resource (`resources/read`) as the document to render;
// 3. renders it: a view (`App`) connected to an `AppBridge` over the client, on an in-memory
//    pair where a browser host would use postMessage to a sandboxed iframe; once the view has
//    initialized, the view calls the server tool --view-calls by the name its server gave it and
//    reads its own resource again, both through the host.
//
// Output: {"uri", "mimeType", "contentUri", "html", "appOnly": [...], "viewCalled": CallToolResult,
//          "viewRead": ReadResourceResult, "hostInfo"} or {"error": {"name", "message"}} (exit 1).
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';

const { values: opts } = parseArgs({
  options: {
    url: { type: 'string' },
    key: { type: 'string' },
    tool: { type: 'string' },
    'view-calls': { type: 'string' },
    mode: { type: 'string', default: 'legacy' },
    modules: { type: 'string' }
  }
});

const dir =
  opts.modules ??
  process.env.SWITCHBOARD_NODE ??
  join(process.env.SWITCHBOARD_CACHE ?? join(homedir(), '.cache', 'switchboard'), 'node');

/** A package's ESM entry (`subpath` of its exports map), imported from the install directory. */
async function load(name, subpath = '.') {
  const pkgJson = join(dir, 'node_modules', ...name.split('/'), 'package.json');
  if (!existsSync(pkgJson)) {
    throw new Error(`${name} is not installed in ${dir}: run tests/setup-node.sh (tests/run-all.sh e2e does it)`);
  }
  const pkg = JSON.parse(readFileSync(pkgJson, 'utf8'));
  const entry = pkg.exports?.[subpath];
  const file = entry?.import?.default ?? entry?.import ?? entry?.default ?? entry;
  return import(pathToFileURL(join(pkgJson, '..', file)).href);
}

function print(line, code) {
  process.stdout.write(JSON.stringify(line) + '\n');
  process.exit(code);
}

const bound = setTimeout(() => print({ error: { name: 'Timeout', message: 'the host did not finish within 60 s' } }, 1), 60_000);

try {
  const { Client, StreamableHTTPClientTransport, InMemoryTransport } = await load('@modelcontextprotocol/client');
  const { AppBridge, getToolUiResourceUri, isToolVisibilityAppOnly, RESOURCE_MIME_TYPE } = await load(
    '@modelcontextprotocol/ext-apps',
    './app-bridge'
  );
  const { App } = await load('@modelcontextprotocol/ext-apps');

  const negotiation = opts.mode === 'legacy' ? { mode: 'legacy' } : { mode: { pin: opts.mode } };
  const hostInfo = { name: 'switchboard-e2e-apps-host', version: '0' };
  const client = new Client(hostInfo, {
    capabilities: { extensions: { 'io.modelcontextprotocol/ui': { mimeTypes: [RESOURCE_MIME_TYPE] } } },
    versionNegotiation: negotiation
  });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(opts.url), {
      requestInit: { headers: { Authorization: `Bearer ${opts.key}` } }
    })
  );

  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  const tool = tools.find(t => t.name === opts.tool);
  if (!tool) throw new Error(`no tool ${opts.tool} among ${tools.map(t => t.name).join(', ')}`);
  const uri = getToolUiResourceUri(tool);
  if (!uri) throw new Error(`tool ${opts.tool} has no UI resource`);
  const read = await client.readResource({ uri });
  const content = read.contents.find(c => c.uri === uri) ?? read.contents[0];

  const bridge = new AppBridge(client, hostInfo, { serverTools: {}, serverResources: {} });
  const initialized = new Promise(resolve => {
    bridge.oninitialized = resolve;
  });
  const [hostEnd, viewEnd] = InMemoryTransport.createLinkedPair();
  await bridge.connect(hostEnd);
  const view = new App({ name: 'weather-view', version: '0' }, {}, { autoResize: false });
  await view.connect(viewEnd);
  await initialized;
  const viewCalled = await view.callServerTool({ name: opts['view-calls'], arguments: {} });
  const viewRead = await view.readServerResource({ uri });
  await client.close();
  clearTimeout(bound);
  print(
    {
      uri,
      mimeType: content.mimeType,
      contentUri: content.uri,
      html: content.text ?? null,
      appOnly: tools.filter(isToolVisibilityAppOnly).map(t => t.name),
      viewCalled,
      viewRead,
      hostInfo: view.getHostVersion() ?? null
    },
    0
  );
} catch (e) {
  print({ error: { name: e?.name ?? 'Error', message: String(e?.message ?? e), code: e?.code, data: e?.data } }, 1);
}
