/** postgres (on the local cluster only, `--cluster`): PostgreSQL restarted, fast shutdown; one job cancelled around it. */
import { random } from './rig';
import type { Trial } from './rig';

export const postgresTrial: Trial = async (rig, t, tally) => {
  await rig.faultTrial('postgres', t, tally, () => rig.server.restartDatabase!(random(500, 3000)));
  await rig.keepTwoNodes();
};
