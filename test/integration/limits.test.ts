/**
 * A sandbox's limits (SPEC I4, issue 34.5) hold in each mode a node runs in — cgroup v1 (this machine's), resource
 * limits where no control group may be written (forced here with `node.limitsBy: "rlimit"`, as a node run by an
 * unprivileged user in a container is), and cgroup v2 where the machine has none (refused, saying why: this machine's
 * unified hierarchy holds no controller, so v2 itself cannot be tried here) — and each sandbox runs as a uid of its
 * own (I1). Each is tried by test/fixtures/hostile.js burning one limit, beside a positive control that shows the
 * test can fail, and asserted on the node's side: what the attempt says, what another sandbox and another tenant's
 * calls still do.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import type { LoadedConfig } from '../../common/config';
import type { JobSpec } from '../../model/schemas';
import { Isolation } from '../../activities/sandbox';
import { keyed, ownGroups } from '../../activities/sandbox/limits';
import { ServerPool } from '../../activities/pool';
import { createNode } from '../../worker/node';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import { ROOT, eventually, fixture, logger, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { hostProcesses, sandboxed, writableDir } from '../helpers/sandbox';

const temporal = useTemporal();

const root = process.getuid?.() === 0;

/** A node's config: the hostile server `box` with these limits, and another tenant's sandboxed probe `vic`. */
function limitsConfig(box: object, node: object = {}): LoadedConfig {
  return temporal.config({
    servers: {
      box: { command: 'node', args: [fixture('hostile.js'), 'server'], sandbox: sandboxed(box) },
      vic: { command: 'node', args: [fixture('probe-server.js')], sandbox: sandboxed() },
    },
    node,
  });
}

/** Starts a job of one tenant on the config's queue. */
function start(config: LoadedConfig, tenant: string, steps: JobSpec['steps']): Promise<WorkflowHandle> {
  return temporal.client.workflow.start('job', {
    taskQueue: config.temporal.taskQueue,
    workflowId: uniqueId(tenant),
    args: [{ tenant, steps } satisfies JobSpec],
  });
}

/** One call's result, its attempts' outcomes and notes. */
async function call(config: LoadedConfig, tool: string, args: Record<string, unknown> = {}, tenant = 'acme') {
  const trace: JobTrace = await (await start(config, tenant, [{ call: tool, args }])).result();
  const [c] = callsOf(trace);
  return {
    result: c.result,
    value: c.result.structuredContent as Record<string, number> | undefined,
    attempts: c.attempts.map((a) => [a.outcome, a.note]),
  };
}

const stopped = (why: string) => [['failed', `outcome unknown: its sandbox was stopped: past ${why}`]];

