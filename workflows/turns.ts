/**
 * A job's calls that wait for their turn (SPEC F2, F3). A call that may not go on now gave its slot back and sent
 * nothing; it waits here, in its job workflow, holding no slot and using no attempt: for its turn in its tenant's line
 * (its limiter signals it, model/limiter.ts), or a moment when its node kept its last slot for another tenant. Then
 * its job schedules it again. A job cancelled while a call waits takes it out of line.
 */
import { condition, getExternalWorkflowHandle, setHandler, sleep } from '@temporalio/workflow';
import { turnSignal, withdrawSignal } from '../model/messages';
import type { Turn } from '../model/messages';
import type { CallWaits } from '../model/activities';
import type { WaitTrace } from '../model/job';
import { sharesWorkflowId } from '../model/shares';

/**
 * A call in line asks again after this long without a word from its limiter (it keeps its place): a limiter ended by
 * hand, or a signal that could not reach the job, cannot leave it waiting for ever.
 */
const ASK_AGAIN_MS = 5 * 60_000;
/** A call whose node kept its slot for another tenant tries again after about this long, if the node did not say. */
const SLOT_RETRY_MS = 1000;

export class Turns {
  /** Turns that came, by call key, until their call takes them (a turn may come before its call's wait is known). */
  private readonly came = new Map<string, Turn>();

  /** Before the job's first await, like its other handlers. */
  register(): void {
    setHandler(
      turnSignal,
      (turn) => {
        if (turn && typeof turn.key === 'string') this.came.set(turn.key, turn);
      },
      { description: "F3: a call in line has its turn (its tenant's limiter holds a permit for it), or looks again" },
    );
  }

  /**
   * Waits out what the call waits for: its turn (or a word to look again), a moment for a slot, or, past
   * {@link ASK_AGAIN_MS}, nothing (it asks again, keeping its place). Resolves to the turn that came, if any.
   */
  async wait(key: string, waits: CallWaits['waits']): Promise<Turn | undefined> {
    if (waits.for === 'slot') {
      await sleep(waits.retryInMs ?? SLOT_RETRY_MS);
      return undefined;
    }
    await condition(() => this.came.has(key), ASK_AGAIN_MS);
    const turn = this.came.get(key);
    this.came.delete(key);
    return turn;
  }

  /** The call ended: a turn that came too late for it is dropped. */
  forget(key: string): void {
    this.came.delete(key);
  }
}

/** A call that waited in line will not come for its turn (its job was cancelled, its session lost): out of line. */
export async function withdraw(tenant: string, call: { jobId: string; key: string }): Promise<void> {
  try {
    await getExternalWorkflowHandle(sharesWorkflowId(tenant)).signal(withdrawSignal, call);
  } catch {
    // Its limiter is gone: so is the line. A grant it held goes back by itself (model/limiter.ts GRANT_TTL_MS).
  }
}

/** F3: the step's record of its waits: by what it waited for, how long in all, how many times, and why (the last). */
export function addWait(waited: WaitTrace[], kind: WaitTrace['for'], why: string, ms: number): void {
  const entry = waited.find((w) => w.for === kind);
  if (entry) {
    entry.ms += ms;
    entry.times++;
    entry.why = why;
  } else waited.push({ for: kind, why, ms, times: 1 });
}
