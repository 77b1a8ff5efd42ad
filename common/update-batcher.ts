/**
 * N4: one Update in flight per workflow from this process. Temporal admits at most 10 Updates in flight on one
 * workflow (`history.maxInFlightUpdates`) and refuses the rest; a tenant's policy and its limiter are one workflow
 * each, and every call of the tenant on every node asks them. So a node never sends them an Update per call: what its
 * calls ask while one batch is on its way goes together in the next, one Update carrying many asks, answered in one
 * workflow task. A cluster of n nodes keeps at most n Updates of a kind in flight on a tenant's workflow, whatever its
 * load.
 *
 * A workflow run by an older oz0 knows no batch Update: it refuses it by name, and that workflow's asks go one by
 * one, a few at a time, as that release sent them, until a batch is taken again (its next run may be this release's).
 */
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { causesOf } from './causes';

/** `target` names one workflow as its sender knows it (for the policy and the limiter: the tenant). */
export interface BatchSender<Item, Result> {
  /** One Update carrying every item, answered with one result per item, in order (an Error: that item was refused). */
  many(target: string, items: Item[]): Promise<Array<Result | Error>>;
  /** The Update an older oz0 takes: one item. */
  one(target: string, item: Item): Promise<Result>;
}

interface Waiting<Item, Result> {
  item: Item;
  resolve(result: Result): void;
  reject(err: unknown): void;
}

interface Line<Item, Result> {
  queue: Waiting<Item, Result>[];
  sending: boolean;
  /** Until then, this workflow is sent one item per Update (it refused a batch: an older oz0 runs it). */
  singlesUntil: number;
}

/** The most asks one Update carries (its payload stays small: an ask is a few hundred bytes). */
export const MAX_BATCH = 200;
/** An older oz0's workflow is asked one by one for this long before a batch is tried again. */
const SINGLES_FOR_MS = 60_000;
/** One by one, at most this many at once (well under Temporal's 10, beside other nodes' and the CLI's). */
const SINGLES_AT_ONCE = 3;

/** An Update refused because the workflow's code has no handler by its name: an older release runs it. */
export function refusedByName(err: unknown, name: string): boolean {
  const cause = err instanceof WorkflowUpdateFailedError ? err.cause : undefined;
  return !!cause?.message?.includes(`No registered handler for update: ${name}`);
}

/**
 * Temporal did not take the Update, and nothing of it was applied: too many in flight on the workflow (from other
 * nodes, the CLI), or its workflow task failed before it was accepted. Sent again, after a moment.
 */
export function notTaken(err: unknown): boolean {
  return [...causesOf(err)].some((e) =>
    /limit on number of concurrent in-flight updates|workflow update was aborted/i.test(e.message),
  );
}

/** How long a batch Temporal did not take is tried again before its asks fail (each ask has its own deadline too). */
const RETRY_FOR_MS = 10_000;

export class UpdateBatcher<Item, Result> {
  private readonly lines = new Map<string, Line<Item, Result>>();
  /** Batches and single asks sent again because Temporal did not take them (for a node's status and the bench). */
  retries = 0;
  /** Updates sent, and the asks they carried. */
  readonly sent = { updates: 0, asks: 0 };

  constructor(
    /** The batch Update's name, to know an older oz0's refusal of it. */
    private readonly name: string,
    private readonly sender: BatchSender<Item, Result>,
    /**
     * N6: never a batch, only what an older oz0 takes (`upgrade.rollbackSafe`: a workflow that took a batch cannot
     * be run by a node of the previous release).
     */
    private readonly singlesOnly = false,
  ) {}

  /** Sends `item` to the workflow in the next batch; its own result comes back. */
  submit(target: string, item: Item): Promise<Result> {
    let line = this.lines.get(target);
    if (!line) this.lines.set(target, (line = { queue: [], sending: false, singlesUntil: 0 }));
    const queued = new Promise<Result>((resolve, reject) => line.queue.push({ item, resolve, reject }));
    if (!line.sending) void this.drain(target, line);
    return queued;
  }

  /** Asks on their way or waiting for the next batch, over every workflow (for a node's status). */
  get pending(): number {
    let n = 0;
    for (const line of this.lines.values()) n += line.queue.length + (line.sending ? 1 : 0);
    return n;
  }

  private async drain(target: string, line: Line<Item, Result>): Promise<void> {
    line.sending = true;
    try {
      while (line.queue.length > 0) {
        const batch = line.queue.splice(0, MAX_BATCH);
        if (this.singlesOnly || Date.now() < line.singlesUntil) await this.singly(target, batch);
        else await this.batched(target, line, batch);
      }
    } finally {
      line.sending = false;
      if (line.queue.length === 0) this.lines.delete(target);
    }
  }

  private async batched(target: string, line: Line<Item, Result>, batch: Waiting<Item, Result>[]): Promise<void> {
    this.sent.updates++;
    this.sent.asks += batch.length;
    let results: Array<Result | Error>;
    try {
      results = await this.retried(() =>
        this.sender.many(
          target,
          batch.map((w) => w.item),
        ),
      );
    } catch (err) {
      if (refusedByName(err, this.name)) {
        line.singlesUntil = Date.now() + SINGLES_FOR_MS;
        return this.singly(target, batch);
      }
      for (const w of batch) w.reject(err);
      return;
    }
    if (results.length !== batch.length) {
      const err = new Error(`the workflow of ${target} answered ${results.length} of ${batch.length} asks`);
      for (const w of batch) w.reject(err);
      return;
    }
    batch.forEach((w, i) => {
      const result = results[i];
      if (result instanceof Error) w.reject(result);
      else w.resolve(result);
    });
  }

  /** `send`, again while Temporal says it did not take it (at most {@link RETRY_FOR_MS}, backing off to a second). */
  private async retried<T>(send: () => Promise<T>): Promise<T> {
    const until = Date.now() + RETRY_FOR_MS;
    for (let wait = 50; ; wait = Math.min(wait * 2, 1000)) {
      try {
        return await send();
      } catch (err) {
        if (!notTaken(err) || Date.now() + wait > until) throw err;
        this.retries++;
        await new Promise((resolve) => setTimeout(resolve, wait * (0.5 + Math.random())));
      }
    }
  }

  private async singly(target: string, batch: Waiting<Item, Result>[]): Promise<void> {
    const next = [...batch];
    const worker = async () => {
      for (let w = next.shift(); w; w = next.shift()) {
        this.sent.updates++;
        this.sent.asks++;
        await this.retried(() => this.sender.one(target, w.item)).then(w.resolve, w.reject);
      }
    };
    await Promise.all(Array.from({ length: Math.min(SINGLES_AT_ONCE, batch.length) }, worker));
  }
}
