import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  ConfigError,
  DEFAULT_TOOL_SETTINGS,
  loadConfig,
  namesTenant,
  parseConfig,
  toolSettings,
} from '../../common/config';
import type { Config, SandboxConfig } from '../../common/config';
import { beforeTenant, forTenant } from '../../activities/sandbox/tenant-grants';
import { fillTenant } from '../../model/checks';
import { Hidden } from '../../activities/sandbox/hidden';

/** The example config of SPEC "Config", as written there. */
const SPEC_EXAMPLE = {
  temporal: { address: '127.0.0.1:7233', namespace: 'default', taskQueue: 'oz0', policyTaskQueue: 'oz0-policy' },
  servers: {
    ledger: { command: 'node', args: ['examples/ledger.js'] },
    files: { command: 'node', args: ['examples/files.js'], sandbox: true, env: { ROOT: '/tmp/x' } },
    search: { url: 'http://127.0.0.1:8931/mcp', headers: { Authorization: 'env:SEARCH_TOKEN' } },
  },
  tools: {
    'ledger.charge': { timeoutSeconds: 30, maxAttempts: 5 },
    '*': { timeoutSeconds: 60, maxAttempts: 3 },
  },
  tenants: { acme: { policy: { 'ledger.*': 'allow', 'search.*': 'ask' } } },
  jobs: { continueAsNewAfterCalls: 1000 },
  node: { slots: 100 },
};

/** Runs `fn` and returns the ConfigError it throws. */
function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error('expected a ConfigError, got none');
}

/** I1-I5: a sandbox with no grants, no network, and the default limits (I4). */
const SANDBOX_DEFAULTS = {
  read: [],
  write: [],
  network: [],
  memoryMiB: 1024,
  pids: 512,
  cpuSeconds: 3600,
  cpus: 1,
  diskMiB: 1024,
};

