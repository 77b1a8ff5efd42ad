/** cancel: jobs cancelled at random moments, racing their calls' answers (a sandboxed call, then a plugin one). */
import { sleep } from '../common';
import { random } from './rig';
import type { Trial } from './rig';

export const cancelTrial: Trial = async (rig, t, tally) => {
  const ids = Array.from({ length: rig.jobsPerTrial }, (_, j) => `chaos-cancel-${process.pid}-${t}-${j}`);
  const handles = await Promise.all(ids.map((id) => rig.cancellable(id)));
  const cancels = handles.map(async (h) => {
    await sleep(random(0, 2200));
    tally.faults++;
    await h.cancel().catch(() => undefined); // it may have finished first: the race this is about
  });
  for (const [i, h] of handles.entries()) await rig.settleCancelled(tally, ids[i], h);
  await Promise.all(cancels);
};
