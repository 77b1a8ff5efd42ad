/**
 * upgrade (N6, issue 56.1): a rolling upgrade and its rollback while jobs run. Two nodes of the previous release
 * (deploy/previous-release.ts) take a trial's first jobs — plain calls, scripted and live harness sessions, an
 * external session driven by an agent on this release's client, a job that continues as new mid-way, a call whose
 * answer is big (768 KiB), and a call that waits for a person — then are replaced one at a time by nodes of this
 * release (SIGTERM, as a deploy stops them), which take a second batch of the same; then this release's nodes are
 * replaced by the previous release's again, the way back. Each waiting call is answered by this release's client
 * (the CLI's answer, then the inbox's) while the other release runs its job, and after each deploy the tenant's
 * policy is changed (a kill switch thrown and taken back). Every job must finish, each write once, each big answer
 * whole, and no job's history may hold a workflow task failed for nondeterminism (read from the server, whichever
 * node failed it).
 */
import type { WorkflowHandle } from '@temporalio/client';
import { answerCall } from '../../client/calls';
import { openSession } from '../../client/sessions';
import { changePolicy, policyTargetOf } from '../../common/policy-client';
import { killUpdate, reviveUpdate } from '../../model/messages';
import { callsOf } from '../../model/job';
import { contentText } from '../../common/text';
import { sleep } from '../common';
import { PEOPLE, charge, random } from './rig';
import type { Rig, Tally, Trial } from './rig';

