/**
 * The node's running calls of live sessions, by job and caller's call id (H5, H6, A7): an attempt registers itself
 * here, so its session's caller can stop it (with the caller's words), and the node's gateway hears its progress —
 * and, for a call that waits for a person's yes, that it waits.
 */
import type { Progress } from '../../model/schemas';
import type { SessionCallOutput } from '../../model/messages';

type Stop = (why: string) => void;

/** What the caller of a live session's call hears of it while it runs. */
export interface CallNews {
  /** P1/H6: the server's progress, from any of the call's attempts on this node. */
  progress(progress: Progress): void;
  /** A7: the call waits for a person's yes (in words, with the command that answers it); undefined: it goes on. */
  waiting(words: string | undefined): void;
  /**
   * H4 (issue 26.3): the call's answer is durable — its activity completed and Temporal accepted it — so it is what
   * the job's Update will answer too, once its workflow task has recorded it.
   */
  answered?(out: SessionCallOutput): void;
}

export class CallRelay {
  private readonly stops = new Map<string, Stop>();
  private readonly listeners = new Map<string, Set<CallNews>>();

  /** A running attempt's stop; call the result when the attempt ends. */
  register(jobId: string, callId: string, stop: Stop): () => void {
    const id = idOf(jobId, callId);
    this.stops.set(id, stop);
    return () => {
      if (this.stops.get(id) === stop) this.stops.delete(id);
    };
  }

  /** Stops the call's running attempt; false when none runs on this node. */
  stop(jobId: string, callId: string, why: string): boolean {
    const stop = this.stops.get(idOf(jobId, callId));
    stop?.(why);
    return stop !== undefined;
  }

  /** Hears the call's news, from any of its attempts on this node, until the result is called. */
  watch(jobId: string, callId: string, news: CallNews): () => void {
    const id = idOf(jobId, callId);
    const set = this.listeners.get(id) ?? new Set();
    set.add(news);
    this.listeners.set(id, set);
    return () => {
      set.delete(news);
      if (set.size === 0 && this.listeners.get(id) === set) this.listeners.delete(id);
    };
  }

  /** H4: the call's activity completed with this answer and Temporal accepted it (./durable.ts). */
  answered(jobId: string, callId: string, out: SessionCallOutput): void {
    for (const news of this.listeners.get(idOf(jobId, callId)) ?? []) news.answered?.(out);
  }

  report(jobId: string, callId: string, progress: Progress): void {
    for (const news of this.listeners.get(idOf(jobId, callId)) ?? []) news.progress(progress);
  }

  /**
   * A7: the call waits for a person's yes (the gateway keeps telling its caller so while it waits), or, undefined,
   * it is about to be sent.
   */
  waiting(jobId: string, callId: string, words: string | undefined): void {
    for (const news of this.listeners.get(idOf(jobId, callId)) ?? []) news.waiting(words);
  }
}

function idOf(jobId: string, callId: string): string {
  return `${jobId}\n${callId}`;
}
