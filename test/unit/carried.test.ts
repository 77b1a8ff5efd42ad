/**
 * What one attempt carries of its call (activities/call/carried.ts): the state the attempts before left, what its
 * heartbeats carry on and when, and its line in the trace. Run in Temporal's mock activity context, whose heartbeats
 * are what the server would receive.
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { Carried } from '../../activities/call/carried';
import { hearTimeLimit } from '../../activities/call/stops';
import type { StopCause } from '../../activities/call/stops';
import { IGNORED_TOKEN } from '../../activities/call/resume';
import { RESUME_META } from '../../model/protocol';
import type { CallProgressState } from '../../model/schemas';

const call = { tool: 'ledger.write', key: 'job-1/c1' };
/** A pace that never beats on its own within a test: every beat seen is one the attempt asked for. */
const pace = { idleMs: 60_000, carryMs: 0 };

/** Runs fn as attempt `attempt` with what the attempts before left, and returns the heartbeats it sent. */
async function attempt(
  attempt: number,
  prior: unknown,
  fn: (carried: Carried) => void | Promise<void>,
): Promise<CallProgressState[]> {
  const env = new MockActivityEnvironment({ attempt, heartbeatDetails: prior });
  const sent: CallProgressState[] = [];
  env.on('heartbeat', (d: CallProgressState) => sent.push(structuredClone(d)));
  await env.run(async () => {
    const carried = new Carried(env.context, pace, call);
    try {
      await fn(carried);
    } finally {
      carried.stopBeating();
    }
  });
  return sent;
}

test('P2: an attempt starts from what the attempts before left, an attempt that left nothing recorded as lost', async () => {
  const prior = { attempts: [{ attempt: 1, outcome: 'timeout' }], task: { id: 't1', status: 'working' } };
  let state: CallProgressState | undefined;
  const sent = await attempt(3, prior, (carried) => {
    state = carried.state;
  });
  expect(state).toMatchObject({ ...call, task: { id: 't1', status: 'working' } });
  expect(state!.attempts.map((a) => [a.attempt, a.outcome])).toEqual([
    [1, 'timeout'],
    [2, 'lost'],
  ]);
  // Nothing up front: Temporal already holds what the attempts before left.
  expect(sent).toEqual([]);
});

test('C7: a sandbox on this node is said in a heartbeat at once, its queue once; a remote server beats nothing', async () => {
  const sandbox = await attempt(1, undefined, (carried) => {
    carried.served({ kind: 'sandbox', protocol: '2025-11-25' }, 'q/node-a');
    carried.served({ kind: 'sandbox', protocol: '2025-11-25' }, 'q/node-a');
  });
  expect(sandbox).toHaveLength(1);
  expect(sandbox[0]).toMatchObject({ protocol: '2025-11-25', sandboxQueues: ['q/node-a'] });
  const remote = await attempt(1, undefined, (carried) => carried.served({ kind: 'remote', protocol: 'x' }, 'q'));
  expect(remote).toEqual([]);
});

test('T3, P1-P3: a task and progress go in the heartbeat; the line says the task once, an ignored token once, and the last progress', async () => {
  let carried!: Carried;
  const sent = await attempt(1, undefined, (c) => {
    carried = c;
    c.note('resumed from progress 2');
    c.taskSeen({ taskId: 't9', status: 'working' }, '2025-11-25');
    c.taskSeen({ taskId: 't9', status: 'input_required' }, '2026-07-28');
    expect(c.progressed({ progress: 3, total: 10, _meta: { [RESUME_META]: 'not a token!' } }, true)).toEqual({
      progress: 3,
      total: 10,
    });
    // No news: progress must increase within one request.
    expect(c.progressed({ progress: 3 }, true)).toBeUndefined();
    c.progressed({ progress: 4, total: 10, _meta: { [RESUME_META]: 'not a token!' } }, true);
    c.ended({ outcome: 'ok', answer: { content: [] } }, ['refused 10.0.0.1:80']);
  });
  // The task's first protocol is the one its form is: a later status does not change it.
  expect(sent.map((s) => s.task)).toEqual([
    { id: 't9', status: 'working', protocol: '2025-11-25' },
    { id: 't9', status: 'input_required', protocol: '2025-11-25' },
    { id: 't9', status: 'input_required', protocol: '2025-11-25' },
    { id: 't9', status: 'input_required', protocol: '2025-11-25' },
  ]);
  expect(sent.at(-1)).toMatchObject({ progress: 4, total: 10, invalidToken: true });
  expect(carried.state.attempts).toEqual([
    {
      attempt: 1,
      outcome: 'ok',
      note: `resumed from progress 2; task t9; ${IGNORED_TOKEN}; refused 10.0.0.1:80`,
      progress: { progress: 4, total: 10 },
    },
  ]);
  expect(carried.outcome()).toBe('ok');
});

test('P2, T3: an ending forgets a task its server lost and records an attempt that sent nothing; handOn beats now', async () => {
  let carried!: Carried;
  const sent = await attempt(
    2,
    { attempts: [{ attempt: 1, outcome: 'lost' }], task: { id: 't1', status: 'working' } },
    (c) => {
      carried = c;
      expect(c.outcome()).toBeUndefined();
      c.ended(
        { forgetTask: true, unsent: true, outcome: 'lost', note: 'gone', failure: { type: 'x', retryable: true } },
        [],
      );
      c.handOn();
      // After handOn no beat goes out: the failure that ends the attempt carries the same record.
      c.taskSeen({ taskId: 't2', status: 'working' }, '2025-11-25');
    },
  );
  expect(sent).toHaveLength(1);
  expect(sent[0].task).toBeUndefined();
  expect(sent[0].unsent).toEqual([2]);
  expect(sent[0].attempts).toEqual([
    { attempt: 1, outcome: 'lost' },
    { attempt: 2, outcome: 'lost', note: 'gone' },
  ]);
  expect(carried.outcome()).toBe('lost');
});

test('C6: the time limit stops the attempt once its time, less the margin, has passed since its slot; unheard, never', async () => {
  const stops: StopCause[] = [];
  // 1 s less its margin (a tenth): 900 ms, of which 800 have passed.
  const limit = hearTimeLimit(1, Date.now() - 800, (why) => stops.push(why));
  expect(limit.remainingMs).toBeLessThanOrEqual(100);
  await new Promise((r) => setTimeout(r, 300));
  expect(stops).toEqual([{ outcome: 'timeout', text: 'oz0: time limit: 1 s less its margin' }]);

  const unheard: StopCause[] = [];
  hearTimeLimit(1, Date.now() - 800, (why) => unheard.push(why)).unhear();
  await new Promise((r) => setTimeout(r, 300));
  expect(unheard).toEqual([]);
});
