/**
 * A13: a config seeds a tenant's policy and shares the first time its policy workflow starts, and only then. A node
 * restarted with a changed config names, at start, each field where it differs from what is durable, with the command
 * that would change it, and applies nothing; `oz0 tenant status` and `oz0 policy show` say which fields came from the
 * config and which a command set. Against a real Temporal: the durable state is read back from its workflow.
 */
import { createLogger } from '../../common/logger';
import { changePolicy, policyStart, policyTargetOf, readOrigins } from '../../common/policy-client';
import { setSharesUpdate } from '../../model/messages';
import { POLICY_WORKFLOW } from '../../model/policy-rules';
import type { JobTrace } from '../../model/job';
import { callsOf } from '../../model/job';
import { createNode } from '../../worker/node';
import { oz0 } from '../helpers/cli';
import { fixture, uniqueId, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();

/** A config file whose tenants are these, with the probe server; no fairness probe (the node's start is what counts). */
function configFile(tenants: Record<string, unknown>) {
  return temporal.configFile({
    servers: { probe: { command: 'node', args: [fixture('probe-server.js')] } },
    tenants,
    node: { fairnessProbe: false },
  });
}

/**
 * Starts a node on the config, waits for what it says of its tenants at start (it reads them beside its workers, then
 * looks at fairness), runs `fn`, and gives back the lines it warned of.
 */
async function nodeSays(config: ReturnType<typeof configFile>['config'], fn: () => Promise<void> = async () => {}) {
  const lines: Array<{ level: number; msg: string; tenant?: string }> = [];
  const logger = createLogger({
    level: 'info',
    destination: { write: (line: string) => void lines.push(JSON.parse(line)) },
  });
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    await node.fairness;
    await fn();
  });
  return lines.filter((l) => l.level >= 40).map((l) => l.msg);
}

test('A13: a node restarted with a changed config names each field that differs from the durable shares, with the command that changes it, and applies none; the same config says nothing (the control)', async () => {
  const beta = uniqueId('beta');
  const a = configFile({ [beta]: { policy: { 'probe.*': 'allow' }, limits: { maxRunningCalls: 2 } } });
  // The first node seeds beta's policy workflow with config A (its first call needs it).
  const first = await nodeSays(a.config, async () => {
    const job = await temporal.client.workflow.start('job', {
      taskQueue: a.config.temporal.taskQueue,
      workflowId: uniqueId('seed'),
      args: [{ tenant: beta, steps: [{ call: 'probe.probe' }] }],
    });
    expect(callsOf((await job.result()) as JobTrace)[0].result.isError).toBe(false);
  });
  expect(first.filter((l) => l.includes(beta))).toEqual([]);
  // Restarted with the same config: nothing differs, nothing said (and the policy was read: no line says it was not).
  expect((await nodeSays(a.config)).filter((l) => l.includes(beta))).toEqual([]);

  // Config B: a rate of 5, no cap.
  const b = configFile({ [beta]: { policy: { 'probe.*': 'allow' }, limits: { callsPerSecond: 5 } } });
  const seeded = '(from the config that first seeded it), which is what runs; to change it:';
  const capLine =
    `tenant ${beta}: limits.maxRunningCalls is none in the config but 2 in its durable policy ${seeded} ` +
    `oz0 tenant set ${beta} --max-running none`;
  // Nothing was applied: the durable shares are config A's, all of them from the config (read while a node runs: a
  // policy answers its queries through a worker).
  const status = async () => JSON.parse((await oz0(['tenant', 'status', beta, '--json', '--config', b.file])).stdout);
  const said = await nodeSays(b.config, async () => {
    expect(await status()).toMatchObject({
      source: 'config',
      shares: { weight: 1, maxPriority: 3, limits: { maxRunningCalls: 2 } },
      sources: { weight: 'config', maxPriority: 'config', 'limits.maxRunningCalls': 'config' },
    });
    // The operator takes the rate: a command's field says set, the seed's still config.
    expect((await oz0(['tenant', 'set', beta, '--rate', '5', '--config', b.file])).code).toBe(0);
    expect(await status()).toMatchObject({
      source: 'set',
      shares: { limits: { maxRunningCalls: 2, callsPerSecond: 5 } },
      sources: { 'limits.callsPerSecond': 'set', 'limits.maxRunningCalls': 'config', weight: 'config' },
    });
    const text = (await oz0(['tenant', 'status', beta, '--config', b.file])).stdout;
    expect(text).toContain(`  ${beta}: rate set by a command; cap, priority, weight from the config`);
  });
  expect(said.filter((l) => l.includes(beta))).toEqual([
    `tenant ${beta}: limits.callsPerSecond is 5 in the config but none in its durable policy ${seeded} ` +
      `oz0 tenant set ${beta} --rate 5`,
    capLine,
  ]);
  // Restarted again with config B: only the cap still differs.
  expect((await nodeSays(b.config)).filter((l) => l.includes(beta))).toEqual([capLine]);
}, 180_000);