export const upgradeTrial: Trial = async (rig, t, tally) => {
  const jobs: Array<{ id: string; handle: WorkflowHandle }> = [];
  /**
   * When each batch's deploy is over: its external session is closed then, so it lives through one deploy. Its runs
   * are lost at each stop of its node there (the previous release, and this one under rollbackSafe, hand no session
   * on), and a session gets 4 runs (T4): one across an upgrade and its rollback could run out of them.
   */
  const over = { old: settler(), new: settler() };
  const deployed = { old: over.old.promise, new: over.new.promise };
  /** The external sessions' agents, each calling through the deploys until its session is closed. */
  const agents: Array<Promise<void | Error>> = [];
  /** Jobs whose one call's answer is big (no ledger write: settled apart from the writes' counts). */
  const bigs: Array<{ id: string; handle: WorkflowHandle }> = [];
  const batch = async (phase: 'old' | 'new'): Promise<WorkflowHandle> => {
    for (let j = 0; j < rig.jobsPerTrial; j++) {
      const id = `chaos-upgrade-${process.pid}-${t}-${phase}-${j}`;
      jobs.push({ id, handle: await rig.start(id, slower(rig.writes(t, j, `upgrade-${phase}`))) });
    }
    const long = `chaos-upgrade-${process.pid}-${t}-${phase}-long`;
    const calls = Array.from({ length: 6 }, (_, i) => charge(`upgrade-${phase}-long-t${t}`, i));
    jobs.push({ id: long, handle: await rig.start(long, slower({ tenant: 'chaos', steps: calls })) });
    const outside = `chaos-upgrade-${process.pid}-${t}-${phase}-external`;
    const external = await rig.start(outside, { tenant: 'chaos', steps: [{ session: { external: true } }] });
    jobs.push({ id: outside, handle: external });
    // Its failure is counted when the agents are awaited, never left unhandled meanwhile.
    agents.push(agent(rig, external, `upgrade-${phase}-external-t${t}`, deployed[phase]).catch((err: Error) => err));
    const echo = `chaos-upgrade-${process.pid}-${t}-${phase}-big`;
    const text = 'x'.repeat(BIG_ANSWER);
    bigs.push({
      id: echo,
      handle: await rig.start(echo, { tenant: 'chaos', steps: [{ call: 'reader.echo', args: { text } }] }),
    });
    const id = `chaos-upgrade-${process.pid}-${t}-${phase}-asks`;
    const handle = await rig.start(id, { tenant: PEOPLE, steps: [charge(`upgrade-${phase}-asks-t${t}`, 0)] });
    jobs.push({ id, handle });
    return handle;
  };
  // The trial's count of jobs is its batches' (runChaos counted jobsPerTrial).
  tally.jobs += rig.jobsPerTrial + 8;
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
  over.old.settle();
  await policyChange();
  const second = await batch('new');
  await answer(rig, first, 'cli');
  await sleep(random(200, 1500));
  // The way back: the previous release's nodes take over again, the second batch (begun on this release) in flight.
  await rig.replaceNodes('previous');
  tally.faults++;
  over.new.settle();
  await policyChange();
  await answer(rig, second, 'inbox');
  for (const failed of await Promise.all(agents))
    if (failed) rig.violations.push(`an external session's agent: ${failed.message}`);
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
  for (const { id, handle } of bigs) {
    const settled = await rig.settle(handle, 180_000);
    if (settled.kind !== 'completed') rig.count(tally, id, settled);
    else {
      tally.finished++;
      const [step] = callsOf(settled.trace);
      const got = contentText(step?.result.content).length;
      if (step?.result.isError || got !== BIG_ANSWER)
        rig.violations.push(`${id}: its answer of ${BIG_ANSWER} characters came back as ${got}`);
    }
  }
  for (const { id, handle } of [...jobs, ...bigs]) await readHistory(rig, tally, id, handle);
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

/** A promise and what settles it. */
function settler(): { promise: Promise<void>; settle: () => void } {
  let settle!: () => void;
  const promise = new Promise<void>((resolve) => (settle = resolve));
  return { promise, settle };
}

/**
 * An external session's agent on this release's client (H9): four writes, one after another, whichever release's node
 * holds its session, closed once its deploy is over. When its node is stopped the session's run is lost: the agent opens it again (the job's next
 * run) and makes the same call again — the same arguments, so the same key (K3), and the write is made once.
 */
async function agent(rig: Rig, handle: WorkflowHandle, order: string, deployed: Promise<void>): Promise<void> {
  const open = () => openSession(rig.client, handle.workflowId, { waitMs: 180_000 });
  let session = await open();
  for (let i = 0; i < 4; i++) {
    const args = { order_id: `${order}-${i}`, amount: i + 1, ms: random(1000, 3000) };
    for (let tries = 1; ; tries++) {
      const outcome = await session.callTool('ledger.slow_charge', args).then(
        (result) => (result.isError && LOST.test(contentText(result.content)) ? 'lost' : 'answered'),
        (err: Error) => (tries < 5 ? 'lost' : Promise.reject(err)),
      );
      if (outcome === 'answered') break;
      session = await open();
    }
    await sleep(random(200, 800));
  }
  await deployed;
  // Its run may have been lost after its last call: the next one is opened and closed.
  for (let tries = 1; ; tries++) {
    const closed = await session.close({ done: true }).then(
      () => true,
      (err: Error) => (tries < 5 && LOST.test(err.message) ? false : Promise.reject(err)),
    );
    if (closed) return;
    session = await open();
  }
}

/**
 * A big answer, as big as both releases keep it whole: the previous release dropped an answer over 1 MB, and under
 * upgrade.rollbackSafe this one keeps answers inline (payloads.store "off": up to 1.9 MiB).
 */
const BIG_ANSWER = 768 * 1024;

/** What an external session's call says when its session's run ended under it (T4). */
const LOST = /was lost|shut down|is not an open|no longer open/;

/**
 * Waits for the job's call to wait for a person, then approves it with this release's client: as the CLI does, or as
 * the inbox does (with the identity its provider vouched for, which a job on the previous release's bundle takes in
 * that release's shape).
 */
async function answer(rig: Rig, handle: WorkflowHandle, from: 'cli' | 'inbox'): Promise<void> {
  const identity = { issuer: 'https://id.example', subject: 'ann', email: 'ann@people.test' };
  const yes = from === 'cli' ? { by: 'cli:chaos' } : { by: identity.email, identity };
  for (let i = 0; i < 600; i++) {
    const waiting = (await handle.query<unknown[]>('waitingCalls').catch(() => [])) ?? [];
    if (waiting.length > 0) {
      await answerCall(rig.client, handle.workflowId, { approve: true, ...yes });
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
