/** busy: 429 storms from the remote ledger, with Retry-After, while jobs write to it. */
import { sleep } from '../common';
import { random } from './rig';
import type { Trial } from './rig';

export const busyTrial: Trial = async (rig, t, tally) => {
  const { storm } = rig;
  const ids = Array.from({ length: rig.jobsPerTrial }, (_, j) => `chaos-busy-${process.pid}-${t}-${j}`);
  const before = storm.answered;
  let running = true;
  const storms = (async () => {
    // A storm from the first call on, then calm and storm in turns until every job is done.
    while (running) {
      storm.on = true;
      await sleep(random(300, 2500));
      storm.on = false;
      await sleep(random(100, 1200));
    }
  })();
  const handles = await Promise.all(
    ids.map((id) =>
      rig.start(id, {
        tenant: 'chaos',
        steps: [0, 1, 2].map((i) => ({ call: 'remote.charge', args: { order_id: `${id}-${i}`, amount: i + 1 } })),
      }),
    ),
  );
  try {
    for (const [i, h] of handles.entries()) rig.count(tally, ids[i], await rig.settle(h, 120_000));
  } finally {
    running = false;
    await storms;
    storm.on = false;
  }
  tally.busyAnswers += storm.answered - before;
  tally.faults = tally.busyAnswers;
};
