/**
 * I2 (issue 55.9): a server's `args` and `env` may name `{tenant}`, as a grant may: one server definition then gives
 * each tenant a process of its own (a plugin's) or a sandbox of its own, with its name there — its own file, its own
 * folder — never another tenant's. Read from the servers' side: which process answered each tenant, with what
 * arguments and environment, and what each wrote in its tenant's file. Beside the control: a plugin that names no
 * `{tenant}` is one process for every tenant.
 */
import fs from 'node:fs';
import path from 'node:path';
import { readReceived } from '../../examples/common';
import { callsOf } from '../../model/job';
import type { StepTrace } from '../../model/job';
import { createNode } from '../../worker/node';
import { sandboxed, writableDir } from '../helpers/sandbox';
import { fixture, logger, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();

/** What the probe server said of itself (test/fixtures/probe-server.js). */
interface Probed {
  instance: string;
  argv: string[];
  env: Record<string, string>;
}

const probed = (step: StepTrace) => step.result.structuredContent as unknown as Probed;

/** The instances that noted a `tools/call` in a probe's file. */
function callers(file: string): string[] {
  return readReceived(file)
    .filter((r) => r.event === 'received' && r.method === 'tools/call')
    .map((r) => r.instance as string);
}

test('I2: one server definition with {tenant} in its args and env gives each tenant its own process, file and folder; one without it is shared (the control)', async () => {
  const plain = tmpDir('oz0-tenant-servers-');
  const boxes = writableDir('oz0-tenant-boxes-');
  // A plugin's folders are the operator's to make; a sandbox's write grant that names {tenant} is made by the node.
  for (const dir of ['acme', 'beta', 'shared']) fs.mkdirSync(path.join(plain, dir));
  const probe = fixture('probe-server.js');
  const config = temporal.config({
    servers: {
      mine: {
        command: 'node',
        args: [probe, `${plain}/{tenant}`],
        env: { PROBE_LOG: `${plain}/{tenant}/probe.jsonl`, PROBE_TENANT: '{tenant}' },
      },
      ours: { command: 'node', args: [probe, `${plain}/shared`], env: { PROBE_LOG: `${plain}/shared/probe.jsonl` } },
      box: {
        command: 'node',
        args: [probe],
        env: { PROBE_LOG: `${boxes}/{tenant}/probe.jsonl` },
        sandbox: sandboxed({ write: [`${boxes}/{tenant}`] }),
      },
    },
    tools: { '*': { maxAttempts: 1 } },
  });
  const node = await createNode({ config, logger });
  const [acme, beta] = await node.runUntil(() =>
    Promise.all(
      ['acme', 'beta'].map(async (tenant) => {
        const handle = await temporal.client.workflow.start('job', {
          taskQueue: config.temporal.taskQueue,
          workflowId: uniqueId(tenant),
          args: [{ tenant, steps: [{ call: 'mine.probe' }, { call: 'ours.probe' }, { call: 'box.probe' }] }],
        });
        const [mine, ours, box] = callsOf(await handle.result()).map(probed);
        return { tenant, mine, ours, box };
      }),
    ),
  );

  for (const { tenant, mine, box } of [acme, beta]) {
    // Its own process, given its name in its args and env, wrote its own file: no other process's calls are in it.
    expect(mine.argv).toEqual([`${plain}/${tenant}`]);
    expect(mine.env).toMatchObject({ PROBE_LOG: `${plain}/${tenant}/probe.jsonl`, PROBE_TENANT: tenant });
    expect(callers(path.join(plain, tenant, 'probe.jsonl'))).toEqual([mine.instance]);
    // Its own sandbox, in the folder the node made for it.
    expect(box.env.PROBE_LOG).toBe(`${boxes}/${tenant}/probe.jsonl`);
    expect(callers(path.join(boxes, tenant, 'probe.jsonl'))).toEqual([box.instance]);
  }
  expect(acme.mine.instance).not.toBe(beta.mine.instance);
  // The control: a plugin that names no {tenant} is one process, whose one file has both tenants' calls.
  expect(acme.ours.instance).toBe(beta.ours.instance);
  expect(callers(path.join(plain, 'shared', 'probe.jsonl'))).toEqual([acme.ours.instance, acme.ours.instance]);
});
