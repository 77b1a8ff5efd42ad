/**
 * (I7) What isolation costs: a sandboxed server's start (spawned until its first `tools/call` is answered) and a call
 * on it (one `tools/call` answered), in a bubblewrap sandbox against the same server run as a plain process
 * (`node.isolation: "none"`), in one run, the two interleaved so the machine's noise falls on both. Measured on the
 * node's pool, without Temporal: the difference is the sandbox's alone. And a harness's start, whose network is its own
 * and needs a forwarder inside: with the one the node runs (oz0's native one where Go is), with the Node.js one for
 * comparison, in the same sandbox with nothing led in (no forwarder: the sandbox's own share) and plain, the four
 * interleaved.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { parseConfig } from '../../common/config';
import type { LoadedConfig } from '../../common/config';
import { createLogger } from '../../common/logger';
import { projectRoot } from '../../common/paths';
import { Isolation } from '../../activities/sandbox';
import { compile, sandboxFilterPlan } from '../../activities/sandbox/seccomp';
import {
  describeForwarder,
  nodeForwarder as nodeForwarderOf,
  provideForwarder,
} from '../../activities/sandbox/native-forwarder';
import { ServerPool } from '../../activities/pool';
import { fixed, mean, spread } from '../common';
import type { Row } from '../common';

export interface SandboxOptions {
  starts: number;
  calls: number;
}

function configFor(isolation: 'bwrap' | 'none', stateDir: string): LoadedConfig {
  const root = projectRoot();
  return {
    ...parseConfig({
      servers: {
        box: {
          command: 'node',
          args: ['dist/examples/reader.js'],
          sandbox: { read: ['dist', 'node_modules'] },
        },
      },
      node: { isolation, stateDir },
    }),
    baseDir: root,
    source: 'bench',
  };
}

export async function measureSandbox(opts: SandboxOptions) {
  const logger = createLogger({ level: 'warn' });
  // I1: what a node pays once for every sandbox's filter (koffi and libseccomp loaded, the profile compiled).
  const t0 = performance.now();
  const filter = compile(sandboxFilterPlan());
  const filterMs = performance.now() - t0;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-bench-sandbox-'));
  const kinds = ['isolated', 'plain'] as const;
  /** Round i's order: who goes first alternates, so neither always meets a cache the other warmed. */
  const inTurn = (i: number) => (i % 2 === 0 ? kinds : ([...kinds].reverse() as (typeof kinds)[number][]));
  const pools = {
    isolated: new ServerPool({
      config: configFor('bwrap', path.join(dir, 'isolated')),
      logger,
      sandboxRoot: path.join(dir, 'isolated'),
    }),
    plain: new ServerPool({
      config: configFor('none', path.join(dir, 'plain')),
      logger,
      sandboxRoot: path.join(dir, 'plain'),
    }),
  };
  const starts: Record<(typeof kinds)[number], number[]> = { isolated: [], plain: [] };
  const calls: Record<(typeof kinds)[number], number[]> = { isolated: [], plain: [] };
  // The forwarder a node runs (built now where Go is and it is not built yet), and the Node.js one to compare.
  const forwarder = provideForwarder();
  const nodeForwarder = nodeForwarderOf('the comparison');
  // And the same sandbox with nothing led in (no gateway, so no forwarder): what the forwarder itself adds.
  const harnessKinds = ['isolated', 'node-forwarder', 'no-forwarder', 'plain'] as const;
  type HarnessKind = (typeof harnessKinds)[number];
  const harness: Record<HarnessKind, number[]> = { isolated: [], 'node-forwarder': [], 'no-forwarder': [], plain: [] };
  // One Isolation per kind, as a node has: its check (a probe sandbox, the limits' mode) is paid once, in the warm-up,
  // not in every harness's start.
  const isolations: Record<HarnessKind, Isolation> = {
    isolated: new Isolation(configFor('bwrap', dir), logger, undefined, undefined, forwarder),
    'node-forwarder': new Isolation(configFor('bwrap', dir), logger, undefined, undefined, nodeForwarder),
    'no-forwarder': new Isolation(configFor('bwrap', dir), logger, undefined, undefined, forwarder),
    plain: new Isolation(configFor('none', dir), logger),
  };
  try {
    // Starts, one pair at a time, the first pair a warm-up (page cache, bwrap's first run).
    for (let i = -1; i < opts.starts; i++) {
      for (const kind of inTurn(i)) {
        const job = { tenant: 'bench', jobId: `start-${kind}-${i}` };
        const t = performance.now();
        const lease = await pools[kind].acquire('box', job);
        // Until its first answer: once the pool knows the server speaks 2026-07-28 (from the warm-up's
        // `server/discover`), a start sends nothing before the first request, so acquire returns as soon as it is spawned.
        await lease.connection.client.callTool({ name: 'echo', arguments: { text: 'started' } });
        const ms = performance.now() - t;
        lease.release();
        await pools[kind].stopSandbox('box', job);
        if (i >= 0) starts[kind].push(ms);
      }
    }
    // Calls on one open server each, in blocks of 50 taken in turn.
    const leases = {
      isolated: await pools.isolated.acquire('box', { tenant: 'bench', jobId: 'calls' }),
      plain: await pools.plain.acquire('box', { tenant: 'bench', jobId: 'calls' }),
    };
    for (let done = -50; done < opts.calls; done += 50) {
      for (const kind of kinds) {
        const { client } = leases[kind].connection;
        const t = performance.now();
        for (let j = 0; j < 50; j++) await client.callTool({ name: 'echo', arguments: { text: `call ${j}` } });
        if (done >= 0) calls[kind].push((performance.now() - t) / 50);
      }
    }
    for (const kind of kinds) leases[kind].release();
    // A harness's start: its sandbox with a forwarder (its gateway), until the program has run and exited.
    for (let i = -1; i < Math.min(opts.starts, 30); i++) {
      // Each round in another order (a rotation of the three), so none always follows the same one.
      for (const kind of harnessKinds.map((_, k) => harnessKinds[(k + i + 1) % harnessKinds.length])) {
        const isolation = isolations[kind];
        const cwd = fs.mkdtempSync(path.join(dir, 'harness-'));
        const t = performance.now();
        const started = await isolation.start({
          who: 'bench harness',
          field: 'harnesses.bench.sandbox',
          command: 'node',
          args: ['-e', '0'],
          cwd,
          env: {},
          grants: defaultGrants(),
          tenant: 'bench',
          gateway:
            kind === 'no-forwarder'
              ? undefined
              : { port: 40_000 + (i % 1000), accept: (socket: Duplex) => socket.destroy() },
        });
        await new Promise((resolve) => started.child.once('exit', resolve));
        const ms = performance.now() - t;
        await started.stop(1000);
        if (i >= 0) harness[kind].push(ms);
      }
    }
  } finally {
    await pools.isolated.close();
    await pools.plain.close();
    for (const kind of harnessKinds) await isolations[kind].close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const start = { isolated: spread(starts.isolated), plain: spread(starts.plain) };
  const extraStart = start.isolated.p50 - start.plain.p50;
  const call = { isolated: mean(calls.isolated), plain: mean(calls.plain) };
  const callRatio = call.isolated / call.plain;
  const harnessStart = {
    isolated: spread(harness.isolated),
    nodeForwarder: spread(harness['node-forwarder']),
    noForwarder: spread(harness['no-forwarder']),
    plain: spread(harness.plain),
  };
  const extraHarness = harnessStart.isolated.p50 - harnessStart.plain.p50;
  const extraNodeHarness = harnessStart.nodeForwarder.p50 - harnessStart.plain.p50;
  const extraBare = harnessStart.noForwarder.p50 - harnessStart.plain.p50;
  const rows: Row[] = [
    {
      measure: '(I1) every sandbox’s seccomp filter, built once per node (koffi, libseccomp, Docker’s profile)',
      figure: `${fixed(filterMs, 1)} ms, ${filter.bpf.length / 8} BPF instructions (libseccomp ${filter.libseccomp})`,
    },
    {
      measure: "(I7) a sandboxed server's start (spawn → its first call answered), isolated − plain, p50",
      target: '≤ 50 ms more',
      figure: `+${fixed(extraStart, 1)} ms (${fixed(start.isolated.p50, 1)} vs ${fixed(start.plain.p50, 1)} ms, ${opts.starts} starts each)`,
      met: extraStart <= 50,
    },
    {
      measure: '(I7) a call on a sandboxed server (tools/call answered), isolated / plain',
      target: '≤ 1.05',
      figure: `${fixed(callRatio, 3)} (${fixed(call.isolated * 1000, 0)} vs ${fixed(call.plain * 1000, 0)} µs a call, ${opts.calls} calls each)`,
      met: callRatio <= 1.05,
    },
    {
      measure: `(I7) a harness's start (spawn → \`node -e 0\` exited), isolated with ${forwarder.kind === 'native' ? "oz0's native forwarder" : 'the Node.js forwarder (no Go)'} − plain, p50`,
      target: '≤ 50 ms more',
      figure: `+${fixed(extraHarness, 1)} ms (${fixed(harnessStart.isolated.p50, 1)} vs ${fixed(harnessStart.plain.p50, 1)} ms, ${harness.plain.length} starts each)`,
      met: extraHarness <= 50,
    },
    {
      measure: '(I7) the same with the Node.js forwarder, interleaved with it, for comparison',
      figure: `+${fixed(extraNodeHarness, 1)} ms (${fixed(harnessStart.nodeForwarder.p50, 1)} ms)`,
    },
    {
      measure: '(I7) the same sandbox with nothing led in (no forwarder), interleaved: what the sandbox alone costs',
      figure: `+${fixed(extraBare, 1)} ms (${fixed(harnessStart.noForwarder.p50, 1)} ms)`,
    },
  ];
  return {
    rows,
    data: {
      filterMs,
      start,
      extraStart,
      call,
      callRatio,
      forwarder: describeForwarder(forwarder),
      harnessStart,
      extraHarness,
      extraNodeHarness,
      extraBare,
    },
  };
}

/** A harness's sandbox as its config's defaults make it: no grants, the default limits. */
function defaultGrants() {
  return parseConfig({ harnesses: { h: { command: 'node', tools: ['*'] } } }).harnesses.h.sandbox;
}