test('A13: `oz0 policy show` marks each pattern from the config or set by a command; an older caller’s setShares (shares alone) marks the fields it changed', async () => {
  const gamma = uniqueId('gamma');
  const { config, file } = configFile({ [gamma]: { policy: { 'probe.*': 'allow' } } });
  const target = policyTargetOf(config, temporal.client);
  const said = await nodeSays(config, async () => {
    expect((await oz0(['policy', 'set', gamma, 'probe.hang', 'deny', '--config', file])).code).toBe(0);
    const shown = JSON.parse((await oz0(['policy', 'show', gamma, '--json', '--config', file])).stdout);
    expect(shown).toMatchObject({
      policy: { 'probe.*': 'allow', 'probe.hang': 'deny' },
      policySources: { 'probe.*': 'config', 'probe.hang': 'set' },
    });
    const text = (await oz0(['policy', 'show', gamma, '--config', file])).stdout;
    expect(text).toMatch(/probe\.\* +allow +from the config/);
    expect(text).toMatch(/probe\.hang +deny +set by a command/);
    // As a caller from before A13 sends it: the shares alone, which the validator still takes.
    await changePolicy(target, gamma, setSharesUpdate, [{ weight: 2, maxPriority: 3, limits: {} }]);
    expect((await readOrigins(target, gamma)).origins).toEqual({
      policy: ['probe.hang'],
      shares: ['weight'],
      complete: true,
    });
  });
  expect(said.filter((l) => l.includes(gamma))).toEqual([]);
  // The next node names what a command set against this config, the pattern it does not name included.
  expect((await nodeSays(config)).filter((l) => l.includes(gamma))).toEqual([
    `tenant ${gamma}: policy probe.hang is deny in its durable policy (set by a command), which the config does not ` +
      `name; it stays (no command takes a pattern off; oz0 policy set ${gamma} probe.hang … changes it)`,
    `tenant ${gamma}: fairness.weight is 1 in the config but 2 in its durable policy (set by a command), which is ` +
      `what runs; to change it: oz0 tenant set ${gamma} --weight 1`,
  ]);
}, 120_000);

test('A13: a tenant whose policy cannot be read is said so, and the node goes on (to the next tenant, and to its calls)', async () => {
  const [lost, beta] = [uniqueId('lost'), uniqueId('beta')];
  const { config } = configFile({
    [lost]: { policy: {} },
    [beta]: { policy: {}, limits: { callsPerSecond: 5 } },
  });
  const target = policyTargetOf(config, temporal.client);
  // Lost's policy workflow waits on a queue no worker polls: it answers no query. Beta's was seeded with another cap.
  await temporal.client.workflow.start(POLICY_WORKFLOW, {
    ...policyStart(target, lost),
    taskQueue: uniqueId('nobody-polls'),
  });
  await temporal.client.workflow.start(
    POLICY_WORKFLOW,
    policyStart(
      { ...target, shareSeeds: { [beta]: { weight: 1, maxPriority: 3, limits: { maxRunningCalls: 4 } } } },
      beta,
    ),
  );
  const said = await nodeSays(config, async () => {
    const job = await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId('after'),
      args: [{ tenant: beta, steps: [{ call: 'probe.probe' }] }],
    });
    expect(callsOf((await job.result()) as JobTrace)[0].result.isError).toBe(false);
  });
  expect(said.find((l) => l.includes(lost))).toMatch(
    new RegExp(`^could not read tenant ${lost}'s policy to compare it with the config \\(.+\\): the node goes on$`),
  );
  expect(said.filter((l) => l.startsWith(`tenant ${beta}:`))).toHaveLength(2);
}, 120_000);
