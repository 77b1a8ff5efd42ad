/**
 * C1 (issue 36.4): the node follows the history of each job it runs a call of, so a job's cancel stops its running
 * calls as soon as Temporal has written it, without waiting for the job's workflow task to turn it into its
 * activities' cancels (that task queues on a node's one workflow thread behind every other job's).
 *
 * A job that waits on its call has no workflow task running, so its `WorkflowExecutionCancelRequested` is written at
 * once, and the long poll of that run's history (`GetWorkflowExecutionHistory`, `waitNewEvent`) returns it. The event,
 * read from the job's own run, is its own proof: nothing else is checked and nobody can forge it. On it, every call of
 * that run on this node is stopped (./stops.ts, `beforeTemporal`); Temporal's own cancel of each activity still comes
 * the usual way and settles it.
 *
 * What it costs, and its bounds:
 * - nothing for a short call: a job is followed only once one of its calls has run `afterMs` (a timer per call, no
 *   read); one follow per job run however many of its calls run here;
 * - the first read of a run pages through its history from event 1 (bounded by continue-as-new); the page token is
 *   kept while the run has calls on this node and a minute after (LINGER_MS: a live session's harness may think that
 *   long between calls), at most LINGERING_MAX runs' worth, so the next call's follow goes on
 *   from there; then it is dropped;
 * - at most `max` runs followed at once on the node (`node.jobFollows`, 0: none); past it a call goes Temporal's way
 *   only. Each follow is one long poll, which Temporal's frontend counts against `frontend.namespaceCount`;
 * - a follow that fails (the run not found, continued as new or ended, the connection lost past MAX_FAILURES tries)
 *   ends quietly: its calls go Temporal's way. A node shutting down closes them all.
 */
import { isGrpcServiceError } from '@temporalio/client';
import type { Client } from '@temporalio/client';
import type { temporal } from '@temporalio/proto';
import type { Logger } from '../../common/logger';
import { timestampMs } from '../../common/time';

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

/** The server answers a long poll with no event after about 20 s; past this, the connection is taken as lost. */
const LONG_POLL_DEADLINE_MS = 30_000;
/** A run's token outlives its last call on the node by this much: the job's next call goes on from it. */
const LINGER_MS = 60_000;
/** Runs kept for their tokens alone, at most (the oldest is dropped first): a token is a hundred bytes or so. */
const LINGERING_MAX = 1000;
/** Failed reads in a row before a follow gives up (its calls go Temporal's way); each waits RETRY_MS longer. */
const MAX_FAILURES = 3;
const RETRY_MS = 250;
/** gRPC's NOT_FOUND and RESOURCE_EXHAUSTED (e.g. the frontend's `frontend.namespaceCount`): not worth a retry. */
const GIVE_UP_CODES = new Set([5, 8]);

export interface JobFollowSettings {
  /** Runs followed at once on the node (`node.jobFollows`); 0: none. */
  max: number;
  /** A job is followed once one of its calls has run this long (`node.jobFollowAfterMs`). */
  afterMs: number;
}

/** What the node's follows have done since it started (the node's own record; tests and the bench read it). */
export interface JobFollowCounts {
  /** Follows started: a job run whose call ran past `afterMs`, while there was room. */
  started: number;
  /** Follows not started for want of room (`max`): their calls went Temporal's way. */
  full: number;
  /** Running calls stopped by a cancel read in their job's history. */
  stopped: number;
  /** Follows that ended on an error (their calls went Temporal's way). */
  failed: number;
  /** History events read, all follows together (a run's next follow on the node goes on from its token). */
  events: number;
  /** Follows running now. */
  following: number;
  /** For the last cancels read (up to 100): ms from Temporal writing the cancel to the node reading it. */
  readMs: number[];
}

/** How many of the last cancels' read times the record keeps. */
const READS_KEPT = 100;

/** One job run with calls on this node (or lately had): its calls' stops and how far its history was read. */
interface Run {
  workflowId: string;
  runId: string;
  calls: Set<() => void>;
  /** Where the next read of the history goes on from. */
  token?: Uint8Array;
  /** The run's cancel was read: its calls are stopped, a call that registers later too. */
  cancelled: boolean;
  /** The run closed or continued as new, or its follow gave up: its calls go Temporal's way. */
  done: boolean;
  /** Set while its follow runs. */
  reading?: AbortController;
  linger?: NodeJS.Timeout;
}

export class JobFollows {
  private readonly runs = new Map<string, Run>();
  /** The runs with no call here kept for their tokens, oldest first. */
  private readonly lingering = new Set<string>();
  private readonly closing = new AbortController();
  private readonly counts: Omit<JobFollowCounts, 'following' | 'readMs'> = {
    events: 0,
    started: 0,
    full: 0,
    stopped: 0,
    failed: 0,
  };
  private readonly readMs: number[] = [];
  private following = 0;

  constructor(
    private readonly client: Client,
    private readonly settings: JobFollowSettings,
    private readonly logger: Logger,
  ) {}

