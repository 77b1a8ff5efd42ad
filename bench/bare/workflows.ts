/** The baselines: workflows that call bare activities making one MCP call per step. */
import { condition, defineSignal, proxyActivities, setHandler } from '@temporalio/workflow';
import type { bareActivities } from './activities';

type Bare = ReturnType<typeof bareActivities>;
const { bareEcho } = proxyActivities<Bare>({ startToCloseTimeout: '30s' });
const { bareSleep } = proxyActivities<Bare>({ startToCloseTimeout: '15m' });
const { bareRead } = proxyActivities<Bare>({ startToCloseTimeout: '5m', retry: { maximumAttempts: 1 } });

export async function bareJob(n: number): Promise<number> {
  for (let i = 0; i < n; i++) await bareEcho(`t${i}`);
  return n;
}

/** One long call, for the memory baseline. */
export async function bareSleepJob(ms: number): Promise<void> {
  await bareSleep(ms);
}

/** D7: one call of a big answer, its result on Temporal's External Storage (the worker's). */
export async function bareReadJob(kib: number, seed: number): Promise<void> {
  await bareRead(kib, seed);
}

/** Issue 56: a signal that lets {@link bareWaitJob} go on. */
export const bareGo = defineSignal('bareGo');

/** Issue 56: a call, a wait for {@link bareGo}, a call: which build runs the second half after a deploy. */
export async function bareWaitJob(): Promise<void> {
  let go = false;
  setHandler(bareGo, () => {
    go = true;
  });
  await bareEcho('before');
  await condition(() => go);
  await bareEcho('after');
}
