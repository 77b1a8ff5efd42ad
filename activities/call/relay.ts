/**
 * The node's running calls of live sessions, by job and caller's call id (H5, H6): an attempt registers itself here,
 * so its session's caller can stop it (with the caller's words) and the node's gateway hears its progress.
 */
import type { Progress } from '../../common/schemas';

type Stop = (why: string) => void;
type Listener = (progress: Progress) => void;

export class CallRelay {
  private readonly stops = new Map<string, Stop>();
  private readonly listeners = new Map<string, Set<Listener>>();

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

  /** Hears the call's progress, from any of its attempts on this node, until the result is called. */
  watch(jobId: string, callId: string, fn: Listener): () => void {
    const id = idOf(jobId, callId);
    const set = this.listeners.get(id) ?? new Set();
    set.add(fn);
    this.listeners.set(id, set);
    return () => {
      set.delete(fn);
      if (set.size === 0 && this.listeners.get(id) === set) this.listeners.delete(id);
    };
  }

  report(jobId: string, callId: string, progress: Progress): void {
    for (const fn of this.listeners.get(idOf(jobId, callId)) ?? []) fn(progress);
  }
}

function idOf(jobId: string, callId: string): string {
  return `${jobId}\n${callId}`;
}