describe('I4, without a writable control group (node.limitsBy: "rlimit")', () => {
  const rlimit = { limitsBy: 'rlimit', limits: 'best-effort' };

  test('a fork bomb is stopped at sandbox.pids, while another sandbox of the same server still starts its own processes (RLIMIT_NPROC counts one sandbox)', async () => {
    const config = limitsConfig({ pids: 64 }, rlimit);
    const node = await createNode({ config, logger });
    const [bomb, beside, other] = await node.runUntil(() =>
      Promise.all([
        call(config, 'box.forkbomb'),
        // Started as the bomb goes off: a sandbox of its own, with its own uid (as root) or user namespace.
        new Promise((r) => setTimeout(r, 1500)).then(() => call(config, 'box.forks', { n: 20 })),
        call(config, 'vic.probe', {}, 'beta'),
      ]),
    );
    expect(bomb.attempts).toEqual(stopped('its limit of 64 processes (sandbox.pids)'));
    expect(beside.value).toEqual({ started: 20, of: 20 });
    expect(other.result.isError).toBe(false);
  });

  test('a disk filler is stopped at sandbox.diskMiB, in its folder and in its /tmp; one that stays under writes all it meant to (the control)', async () => {
    const config = limitsConfig({ diskMiB: 32 }, rlimit);
    const node = await createNode({ config, logger });
    const [folder, tmp, under] = await node.runUntil(() =>
      Promise.all([
        // 4 MiB every 20 ms: past the limit well within the time the node takes to read it (every 250 ms or so).
        call(config, 'box.diskfill', { mib: 256, paceMs: 20 }),
        call(config, 'box.diskfill', { where: '/tmp', mib: 256 }),
        call(config, 'box.diskfill', { mib: 8 }),
      ]),
    );
    expect(folder.attempts).toEqual(stopped('its disk limit of 32 MiB (sandbox.diskMiB)'));
    expect(tmp.attempts).toEqual(stopped('its disk limit of 32 MiB (sandbox.diskMiB)'));
    expect(under.value).toEqual({ writtenMiB: 8, failures: 0 });
  });

  (root ? test : test.skip)(
    'I12: files an earlier sandbox left in its write grant count against whoever writes them next: a sandbox that fills them past sandbox.diskMiB is stopped; one that rewrites them no bigger is not (the control)',
    async () => {
      const grant = writableDir('oz0-grant-');
      const config = limitsConfig({ diskMiB: 16, write: [grant] }, rlimit);
      const node = await createNode({ config, logger });
      await node.runUntil(async () => {
        // Six files of 1 MiB, left in the grant and handed to its owner when the sandbox ends.
        expect((await call(config, 'box.diskfill', { where: grant, mib: 6, fileMiB: 1 })).value).toEqual({
          writtenMiB: 6,
          failures: 0,
        });
        expect(fs.statSync(path.join(grant, 'fill-5')).uid).toBe(0);
        // The next sandbox writes 12 MiB into each of them, a file every 300 ms (time for the node's walks): 72 MiB
        // against 16, none of it in a file of its own.
        const filler = await call(config, 'box.diskfill', { where: grant, mib: 72, fileMiB: 12, paceMs: 300 });
        expect(filler.attempts).toEqual(stopped('its disk limit of 16 MiB (sandbox.diskMiB)'));
        const control = await call(config, 'box.diskfill', { where: grant, mib: 6, fileMiB: 1 });
        expect(control.value).toEqual({ writtenMiB: 6, failures: 0 });
      });
    },
  );

  test('strict (the default): a node that cannot hold memory and CPU time per sandbox refuses it, saying which, at start and at the call; best-effort warns and runs it (the control)', async () => {
    const config = limitsConfig({}, { limitsBy: 'rlimit' });
    const refused = 'its limits cannot all be held on this node, whose limits are by rlimit (I4): memory: ';
    expect(new Isolation(config, logger).startupLines()).toContainEqual({
      level: 'error',
      text: expect.stringContaining(`server "box" cannot start: ${refused}`),
    });
    const pool = new ServerPool({ config, logger, sandboxRoot: tmpDir() });
    try {
      await expect(pool.acquire('box', { tenant: 'acme', jobId: uniqueId('job') })).rejects.toThrow(
        /CPU time: without a control group/,
      );
    } finally {
      await pool.close();
    }
    const lenient = limitsConfig({}, { limitsBy: 'rlimit', limits: 'best-effort' });
    const lines = new Isolation(lenient, logger).startupLines();
    expect(lines.filter((l) => l.level === 'error')).toEqual([]);
    expect(lines).toContainEqual({
      level: 'warn',
      text: expect.stringMatching(/^sandbox limits, best-effort \(node.limits\): memory: /),
    });
    const node = await createNode({ config: lenient, logger });
    expect((await node.runUntil(() => call(lenient, 'box.forks', { n: 2 }))).value).toEqual({ started: 2, of: 2 });
  });
});

describe('I4, with a control group (this machine: cgroup v1)', () => {
  test.each(['/dev/shm', '/tmp'])(
    'memory written to %s counts: past sandbox.memoryMiB the sandbox is stopped; under it, it holds what it wrote (the control)',
    async (where) => {
      const config = limitsConfig({ memoryMiB: 128, diskMiB: 1024 });
      const node = await createNode({ config, logger });
      const [over, under] = await node.runUntil(() =>
        Promise.all([
          call(config, 'box.shmfill', { where, mib: 256 }),
          call(config, 'box.shmfill', { where, mib: 16 }),
        ]),
      );
      expect(over.attempts).toEqual(stopped('its memory limit of 128 MiB (sandbox.memoryMiB)'));
      expect(under.value).toEqual({ writtenMiB: 16 });
    },
  );

  test('cgroup v2 asked for where the machine has none: every sandbox is refused, saying why; v1 asked for works (the control)', () => {
    const v2 = new Isolation(limitsConfig({}, { limitsBy: 'cgroup2' }), logger).check();
    expect(v2.problem).toMatch(
      /^no sandbox's limits can be held \(I4\): limits by cgroup2 were asked for, and cannot be had here: /,
    );
    const v1 = new Isolation(limitsConfig({}, { limitsBy: 'cgroup1' }), logger).check();
    expect(v1.problem).toBeUndefined();
    expect(v1.limits).toMatchObject({ kind: 'cgroup v1', gaps: [] });
  });
});

