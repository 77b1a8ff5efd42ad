/** The baseline for bench/call-cost: a workflow that calls a bare activity making one MCP call per step. */
import { proxyActivities } from '@temporalio/workflow';
import type { bareActivities } from './activities';

const { bareEcho } = proxyActivities<ReturnType<typeof bareActivities>>({ startToCloseTimeout: '30s' });

export async function bareJob(n: number): Promise<number> {
  for (let i = 0; i < n; i++) await bareEcho(`t${i}`);
  return n;
}