describe('Config: parseConfig', () => {
  test('Config: the SPEC example parses as written', () => {
    const config = parseConfig(SPEC_EXAMPLE);
    expect(config.temporal).toEqual(SPEC_EXAMPLE.temporal);
    expect(config.servers.ledger).toEqual({
      command: 'node',
      args: ['examples/ledger.js'],
      env: {},
      keyStores: [],
      sandbox: false,
      protocol: 'auto',
    });
    expect(config.servers.files).toEqual({
      command: 'node',
      args: ['examples/files.js'],
      env: { ROOT: '/tmp/x' },
      keyStores: [],
      // I1-I5: `true` is a sandbox with the defaults: no grants, no network, the default limits.
      sandbox: SANDBOX_DEFAULTS,
      protocol: 'auto',
    });
    expect(config.servers.search).toEqual({
      url: 'http://127.0.0.1:8931/mcp',
      headers: { Authorization: 'env:SEARCH_TOKEN' },
      protocol: 'auto',
      // R1: by default a remote server's headers are every tenant's.
      credentials: 'shared',
    });
    expect(config.tools).toEqual(SPEC_EXAMPLE.tools);
    expect(config.tenants.acme.policy).toEqual({ 'ledger.*': 'allow', 'search.*': 'ask' });
    expect(config.jobs.continueAsNewAfterCalls).toBe(1000);
    expect(config.node.slots).toBe(100);
  });

  test.each<[string, unknown, string]>([
    ['a grant that is not host:port', { network: ['example.com'] }, 'servers.box.sandbox.network'],
    ['a port past 65535', { network: ['example.com:70000'] }, 'a port is 1 to 65535'],
    ['a network that is neither a list nor "host"', { network: 'none' }, 'servers.box.sandbox.network'],
    ['memory under 32 MiB', { memoryMiB: 8 }, 'servers.box.sandbox.memoryMiB'],
    ['no CPU share', { cpus: 0 }, 'servers.box.sandbox.cpus'],
    ['a disk limit in parts of a MiB', { diskMiB: 1.5 }, 'servers.box.sandbox.diskMiB'],
    ['an unknown field', { mounts: ['/'] }, 'servers.box.sandbox'],
  ])('I1-I5: a sandbox block with %s is refused, naming the field', (_what, sandbox, named) => {
    const err = configError(() =>
      parseConfig({ servers: { box: { command: 'node', args: ['x.js'], sandbox } } }, 'oz0.config.json'),
    );
    expect(err.message).toContain(named);
  });

  test('I1-I5: a sandbox block keeps its grants and fills in the limits; a harness always has one', () => {
    const config = parseConfig({
      servers: {
        box: {
          command: 'node',
          sandbox: { read: ['dist'], network: ['api.example.com:443', '[::1]:8080', '127.0.0.1:5432'] },
        },
        shared: { command: 'node', sandbox: { network: 'host', memoryMiB: 256 } },
      },
      harnesses: { agent: { command: 'node', tools: ['*'] } },
    });
    expect(config.servers.box).toMatchObject({
      sandbox: {
        read: ['dist'],
        write: [],
        network: ['api.example.com:443', '[::1]:8080', '127.0.0.1:5432'],
        pids: 512,
      },
    });
    expect(config.servers.shared).toMatchObject({ sandbox: { network: 'host', memoryMiB: 256 } });
    expect(config.harnesses.agent.sandbox).toEqual(SANDBOX_DEFAULTS);
    expect(config.node.isolation).toBe('bwrap');
    // I4: limits held strictly, by the best means the node finds; I1: a uid of its own from a range, as root.
    expect(config.node).toMatchObject({
      limits: 'strict',
      limitsBy: 'auto',
      sandboxUids: { first: 1_879_048_192, count: 65_536 },
      sandboxGid: 65534,
    });
  });

  test.each<[string, unknown]>([
    ['an empty object', {}],
    ['empty sections', { temporal: {}, jobs: {}, node: {} }],
  ])('Config: defaults are filled in from %s', (_what, input) => {
    const config = parseConfig(input);
    expect(config.temporal).toEqual({
      address: '127.0.0.1:7233',
      namespace: 'default',
      taskQueue: 'oz0',
      policyTaskQueue: 'oz0-policy',
    });
    expect(config.node.slots).toBe(100);
    expect(config.jobs.continueAsNewAfterCalls).toBe(1000);
    expect(config.servers).toEqual({});
    expect(config.tools).toEqual({});
    expect(config.tenants).toEqual({});
  });

  test('Config: a section given in part keeps the defaults of the fields it leaves out', () => {
    const config = parseConfig({ temporal: { namespace: 'prod' }, node: { slots: 4 } });
    expect(config.temporal).toEqual({
      address: '127.0.0.1:7233',
      namespace: 'prod',
      taskQueue: 'oz0',
      policyTaskQueue: 'oz0-policy',
    });
    expect(config.node.slots).toBe(4);
  });

  test.each<[string, string, unknown]>([
    [
      'a negative timeout',
      'tools.ledger.charge.timeoutSeconds',
      { tools: { 'ledger.charge': { timeoutSeconds: -1 } } },
    ],
    ['a zero timeout', 'tools.*.timeoutSeconds', { tools: { '*': { timeoutSeconds: 0 } } }],
    ['a fractional maxAttempts', 'tools.ledger.*.maxAttempts', { tools: { 'ledger.*': { maxAttempts: 1.5 } } }],
    ['an unknown tool setting', 'tools.*', { tools: { '*': { retries: 2 } } }],
    ['a tool pattern that is none', 'tools.bad pattern', { tools: { 'bad pattern': {} } }],
    ['node.slots: 0', 'node.slots', { node: { slots: 0 } }],
    ['node.slots as a string', 'node.slots', { node: { slots: '4' } }],
    ['jobs.continueAsNewAfterCalls: 0', 'jobs.continueAsNewAfterCalls', { jobs: { continueAsNewAfterCalls: 0 } }],
    ['an empty temporal.address', 'temporal.address', { temporal: { address: '' } }],
    ['an unknown temporal key', 'temporal', { temporal: { port: 7233 } }],
    [
      'a tenant policy value maybe',
      'tenants.acme.policy.ledger.*',
      { tenants: { acme: { policy: { 'ledger.*': 'maybe' } } } },
    ],
    [
      'a policy pattern without a dot',
      'tenants.acme.policy.ledger',
      { tenants: { acme: { policy: { ledger: 'allow' } } } },
    ],
    ['a url that is not one', 'servers.search.url', { servers: { search: { url: 'not a url' } } }],
    ['a url that is not http', 'servers.search.url', { servers: { search: { url: 'ftp://127.0.0.1/mcp' } } }],
    ['an empty command', 'servers.ledger.command', { servers: { ledger: { command: '' } } }],
    ['a server name with a dot', 'servers.led.ger', { servers: { 'led.ger': { command: 'node' } } }],
    ['a server with both command and url', 'servers.s', { servers: { s: { command: 'node', url: 'http://x/mcp' } } }],
  ])('Config: %s is refused, naming %s', (_what, field, input) => {
    const err = configError(() => parseConfig(input));
    expect(err.message).toMatch(/^bad config \(config\): /);
    expect(err.message).toContain(`: ${field}: `);
  });

  test('Config: a tenant policy value maybe is refused with the full dotted path and the choices', () => {
    const err = configError(() => parseConfig({ tenants: { acme: { policy: { 'ledger.*': 'maybe' } } } }));
    expect(err.message).toContain('tenants.acme.policy.ledger.*:');
    expect(err.message).toMatch(/allow.*deny.*ask/);
  });

  test('Config: an unknown top-level key is refused, naming the key', () => {
    const err = configError(() => parseConfig({ ...SPEC_EXAMPLE, servres: {} }));
    expect(err.message).toContain('"servres"');
  });

  test('Config: an error at the root of a config does not call it "the spec"', () => {
    const err = configError(() => parseConfig({ servres: {} }));
    expect(err.message).not.toContain('the spec');
  });

  test('Config: a server without command or url is refused, naming the server', () => {
    const err = configError(() => parseConfig({ servers: { ledger: { args: ['examples/ledger.js'] } } }));
    expect(err.message).toContain('servers.ledger');
  });

  test.each<[string, string, unknown]>([
    ['command missing', 'servers.ledger.command', { servers: { ledger: { args: ['examples/ledger.js'] } } }],
    ['sandbox: "yes"', 'servers.files.sandbox', { servers: { files: { command: 'node', sandbox: 'yes' } } }],
    [
      'a header that is no string',
      'servers.search.headers.A',
      { servers: { search: { url: 'http://x/mcp', headers: { A: 1 } } } },
    ],
  ])('Config: a server with %s is refused, naming %s', (_what, field, input) => {
    expect(configError(() => parseConfig(input)).message).toContain(`${field}: `);
  });

  test('Config: a server speaks the MCP revision it offers (auto), or one its config pins; any other is refused', () => {
    const servers = {
      a: { command: 'node' },
      b: { command: 'node', protocol: '2025-11-25' },
      c: { url: 'http://x/mcp', protocol: '2026-07-28' },
    };
    expect(Object.values(parseConfig({ servers }).servers).map((s) => s.protocol)).toEqual([
      'auto',
      '2025-11-25',
      '2026-07-28',
    ]);
    const err = configError(() => parseConfig({ servers: { a: { command: 'node', protocol: '2024-11-05' } } }));
    expect(err.message).toContain('servers.a.protocol: ');
  });

  const desk = { url: 'http://127.0.0.1:8941/mcp', credentials: 'per-tenant' };
  const oauth = { clientId: 'acme-desk', clientSecret: 'env:ACME_SECRET', issuer: 'http://127.0.0.1:8940' };
  const withCredential = (credential: unknown, server: unknown = desk) => ({
    servers: { tickets: server },
    tenants: { acme: { credentials: { tickets: credential } } },
  });

  test('R1: a tenant’s credentials are headers or an OAuth client, each secret by reference; the method follows the secret', () => {
    const config = parseConfig(
      withCredential({ headers: { 'X-Api-Key': 'file:secrets/acme.key' }, oauth: { ...oauth, scope: 'tickets.read' } }),
    );
    expect(config.tenants.acme.credentials.tickets).toEqual({
      headers: { 'X-Api-Key': 'file:secrets/acme.key' },
      oauth: { ...oauth, scope: 'tickets.read', method: 'client_secret_basic' },
    });
    const jwt = parseConfig(
      withCredential({ oauth: { clientId: 'b', privateKey: 'file:b.pem', issuer: oauth.issuer } }),
    );
    expect(jwt.tenants.acme.credentials.tickets.oauth?.method).toBe('private_key_jwt');
  });

  test.each<[string, string, unknown]>([
    [
      'an inline secret',
      'tenants.acme.credentials.tickets.oauth.clientSecret',
      withCredential({ oauth: { ...oauth, clientSecret: 's3cr3t' } }),
    ],
    [
      'an inline header',
      'tenants.acme.credentials.tickets.headers.X-Api-Key',
      withCredential({ headers: { 'X-Api-Key': 'k3y' } }),
    ],
    ['neither headers nor oauth', 'tenants.acme.credentials.tickets', withCredential({})],
    [
      'private_key_jwt without a key',
      'tenants.acme.credentials.tickets.oauth.privateKey',
      withCredential({ oauth: { ...oauth, method: 'private_key_jwt' } }),
    ],
    [
      'a secret and a key at once',
      'tenants.acme.credentials.tickets.oauth.clientSecret',
      withCredential({ oauth: { ...oauth, privateKey: 'file:k.pem' } }),
    ],
    [
      'no issuer',
      'tenants.acme.credentials.tickets.oauth.issuer',
      withCredential({ oauth: { clientId: 'a', clientSecret: 'env:A' } }),
    ],
    [
      'an Authorization header beside oauth',
      'tenants.acme.credentials.tickets.headers.Authorization',
      withCredential({ oauth, headers: { Authorization: 'env:A' } }),
    ],
    [
      'credentials for a shared server',
      'tenants.acme.credentials.tickets',
      withCredential({ oauth }, { url: desk.url }),
    ],
    [
      'credentials for a stdio server',
      'tenants.acme.credentials.tickets',
      withCredential({ oauth }, { command: 'node' }),
    ],
    [
      'credentials for no server',
      'tenants.acme.credentials.tickets',
      { tenants: { acme: { credentials: { tickets: { oauth } } } } },
    ],
    [
      'a per-tenant server with its own Authorization',
      'servers.tickets.headers.Authorization',
      { servers: { tickets: { ...desk, headers: { Authorization: 'env:A' } } } },
    ],
  ])('R1: %s is refused, naming %s', (_what, field, input) => {
    expect(configError(() => parseConfig(input)).message).toContain(`${field}: `);
  });

  test.each<[string, unknown]>([
    ['null', null],
    ['an array', []],
    ['a string', 'oz0'],
  ])('Config: %s is not a config', (_what, input) => {
    expect(() => parseConfig(input)).toThrow(ConfigError);
  });

  test('C1: node.jobFollows and node.jobFollowAfterMs default to 100 and 15 ms, 0 turns following off, and a bad value is refused by name', () => {
    expect(parseConfig({}).node).toMatchObject({ jobFollows: 100, jobFollowAfterMs: 15 });
    expect(parseConfig({ node: { jobFollows: 0 } }).node.jobFollows).toBe(0);
    const err = configError(() => parseConfig({ node: { jobFollows: -1, jobFollowAfterMs: 1.5 } }));
    expect(err.message).toContain('node.jobFollows: ');
    expect(err.message).toContain('node.jobFollowAfterMs: ');
    expect(configError(() => parseConfig({ node: { jobFollows: 'many' } })).message).toContain('node.jobFollows: ');
  });

  test('D5: inbox.crossSiteUi (a SameSite=None sign-in, for a Temporal UI on another site) needs an https publicUrl', () => {
    const oidc = { issuer: 'https://id.example', clientId: 'oz0-inbox' };
    expect(parseConfig({ inbox: { oidc } }).inbox).toMatchObject({ crossSiteUi: false, operators: [] });
    const plain = configError(() => parseConfig({ inbox: { oidc, crossSiteUi: true } }));
    expect(plain.message).toContain('inbox.crossSiteUi: inbox.crossSiteUi needs inbox.publicUrl on https');
    const http = { oidc, crossSiteUi: true, publicUrl: 'http://inbox.example' };
    expect(() => parseConfig({ inbox: http })).toThrow(ConfigError);
    const https = { ...http, publicUrl: 'https://inbox.example' };
    expect(parseConfig({ inbox: https }).inbox?.crossSiteUi).toBe(true);
  });

  test('N6: upgrade.rollbackSafe asks for payloads the previous release reads: none sealed, none stored', () => {
    const sealed = configError(() => parseConfig({ upgrade: { rollbackSafe: true } }));
    expect(sealed.message).toContain('upgrade.rollbackSafe: the previous release opens no sealed payload');
    const stored = { upgrade: { rollbackSafe: true }, payloads: { seal: 'off' } };
    expect(() => parseConfig(stored)).toThrow(/payloads\.store to "off"/);
    const plain = parseConfig({
      upgrade: { rollbackSafe: true },
      payloads: { store: 'off', seal: { newPayloads: 'plain' } },
    });
    expect(plain.upgrade.rollbackSafe).toBe(true);
    expect(parseConfig({ upgrade: { rollbackSafe: true }, payloads: { store: 'off', seal: 'off' } })).toBeDefined();
    // The control: without it, the defaults (sealed, stored) stand.
    expect(parseConfig({}).upgrade.rollbackSafe).toBe(false);
  });

  test('Config: the error names every bad field and the source', () => {
    const err = configError(() => parseConfig({ node: { slots: 0 }, jobs: { continueAsNewAfterCalls: -5 } }, 'x.json'));
    expect(err.message).toContain('bad config (x.json)');
    expect(err.message).toContain('node.slots');
    expect(err.message).toContain('jobs.continueAsNewAfterCalls');
    expect(err.name).toBe('ConfigError');
  });
});

