/**
 * A tenant's limiter (SPEC F3): one long-running workflow per tenant with caps or rates, `oz0-shares/<tenant>`, which
 * every node asks for its calls' permits (model/limiter.ts has the rules). A node holds the permits of the calls it
 * runs and renews them; a call that finds none waits in its job, in line here, and its job is signalled when its turn
 * comes. It runs on the policy queue beside the tenant's policy workflow, whose shares say its limits (a node passes
 * them on with each ask, `oz0 tenant set` at once).
 *
 * Every change happens in a handler, and every command it makes (a job told its turn) in the same synchronous step:
 * the order of commands in an activation never depends on when a main loop wakes, so a replay after eviction meets
 * them in the order the history has them (the SDK's update responses and a main loop's timers can cross, Temporal's
 * sdk-typescript#1966). So the limiter keeps no timer: nodes' messages drive it — a node renews its permits every
 * second, and a node whose call waits in line asks every second too — and each message looks for holders and grants
 * past their time and gives the next calls their turns.
 */
import {
  allHandlersFinished,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import { Limiter, emptyLimiter, giveProblem, takeProblem } from '../model/limiter';
import { batchProblem } from '../model/checks';
import type { Waiter } from '../model/limiter';
import {
  giveSignal,
  giveUpdate,
  killsSignal,
  limiterStatusQuery,
  limitsSignal,
  takeManyUpdate,
  takeUpdate,
  turnSignal,
  withdrawSignal,
} from '../model/messages';
import type { SharesInput, Turn } from '../model/messages';

/** Messages handled in one run before it continues as new (a busy tenant's run stays short). */
const CHANGES_PER_RUN = 2000;

export async function tenantShares(input: SharesInput): Promise<void> {
  const limiter = new Limiter(input.state ?? emptyLimiter(input.tenant));
  let changes = 0;
  /** Jobs being told their turn: the run continues as new only once each was told. */
  let telling = 0;
  const tell = (w: Waiter, turn: Turn) => {
    telling++;
    void getExternalWorkflowHandle(w.jobId)
      .signal(turnSignal, turn)
      // Its job has ended: it will never claim its grant, which goes back (the next message gives it on).
      .catch(() => limiter.withdraw(w))
      .finally(() => telling--);
  };
  /** After a change: calls in line whose turn came are told, in the same step. */
  const changed = () => {
    changes++;
    for (const w of limiter.pump(Date.now())) tell(w, { key: w.key, granted: true });
  };

  setHandler(
    takeUpdate,
    (req) => {
      const result = limiter.take(req, Date.now());
      changed();
      return result;
    },
    { validator: (req) => check(takeProblem(req)), description: "F3: a node asks for a call's permits" },
  );
  setHandler(
    takeManyUpdate,
    (reqs) => {
      const now = Date.now();
      const results = reqs.map((req) => {
        const refused = takeProblem(req);
        return refused ? { refused } : limiter.take(req, now);
      });
      changed();
      return results;
    },
    {
      validator: (reqs) => check(batchProblem(reqs)),
      description: "N4: a node's asks since its last batch, in one Update (as take each, answered in order)",
    },
  );
  setHandler(
    giveUpdate,
    (input) => {
      limiter.give(input, Date.now());
      changed();
      return limiter.waiting();
    },
    {
      validator: (input) => check(giveProblem(input)),
      description: 'F3: a node gives permits back and renews the rest (or asks after its calls in line)',
    },
  );
  setHandler(giveSignal, (input) => {
    if (giveProblem(input)) return;
    limiter.give(input, Date.now());
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

  // The history stays short: after enough changes (or when Temporal says so) the state moves to a new run.
  await condition(() => changes >= CHANGES_PER_RUN || workflowInfo().continueAsNewSuggested);
  await condition(() => allHandlersFinished() && telling === 0);
  await continueAsNew<typeof tenantShares>({ tenant: input.tenant, state: limiter.state });
}

/** Update validators: a bad argument is refused before it reaches the history, with what is wrong. */
function check(problem: string | undefined): void {
  if (problem) throw new Error(problem);
}
