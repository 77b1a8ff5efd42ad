/**
 * temporal: the Temporal server killed (kill -9) and started again: the dev server on the same SQLite file, or the
 * local cluster's real server (`--cluster`); one more job is cancelled around the fault.
 */
import { sleep } from '../common';
import { random } from './rig';
import type { Trial } from './rig';

export const temporalTrial: Trial = async (rig, t, tally) => {
  await rig.faultTrial('temporal', t, tally, async () => {
    await rig.server.kill();
    await sleep(random(500, 3000));
    await rig.server.start();
    await rig.keepTwoNodes();
  });
  await rig.keepTwoNodes();
};