describe('Config: loadConfig', () => {
  let tmp: string;
  beforeEach(() => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-config-'));
  });
  afterEach(() => {
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  function write(rel: string, content: unknown): string {
    const file = path.join(tmp, rel);
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, typeof content === 'string' ? content : JSON.stringify(content));
    return file;
  }

  test('Config: --config FILE is read, and baseDir is its folder', () => {
    const file = write('etc/mine.json', { node: { slots: 7 } });
    const config = loadConfig({ file, env: {}, cwd: tmp });
    expect(config.node.slots).toBe(7);
    expect(config.source).toBe(file);
    expect(config.baseDir).toBe(path.join(tmp, 'etc'));
  });

  test('Config: a relative --config FILE is resolved against the working directory', () => {
    write('etc/mine.json', { node: { slots: 7 } });
    const config = loadConfig({ file: 'etc/mine.json', env: {}, cwd: tmp });
    expect(config.node.slots).toBe(7);
    expect(config.baseDir).toBe(path.join(tmp, 'etc'));
  });

  test('Config: OZ0_CONFIG is read when there is no --config', () => {
    write('oz0.config.json', { node: { slots: 1 } });
    const file = write('env/oz0.json', { node: { slots: 8 } });
    const config = loadConfig({ env: { OZ0_CONFIG: file }, cwd: tmp });
    expect(config.node.slots).toBe(8);
    expect(config.baseDir).toBe(path.join(tmp, 'env'));
  });

  test('I4: OZ0_LIMITS forces how limits are held over node.limitsBy; a word it does not know is refused, naming it', () => {
    const file = write('oz0.json', { node: { limitsBy: 'cgroup1' } });
    expect(loadConfig({ file, env: {}, cwd: tmp }).node.limitsBy).toBe('cgroup1');
    expect(loadConfig({ file, env: { OZ0_LIMITS: 'rlimit' }, cwd: tmp }).node.limitsBy).toBe('rlimit');
    expect(configError(() => loadConfig({ file, env: { OZ0_LIMITS: 'cgroup3' }, cwd: tmp })).message).toBe(
      'OZ0_LIMITS: one of auto, cgroup2, cgroup1, rlimit',
    );
  });

  test('Config: --config wins over OZ0_CONFIG', () => {
    const flag = write('flag.json', { node: { slots: 9 } });
    const env = write('env.json', { node: { slots: 8 } });
    expect(loadConfig({ file: flag, env: { OZ0_CONFIG: env }, cwd: tmp }).node.slots).toBe(9);
  });

  test('Config: ./oz0.config.json in the working directory is read when nothing names a file', () => {
    write('oz0.config.json', { temporal: { taskQueue: 'here' } });
    const config = loadConfig({ env: {}, cwd: tmp });
    expect(config.temporal.taskQueue).toBe('here');
    expect(config.source).toBe(path.join(tmp, 'oz0.config.json'));
    expect(config.baseDir).toBe(tmp);
  });

  test('Config: the working directory defaults to process.cwd()', () => {
    write('oz0.config.json', { node: { slots: 3 } });
    const before = process.cwd();
    process.chdir(tmp);
    try {
      expect(loadConfig({ env: {} }).node.slots).toBe(3);
    } finally {
      process.chdir(before);
    }
  });

  test('Config: no file anywhere gives the defaults, with the working directory as baseDir', () => {
    const config = loadConfig({ env: {}, cwd: tmp });
    expect(config.source).toBe('defaults');
    expect(config.baseDir).toBe(tmp);
    expect(config.temporal).toEqual({
      address: '127.0.0.1:7233',
      namespace: 'default',
      taskQueue: 'oz0',
      policyTaskQueue: 'oz0-policy',
    });
    expect(config.node.slots).toBe(100);
    expect(config.jobs.continueAsNewAfterCalls).toBe(1000);
  });

  test.each<[string, (tmp: string) => { file?: string; env: NodeJS.ProcessEnv }]>([
    ['--config', (dir) => ({ file: path.join(dir, 'nope.json'), env: {} })],
    ['OZ0_CONFIG', (dir) => ({ env: { OZ0_CONFIG: path.join(dir, 'nope.json') } })],
  ])('Config: a file named by %s that is missing is a ConfigError, even with ./oz0.config.json there', (_by, opts) => {
    write('oz0.config.json', {});
    const err = configError(() => loadConfig({ ...opts(tmp), cwd: tmp }));
    expect(err.message).toContain('config file not found');
    expect(err.message).toContain(path.join(tmp, 'nope.json'));
  });

  test.each([
    ['not JSON at all', 'temporal: {}'],
    ['a trailing comma', '{ "node": { "slots": 4 }, }'],
    ['an empty file', ''],
  ])('Config: a file with %s is a ConfigError naming the file', (_what, text) => {
    const file = write('bad.json', text);
    const err = configError(() => loadConfig({ file, env: {}, cwd: tmp }));
    expect(err.message).toContain(file);
    expect(err.message).toContain('not JSON');
  });

  test('Config: a file with a bad field is a ConfigError naming the file and the field', () => {
    const file = write('oz0.config.json', { tools: { 'ledger.charge': { timeoutSeconds: -1 } } });
    const err = configError(() => loadConfig({ env: {}, cwd: tmp }));
    expect(err.message).toContain(file);
    expect(err.message).toContain('tools.ledger.charge.timeoutSeconds');
  });

  test.each<[string, NodeJS.ProcessEnv, { address: string; namespace: string }]>([
    ['neither', {}, { address: 'file:7233', namespace: 'file-ns' }],
    ['TEMPORAL_ADDRESS', { TEMPORAL_ADDRESS: 'env:7233' }, { address: 'env:7233', namespace: 'file-ns' }],
    ['TEMPORAL_NAMESPACE', { TEMPORAL_NAMESPACE: 'env-ns' }, { address: 'file:7233', namespace: 'env-ns' }],
    [
      'both',
      { TEMPORAL_ADDRESS: 'env:7233', TEMPORAL_NAMESPACE: 'env-ns' },
      { address: 'env:7233', namespace: 'env-ns' },
    ],
  ])('Config: %s in the environment overrides the file', (_what, env, expected) => {
    write('oz0.config.json', { temporal: { address: 'file:7233', namespace: 'file-ns', taskQueue: 'q' } });
    const config = loadConfig({ env, cwd: tmp });
    expect(config.temporal).toEqual({ ...expected, taskQueue: 'q', policyTaskQueue: 'oz0-policy' });
  });

  test('Config: TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE override the defaults too', () => {
    const config = loadConfig({ env: { TEMPORAL_ADDRESS: 'env:1', TEMPORAL_NAMESPACE: 'ns' }, cwd: tmp });
    expect(config.temporal).toEqual({
      address: 'env:1',
      namespace: 'ns',
      taskQueue: 'oz0',
      policyTaskQueue: 'oz0-policy',
    });
  });
});

