/**
 * Issue 26: a running activity's heartbeats, paced by what they carry and by liveness (T4) where the server pushes
 * cancels, and every heartbeatMs where a cancel comes only in a heartbeat's answer.
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { CancelRoute, Pulse } from '../../activities/heartbeats';

test.each([
  // way, heartbeat timeout (ms), idle period, carry period
  ['heartbeat', 10_000, 200, 0],
  ['heartbeat', undefined, 200, 0],
  ['push', 10_000, 3333, 1000],
  ['push', 90_000, 30_000, 1000],
  // Never more often than heartbeatMs, even with a short timeout.
  ['push', 300, 200, 1000],
  ['push', undefined, 60_000, 1000],
] as const)(
  'T4/P1 pace: cancels by %s, heartbeat timeout %s ms: a beat every %s ms, a change carried within %s ms',
  (way, timeout, idleMs, carryMs) => {
    const route = new CancelRoute(200);
    route.way = way;
    expect(route.pace(timeout)).toEqual({ idleMs, carryMs });
  },
);

/** Runs fn in an activity context and counts the heartbeats it sends, with what they carried. */
async function beats(fn: (env: MockActivityEnvironment) => Promise<void>): Promise<unknown[]> {
  const env = new MockActivityEnvironment();
  const sent: unknown[] = [];
  env.on('heartbeat', (d: unknown) => sent.push(d));
  await env.run(() => fn(env));
  return sent;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('P1 with push: changes within the carry period wait and go out together, a fact marked now goes out at once with them, nothing up front', async () => {
  let state = 0;
  const sent = await beats(async (env) => {
    const pulse = new Pulse(env.context, { idleMs: 60_000, carryMs: 300 }, () => state);
    await sleep(50);
    state = 1;
    pulse.beat(); // the first change: out at once
    state = 2;
    pulse.beat();
    state = 3;
    pulse.beat(); // these two wait for the carry period to pass (300 ms after the first)
    await sleep(50);
    state = 4;
    pulse.beat(true); // a task id: out now, with the changes that waited
    await sleep(400);
    state = 5;
    pulse.beat(); // the period since the last beat has passed: out at once
    await sleep(50);
    pulse.stop();
  });
  expect(sent).toEqual([1, 4, 5]);
});

test('T4: a pulse with nothing to carry beats every idle period, and a stopped one never again', async () => {
  const sent = await beats(async (env) => {
    const pulse = new Pulse(env.context, { idleMs: 100, carryMs: 1000 }, () => 'alive');
    await sleep(350);
    pulse.stop();
    await sleep(250);
  });
  // Loose on a loaded machine: two or three beats in 350 ms, none after the stop.
  expect(sent.length).toBeGreaterThanOrEqual(2);
  expect(sent.length).toBeLessThanOrEqual(3);
});
