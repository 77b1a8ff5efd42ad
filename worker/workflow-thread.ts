/**
 * One workflow thread for a node's two workflow workers (issue 36.3). The SDK gives every Worker that runs workflows a
 * thread of its own, with its own V8 isolate and its own copy of the bundle: a node's jobs' worker and its policy
 * worker (the namespace-wide policy queue, which a Worker cannot poll beside another queue) cost two, 46 MiB apart at
 * 500 running calls. Workers made here share the first one's workflow creator instead: one thread, one isolate, the
 * bundle loaded once; each keeps its own task queue, cache and sinks (a sink call returns with its activation to the
 * Worker that asked). The SDK's seam for this is `Worker.createWorkflowCreator` (protected, static), overridden in a
 * subclass; the creator's per-Worker part, the activity names a local activity may use, is the first worker's, and
 * only that worker's workflows (jobs) schedule local activities.
 */
import { createHash } from 'node:crypto';
import { Worker } from '@temporalio/worker';
import type { WorkerOptions } from '@temporalio/worker';
import type { WorkflowCreator } from '@temporalio/worker/lib/workflow/interface';

type Create = (...args: Parameters<typeof SharingWorker.createWorkflowCreator>) => Promise<WorkflowCreator>;

/** Worker with its protected seam opened to this module. */
class SharingWorker extends Worker {
  static override createWorkflowCreator(...args: Parameters<typeof Worker.createWorkflowCreator>) {
    return super.createWorkflowCreator(...args);
  }
}

export class SharedWorkflowThread {
  private creator?: Promise<WorkflowCreator>;
  /** The bundle's digest, not its code: the thread holds the code, and 2 MB more on the node's heap buys nothing. */
  private bundleDigest?: string;
  private users = 0;

  /** A Worker whose workflows run on this thread; the first one made starts it. Every worker must bring the same bundle. */
  createWorker(options: WorkerOptions): Promise<Worker> {
    const share = (...args: Parameters<Create>) => this.share(args);
    class ThreadSharingWorker extends SharingWorker {
      static override createWorkflowCreator(...args: Parameters<Create>): Promise<WorkflowCreator> {
        return share(...args);
      }
    }
    return ThreadSharingWorker.create(options);
  }

  private async share(args: Parameters<Create>): Promise<WorkflowCreator> {
    const [bundle] = args;
    const digest = createHash('sha256').update(bundle.code).digest('hex');
    if (this.bundleDigest !== undefined && this.bundleDigest !== digest) {
      throw new Error('workers sharing a workflow thread must run the same workflow bundle');
    }
    this.bundleDigest = digest;
    this.creator ??= SharingWorker.createWorkflowCreator(...args);
    const creator = await this.creator;
    this.users++;
    let released = false;
    return {
      createWorkflow: (options) => creator.createWorkflow(options),
      // Each Worker destroys its creator as it shuts down: the thread ends with the last of them.
      destroy: async () => {
        if (released) return;
        released = true;
        if (--this.users === 0) {
          this.creator = undefined;
          this.bundleDigest = undefined;
          await creator.destroy();
        }
      },
    };
  }
}