const DAY = 24 * 3600;

describe('Config: toolSettings', () => {
  const tools: Config['tools'] = {
    '*': { timeoutSeconds: 90 },
    'ledger.*': { maxAttempts: 7 },
    'ledger.charge': { timeoutSeconds: 30 },
    'files.write': { maxAttempts: 1 },
    'search.*': { timeoutSeconds: 5, maxAttempts: 2 },
  };

  test('Config: the defaults are 60 s, 3 attempts and 24 h for a person to answer (A6)', () => {
    expect(DEFAULT_TOOL_SETTINGS).toEqual({ timeoutSeconds: 60, maxAttempts: 3, confirmTimeoutSeconds: DAY });
    expect(toolSettings({ tools: {} }, 'ledger.charge')).toEqual(DEFAULT_TOOL_SETTINGS);
  });

  test('A6: confirmTimeoutSeconds layers like the others; it is positive and at most a year', () => {
    const layered = { '*': { confirmTimeoutSeconds: 600 }, 'ledger.refund': { confirmTimeoutSeconds: 3600 } };
    expect(toolSettings({ tools: layered }, 'ledger.refund').confirmTimeoutSeconds).toBe(3600);
    expect(toolSettings({ tools: layered }, 'ledger.charge').confirmTimeoutSeconds).toBe(600);
    expect(() => parseConfig({ tools: { '*': { confirmTimeoutSeconds: 0 } } })).toThrow(
      /tools\.\*\.confirmTimeoutSeconds/,
    );
    expect(() => parseConfig({ tools: { '*': { confirmTimeoutSeconds: 366 * DAY } } })).toThrow(ConfigError);
  });

  test.each([
    ['ledger.charge', 'timeout from the tool, attempts from ledger.*', { timeoutSeconds: 30, maxAttempts: 7 }],
    ['ledger.refund', 'timeout from *, attempts from ledger.*', { timeoutSeconds: 90, maxAttempts: 7 }],
    ['files.write', 'timeout from *, attempts from the tool', { timeoutSeconds: 90, maxAttempts: 1 }],
    ['files.read', 'timeout from *, attempts from the defaults', { timeoutSeconds: 90, maxAttempts: 3 }],
    ['search.query', 'both from search.*, over *', { timeoutSeconds: 5, maxAttempts: 2 }],
  ])('Config: toolSettings(%s) layers field by field: %s', (tool, _why, expected) => {
    expect(toolSettings({ tools }, tool)).toEqual({ ...expected, confirmTimeoutSeconds: DAY });
  });

  test.each([
    [{ '*': { timeoutSeconds: 10 }, 'a.*': { timeoutSeconds: 20 }, 'a.f': { timeoutSeconds: 30 } }, 30],
    [{ '*': { timeoutSeconds: 10 }, 'a.*': { timeoutSeconds: 20 } }, 20],
    [{ '*': { timeoutSeconds: 10 } }, 10],
    [{ 'b.*': { timeoutSeconds: 20 }, 'a.g': { timeoutSeconds: 30 } }, 60],
  ])('Config: the exact tool wins over server.* over * over the defaults (%j)', (layers, timeoutSeconds) => {
    expect(toolSettings({ tools: layers }, 'a.f').timeoutSeconds).toBe(timeoutSeconds);
  });

  test('Config: the SPEC example gives ledger.charge 30 s / 5 attempts and others 60 s / 3', () => {
    const config = parseConfig(SPEC_EXAMPLE);
    expect(toolSettings(config, 'ledger.charge')).toEqual({
      timeoutSeconds: 30,
      maxAttempts: 5,
      confirmTimeoutSeconds: DAY,
    });
    expect(toolSettings(config, 'search.query')).toEqual({
      timeoutSeconds: 60,
      maxAttempts: 3,
      confirmTimeoutSeconds: DAY,
    });
  });

  test('Config: a function name with dots takes its server from before the first dot', () => {
    const layered = { 'ns.*': { maxAttempts: 9 } };
    expect(toolSettings({ tools: layered }, 'ns.deep.fn')).toEqual({
      timeoutSeconds: 60,
      maxAttempts: 9,
      confirmTimeoutSeconds: DAY,
    });
  });

  test('Config: toolSettings hands back a copy, never the defaults object itself', () => {
    const settings = toolSettings({ tools: {} }, 'a.f');
    settings.timeoutSeconds = 1;
    expect(DEFAULT_TOOL_SETTINGS.timeoutSeconds).toBe(60);
  });
});

