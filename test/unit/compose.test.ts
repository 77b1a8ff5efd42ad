/**
 * The cluster files, checked by structure: there is no Docker engine where the tests run, so this proves what can be
 * proved by reading docker-compose.yml, the Dockerfile, .dockerignore and deploy/oz0.cluster.json; and that the
 * compose file and `npm run cluster` take the Temporal server's settings from the one place, deploy/temporal/.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import { isRemote, loadConfig, parseConfig } from '../../common/config';
import type { LoadedConfig } from '../../common/config';
import { nodeConfig } from '../../deploy/local-cluster/node-config';
import { dynamicConfigFile, readServerSettings } from '../../deploy/local-cluster/settings';
import { DEV_SERVER_DYNAMIC_CONFIG } from '../../worker/dev-server';
import { PORT_NAMES, serverConfig } from '../../deploy/local-cluster/temporal-server';
import type { ServerPorts } from '../../deploy/local-cluster/temporal-server';
import { Oz0Status, Oz0Tenant, Oz0Tools } from '../../model/job';

const ROOT = path.join(__dirname, '..', '..');

interface Healthcheck {
  test?: string | string[];
  disable?: boolean;
}

interface Service {
  image?: string;
  build?: unknown;
  entrypoint?: string | string[];
  command?: string | string[];
  container_name?: string;
  ports?: Array<string | number | { target: number; published?: string | number }>;
  environment?: Record<string, string | number | boolean | null> | string[];
  depends_on?: string[] | Record<string, { condition?: string }>;
  healthcheck?: Healthcheck;
  volumes?: Array<string | { type?: string; source?: string; target?: string; read_only?: boolean }>;
  init?: boolean;
  stop_grace_period?: string;
  restart?: string;
  security_opt?: string[];
  cap_add?: string[];
  privileged?: boolean;
}

interface Compose {
  services: Record<string, Service>;
}

const compose = parse(fs.readFileSync(path.join(ROOT, 'docker-compose.yml'), 'utf8')) as Compose;
const services = compose.services;
const node = services.node;

/** The image's repository and tag; `undefined` tag when there is none. A registry port is not a tag. */
function imageTag(image: string): { repo: string; tag?: string } {
  const withoutDigest = image.split('@')[0];
  const colon = withoutDigest.lastIndexOf(':');
  if (colon <= withoutDigest.lastIndexOf('/')) return { repo: withoutDigest };
  return { repo: withoutDigest.slice(0, colon), tag: withoutDigest.slice(colon + 1) };
}

/** The container ports a service publishes, and whether each names a host port. */
function publishedPorts(service: Service): Array<{ container: number; host?: string }> {
  return (service.ports ?? []).map((p) => {
    if (typeof p === 'object') return { container: p.target, host: p.published?.toString() };
    const parts = String(p).split('/')[0].split(':');
    const container = Number(parts[parts.length - 1]);
    return { container, host: parts.length > 1 ? parts.slice(0, -1).join(':') : undefined };
  });
}

/** The condition a service waits for on another: `service_started` for the short list form. */
function dependsOn(service: Service, on: string): string | undefined {
  const deps = service.depends_on;
  if (!deps) return undefined;
  if (Array.isArray(deps)) return deps.includes(on) ? 'service_started' : undefined;
  return deps[on] ? (deps[on].condition ?? 'service_started') : undefined;
}

function environment(service: Service): Record<string, string> {
  const env = service.environment ?? {};
  if (Array.isArray(env)) {
    return Object.fromEntries(env.map((line) => [line.split('=')[0], line.slice(line.indexOf('=') + 1)]));
  }
  return Object.fromEntries(Object.entries(env).map(([k, v]) => [k, v === null ? '' : String(v)]));
}

/** Compose's `${NAME:-default}` with NAME unset: what a plain `docker compose up` passes. */
function withDefaults(value: string): string {
  return value.replace(/\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}/g, (_m, def: string | undefined) => def ?? '');
}

