/**
 * What `oz0 job status` (and `oz0 job watch`) says while a job closes (C4): the job's own word while Temporal
 * says RUNNING — `running` or `cancelling` — and Temporal's status once it has recorded the close. The job sets
 * its final status in the task that closes it, so a query can see it a moment before Temporal does; that moment
 * is still `running` (`cancelling` for a cancel), never a final status Temporal has not recorded.
 * test/integration/stops.test.ts sees the same against a real server. The job's words are Temporal's for a closed
 * run (COMPLETED, CANCELED, …); list filters also find the lower-case words earlier versions wrote.
 */
import { shownStatus, statusFilter } from '../../client/jobs';
import type { JobStatus } from '../../model/job';

test.each<[string, string | undefined, string]>([
  ['RUNNING', 'running', 'running'],
  ['RUNNING', 'cancelling', 'cancelling'],
  // A4: a call waits for a person's yes.
  ['RUNNING', 'waiting', 'waiting'],
  ['TERMINATED', 'waiting', 'TERMINATED'],
  ['RUNNING', 'COMPLETED', 'running'],
  ['RUNNING', 'CANCELED', 'cancelling'],
  ['RUNNING', 'FAILED', 'running'],
  ['RUNNING', 'CONTINUED_AS_NEW', 'running'],
  // What an older node answers while its job closes.
  ['RUNNING', 'completed', 'running'],
  ['RUNNING', 'cancelled', 'cancelling'],
  ['RUNNING', undefined, 'running'],
  ['COMPLETED', 'COMPLETED', 'COMPLETED'],
  ['CANCELLED', 'CANCELED', 'CANCELED'],
  ['CANCELLED', undefined, 'CANCELED'],
  ['FAILED', 'FAILED', 'FAILED'],
  ['FAILED', undefined, 'FAILED'],
  ['TERMINATED', 'running', 'TERMINATED'],
  ['TIMED_OUT', undefined, 'TIMED_OUT'],
  ['CONTINUED_AS_NEW', 'running', 'running'],
  ['CONTINUED_AS_NEW', 'CONTINUED_AS_NEW', 'running'],
])('C4: Temporal says %s, the job says %s: oz0 job status shows %s', (temporalStatus, own, shown) => {
  expect(shownStatus(temporalStatus, own)).toBe(shown);
});

test.each<[JobStatus, string]>([
  ['running', 'Oz0Status = "running"'],
  ['cancelling', 'Oz0Status = "cancelling"'],
  ['waiting', 'Oz0Status = "waiting"'],
  ['COMPLETED', 'Oz0Status IN ("COMPLETED", "completed")'],
  ['CANCELED', 'Oz0Status IN ("CANCELED", "cancelled")'],
  ['FAILED', 'Oz0Status = "FAILED"'],
  ['CONTINUED_AS_NEW', 'Oz0Status = "CONTINUED_AS_NEW"'],
])('T3: the filter for Oz0Status %s also finds what earlier versions wrote: %s', (status, filter) => {
  expect(statusFilter(status)).toBe(filter);
});
