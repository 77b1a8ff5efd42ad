'use strict';
// oz0 as the client of the MCP conformance suite (`@modelcontextprotocol/conformance` 0.1.16, `client` mode): the suite
// starts a scenario's server and runs this with the server's URL last, the scenario's name in MCP_CONFORMANCE_SCENARIO
// and, for the client-credentials scenarios, the client's id and secret or key in MCP_CONFORMANCE_CONTEXT.
//
// It is the `oz0 plugin test SERVER --tenant T` a platform engineer runs (plugin/drill/plugin-test.ts, on
// client/open-server.ts: the node's own pool, connections and OAuth), on a config this writes as that engineer would:
// the scenario's server as a per-tenant remote server, the tenant's OAuth client with its secret by reference (an
// environment variable, the private key a file of mode 0600), and a drill file whose sample calls the scenario's tool.
// It runs on oz0's own Node (20), from dist/; the suite itself runs on Node 22 (test/integration/conformance.test.ts).
//
// It prints the plugin test's report, and exits 0 when the server's listing was read and every sample call was
// answered without an error, 1 saying why otherwise.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..', '..');
const dist = (p) => require(path.join(ROOT, 'dist', p));
const { parseConfig } = dist('common/config.js');
const { openServer } = dist('client/open-server.js');
const { pluginTest } = dist('plugin/drill/plugin-test.js');
const { formatReport } = dist('plugin/drill/report.js');

/** The tool each scenario's server lists, and the arguments it wants: the drill file's samples. */
const SAMPLES = {
  initialize: {},
  tools_call: { add_numbers: { args: { a: 5, b: 3 } } },
  'sse-retry': { test_reconnection: { args: {} } },
  'elicitation-sep1034-client-defaults': { test_client_elicitation_defaults: { args: {} } },
  'auth/client-credentials-basic': { 'test-tool': { args: {} } },
  'auth/client-credentials-jwt': { 'test-tool': { args: {} } },
};

/** The issuer of the server's authorization server, as its Protected Resource Metadata (RFC 9728) names it. */
async function issuerOf(url) {
  const u = new URL(url);
  const prm = new URL(`/.well-known/oauth-protected-resource${u.pathname === '/' ? '' : u.pathname}`, u);
  const answer = await fetch(prm);
  if (!answer.ok) throw new Error(`the server's ${prm} answered HTTP ${answer.status}`);
  const servers = (await answer.json()).authorization_servers;
  if (!Array.isArray(servers) || typeof servers[0] !== 'string')
    throw new Error(`${prm} names no authorization server`);
  return servers[0];
}

/**
 * The tenant's credential for a client-credentials scenario, as a config says it. The issuer is what a platform
 * engineer knows of the authorization server their client is registered with; here it is read off the server's own
 * metadata, the suite's authorization server having a port of its own each run.
 */
async function credentialFor(scenario, url, dir, env) {
  const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT || '{}');
  const issuer = await issuerOf(url);
  if (scenario === 'auth/client-credentials-basic') {
    env.OZ0_CONFORMANCE_SECRET = context.client_secret;
    return { oauth: { clientId: context.client_id, clientSecret: 'env:OZ0_CONFORMANCE_SECRET', issuer } };
  }
  const key = path.join(dir, 'client-key.pem');
  fs.writeFileSync(key, context.private_key_pem, { mode: 0o600 });
  return {
    oauth: {
      clientId: context.client_id,
      method: 'private_key_jwt',
      privateKey: `file:${key}`,
      algorithm: context.signing_algorithm || 'ES256',
      issuer,
    },
  };
}

async function main() {
  const url = process.argv[2];
  const scenario = process.env.MCP_CONFORMANCE_SCENARIO;
  if (!url || !scenario) throw new Error('usage: MCP_CONFORMANCE_SCENARIO=… oz0-client.js SERVER_URL');
  const samples = SAMPLES[scenario];
  if (!samples) throw new Error(`no samples for scenario ${scenario}: oz0's adapter does not run it`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-conformance-'));
  try {
    const oauth = scenario.startsWith('auth/client-credentials-');
    const tenant = 'conformance';
    const input = {
      servers: { scenario: { url, ...(oauth && { credentials: 'per-tenant' }) } },
      tenants: oauth
        ? { [tenant]: { credentials: { scenario: await credentialFor(scenario, url, dir, process.env) } } }
        : {},
      node: { stateDir: path.join(dir, 'state') },
    };
    const config = { ...parseConfig(input, 'conformance'), baseDir: dir, source: 'conformance' };
    const drillFile = path.join(dir, 'oz0.drill.json');
    // sse-retry's call is never answered once its stream closed (oz0 does not reconnect it, B5): 5 s says as much.
    fs.writeFileSync(drillFile, JSON.stringify({ samples, ...(scenario === 'sse-retry' && { timeoutSeconds: 5 }) }));
    const report = await pluginTest(config, 'scenario', { drillFile, ...(oauth && { tenant }) }, openServer);
    process.stdout.write(`${formatReport(report)}\n`);
    const failed = report.findings.filter((f) =>
      ['sample-error', 'sample-unknown', 'asks-for-input'].includes(f.check),
    );
    for (const f of failed) process.stderr.write(`oz0-client: ${f.function}: ${f.message}\n`);
    if (failed.length) process.exitCode = 1;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  process.stderr.write(`oz0-client: ${err && err.stack ? err.stack : String(err)}\n`);
  process.exit(1);
});
