/**
 * A tenant's limiter (SPEC F3): one long-running workflow per tenant with caps or rates, `oz0-shares/<tenant>`, which
 * every node asks for its calls' permits (model/limiter.ts has the rules). A node holds the permits of the calls it
 * runs and renews them; a call that finds none waits in its job, in line here, and its job is signalled when its turn
 * comes. It runs on the policy queue beside the tenant's policy workflow, whose shares say its limits (a node passes
 * them on with each ask, `oz0 tenant set` at once).
 */
import {
  allHandlersFinished,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  setHandler,
  sleep,
  workflowInfo,
} from '@temporalio/workflow';
import { Limiter, emptyLimiter, giveProblem, takeProblem } from '../model/limiter';
import type { Waiter } from '../model/limiter';
import {
  giveSignal,
  giveUpdate,
  killsSignal,
  limiterStatusQuery,
  limitsSignal,
  takeUpdate,
  turnSignal,
  withdrawSignal,
} from '../model/messages';
import type { SharesInput, Turn } from '../model/messages';

/** Messages handled in one run before it continues as new (a busy tenant's run stays short). */
const CHANGES_PER_RUN = 2000;
/** While permits are held, the limiter looks this often for holders and grants past their time. */
const EXPIRY_TICK_MS = 5000;

export async function tenantShares(input: SharesInput): Promise<void> {
  const limiter = new Limiter(input.state ?? emptyLimiter(input.tenant));
  let changes = 0;
  /** Something changed that may give a call in line its turn. */
  let dirty = true;
  /** Jobs being told their turn: the run continues as new only once each was told. */
  let telling = 0;
  let ticking = false;
  let rateWake: number | undefined;
  const changed = () => {
    changes++;
    dirty = true;
  };
  const tell = (w: Waiter, turn: Turn) => {
    telling++;
    void getExternalWorkflowHandle(w.jobId)
      .signal(turnSignal, turn)
      // Its job has ended: it will never claim its grant, which goes back now.
      .catch(() => {
        limiter.withdraw(w);
        dirty = true;
      })
      .finally(() => telling--);
  };

  setHandler(
    takeUpdate,
    (req) => {
      changed();
      return limiter.take(req, Date.now());
    },
    { validator: (req) => check(takeProblem(req)), description: "F3: a node asks for a call's permits" },
  );
  setHandler(
    giveUpdate,
    ({ holder, caps, ttlMs }) => {
      changed();
      limiter.give(holder, caps, ttlMs, Date.now());
      return limiter.waiting();
    },
    { validator: (input) => check(giveProblem(input)), description: 'F3: a node gives permits back, renews the rest' },
  );
  setHandler(giveSignal, (input) => {
    if (giveProblem(input)) return;
    limiter.give(input.holder, input.caps, input.ttlMs, Date.now());
    changed();
  });
  setHandler(withdrawSignal, (call) => {
    if (call && typeof call.jobId === 'string' && typeof call.key === 'string') limiter.withdraw(call);
    changed();
  });
  setHandler(killsSignal, (news) => {
    const kills = Array.isArray(news?.kills) ? news.kills.filter((k) => typeof k === 'string') : [];
    for (const w of limiter.wake(kills)) tell(w, { key: w.key, recheck: 'a kill switch covers its tool now' });
    changed();
  });
  setHandler(limitsSignal, (settings) => {
    if (settings && typeof settings.version === 'number' && settings.limits) limiter.adopt(settings);
    changed();
  });
  setHandler(limiterStatusQuery, () => limiter.status(), {
    description: 'F5: running and waiting calls by scope, and the limits they are held to',
  });

  while (changes < CHANGES_PER_RUN && !workflowInfo().continueAsNewSuggested) {
    if (dirty) {
      dirty = false;
      const now = Date.now();
      const { granted, wakeAt } = limiter.pump(now);
      for (const w of granted) tell(w, { key: w.key, granted: true });
      // A rate's next start: a timer of its own, unless one already wakes the limiter sooner.
      if (wakeAt !== undefined && (rateWake === undefined || wakeAt < rateWake || rateWake < now)) {
        rateWake = wakeAt;
        void sleep(Math.max(1, wakeAt - now)).then(() => (dirty = true));
      }
      // Holders and grants past their time: looked for on a slow tick, while there are any.
      if (!ticking && limiter.nextExpiry() !== undefined) {
        ticking = true;
        void sleep(EXPIRY_TICK_MS).then(() => {
          ticking = false;
          dirty = true;
        });
      }
    }
    await condition(() => dirty || changes >= CHANGES_PER_RUN || workflowInfo().continueAsNewSuggested);
  }
  await condition(() => allHandlersFinished() && telling === 0);
  await continueAsNew<typeof tenantShares>({ tenant: input.tenant, state: limiter.state });
}

/** Update validators: a bad argument is refused before it reaches the history, with what is wrong. */
function check(problem: string | undefined): void {
  if (problem) throw new Error(problem);
}
