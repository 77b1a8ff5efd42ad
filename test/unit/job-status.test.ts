/**
 * What `oz0 job status` (and `oz0 job watch`) says while a job closes (C4): the job's own word while Temporal
 * says RUNNING — `running` or `cancelling` — and Temporal's status once it has recorded the close. The job sets
 * its final status in the task that closes it, so a query can see it a moment before Temporal does; that moment
 * is still `running` (`cancelling` for a cancel), never a final status of oz0's own spelling.
 * test/integration/stops.test.ts sees the same against a real server.
 */
import { shownStatus } from '../../client/jobs';
import type { JobStatus } from '../../workflows/definitions';

test.each<[string, JobStatus | undefined, string]>([
  ['RUNNING', 'running', 'running'],
  ['RUNNING', 'cancelling', 'cancelling'],
  ['RUNNING', 'completed', 'running'],
  ['RUNNING', 'cancelled', 'cancelling'],
  ['RUNNING', undefined, 'running'],
  ['COMPLETED', 'completed', 'COMPLETED'],
  ['CANCELLED', 'cancelled', 'CANCELED'],
  ['CANCELLED', undefined, 'CANCELED'],
  ['FAILED', undefined, 'FAILED'],
  ['TERMINATED', 'running', 'TERMINATED'],
  ['TIMED_OUT', undefined, 'TIMED_OUT'],
  ['CONTINUED_AS_NEW', 'running', 'running'],
])('C4: Temporal says %s, the job says %s: oz0 job status shows %s', (temporalStatus, own, shown) => {
  expect(shownStatus(temporalStatus, own)).toBe(shown);
});
