/**
 * The cost of a call a harness makes through the node's gateway (H4: MCP to the gateway, a workflow Update, the
 * call's activity, the answer back) against the same call in a scripted session, on the same node and reader server.
 * Per call: from the first call's activity scheduled to the last one's completion, in the job's own history, over
 * the number of calls — the harness's start and its MCP handshake are outside that span, as a session's opening is.
 */
import type { Client } from '@temporalio/client';
import { fixed, mean } from '../common';
import type { Row } from '../common';
import { benchConfig, echoSteps, withNode } from '../env';
import type { BenchEnv } from '../env';

export interface GatewayOptions {
  calls: number;
  rounds: number;
}

/** Milliseconds per call over a job's calls, from its history. */
async function msPerCall(client: Client, workflowId: string, calls: number): Promise<number> {
  const events = (await client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
  const at = (e: (typeof events)[number]) => Number(e.eventTime!.seconds) * 1000 + (e.eventTime!.nanos ?? 0) / 1e6;
  const first = events.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'callTool');
  const last = events.filter((e) => e.activityTaskCompletedEventAttributes).at(-1);
  return (at(last!) - at(first!)) / calls;
}

export async function measureGateway(env: BenchEnv, opts: GatewayOptions) {
  const config = benchConfig(env, 'oz0-gateway', {
    harnesses: {
      writer: {
        command: 'node',
        args: [`${env.root}/dist/bench/writer-harness.js`],
        tools: ['reader.*'],
        timeoutSeconds: 600,
      },
    },
    jobs: { continueAsNewAfterCalls: 10_000, maxCallsPerSession: 10_000 },
  });
  const perCall: Record<'gateway' | 'scripted', number[]> = { gateway: [], scripted: [] };
  await withNode(env, config, async () => {
    const run = async (kind: 'gateway' | 'scripted', n: number) => {
      const steps = echoSteps(n);
      const session =
        kind === 'scripted'
          ? { session: steps }
          : { session: { harness: 'writer', input: { calls: steps.map((s) => ({ tool: s.call, args: s.args })) } } };
      const workflowId = env.id(`gateway-${kind}`);
      await env.client.workflow.execute('job', {
        taskQueue: 'oz0-gateway',
        workflowId,
        args: [{ tenant: 'bench', steps: [session] }],
      });
      return msPerCall(env.client, workflowId, n);
    };
    await run('scripted', 10);
    await run('gateway', 10);
    for (let r = 0; r < opts.rounds; r++) {
      perCall.scripted.push(await run('scripted', opts.calls));
      perCall.gateway.push(await run('gateway', opts.calls));
    }
  });
  const gateway = mean(perCall.gateway);
  const scripted = mean(perCall.scripted);
  const ratio = gateway / scripted;
  const rows: Row[] = [
    {
      measure: '(H4) a call through the gateway / the same call in a scripted session',
      figure: `${fixed(ratio, 2)} (${fixed(gateway)} / ${fixed(scripted)} ms per call)`,
      target: '≤ 1.10',
      met: ratio <= 1.1,
    },
  ];
  return { rows, data: { ...opts, msPerCall: perCall, gateway, scripted, ratio } };
}
