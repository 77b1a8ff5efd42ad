/**
 * partition: a node cut off from the server (SIGSTOP for longer than its heartbeat timeout, then SIGCONT): its calls
 * go on elsewhere, and what its servers answered meanwhile (its late answers) must be ignored; a sandbox it started for
 * a job whose call had answered may outlive the job (the job's end cannot reach the node): counted, not an early
 * CANCELED, since no call runs in it.
 */
import type { ChildProcess } from 'node:child_process';
import { readReceived } from '../../examples/common';
import { descendants } from '../../worker/processes';
import { callsOf } from '../../model/job';
import { sleep } from '../common';
import { HEARTBEAT_TIMEOUT_S, random } from './rig';
import type { Trial } from './rig';

export const partitionTrial: Trial = async (rig, t, tally) => {
  let victim: ChildProcess | undefined;
  let stoppedAt = 0;
  rig.cutOff = undefined;
  let resumedAt = 0;
  const settled = await rig.faultTrial('partition', t, tally, async () => {
    victim = rig.nodes[random(0, rig.nodes.length)];
    rig.cutOff = victim;
    stoppedAt = Date.now();
    process.kill(victim.pid!, 'SIGSTOP');
    // Past the heartbeat timeout: the server takes the node's calls as lost and runs them elsewhere.
    await sleep(HEARTBEAT_TIMEOUT_S * 1000 + random(1500, 4000));
    process.kill(victim.pid!, 'SIGCONT');
    resumedAt = Date.now();
  });
  rig.cutOff = undefined;
  // Its servers kept running while it was stopped: what they answered then reached the node too late.
  const servers = new Set(descendants(victim!.pid!));
  // The plugin ledger's records (host pids); a sandbox's pids are its namespace's and are not compared here.
  const late = readReceived(rig.received).filter(
    (r) =>
      r.event === 'answered' &&
      servers.has(r.pid as number) &&
      (r.t as number) >= stoppedAt &&
      (r.t as number) <= resumedAt &&
      [...settled.keys()].some((id) => String(r.key).startsWith(`${id}/`)),
  );
  tally.lateAnswers += late.length;
  for (const [id, s] of settled) {
    if (s.kind !== 'completed') continue;
    for (const r of late.filter((l) => String(l.key).startsWith(`${id}/`))) {
      // Taken, it would be the step's only attempt, made by the cut-off node in the session's first run.
      const step = callsOf(s.trace)
        .filter((st) => st.key === r.key)
        .at(-1);
      const accepted =
        step !== undefined &&
        step.node === rig.names.get(victim!) &&
        (step.sessionRun ?? 1) === 1 &&
        !step.attempts.some((a) => a.outcome === 'lost' || a.outcome === 'timeout');
      if (accepted) {
        tally.lateAccepted++;
        rig.violations.push(`${id}: the late answer of ${String(r.key)} was taken`);
      }
    }
  }
};