function seconds(duration: string): number {
  const units: Record<string, number> = { h: 3600, m: 60, s: 1, ms: 0.001, us: 1e-6 };
  const parts = [...duration.matchAll(/(\d+(?:\.\d+)?)(ms|us|h|m|s)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== duration) throw new Error(`bad duration ${duration}`);
  return parts.reduce((sum, [, n, unit]) => sum + Number(n) * units[unit], 0);
}

function argv(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  return Array.isArray(value) ? value : value.split(/\s+/).filter(Boolean);
}

/** The node's config mount: the bind whose target the node's `--config` names. */
function configMount(): { source: string; target: string; readOnly: boolean } {
  const command = argv(node.command);
  const target = command[command.indexOf('--config') + 1];
  for (const v of node.volumes ?? []) {
    if (typeof v === 'string') {
      const [source, t, mode] = v.split(':');
      if (t === target) return { source, target, readOnly: mode?.split(',').includes('ro') ?? false };
    } else if (v.target === target && v.source) {
      return { source: v.source, target, readOnly: v.read_only === true };
    }
  }
  throw new Error(`no volume of the node is mounted at ${target}`);
}

const mount = configMount();
const nodeEnv = Object.fromEntries(Object.entries(environment(node)).map(([k, v]) => [k, withDefaults(v)]));
const clusterConfig: LoadedConfig = loadConfig({ file: path.resolve(ROOT, mount.source), env: nodeEnv, cwd: ROOT });

/** Every `env:NAME` the config reads from the node's environment (remote headers and stdio env). */
/** Every `env:NAME` the config names: servers' headers and environments, and the payload store's keys (D2). */
function envRefs(config: LoadedConfig): string[] {
  const values = Object.values(config.servers).flatMap((s) => Object.values(isRemote(s) ? s.headers : s.env));
  const store = config.payloads.store;
  if (store && store !== 'off' && 's3' in store)
    values.push(store.s3.accessKeyId ?? '', store.s3.secretAccessKey ?? '');
  return values.filter((v) => v.startsWith('env:')).map((v) => v.slice(4));
}

interface Instruction {
  op: string;
  args: string;
}

/** The Dockerfile's instructions, stage by stage (a stage starts at FROM); comments and continuations handled. */
function dockerfileStages(text: string): Instruction[][] {
  const logical = text
    .split('\n')
    .filter((line) => !/^\s*#/.test(line))
    .join('\n')
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  const stages: Instruction[][] = [];
  for (const line of logical) {
    const [op, ...rest] = line.split(/\s+/);
    const instruction = { op: op.toUpperCase(), args: rest.join(' ') };
    if (instruction.op === 'FROM') stages.push([]);
    if (stages.length === 0) continue;
    stages[stages.length - 1].push(instruction);
  }
  return stages;
}

const stages = dockerfileStages(fs.readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8'));
const finalStage = stages[stages.length - 1];
const finalWorkdir = finalStage.find((i) => i.op === 'WORKDIR')?.args;

describe('docker-compose.yml', () => {
  test('has the services postgresql, temporal, temporal-ui, search and node', () => {
    expect(Object.keys(services)).toEqual(
      expect.arrayContaining(['postgresql', 'temporal', 'temporal-ui', 'search', 'node']),
    );
  });

  test('every image is pinned to a tag that is not latest', () => {
    for (const [name, service] of Object.entries(services)) {
      expect({ name, image: service.image }).toEqual({ name, image: expect.any(String) });
      const { tag } = imageTag(service.image as string);
      expect({ name, tag }).toEqual({ name, tag: expect.stringMatching(/^(?!latest$)[\w][\w.-]*$/) });
    }
  });

  test('the PostgreSQL, Temporal and UI images are pinned to version numbers', () => {
    const versions = {
      postgresql: ['postgres', /^\d+\.\d+(-[a-z0-9.]+)?$/],
      temporal: ['temporalio/auto-setup', /^\d+\.\d+\.\d+$/],
      'temporal-ui': ['temporalio/ui', /^2\.\d+\.\d+$/],
    } as const;
    for (const [name, [repo, pattern]] of Object.entries(versions)) {
      const image = imageTag(services[name].image as string);
      expect(image.repo).toBe(repo);
      expect(image.tag).toMatch(pattern);
    }
  });

  test('Temporal publishes 7233 and the UI 8080, on the host loopback only', () => {
    expect(publishedPorts(services.temporal)).toContainEqual({ container: 7233, host: '127.0.0.1:7233' });
    expect(publishedPorts(services['temporal-ui'])).toContainEqual({ container: 8080, host: '127.0.0.1:8080' });
    expect(environment(services['temporal-ui']).TEMPORAL_ADDRESS).toBe('temporal:7233');
  });

  test('postgresql, temporal and search have health checks; postgresql uses pg_isready', () => {
    for (const name of ['postgresql', 'temporal', 'search']) {
      const check = services[name].healthcheck;
      expect({ name, test: check?.test, disable: check?.disable }).toEqual({
        name,
        test: expect.anything(),
        disable: undefined,
      });
    }
    expect(argv(services.postgresql.healthcheck?.test).join(' ')).toContain('pg_isready');
    expect(argv(services.temporal.healthcheck?.test)).toEqual(expect.arrayContaining(['temporal', 'operator']));
  });

  test('PostgreSQL credentials come from POSTGRES_USER / POSTGRES_PASSWORD, the same for both services', () => {
    const pg = environment(services.postgresql);
    const temporal = environment(services.temporal);
    expect(pg.POSTGRES_PASSWORD).toMatch(/^\$\{POSTGRES_PASSWORD(:-[^}]*)?\}$/);
    expect(temporal.POSTGRES_PWD).toBe(pg.POSTGRES_PASSWORD);
    expect(temporal.POSTGRES_USER).toBe(pg.POSTGRES_USER);
    expect(temporal).toMatchObject({ DB: 'postgres12', DB_PORT: '5432', POSTGRES_SEEDS: 'postgresql' });
  });

  test('services wait for what they use to be healthy (condition: service_healthy)', () => {
    const waits: Array<[string, string]> = [
      ['temporal', 'postgresql'],
      ['temporal-ui', 'temporal'],
      ['node', 'temporal'],
      ['node', 'search'],
    ];
    for (const [service, on] of waits) {
      expect({ service, on, condition: dependsOn(services[service], on) }).toEqual({
        service,
        on,
        condition: 'service_healthy',
      });
    }
  });

  test('the search service runs the reader example over HTTP on 8931, where the config points', () => {
    const search = services.search;
    expect(search.image).toBe(node.image);
    expect([...argv(search.entrypoint), ...argv(search.command)]).toEqual([
      'node',
      'dist/examples/reader.js',
      '--http',
      '8931',
      '--host',
      '0.0.0.0',
    ]);
    expect(fs.existsSync(path.join(ROOT, 'examples', 'reader.ts'))).toBe(true);
    const server = clusterConfig.servers.search;
    expect(isRemote(server) && server.url).toBe('http://search:8931/mcp');
  });

  test('the node scales: it is built here, and has no container_name and no host ports', () => {
    expect(node.build).toBe('.');
    expect(node.image).toBe('oz0-node:0.1.0');
    expect(node.container_name).toBeUndefined();
    expect(node.ports ?? []).toEqual([]);
  });

  test('the node runs `worker --config` on its read-only mounted config, under init', () => {
    expect(argv(node.command)).toEqual(['worker', '--config', '/etc/oz0/oz0.config.json']);
    expect(mount).toEqual({ source: './deploy/oz0.cluster.json', target: '/etc/oz0/oz0.config.json', readOnly: true });
    expect(node.init).toBe(true);
  });

  test('the node sets TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE, which override the config file', () => {
    expect(nodeEnv).toMatchObject({ TEMPORAL_ADDRESS: 'temporal:7233', TEMPORAL_NAMESPACE: 'default' });
    expect(clusterConfig.temporal.address).toBe('temporal:7233');
    expect(clusterConfig.temporal.namespace).toBe('default');
  });

  test("every variable set on the node is one oz0 reads: worker/ or common/ sources, Temporal's envconfig, or the config's `env:NAME`", () => {
    const workerSources = ['worker', 'common']
      .flatMap((dir) =>
        fs
          .readdirSync(path.join(ROOT, dir))
          .filter((f) => f.endsWith('.ts'))
          .map((f) => fs.readFileSync(path.join(ROOT, dir, f), 'utf8')),
      )
      .join('\n');
    // common/connection.ts hands the environment to @temporalio/envconfig (TEMPORAL_API_KEY, TEMPORAL_TLS_*, …).
    const envconfigDir = path.dirname(require.resolve('@temporalio/envconfig'));
    const envconfigSources = fs
      .readdirSync(envconfigDir)
      .filter((f) => f.endsWith('.js'))
      .map((f) => fs.readFileSync(path.join(envconfigDir, f), 'utf8'))
      .join('\n');
    const refs = envRefs(clusterConfig);
    for (const name of Object.keys(nodeEnv)) {
      const read =
        new RegExp(`\\benv\\.${name}\\b`).test(workerSources) ||
        envconfigSources.includes(`'${name}'`) ||
        refs.includes(name);
      expect({ name, read }).toEqual({ name, read: true });
    }
  });

  test("every `env:NAME` of the node's config is set on the node", () => {
    const refs = envRefs(clusterConfig);
    expect(refs).toContain('SEARCH_TOKEN');
    for (const name of refs) expect({ name, value: nodeEnv[name] }).toEqual({ name, value: expect.any(String) });
  });

  test('I8: the node may make bubblewrap sandboxes: the three security options it needs, no capability, not privileged', () => {
    expect([...(node.security_opt ?? [])].sort()).toEqual([
      'apparmor=unconfined',
      'seccomp=unconfined',
      'systempaths=unconfined',
    ]);
    expect(node.cap_add).toBeUndefined();
    expect(node.privileged).toBeUndefined();
    // Only the node starts sandboxes: the other services keep Docker's defaults.
    for (const [name, service] of Object.entries(services)) {
      if (name !== 'node') expect(service.security_opt).toBeUndefined();
    }
  });

  test("stop_grace_period outlasts the config's node.shutdownGraceSeconds with room for cancels", () => {
    expect(node.stop_grace_period).toBeDefined();
    expect(seconds(node.stop_grace_period as string)).toBeGreaterThanOrEqual(
      clusterConfig.node.shutdownGraceSeconds + 10,
    );
  });
});

describe('deploy/oz0.cluster.json', () => {
  test('passes loadConfig and defines ledger, reader, notes (sandboxed) and search (remote)', () => {
    expect(clusterConfig.source).toBe(path.join(ROOT, 'deploy', 'oz0.cluster.json'));
    const { ledger, reader, notes, search } = clusterConfig.servers;
    expect(!isRemote(ledger) && ledger.env.LEDGER_FILE).toBe('/var/lib/oz0/ledger/ledger.db');
    expect(!isRemote(reader) && reader.sandbox).toBe(false);
    expect(!isRemote(notes) && notes.sandbox).toMatchObject({ network: [], read: expect.any(Array) });
    expect(isRemote(search) && search.headers).toEqual({ Authorization: 'env:SEARCH_TOKEN' });
    expect(clusterConfig.node.slots).toBeGreaterThan(0);
    expect(Object.keys(clusterConfig.tenants)).toContain('acme');
  });

  test('I4: the node (uid 1000, /sys/fs/cgroup read-only in a container) holds its sandboxes’ limits best-effort, and says so at start; a root node on a machine with control groups holds them all anyway', () => {
    expect(clusterConfig.node.limits).toBe('best-effort');
    expect(clusterConfig.node.limitsBy).toBe('auto');
  });

  test("stdio servers name scripts by absolute path inside the image's WORKDIR, built from sources here", () => {
    // A plugin server runs in the config's folder (/etc/oz0), so a relative path would not find dist/.
    expect(finalWorkdir).toBe('/app');
    for (const [name, server] of Object.entries(clusterConfig.servers)) {
      if (isRemote(server)) continue;
      const scripts = server.args.filter((a) => a.endsWith('.js'));
      expect({ name, scripts: scripts.length }).toEqual({ name, scripts: 1 });
      const inImage = path.posix.relative('/app', scripts[0]);
      expect(inImage).toMatch(/^dist\//);
      const source = inImage.replace(/^dist\//, '').replace(/\.js$/, '.ts');
      expect({ name, source, exists: fs.existsSync(path.join(ROOT, source)) }).toEqual({ name, source, exists: true });
    }
  });

  test("the ledger's key store is on a named volume every node mounts, in a folder the image gives the node user", () => {
    const ledger = clusterConfig.servers.ledger;
    const folder = path.posix.dirname(!isRemote(ledger) ? ledger.env.LEDGER_FILE : '');
    const shared = (node.volumes ?? []).find((v) => typeof v === 'object' && v.target === folder);
    expect(shared).toEqual({ type: 'volume', source: 'ledger', target: folder });
    expect(Object.keys((compose as unknown as { volumes: Record<string, unknown> }).volumes)).toContain('ledger');
    const runs = finalStage.filter((i) => i.op === 'RUN').map((i) => i.args);
    expect(
      runs.some((r) => r.includes(`mkdir -p ${folder}`) && new RegExp(`chown node:node .*${folder}`).test(r)),
    ).toBe(true);
  });

  test('the payload keys are on a named volume every node mounts (D4), a folder the image gives the node user alone', () => {
    const folder = (clusterConfig as unknown as { payloads: { seal: { folder: string } } }).payloads.seal.folder;
    const shared = (node.volumes ?? []).find((v) => typeof v === 'object' && v.target === folder);
    expect(shared).toEqual({ type: 'volume', source: 'keys', target: folder });
    expect(Object.keys((compose as unknown as { volumes: Record<string, unknown> }).volumes)).toContain('keys');
    const runs = finalStage.filter((i) => i.op === 'RUN').map((i) => i.args);
    expect(
      runs.some((r) => new RegExp(`chown node:node .*${folder}`).test(r) && r.includes(`chmod 0700 ${folder}`)),
    ).toBe(true);
  });

  test("node.stateDir is absolute and created for the node user by the image (the config's folder is read-only)", () => {
    expect(path.isAbsolute(clusterConfig.node.stateDir)).toBe(true);
    const runs = finalStage.filter((i) => i.op === 'RUN').map((i) => i.args);
    expect(runs.some((r) => r.includes(`chown node:node ${clusterConfig.node.stateDir}`))).toBe(true);
  });
});

describe('Dockerfile and .dockerignore', () => {
  test('has at least two stages, each FROM a pinned node:20 tag', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    for (const stage of stages) {
      const image = stage[0].args.split(/\s+/)[0];
      expect(imageTag(image)).toEqual({ repo: 'node', tag: expect.stringMatching(/^20\.\d+\.\d+-bookworm-slim$/) });
    }
  });

  test('the build stage installs with npm ci, builds, then prunes dev dependencies', () => {
    const runs = stages[0].filter((i) => i.op === 'RUN').map((i) => i.args);
    const at = (re: RegExp) => runs.findIndex((r) => re.test(r));
    expect(at(/npm ci\b/)).toBeGreaterThanOrEqual(0);
    expect(at(/npm run build\b/)).toBeGreaterThan(at(/npm ci\b/));
    expect(at(/npm prune --omit=dev\b/)).toBeGreaterThan(at(/npm run build\b/));
  });

  test("the build stage builds better-sqlite3's native addon, whose install script npm ci --ignore-scripts skips", () => {
    const runs = stages[0].filter((i) => i.op === 'RUN').map((i) => i.args);
    const at = (re: RegExp) => runs.findIndex((r) => re.test(r));
    expect(at(/npm rebuild better-sqlite3\b/)).toBeGreaterThan(at(/npm ci\b/));
    expect(at(/apt-get install .*\bg\+\+/)).toBeLessThan(at(/npm rebuild better-sqlite3\b/));
  });

  test("the final stage caps glibc's malloc arenas, a node's native memory (issue 36.3)", () => {
    const envs = finalStage.filter((i) => i.op === 'ENV').map((i) => i.args);
    expect(envs).toContain('MALLOC_ARENA_MAX=2');
  });

  test('I8: the final stage installs bubblewrap, for the sandboxes the node starts', () => {
    const runs = finalStage.filter((i) => i.op === 'RUN').map((i) => i.args);
    expect(runs.some((r) => /apt-get install -y --no-install-recommends bubblewrap/.test(r))).toBe(true);
  });

  test('I1: the image has what each sandbox’s seccomp filter is built with: libseccomp2, and koffi (a runtime dependency, so npm prune keeps it) with prebuilt bindings for both architectures oz0 pins bubblewrap for', () => {
    const runs = finalStage.filter((i) => i.op === 'RUN').map((i) => i.args);
    expect(runs.some((r) => /apt-get install -y --no-install-recommends .*\blibseccomp2\b/.test(r))).toBe(true);
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    expect(pkg.dependencies.koffi).toMatch(/^\d+\.\d+\.\d+$/);
    const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { optional?: boolean; os?: string[]; cpu?: string[] }>;
    };
    for (const cpu of ['x64', 'arm64']) {
      expect(lock.packages[`node_modules/@koromix/koffi-linux-${cpu}`]).toMatchObject({ optional: true });
    }
  });

  test('the final stage runs as a user that is not root', () => {
    const users = finalStage.filter((i) => i.op === 'USER').map((i) => i.args);
    expect(users.length).toBeGreaterThan(0);
    expect(users[users.length - 1]).not.toMatch(/^(root|0)(:|$)/);
  });

  test('the final stage copies only package.json, node_modules, dist, bin, examples/jobs and the native forwarder (its sources and its build) from the build stage', () => {
    const copies = finalStage.filter((i) => i.op === 'COPY' || i.op === 'ADD').map((i) => i.args);
    expect(copies.length).toBeGreaterThan(0);
    const sources = copies.map((c) => {
      expect(c).toMatch(/^--from=build\s/);
      return c.split(/\s+/).filter((w) => !w.startsWith('--'))[0];
    });
    expect(sources.sort()).toEqual(
      [
        '/app/bin',
        '/app/dist',
        '/app/examples/jobs',
        '/app/node_modules',
        '/app/package.json',
        '/app/native',
        '/app/.tools/forwarder',
      ].sort(),
    );
    // Of .tools only the forwarder's build: never the Temporal CLI, the Python venv or a downloaded bwrap.
    for (const c of copies) expect(c).not.toMatch(/(^|[\s/])(test|\.tools(?!\/forwarder(\s|$)))(\/|\s|$)/);
  });

  test('the build stage builds the native forwarder with a pinned Go image', () => {
    const text = fs.readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
    expect(text).toMatch(/^COPY --from=golang:\d+\.\d+\.\d+-bookworm \/usr\/local\/go \/usr\/local\/go$/m);
    expect(text).toMatch(/^RUN OZ0_GO=\/usr\/local\/go\/bin\/go npm run forwarder:build$/m);
  });

  test('the image runs the CLI: ENTRYPOINT node dist/client/cli/index.js, CMD worker', () => {
    expect(finalStage.find((i) => i.op === 'ENTRYPOINT')?.args).toBe('["node", "dist/client/cli/index.js"]');
    expect(finalStage.find((i) => i.op === 'CMD')?.args).toBe('["worker"]');
    expect(fs.readFileSync(path.join(ROOT, 'client', 'cli', 'index.ts'), 'utf8')).toContain('require.main === module');
  });

  test('.dockerignore keeps node_modules, dist, .tools, .oz0, .git, coverage, test and bench/results out', () => {
    const ignored = fs
      .readFileSync(path.join(ROOT, '.dockerignore'), 'utf8')
      .split('\n')
      .map((l) => l.trim().replace(/\/$/, ''))
      .filter((l) => l && !l.startsWith('#'));
    expect(ignored).toEqual(
      expect.arrayContaining(['node_modules', 'dist', '.tools', '.oz0', '.git', 'coverage', 'test', 'bench/results']),
    );
  });
});

describe('deploy/temporal: the server settings docker-compose.yml and `npm run cluster` share', () => {
  const settings = readServerSettings(ROOT);
  const temporalEnv = environment(services.temporal);
  const dynamicConfig = parse(fs.readFileSync(dynamicConfigFile(ROOT), 'utf8')) as Record<string, unknown>;
  const ports = Object.fromEntries(PORT_NAMES.map((name, i) => [name, 20000 + i])) as unknown as ServerPorts;
  const local = serverConfig(settings, ports, { port: 5432, user: 'temporal' }, dynamicConfigFile(ROOT)) as {
    persistence: { numHistoryShards: number };
    dynamicConfigClient: { filepath: string };
  };

  test('shards, namespace and retention: compose passes settings.json to auto-setup, the local server config takes them', () => {
    expect(temporalEnv).toMatchObject({
      NUM_HISTORY_SHARDS: String(settings.numHistoryShards),
      DEFAULT_NAMESPACE: settings.namespace,
      DEFAULT_NAMESPACE_RETENTION: settings.retention,
    });
    expect(local.persistence.numHistoryShards).toBe(settings.numHistoryShards);
    expect(nodeEnv.TEMPORAL_NAMESPACE).toBe(settings.namespace);
  });

  test('one dynamic config file: compose mounts it read-only where DYNAMIC_CONFIG_FILE_PATH points, the local server loads it', () => {
    const target = path.posix.join('/etc/temporal', temporalEnv.DYNAMIC_CONFIG_FILE_PATH);
    const mounts = (services.temporal.volumes ?? []).filter((v) => typeof v === 'object');
    expect(mounts).toContainEqual({
      type: 'bind',
      source: './deploy/temporal/dynamicconfig.yaml',
      target,
      read_only: true,
    });
    expect(local.dynamicConfigClient.filepath).toBe(dynamicConfigFile(ROOT));
  });

  test('the dynamic config raises the history queue readers per shard, each key a list of { value }', () => {
    for (const [key, entries] of Object.entries(dynamicConfig)) {
      expect({ key, entries }).toEqual({ key, entries: expect.arrayContaining([expect.objectContaining({})]) });
      for (const entry of entries as object[]) expect(Object.keys(entry)).toContain('value');
    }
    for (const queue of ['transfer', 'timer', 'visibility', 'outbound']) {
      const [entry] = dynamicConfig[`history.${queue}ProcessorMaxPollRPS`] as Array<{ value: number }>;
      expect({ queue, rps: entry.value }).toEqual({ queue, rps: expect.any(Number) });
      expect(entry.value).toBeGreaterThan(20); // the server's default, a 50 ms floor per call on a quiet shard
    }
  });

  test('the dev servers oz0 starts (oz0 dev, the demo, the tests, the bench) get the same dynamic config: the readers raised, worker commands on (issue 26)', () => {
    for (const [key, value] of Object.entries(DEV_SERVER_DYNAMIC_CONFIG)) {
      expect({ key, value }).toEqual({ key, value: (dynamicConfig[key] as Array<{ value: number }>)[0].value });
    }
  });

  test("settings.json lists oz0's search attributes as the nodes register them (T3)", () => {
    const registered = Object.fromEntries(
      [Oz0Status, Oz0Tenant, Oz0Tools].map((k) => [k.name, k.type === 'KEYWORD' ? 'Keyword' : 'KeywordList']),
    );
    expect(settings.searchAttributes).toEqual(registered);
  });

  test("the local nodes run compose's config, its container paths moved to this machine", () => {
    const place = {
      address: '127.0.0.1:7233',
      namespace: settings.namespace,
      state: '/tmp/oz0-node',
      ledgerFile: '/tmp/oz0-cluster/ledger/ledger.db',
      search: 'http://127.0.0.1:1/mcp',
      s3: 'http://127.0.0.1:2',
      receivedLog: '/tmp/oz0-received.jsonl',
      keys: '/tmp/oz0-cluster/keys',
    };
    const moved = { ...parseConfig(nodeConfig(ROOT, place)), baseDir: ROOT, source: 'test' };
    expect(moved.payloads.store).toMatchObject({ s3: { endpoint: place.s3, bucket: 'oz0-payloads' } });
    expect(Object.keys(moved.servers)).toEqual(Object.keys(clusterConfig.servers));
    expect(moved.tools).toEqual(clusterConfig.tools);
    expect(moved.tenants).toEqual(clusterConfig.tenants);
    expect(moved.node.stateDir).toBe(place.state);
    // Compose's shared `ledger` volume is the cluster's one ledger, not a ledger per node: a write a lost node made
    // must be answered from it on the node that takes the call over.
    const ledger = moved.servers.ledger as { env: Record<string, string> };
    expect(ledger.env.LEDGER_FILE).toBe(place.ledgerFile);
    // And its `keys` volume the cluster's one key folder: what one node seals, every other opens (D4).
    expect(moved.payloads.seal).toEqual({ folder: place.keys, platformKeys: [], newPayloads: 'sealed' });
    const text = JSON.stringify(moved);
    for (const inContainer of ['/app/', '/var/lib/oz0', 'search:8931', 's3:8333', '/tmp/ledger.jsonl']) {
      expect({ inContainer, found: text.includes(inContainer) }).toEqual({ inContainer, found: false });
    }
  });
});

describe('docker-compose.yml: observability (O1-O2)', () => {
  const prometheusConfig = parse(
    fs.readFileSync(path.join(ROOT, 'deploy', 'prometheus', 'prometheus.yml'), 'utf8'),
  ) as {
    scrape_configs: Array<{ job_name: string; dns_sd_configs?: Array<{ names: string[]; port: number }> }>;
  };

  test('O1: every node serves /metrics on 9464, and Prometheus finds every replica of node there', () => {
    expect(nodeEnv.OZ0_METRICS_PORT).toBe('9464');
    const job = prometheusConfig.scrape_configs.find((c) => c.job_name === 'oz0');
    expect(job?.dns_sd_configs).toEqual([expect.objectContaining({ names: ['node'], port: 9464 })]);
    const mount = services.prometheus.volumes?.find(
      (v) => typeof v === 'object' && v.target?.includes('prometheus.yml'),
    );
    expect(mount).toMatchObject({ source: './deploy/prometheus/prometheus.yml', read_only: true });
  });

  test('O2: nodes send their spans to the jaeger service over OTLP/HTTP', () => {
    expect(nodeEnv.OTEL_EXPORTER_OTLP_ENDPOINT).toBe('http://jaeger:4318');
  });

  test('O1-O2: Prometheus publishes 9090 and Jaeger 16686, on the host loopback only', () => {
    expect(publishedPorts(services.prometheus)).toContainEqual({ container: 9090, host: '127.0.0.1:9090' });
    expect(publishedPorts(services.jaeger)).toContainEqual({ container: 16686, host: '127.0.0.1:16686' });
  });
});

describe('docker-compose.yml: the payload store (D2)', () => {
  const store = clusterConfig.payloads.store as unknown as { s3: Record<string, string> };

  test('D2: the nodes keep big payloads in the s3 service, SeaweedFS pinned, with one identity both name', () => {
    const s3 = services.s3;
    expect(imageTag(s3.image!)).toEqual({ repo: 'chrislusf/seaweedfs', tag: expect.stringMatching(/^\d+\.\d+$/) });
    expect(s3.command).toEqual(expect.arrayContaining(['server', '-s3', '-s3.port=8333']));
    expect(store.s3).toMatchObject({ endpoint: 'http://s3:8333', bucket: 'oz0-payloads', prefix: 'tenants/' });
    // The store's identity (SeaweedFS's AWS_* admin identity) is the nodes' (their env: references): one pair.
    const s3Env = Object.fromEntries(Object.entries(environment(s3)).map(([k, v]) => [k, withDefaults(v)]));
    expect(store.s3.accessKeyId).toBe('env:OZ0_S3_ACCESS_KEY');
    expect(store.s3.secretAccessKey).toBe('env:OZ0_S3_SECRET_KEY');
    expect(nodeEnv.OZ0_S3_ACCESS_KEY).toBe(s3Env.AWS_ACCESS_KEY_ID);
    expect(nodeEnv.OZ0_S3_SECRET_KEY).toBe(s3Env.AWS_SECRET_ACCESS_KEY);
    expect(node.depends_on).toMatchObject({ s3: { condition: 'service_healthy' } });
    expect(s3.healthcheck?.test).toBeDefined();
    // Its data on a volume of its own; nothing published on the host: only the nodes reach it.
    expect(s3.volumes).toContainEqual(expect.objectContaining({ type: 'volume', target: '/data' }));
    expect(publishedPorts(s3)).toEqual([]);
  });
});
