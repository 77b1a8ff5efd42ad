/**
 * What `oz0 job status` (and `oz0 job watch`) says while a job closes (C4): the job's own word while Temporal
 * says RUNNING — `running` or `cancelling` — and Temporal's status once it has recorded the close. The job sets
 * its final status in the task that closes it, so a query can see it a moment before Temporal does; that moment
 * is still `running` (`cancelling` for a cancel), never a final status of oz0's own spelling.
 * tests/integration/progress and stops see the same against a real server.
 */
import type { Client } from '@temporalio/client';
import { jobStatus } from '../../client/jobs';

function client(temporalStatus: string, own: string | Error): Client {
  return {
    workflow: {
      getHandle: () => ({
        describe: async () => ({ status: { name: temporalStatus } }),
        query: async () => {
          if (own instanceof Error) throw own;
          return own;
        },
      }),
    },
  } as unknown as Client;
}

test.each([
  ['RUNNING', 'running', 'running'],
  ['RUNNING', 'cancelling', 'cancelling'],
  ['RUNNING', 'completed', 'running'],
  ['RUNNING', 'cancelled', 'cancelling'],
  ['COMPLETED', 'completed', 'COMPLETED'],
  ['CANCELLED', 'cancelled', 'CANCELED'],
  ['CONTINUED_AS_NEW', 'running', 'running'],
])('Temporal %s, the job says %s: %s', async (temporalStatus, own, shown) => {
  expect(await jobStatus(client(temporalStatus, own), 'j')).toBe(shown);
});

test('a job no worker has picked up yet is running', async () => {
  expect(await jobStatus(client('RUNNING', new Error('no poller')), 'j')).toBe('running');
});
