/** node: a node killed (kill -9 of it and its servers) at a random moment, during plain calls and sessions. */
import { killTree } from '../../worker/processes';
import { sleep } from '../common';
import { random } from './rig';
import type { Trial } from './rig';

export const nodeTrial: Trial = async (rig, t, tally) => {
  const ids = Array.from({ length: rig.jobsPerTrial }, (_, j) => `chaos-node-${process.pid}-${t}-${j}`);
  const handles = await Promise.all(ids.map((id, j) => rig.start(id, rig.writes(t, j, 'node'))));
  await sleep(random(200, 1700));
  const victim = rig.nodes[random(0, rig.nodes.length)];
  killTree(victim.pid!);
  tally.faults++;
  rig.nodes = rig.nodes.filter((n) => n !== victim);
  await rig.keepTwoNodes();
  for (const [i, h] of handles.entries()) rig.count(tally, ids[i], await rig.settle(h, 120_000));
};
