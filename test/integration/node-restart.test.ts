/**
 * I9 (issue 34.6): a node that restarts stops what the node before it left. An `oz0 worker` is killed (SIGKILL) while
 * its sandboxed server has left a process behind in a session of its own (test/fixtures/hostile.js `escapee`); then
 * a node starts again on the same state folder. With bubblewrap the process went with its node (`--die-with-parent`,
 * its PID namespace); with `node.isolation: "none"` it outlived its node (the control: nothing else would stop it)
 * until the next node found it working in the old node's folder and stopped it. Either way the old folders go.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { JobTrace } from '../../model/job';
import type { JobSpec } from '../../model/schemas';
import { ROOT, eventually, fixture, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { NODE_PROGRAM, hostProcesses } from '../helpers/sandbox';

const temporal = useTemporal();

test.each<['bwrap' | 'none']>([['bwrap'], ['none']])(
  'I9: a node killed while its sandbox left a process behind; the next node on its state folder finds none left, or stops it (isolation %s)',
  async (isolation) => {
    const dir = tmpDir();
    const marker = uniqueId('left');
    const stateDir = path.join(dir, 'state');
    const servers = {
      box: {
        command: 'node',
        args: [fixture('hostile.js'), 'server'],
        env: { HOSTILE: JSON.stringify({ marker }) },
        sandbox: { read: NODE_PROGRAM.map((p) => path.join(ROOT, p)) },
      },
    };
    const node = { isolation, stateDir, heartbeatTimeoutSeconds: 3 };
    const config = temporal.config({ servers, node });
    const file = path.join(dir, 'oz0.config.json');
    fs.writeFileSync(file, JSON.stringify({ temporal: config.temporal, servers, node }));
    const left = () => hostProcesses(`oz0-hostile-escapee ${marker}`);

    const a = await temporal.startWorker(file, 'node-a');
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId('restart'),
      args: [{ tenant: 'acme', steps: [{ call: 'box.escapee' }, { session: { external: true } }] } satisfies JobSpec],
    });
    await eventually(async () => ((await handle.query<JobTrace>('trace')).steps.length > 0 ? true : undefined), 60_000);
    expect(left()).toHaveLength(1);
    a.proc.kill('SIGKILL');
    await a.exited;
    await new Promise((r) => setTimeout(r, 2000));
    const survivors = left();
    if (isolation === 'bwrap') expect(survivors).toEqual([]);
    else expect(survivors).toHaveLength(1);
    const folders = () => fs.readdirSync(path.join(stateDir, 'sandboxes'));
    const before = folders();
    expect(before).toHaveLength(1);

    const t0 = Date.now();
    const b = await temporal.startWorker(file, 'node-b');
    await eventually(() => (left().length === 0 ? true : undefined), 30_000, 'what node-a left stopped');
    expect(Date.now() - t0).toBeLessThan(30_000);
    // node-a's folder is gone; node-b's own is there.
    expect(folders()).not.toContain(before[0]);
    await handle.terminate('done');
    b.proc.kill('SIGTERM');
    await b.exited;
  },
);
