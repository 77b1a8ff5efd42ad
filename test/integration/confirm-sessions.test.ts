/**
 * A7: in a live session, a harness's `tools/call` of a tool whose verdict is `confirm` waits like any other call. The
 * harness hears progress notifications that say it waits for a person (so a client that resets its timeout on
 * progress keeps waiting), and its `notifications/cancelled` withdraws the question. One harness is the test probe on
 * the MCP TypeScript SDK's client; the other an agent on the OpenAI Agents SDK for Python, its MCP timeout raised. On
 * a real dev server; what the ledger received is read from its own log.
 */
import path from 'node:path';
import { readReceived } from '../../examples/common';
import { answerCall } from '../../client/calls';
import { startJob } from '../../client/jobs';
import { changePolicy, policyTargetOf } from '../../common/policy-client';
import type { JobSpec } from '../../model/schemas';
import { createNode } from '../../worker/node';
import { isSessionTrace } from '../../model/job';
import { statusQuery, waitingCallsQuery } from '../../model/messages';
import type { JobTrace, SessionTrace } from '../../model/job';
import { setPolicyUpdate } from '../../model/messages';
import { ROOT, eventually, example, fixture, logger, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { sandboxed } from '../helpers/sandbox';
import { agentsSdkMissing, python, withAgentsSdk } from '../helpers/python';

const temporal = useTemporal();

/** How often a waiting call tells its harness so, here: short, so a client's short timeout shows the effect. */
const NOTICE_MS = 400;

function setup() {
  const dir = tmpDir();
  const received = path.join(dir, 'received.jsonl');
  const config = temporal.config({
    servers: {
      ledger: {
        command: 'node',
        args: [example('ledger')],
        env: { OZ0_RECEIVED_LOG: received, LEDGER_FILE: path.join(dir, 'ledger.jsonl') },
      },
    },
    tools: { '*': { timeoutSeconds: 60, maxAttempts: 3 } },
    harnesses: {
      probe: {
        command: 'node',
        args: [fixture('harness.js')],
        env: { NODE_PATH: path.join(ROOT, 'node_modules') },
        tools: ['ledger.*'],
        timeoutSeconds: 120,
        sandbox: sandboxed(),
      },
      ...(python && {
        refunds_openai: {
          command: python,
          args: [path.join(ROOT, 'examples', 'agents', 'refunds_openai.py')],
          tools: ['ledger.*'],
          timeoutSeconds: 120,
        },
      }),
    },
    node: { waitingNoticeMs: NOTICE_MS },
  });
  const refunds = () => readReceived(received).filter((r) => r.tool === 'refund');
  return { config, refunds };
}

function sessionOf(trace: JobTrace): SessionTrace {
  const found = trace.steps.find(isSessionTrace);
  if (!found) throw new Error('no live session in the trace');
  return found;
}

interface SeenCall {
  name: string;
  isError?: boolean;
  text?: string;
  key?: string;
  rejected?: string;
  progress: { progress: number; total?: number; message?: string }[];
}

test("A7: a harness's call of a confirm tool waits like any call; it hears progress saying so, and a client that resets its timeout on progress outlasts it; a client that gives up withdraws its question", async () => {
  const { config, refunds } = setup();
  const tenant = uniqueId('t');
  const refund = (order: string) => ({ call: 'ledger.refund', args: { order_id: order, amount: 5 }, progress: true });
  const spec: JobSpec = {
    tenant,
    steps: [
      {
        session: {
          harness: 'probe',
          input: {
            steps: [
              {
                parallel: [
                  // Waits as long as the person takes: each notice resets its 3 s timeout.
                  { ...refund('o-a'), timeoutMs: 3000, resetTimeoutOnProgress: true },
                  // Gives up 1.5 s after it heard it waits (a loaded machine may take longer to get there): the MCP
                  // SDK's client sends notifications/cancelled for it.
                  { ...refund('o-b'), cancelOnProgress: true, cancelAfterMs: 1500 },
                ],
              },
            ],
          },
        },
      },
    ],
  };
  const node = await createNode({ config, logger });
  const trace = await node.runUntil(async () => {
    await changePolicy(policyTargetOf(config, temporal.client), tenant, setPolicyUpdate, ['ledger.refund', 'confirm']);
    const handle = await startJob({ client: temporal.client, taskQueue: config.temporal.taskQueue }, spec);
    await eventually(async () => ((await handle.query(waitingCallsQuery)).length === 2 ? true : undefined));
    // The one that gave up is withdrawn; the other still waits, well past its own timeout.
    const left = await eventually(async () => {
      const waiting = await handle.query(waitingCallsQuery);
      return waiting.length === 1 ? waiting[0] : undefined;
    }, 20_000);
    await new Promise((r) => setTimeout(r, 4000));
    expect(await handle.query(waitingCallsQuery)).toEqual([left]);
    expect(await handle.query(statusQuery)).toBe('waiting');
    expect(refunds()).toHaveLength(0);
    await answerCall(temporal.client, handle.workflowId, { approve: true, by: 'frank' });
    return (await handle.result()) as JobTrace;
  });
  const session = sessionOf(trace);
  const seen = session.result?.structuredContent as { calls: SeenCall[] };
  const patient = seen.calls.find((c) => c.isError === false)!;
  const gaveUp = seen.calls.find((c) => c.rejected !== undefined)!;
  expect(gaveUp.rejected).toMatch(/gave up/i);
  // It heard, at once and every notice, that the call waits for a person and how to answer it.
  const waitingNotices = patient.progress.filter((p) => p.message?.startsWith("waiting for a person's yes"));
  expect(waitingNotices.length).toBeGreaterThanOrEqual(5);
  expect(waitingNotices[0].message).toContain(`oz0 call approve ${session.calls[0].key.split('/')[0]}`);
  for (let i = 1; i < patient.progress.length; i++) {
    expect(patient.progress[i].progress).toBeGreaterThan(patient.progress[i - 1].progress);
  }
  // The server received the approved call alone, once, under the key the harness got back.
  expect(refunds().map((r) => r.key)).toEqual([patient.key]);
  const steps = session.calls;
  const approved = steps.find((s) => s.key === patient.key)!;
  expect(approved.question?.answer).toMatchObject({ approved: true, by: 'frank' });
  expect(approved.attempts).toEqual([{ attempt: 1, outcome: 'ok' }]);
  const withdrawn = steps.find((s) => s.key !== patient.key)!;
  expect(withdrawn.question?.ended).toMatch(/^withdrawn by its session: /);
  expect(withdrawn.attempts).toEqual([
    { attempt: 1, outcome: 'cancelled', note: expect.stringMatching(/nothing was sent$/) },
  ]);
});

withAgentsSdk(
  `A7: an agent on the OpenAI Agents SDK for Python, its MCP timeout raised, waits for a person's yes; at the SDK's default 5 s it would have given up${agentsSdkMissing ? ` (skipped: ${agentsSdkMissing})` : ''}`,
  async () => {
    const { config, refunds } = setup();
    const tenant = uniqueId('t');
    const agent = (order: string, input: object): JobSpec => ({
      tenant,
      steps: [
        { call: 'ledger.charge', args: { order_id: order, amount: 500 } },
        { session: { harness: 'refunds_openai', input: { order_id: order, ...input } } },
      ],
    });
    const node = await createNode({ config, logger });
    const [patient, hasty] = await node.runUntil(async () => {
      await changePolicy(policyTargetOf(config, temporal.client), tenant, setPolicyUpdate, [
        'ledger.refund',
        'confirm',
      ]);
      const jc = { client: temporal.client, taskQueue: config.temporal.taskQueue };
      // The harness as written: a day for each MCP call. And one that keeps 2 s, as the SDK's 5 s default would.
      const patientJob = await startJob(jc, agent('o-p', {}));
      const hastyJob = await startJob(jc, agent('o-h', { mcp_timeout_seconds: 2 }));
      const asked = await eventually(
        async () => (await patientJob.query(waitingCallsQuery))[0],
        60_000,
        "the agent's refund to wait",
      );
      expect(asked).toMatchObject({ tool: 'ledger.refund', session: 's1', args: '{"order_id":"o-p","amount":500}' });
      // Longer than the SDK's own 5 s: the raised timeout holds.
      await new Promise((r) => setTimeout(r, 6000));
      expect(refunds()).toHaveLength(0);
      await answerCall(temporal.client, patientJob.workflowId, { approve: true, by: 'grace' });
      return [(await patientJob.result()) as JobTrace, (await hastyJob.result()) as JobTrace];
    });
    const done = sessionOf(patient);
    expect(done.result?.structuredContent).toEqual({
      order_id: 'o-p',
      action: 'refunded',
      final: expect.stringMatching(/^refund of o-p: refunded 500 to o-p /),
    });
    const refundStep = done.calls.find((c) => c.tool === 'ledger.refund')!;
    expect(refundStep.question?.answer).toMatchObject({ approved: true, by: 'grace' });
    expect(refunds().map((r) => r.key)).toEqual([refundStep.key]);
    // The hasty one's client gave up: the question was withdrawn, nothing was sent, and the agent said so.
    const gaveUp = sessionOf(hasty);
    expect(gaveUp.result?.structuredContent).toEqual({
      order_id: 'o-h',
      action: 'not refunded',
      final: expect.stringMatching(/^refund of o-h: /),
    });
    const withdrawn = gaveUp.calls.find((c) => c.tool === 'ledger.refund')!;
    // The agent speaks 2026-07-28 with the gateway: the MCP Python SDK closes the request's stream when it stops
    // waiting, and may send notifications/cancelled (with its reason) too; whichever reaches the gateway first
    // withdraws the question.
    expect(withdrawn.question?.ended).toMatch(
      /^withdrawn by its session: (timed out after 2|the harness closed the call’s stream)/,
    );
    expect(refunds().some((r) => (r.args as { order_id?: string }).order_id === 'o-h')).toBe(false);
  },
  120_000,
);
