/**
 * (f) A node's peak memory with `calls` calls running at once: an `oz0 worker` process (workflows and activities,
 * as in production) runs `calls` jobs whose one call sleeps on the reader (a plugin server, one process). Peak
 * resident memory is the kernel's high-water mark (VmHWM) of the node process; its server is reported apart.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { readReceived } from '../../examples/common';
import { fixed, until } from '../common';
import type { Row } from '../common';
import type { BenchEnv } from '../env';
import { descendants, killTree, startWorker } from '../processes';

export interface MemoryOptions {
  calls: number;
}

/** A field of /proc/<pid>/status in MiB (VmRSS, VmHWM); undefined once the process is gone. */
function statusMiB(pid: number, field: string): number | undefined {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

export async function measureMemory(env: BenchEnv, opts: MemoryOptions) {
  const taskQueue = 'oz0-memory';
  const log = path.join(env.dir, 'memory-received.jsonl');
  const file = path.join(env.dir, 'memory.config.json');
  fs.writeFileSync(
    file,
    JSON.stringify({
      temporal: { address: env.server.address, taskQueue },
      servers: {
        reader: {
          command: 'node',
          args: [env.reader],
          env: { OZ0_RECEIVED_LOG: log, READER_STATE: path.join(env.dir, 'memory-seen.json') },
        },
      },
      node: { slots: opts.calls + 100, stateDir: path.join(env.dir, 'state-memory') },
    }),
  );
  const workers: ChildProcess[] = [];
  const { proc } = await startWorker(file, 'bench-memory', workers);
  const pid = proc.pid!;
  const idleMiB = statusMiB(pid, 'VmRSS') ?? NaN;
  let serverPeakMiB = 0;
  let sampler: NodeJS.Timeout | undefined;
  try {
    sampler = setInterval(() => {
      for (const child of descendants(pid)) serverPeakMiB = Math.max(serverPeakMiB, statusMiB(child, 'VmRSS') ?? 0);
    }, 200);
    const t0 = performance.now();
    const jobs = await Promise.all(
      Array.from({ length: opts.calls }, () =>
        env.client.workflow.start('job', {
          taskQueue,
          workflowId: env.id('memory'),
          args: [{ tenant: 'bench', steps: [{ call: 'reader.sleep', args: { ms: 600_000 } }] }],
        }),
      ),
    );
    const keys = new Set(jobs.map((h) => `${h.workflowId}/c1`));
    const running = () => readReceived(log).filter((r) => r.event === 'start' && keys.has(r.key as string)).length;
    await until('every call to be running', () => (running() === opts.calls ? true : undefined), 180_000);
    const allRunningSeconds = (performance.now() - t0) / 1000;
    // Let them run together for a while: heartbeats, policy refreshes, a few GCs.
    await new Promise((r) => setTimeout(r, 5000));
    const runningMiB = statusMiB(pid, 'VmRSS') ?? NaN;
    const t1 = performance.now();
    await Promise.all(jobs.map((h) => h.cancel()));
    await Promise.all(jobs.map((h) => h.result().catch(() => undefined)));
    const cancelAllSeconds = (performance.now() - t1) / 1000;
    const peakMiB = statusMiB(pid, 'VmHWM') ?? NaN;
    const rows: Row[] = [
      {
        measure: `(f) node peak memory, ${opts.calls} calls at once`,
        figure: `${fixed(peakMiB, 0)} MiB (idle ${fixed(idleMiB, 0)}, server ${fixed(serverPeakMiB, 0)} MiB)`,
        target: '≤ 400 MB',
        met: peakMiB * 2 ** 20 <= 400e6,
      },
    ];
    return {
      rows,
      data: { ...opts, idleMiB, runningMiB, peakMiB, serverPeakMiB, allRunningSeconds, cancelAllSeconds },
    };
  } finally {
    if (sampler) clearInterval(sampler);
    for (const w of workers) if (w.exitCode === null) killTree(w.pid!);
  }
}