describe.each([
  ['cgroup v1', {}],
  ['rlimit', { limitsBy: 'rlimit', limits: 'best-effort' }],
])('I4, %s: a CPU share', (_mode, node) => {
  test('a burner of 8 threads gets at most sandbox.cpus (1 of the 2 cores), and another tenant’s calls beside it keep their time and heartbeats', async () => {
    // Heartbeats every third of 5 s: a node starved past 5 s loses the 6-s call (T4), which has one attempt only.
    const config = limitsConfig({ cpus: 1 }, { ...node, heartbeatTimeoutSeconds: 5 });
    const worker = await createNode({ config, logger });
    const { burn, other, tookMs } = await worker.runUntil(async () => {
      const burning = call(config, 'box.burn', { threads: 8, ms: 8000 });
      await new Promise((r) => setTimeout(r, 1000));
      const t = Date.now();
      const job = await start(config, 'beta', [
        { call: 'vic.hang', args: { ms: 6000 } },
        ...Array.from({ length: 5 }, () => ({ call: 'vic.probe' })),
      ]);
      const trace: JobTrace = await job.result();
      return { other: trace, tookMs: Date.now() - t, burn: await burning };
    });
    // The bound: a little over one core (the kernel's accounting and the threads' start and end).
    expect(burn.value!.cores).toBeLessThanOrEqual(1.3);
    // The other tenant: every call answered at its first attempt (heartbeats held), the whole job within 25 s of the
    // 6 s it needs (a loaded 2-core machine, other tests beside).
    for (const c of callsOf(other)) expect([c.tool, c.result.isError, c.attempts.length]).toEqual([c.tool, false, 1]);
    expect(tookMs).toBeLessThan(25_000);
  });
});