  /**
   * A running call of the job's run: `stop` is called if the run's cancel is read while it runs (at once, if it was
   * read already). Returns the function that forgets the call when it ends.
   */
  register(workflowId: string, runId: string, stop: () => void): () => void {
    if (this.settings.max === 0 || this.closing.signal.aborted) return () => undefined;
    const key = `${workflowId}\n${runId}`;
    let run = this.runs.get(key);
    if (!run) {
      run = { workflowId, runId, calls: new Set(), cancelled: false, done: false };
      this.runs.set(key, run);
    }
    clearTimeout(run.linger);
    run.linger = undefined;
    this.lingering.delete(key);
    run.calls.add(stop);
    if (run.cancelled) {
      stop();
      return () => this.forget(key, run, stop);
    }
    const timer = setTimeout(() => this.begin(run), this.settings.afterMs);
    timer.unref();
    return () => {
      clearTimeout(timer);
      this.forget(key, run, stop);
    };
  }

  /** The node's own record of its follows. */
  get record(): JobFollowCounts {
    return { ...this.counts, following: this.following, readMs: [...this.readMs] };
  }

  /** Stops every follow (the node is shutting down): running calls go Temporal's way from now on. */
  close(): void {
    this.closing.abort();
    for (const run of this.runs.values()) {
      run.reading?.abort();
      clearTimeout(run.linger);
    }
    this.runs.clear();
    this.lingering.clear();
  }

  private forget(key: string, run: Run, stop: () => void): void {
    run.calls.delete(stop);
    if (run.calls.size > 0 || this.runs.get(key) !== run) return;
    // No call of the run left here. A run never read (its calls were all short) is forgotten at once; one that was
    // stops being read, and where it was read to is kept for a while, for the job's next call, then dropped.
    if (!run.reading && !run.token && !run.cancelled && !run.done) {
      this.runs.delete(key);
      return;
    }
    run.reading?.abort();
    run.linger = setTimeout(() => this.drop(key, run), LINGER_MS);
    run.linger.unref();
    this.lingering.add(key);
    if (this.lingering.size > LINGERING_MAX) {
      const oldest = this.lingering.values().next().value as string;
      this.drop(oldest, this.runs.get(oldest));
    }
  }

  /** Forgets a run kept for its token (its time is up, or room is needed). */
  private drop(key: string, run: Run | undefined): void {
    this.lingering.delete(key);
    if (!run || run.calls.size > 0 || this.runs.get(key) !== run) return;
    clearTimeout(run.linger);
    this.runs.delete(key);
  }

  /** One of the run's calls has run past `afterMs`: follow the run, unless it is followed already or there is no room. */
  private begin(run: Run): void {
    if (run.reading || run.done || run.cancelled || run.calls.size === 0 || this.closing.signal.aborted) return;
    if (this.following >= this.settings.max) {
      this.counts.full++;
      return;
    }
    this.following++;
    this.counts.started++;
    const reading = (run.reading = new AbortController());
    void this.follow(run, reading.signal).finally(() => {
      this.following--;
      if (run.reading === reading) run.reading = undefined;
    });
  }

  /** Reads the run's history until its cancel, its end, an error past the tries, or no call of it is left here. */
  private async follow(run: Run, signal: AbortSignal): Promise<void> {
    let failures = 0;
    while (!signal.aborted) {
      let page;
      try {
        page = await this.read(run, signal);
        failures = 0;
      } catch (err) {
        if (signal.aborted) return;
        const code = isGrpcServiceError(err) ? err.code : undefined;
        if ((code !== undefined && GIVE_UP_CODES.has(code)) || ++failures >= MAX_FAILURES) {
          run.done = true;
          this.counts.failed++;
          this.logger.debug(
            { jobId: run.workflowId, runId: run.runId, err: (err as Error).message },
            "stopped following a job's history; its calls' cancels come Temporal's way",
          );
          return;
        }
        await pause(RETRY_MS * failures, signal);
        continue;
      }
      this.counts.events += page.history?.events?.length ?? 0;
      const token = page.nextPageToken;
      run.token = token && token.length > 0 ? token : undefined;
      for (const event of page.history?.events ?? []) {
        const seen = eventFor(event);
        if (seen === 'cancel') {
          if (this.readMs.push(Date.now() - timestampMs(event.eventTime)) > READS_KEPT) this.readMs.shift();
          run.cancelled = true;
          this.counts.stopped += run.calls.size;
          for (const stop of [...run.calls]) stop();
          return;
        }
        if (seen === 'end') {
          run.done = true;
          return;
        }
      }
      // A closed run's history has no next page.
      if (!run.token) {
        run.done = true;
        return;
      }
    }
  }

  private read(run: Run, signal: AbortSignal) {
    const { client } = this;
    return client.withAbortSignal(signal, () =>
      client.withDeadline(Date.now() + LONG_POLL_DEADLINE_MS, () =>
        client.workflowService.getWorkflowExecutionHistory({
          namespace: client.options.namespace,
          execution: { workflowId: run.workflowId, runId: run.runId },
          nextPageToken: run.token,
          waitNewEvent: true,
          maximumPageSize: 1000,
        }),
      ),
    );
  }
}

/** What a job's history event says to a follow: its cancel, its run's end, or nothing. */
export function eventFor(event: HistoryEvent): 'cancel' | 'end' | undefined {
  if (event.workflowExecutionCancelRequestedEventAttributes) return 'cancel';
  if (
    event.workflowExecutionCompletedEventAttributes ||
    event.workflowExecutionFailedEventAttributes ||
    event.workflowExecutionTimedOutEventAttributes ||
    event.workflowExecutionCanceledEventAttributes ||
    event.workflowExecutionTerminatedEventAttributes ||
    event.workflowExecutionContinuedAsNewEventAttributes
  )
    return 'end';
  return undefined;
}

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    timer.unref();
    signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
  });
}
