/**
 * I10 (issue 34.7): the node under a hostile harness. One harness (test/fixtures/hostile.js, sandboxed) floods its
 * gateway — connections that never finish a request, requests whose body never comes, a session per `initialize`, a
 * body past the bound — while another tenant's harness makes its calls; each bound answers with an error (503, 429,
 * 408, 413) and the other session's calls all go on (the control that the gateway still serves).
 */
import { isSessionTrace } from '../../model/job';
import type { JobTrace } from '../../model/job';
import type { JobSpec } from '../../model/schemas';
import { createNode } from '../../worker/node';
import { fixture, logger, uniqueId, useTemporal } from '../helpers/temporal';
import { probeHarness, sandboxed } from '../helpers/sandbox';

const temporal = useTemporal();

interface Held {
  first: Record<string, number>;
  later: Record<string, number>;
}

test('I10: a harness flooding its gateway gets 503, 429, 408 and 413 past each bound; another tenant’s session makes every call meanwhile', async () => {
  const bounds = {
    gatewayConnectionsPerHarness: 20,
    gatewayRequestsPerToken: 8,
    gatewayLegacySessions: 4,
    gatewayRequestSeconds: 3,
    gatewayMaxBodyBytes: 64 * 1024,
  };
  const config = temporal.config({
    node: bounds,
    servers: { box: { command: 'node', args: [fixture('hostile.js'), 'server'], sandbox: sandboxed() } },
    harnesses: {
      flood: {
        command: 'node',
        args: [fixture('hostile.js'), 'harness'],
        tools: ['box.*'],
        timeoutSeconds: 120,
        sandbox: sandboxed(),
      },
      probe: probeHarness(['box.*']),
    },
  });
  const flood = { connections: 30, inFlight: 12, sessions: 6, bigBody: 100_000, laterMs: 6000 };
  // The other session: a call a second for the flood's length.
  const calls = Array.from({ length: 12 }, () => [{ call: 'box.folder', args: {} }, { sleep: 1000 }]).flat();
  const node = await createNode({ config, logger });
  const [flooded, other] = await node.runUntil(() =>
    Promise.all(
      [
        { tenant: 'acme', steps: [{ session: { harness: 'flood', input: { flood } } }] },
        { tenant: 'beta', steps: [{ session: { harness: 'probe', input: { steps: calls } } }] },
      ].map(async (spec) =>
        (
          await temporal.client.workflow.start('job', {
            taskQueue: config.temporal.taskQueue,
            workflowId: uniqueId(spec.tenant),
            args: [spec as JobSpec],
          })
        ).result(),
      ),
    ),
  );
  const resultOf = (trace: JobTrace) => trace.steps.filter(isSessionTrace)[0].result!.structuredContent!;
  const report = resultOf(flooded) as unknown as {
    connections: Held;
    inFlight: Held;
    sessions: Record<string, number>;
    bigBody: string;
  };
  // Connections past its bound: 503 at once; those held, 408 once their request is late.
  expect(report.connections).toEqual({ first: { '503': 10, open: 20 }, later: { '408': 20 } });
  // Requests in flight past its bound: 429 at once; those held, 408.
  expect(report.inFlight).toEqual({ first: { '429': 4, open: 8 }, later: { '408': 8 } });
  // 2025-11-25 sessions past its bound: 429.
  expect(report.sessions).toEqual({ '200': 4, '429': 2 });
  expect(report.bigBody).toBe('413');
  // The other tenant's session: every call answered.
  const seen = resultOf(other) as unknown as { calls: Array<{ isError: boolean; rejected?: string }> };
  expect(seen.calls).toHaveLength(12);
  expect(seen.calls.filter((c) => c.isError || c.rejected)).toEqual([]);
});
