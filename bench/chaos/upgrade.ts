/**
 * upgrade (N6, issue 56.1): a rolling upgrade and its rollback while jobs run. Two nodes of the previous release
 * (deploy/previous-release.ts) take a trial's first jobs — plain calls, scripted and live harness sessions, a job
 * that continues as new mid-way, and a call that waits for a person — then are replaced one at a time by nodes of
 * this release (SIGTERM, as a deploy stops them), which take a second batch of the same; then this release's nodes
 * are replaced by the previous release's again, the way back. Each waiting call is answered by this release's
 * client while the other release runs its job, and after each deploy the tenant's policy is changed (a kill switch
 * thrown and taken back). Every job must finish, each write once, and no job's history may hold a workflow task
 * failed for nondeterminism (read from the server, whichever node failed it).
 */
import type { WorkflowHandle } from '@temporalio/client';
import { answerCall } from '../../client/calls';
import { changePolicy, policyTargetOf } from '../../common/policy-client';
import { killUpdate, reviveUpdate } from '../../model/messages';
import { callsOf } from '../../model/job';
import { contentText } from '../../common/text';
import { sleep } from '../common';
import { PEOPLE, charge, random } from './rig';
import type { Rig, Tally, Trial } from './rig';

export const upgradeTrial: Trial = async (rig, t, tally) => {
  const jobs: Array<{ id: string; handle: WorkflowHandle }> = [];
  const batch = async (phase: 'old' | 'new'): Promise<WorkflowHandle> => {
    for (let j = 0; j < rig.jobsPerTrial; j++) {
      const id = `chaos-upgrade-${process.pid}-${t}-${phase}-${j}`;
      jobs.push({ id, handle: await rig.start(id, slower(rig.writes(t, j, `upgrade-${phase}`))) });
    }
    const long = `chaos-upgrade-${process.pid}-${t}-${phase}-long`;
    const calls = Array.from({ length: 6 }, (_, i) => charge(`upgrade-${phase}-long-t${t}`, i));
    jobs.push({ id: long, handle: await rig.start(long, slower({ tenant: 'chaos', steps: calls })) });
    const id = `chaos-upgrade-${process.pid}-${t}-${phase}-asks`;
    const handle = await rig.start(id, { tenant: PEOPLE, steps: [charge(`upgrade-${phase}-asks-t${t}`, 0)] });
    jobs.push({ id, handle });
    return handle;
  };
  // The trial's count of jobs is its batches' (runChaos counted jobsPerTrial).
  tally.jobs += rig.jobsPerTrial + 4;
  // The tenant's policy changed mid-way by this release's client (a kill switch thrown and taken back), its
  // workflow run by whichever release's node takes its task.
  const target = policyTargetOf(rig.config, rig.client);
  const policyChange = async () => {
    await changePolicy(target, 'chaos', killUpdate, ['ledger.no_such_tool']);
    await changePolicy(target, 'chaos', reviveUpdate, ['ledger.no_such_tool']);
  };

  await rig.replaceNodes('previous');
  const first = await batch('old');
  await sleep(random(200, 1500));
  // The upgrade: this release's nodes take over, one at a time, with the first batch in flight.
  await rig.replaceNodes('this');
  tally.faults++;
  await policyChange();
  const second = await batch('new');
  await answer(rig, first);
  await sleep(random(200, 1500));
  // The way back: the previous release's nodes take over again, the second batch (begun on this release) in flight.
  await rig.replaceNodes('previous');
  tally.faults++;
  await policyChange();
  await answer(rig, second);
  for (const { id, handle } of jobs) {
    const settled = await rig.settle(handle, 180_000);
    rig.count(tally, id, settled);
    if (settled.kind !== 'completed') continue;
    for (const step of callsOf(settled.trace)) {
      if (!step.result.isError) continue;
      const said = contentText(step.result.content)
        .replace(/node [^\s()]+(?= was lost)/g, 'node …')
        .slice(0, 120);
      tally.errorResults[said] = (tally.errorResults[said] ?? 0) + 1;
    }
  }
  for (const { id, handle } of jobs) await readHistory(rig, tally, id, handle);
};

/**
 * The same writes, each 1–3 s long (the other trials' take 0.1–0.7 s): a job of three lasts through a node's
 * replacement (the new node's start, the old one's grace), so most jobs meet both releases.
 */
function slower<T>(spec: T): T {
  return JSON.parse(JSON.stringify(spec), (key, value: unknown) =>
    key === 'ms' && typeof value === 'number' ? random(1000, 3000) : value,
  ) as T;
}

/** Waits for the job's call to wait for a person, then approves it with this release's client (as the CLI does). */
async function answer(rig: Rig, handle: WorkflowHandle): Promise<void> {
  for (let i = 0; i < 600; i++) {
    const waiting = (await handle.query<unknown[]>('waitingCalls').catch(() => [])) ?? [];
    if (waiting.length > 0) {
      await answerCall(rig.client, handle.workflowId, { approve: true, by: 'cli:chaos' });
      return;
    }
    await sleep(100);
  }
  rig.violations.push(`${handle.workflowId}: its call never waited for a person`);
}

/**
 * What the server recorded of the job, every run of it: a workflow task failed for nondeterminism (a release that
 * could not run the job), and which releases' nodes ran its tasks (by the worker identity each task names: a node's
 * name).
 */
async function readHistory(rig: Rig, tally: Tally, id: string, handle: WorkflowHandle): Promise<void> {
  const releaseOf = new Map([...rig.releases].map(([proc, release]) => [rig.names.get(proc), release]));
  const ran = new Set<string>();
  for (let runId: string | undefined = (await handle.describe()).runId; runId; ) {
    const history = await rig.client.workflow.getHandle(id, runId).fetchHistory();
    runId = undefined;
    for (const event of history.events ?? []) {
      const message = event.workflowTaskFailedEventAttributes?.failure?.message;
      if (message && /TMPRL1100|[Nn]ondeterminism/.test(message)) {
        tally.nondeterministic++;
        rig.violations.push(`${id}: a workflow task failed for nondeterminism: ${message.split('\n')[0]}`);
      }
      const identity =
        event.workflowTaskCompletedEventAttributes?.identity ?? event.activityTaskStartedEventAttributes?.identity;
      const release = identity ? releaseOf.get(identity) : undefined;
      if (release) ran.add(release);
      // The run before, when this one began as its continuation.
      runId ||= event.workflowExecutionStartedEventAttributes?.continuedExecutionRunId || undefined;
    }
  }
  if (ran.size === 2) tally.crossed++;
}