test('I4 (cgroup v1): a quarter of a core is a quarter: a burner at sandbox.cpus 0.25 gets no more, held back by the kernel at its quota (the control: the same burner at 1 has a whole core’s quota)', async () => {
  const quarter = limitsConfig({ cpus: 0.25 });
  const whole = limitsConfig({ cpus: 1 });
  const [a, b] = [await createNode({ config: quarter, logger }), await createNode({ config: whole, logger })];
  // What the kernel holds each burner's sandbox to, read from its control group while it burns: on a busy machine a
  // comparison of what each got says more of the machine than of the limit (a control group competes as one).
  const groups = new Map<number, { throttled: number }>();
  let burning = true;
  const watch = (async () => {
    while (burning) {
      for (const p of hostProcesses(`${fixture('hostile.js')} server`)) {
        const group = cpuGroupOf(p.pid);
        if (group)
          groups.set(group.quotaUs, {
            throttled: Math.max(group.throttled, groups.get(group.quotaUs)?.throttled ?? 0),
          });
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  const [small, big] = await a
    .runUntil(() =>
      b.runUntil(() =>
        Promise.all([
          call(quarter, 'box.burn', { threads: 8, ms: 4000 }),
          call(whole, 'box.burn', { threads: 8, ms: 4000 }),
        ]),
      ),
    )
    .finally(() => (burning = false));
  await watch;
  expect(small.value!.cores).toBeLessThanOrEqual(0.35);
  expect(big.value!.cores).toBeLessThanOrEqual(1.1);
  // A quarter of each 100 ms period, and the kernel throttled it there; the whole core's sandbox had all of each.
  expect(groups.get(25_000)?.throttled).toBeGreaterThan(0);
  expect(groups.has(100_000)).toBe(true);
});

/** A process's CPU control group (cgroup v1): its quota per 100 ms period and how often the kernel throttled it. */
function cpuGroupOf(pid: number): { quotaUs: number; throttled: number } | undefined {
  try {
    const where = ownGroups(fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8')).get('cpu');
    if (where === undefined) return undefined;
    const dir = path.join('/sys/fs/cgroup', 'cpu', where);
    const quotaUs = Number(fs.readFileSync(path.join(dir, 'cpu.cfs_quota_us'), 'utf8'));
    const throttled = keyed(fs.readFileSync(path.join(dir, 'cpu.stat'), 'utf8'), 'nr_throttled');
    return quotaUs > 0 ? { quotaUs, throttled } : undefined;
  } catch {
    return undefined;
  }
}

(root ? test : test.skip)(
  'I1: two sandboxes run as uids of their own: neither can signal the other where no PID namespace parts them; each can signal its own (the control)',
  async () => {
    const config = limitsConfig({});
    const node = await createNode({ config, logger });
    await node.runUntil(async () => {
      const hold = [{ call: 'box.shmfill', args: { mib: 1, holdMs: 8000 } }];
      const jobs = [await start(config, 'acme', hold), await start(config, 'beta', hold)];
      const servers = await eventually(() => {
        const found = hostProcesses(`${fixture('hostile.js')} server`)
          .map((p) => ({ pid: p.pid, uid: uidOf(p.pid) }))
          .filter((p) => p.uid >= config.node.sandboxUids.first);
        return found.length === 2 ? found : undefined;
      });
      const [a, b] = servers;
      expect(a.uid).not.toBe(b.uid);
      const kill = (uid: number, pid: number) =>
        spawnSync(
          'setpriv',
          [`--reuid=${uid}`, `--regid=${config.node.sandboxGid}`, '--clear-groups', 'kill', '-0', String(pid)],
          { encoding: 'utf8' },
        );
      for (const [from, to] of [
        [a, b],
        [b, a],
      ]) {
        const denied = kill(from.uid, to.pid);
        expect([denied.status, denied.stderr]).toEqual([1, expect.stringContaining('Operation not permitted')]);
        expect(kill(to.uid, to.pid).status).toBe(0);
      }
      await Promise.all(jobs.map((j) => j.result()));
    });
  },
);

/** A process's real uid, as the node sees it. */
function uidOf(pid: number): number {
  try {
    return Number(/^Uid:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? -1);
  } catch {
    return -1;
  }
}

(root ? test : test.skip)(
  'I1, I4, I8: a node run as an unprivileged user (the Compose node): no control group, so limits by rlimit; its sandbox is filtered, in a user namespace of its own where RLIMIT_NPROC counts that sandbox alone — not the 80 other processes of its uid (the control: more than its limit) — and a fork bomb is stopped; I2: a secret file its config names, 0600 and its own user’s, reads as nothing in the sandbox (the control: its user reads it outside); a write grant of {tenant} is a folder of the tenant’s own, made by the node, another tenant’s beside it out of view',
  async () => {
    const uid = 61_999;
    const dir = tmpDir('oz0-unprivileged-');
    fs.chownSync(dir, uid, uid);
    // The node's user runs 80 processes outside: more than the sandbox's 64, all counted with the node's uid.
    const outside = Array.from({ length: 80 }, () =>
      spawn('setpriv', [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', 'sleep', '60'], { stdio: 'ignore' }),
    );
    try {
      // The control: outside a user namespace of its own, a limit of 64 counts those 80, and nothing can fork.
      await eventually(() =>
        hostProcesses('sleep 60').filter((p) => uidOf(p.pid) === uid).length >= 80 ? true : undefined,
      );
      const counted = spawnSync(
        'setpriv',
        [
          `--reuid=${uid}`,
          `--regid=${uid}`,
          '--clear-groups',
          'prlimit',
          '--nproc=64',
          '/bin/sh',
          '-c',
          '/bin/true && echo forked',
        ],
        { encoding: 'utf8' },
      );
      expect(counted.stdout).not.toContain('forked');
      const bomb = [
        'import os, time',
        'while True:',
        '    try:',
        '        if os.fork() == 0:',
        '            time.sleep(30)',
        '            os._exit(0)',
        '    except OSError:',
        '        time.sleep(0.01)',
      ].join('\n');
      // I2: another tenant's token, 0600 and the node's user's own, in a folder the sandbox may read: its config names
      // it (`file:`), so the sandbox, though it runs as the node's user, reads nothing there.
      const granted = path.join(dir, 'granted');
      const secret = path.join(granted, 'beta.key');
      fs.mkdirSync(granted);
      fs.writeFileSync(secret, 'Bearer beta-key-0123456789', { mode: 0o600 });
      fs.chownSync(granted, uid, uid);
      fs.chownSync(secret, uid, uid);
      // The control: the node's user reads it outside a sandbox.
      const readable = spawnSync('setpriv', [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', 'cat', secret], {
        encoding: 'utf8',
      });
      expect(readable.stdout).toBe('Bearer beta-key-0123456789');
      // I2: a write grant per tenant ({tenant}): the node, as its own user, makes acme's folder; beta's, beside it with
      // what beta left, is not in acme's view (the control: it is there, outside).
      const data = path.join(dir, 'data');
      fs.mkdirSync(path.join(data, 'beta'), { recursive: true });
      fs.writeFileSync(path.join(data, 'beta', 'left.txt'), 'beta-card-4242');
      for (const p of [data, path.join(data, 'beta'), path.join(data, 'beta', 'left.txt')]) fs.chownSync(p, uid, uid);
      const script = [
        `echo "secret: [$(cat ${secret} 2>/dev/null)]"`,
        `echo "data: [$(ls ${data} | tr '\\n' ' ')] beta: [$(cat ${data}/beta/left.txt 2>/dev/null)]"`,
        `echo mine > ${data}/acme/mine.txt && echo wrote`,
        'i=0; while [ $i -lt 20 ]; do sleep 10 & i=$((i+1)); done; echo "started $i"',
        'grep "^Seccomp:" /proc/self/status',
        'unshare -Ur true 2>/dev/null && echo "unshare: made" || echo "unshare: refused"',
        `exec python3 -c '${bomb}'`,
      ].join('\n');
      // The node's user reads the project (its dist/, node_modules, .tools) where it can: a clone in a private folder
      // (a root user's /root, 0700) is out of its reach, so the project is bound at a folder of /tmp's for it alone,
      // in a mount namespace of its own that ends with it.
      const mirror = tmpDir('oz0-project-');
      const args = {
        root: mirror,
        stateDir: `${dir}/state`,
        cwd: `${dir}/sandbox`,
        script,
        grants: { pids: 64, read: [granted], write: [path.join(data, '{tenant}')] },
        node: { limits: 'best-effort' },
        config: {
          servers: { desk: { url: 'http://127.0.0.1:9/mcp', credentials: 'per-tenant' } },
          tenants: { beta: { credentials: { desk: { headers: { Authorization: `file:${secret}` } } } } },
        },
      };
      const run = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
        const child = spawn('unshare', [
          '--mount',
          '--propagation',
          'private',
          '/bin/sh',
          '-c',
          'mount --bind "$0" "$1" && shift && exec setpriv "$@"',
          ROOT,
          mirror,
          `--reuid=${uid}`,
          `--regid=${uid}`,
          '--clear-groups',
          process.execPath,
          path.join(mirror, path.relative(ROOT, fixture('unprivileged-node.js'))),
          JSON.stringify(args),
        ]);
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (c) => (stdout += c));
        child.stderr.on('data', (c) => (stderr += c));
        child.once('exit', (code) => resolve({ code, stdout, stderr }));
      });
      expect(run).toMatchObject({ code: 0, stderr: '' });
      const report = JSON.parse(run.stdout) as {
        uid: number;
        status: { limits: { kind: string; why: string[] } };
        lines: Array<{ level: string; text: string }>;
        stoppedFor?: string;
        out: string;
      };
      expect(report.uid).toBe(uid);
      expect(report.status.limits).toMatchObject({
        kind: 'rlimit',
        why: [expect.stringContaining('permission denied')],
      });
      expect(report.lines).toContainEqual({
        level: 'warn',
        text: expect.stringMatching(/^sandbox limits, best-effort \(node.limits\): memory: /),
      });
      expect(report.out).toContain(
        'secret: []\ndata: [acme ] beta: []\nwrote\nstarted 20\nSeccomp:\t2\nunshare: refused\n',
      );
      const made = fs.statSync(path.join(data, 'acme'));
      expect([made.uid, made.mode & 0o7777]).toEqual([uid, 0o700]);
      expect(fs.readFileSync(path.join(data, 'acme', 'mine.txt'), 'utf8')).toBe('mine\n');
      expect(fs.readFileSync(path.join(data, 'beta', 'left.txt'), 'utf8')).toBe('beta-card-4242');
      expect(report.stoppedFor).toBe('its limit of 64 processes (sandbox.pids)');
    } finally {
      for (const p of outside) p.kill('SIGKILL');
    }
  },
);
