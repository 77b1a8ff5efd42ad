/**
 * F2: what a node's slots hold now. Each of its workers (the shared queue, its own) runs at most `node.slots`
 * activities; this counts the ones running, of every kind, by queue, so the node's rule for its last slots
 * (model/shares.ts mayTakeSlot) knows how many are free.
 */
import type { ActivityInterceptorsFactory } from '@temporalio/worker';

export class SlotCounter {
  private readonly busy = new Map<string, number>();

  /** Activities running on this queue now. */
  count(queue: string): number {
    return this.busy.get(queue) ?? 0;
  }

  /** The worker interceptor that counts them, as each starts and ends. */
  interceptor(): ActivityInterceptorsFactory {
    return (ctx) => ({
      inbound: {
        execute: async (input, next) => {
          const queue = ctx.info.taskQueue;
          this.busy.set(queue, this.count(queue) + 1);
          try {
            return await next(input);
          } finally {
            this.busy.set(queue, this.count(queue) - 1);
          }
        },
      },
    });
  }
}