describe('I2: grants that name {tenant}', () => {
  const withWrite = (write: string[]) => ({
    servers: { box: { command: 'node', args: ['x.js'], sandbox: { write } } },
  });

  test('a whole folder of the path, once; anything else in braces is refused, naming the field', () => {
    expect(() => parseConfig(withWrite(['data/{tenant}', '/srv/{tenant}/cache']))).not.toThrow();
    expect(() => parseConfig(withWrite(['data/{job}']))).toThrow(
      /servers\.box\.sandbox\.write\[0\].*\{job\} is not a name a grant may hold/s,
    );
    expect(() => parseConfig(withWrite(['data/x-{tenant}']))).toThrow(/whole folder/);
    expect(() => parseConfig(withWrite(['{tenant}/{tenant}']))).toThrow(/once/);
  });

  test('issue 55.9: a server’s args and env take {tenant} as grants do — a whole component of a path, once — naming the field; other braces are the server’s', () => {
    const server = (args: string[], env: Record<string, string> = {}) => ({
      servers: { mem: { command: 'node', args: ['x.js', ...args], env } },
    });
    const fine = server(['--root', '/srv/{tenant}', '{"a":1}'], {
      MEMORY_FILE_PATH: '/srv/memory/{tenant}/memory.jsonl',
      TENANT: '{tenant}',
    });
    expect(namesTenant(parseConfig(fine).servers.mem)).toBe(true);
    expect(namesTenant(parseConfig(server(['/srv/all'])).servers.mem)).toBe(false);
    expect(() => parseConfig(server(['/srv/x-{tenant}']))).toThrow(
      /servers\.mem\.args\[1\].*\{tenant\} is a whole component of a path/s,
    );
    expect(() => parseConfig(server([], { MEMORY_FILE_PATH: '/srv/{tenant}.jsonl' }))).toThrow(
      /servers\.mem\.env\.MEMORY_FILE_PATH.*not part of a name/s,
    );
    expect(() => parseConfig(server([], { DIR: '/srv/{tenant}/{tenant}' }))).toThrow(/servers\.mem\.env\.DIR.*once/s);
    expect(fillTenant('/srv/memory/{tenant}/memory.jsonl', 'acme')).toBe('/srv/memory/acme/memory.jsonl');
    expect(() => fillTenant('/srv/{tenant}', '..')).toThrow(/cannot name a folder/);
  });

  test('issue 55.9: a plugin’s key store that names {tenant} hides the folder that holds every tenant’s from every sandbox; one without it, its file (the control)', () => {
    const config = {
      ...parseConfig({
        servers: {
          mine: { command: 'node', args: ['x.js'], env: { STORE: '/srv/keys/{tenant}/store.db' } },
          ours: { command: 'node', args: ['x.js'], keyStores: ['/srv/shared/store.db'] },
        },
      }),
      baseDir: '/',
      source: 'test',
    };
    const places = new Hidden(config, () => false).secretPlaces();
    expect(places).toContainEqual({
      path: '/srv/keys',
      what: 'the folder of the key stores of plugin server "mine", one per tenant (servers.mine.env.STORE)',
    });
    expect(places).toContainEqual(expect.objectContaining({ path: '/srv/shared/store.db' }));
  });

  test('a tenant’s grants: its name in place of {tenant}; a name that would climb is never one', () => {
    const grants = parseConfig(withWrite(['data/{tenant}', 'shared'])).servers.box;
    const sandbox = (grants as { sandbox: SandboxConfig }).sandbox;
    expect(forTenant(sandbox, 'acme').write).toEqual(['data/acme', 'shared']);
    expect(() => forTenant(sandbox, '..')).toThrow(/cannot name a folder/);
    expect(() => forTenant(sandbox, 'a/b')).toThrow(/cannot name a folder/);
    expect(beforeTenant('/srv/data/{tenant}/cache')).toBe('/srv/data');
  });
});
