/** What an attempt runs with: the node's pool, policy gate, identity, cancel routes, live sessions and series. */
import type { Logger } from '../../common/logger';
import type { PolicyGate } from '../policy/gate';
import type { ShareGate } from '../policy/shares';
import type { ServerPool } from '../pool';
import type { CancelRoute } from '../heartbeats';
import type { NodeMetrics } from '../observe/metrics';
import type { CallRelay } from './relay';
import type { JobFollows } from './job-follows';
import type { AnswerDeps } from './answer';
import type { NodeRelease } from '../../common/release';

export interface NodeIdentity {
  /** Human-readable name of this node, e.g. `host/1234`. */
  id: string;
  /** This node's own task queue (sandbox clean-up, sessions' calls). */
  queue: string;
  /**
   * N5: where its sessions' leases and harnesses run, with slots of their own (`node.maxSessions`): a session never
   * holds a slot its calls need. Absent from an older node's plan: its sessions are held on its own queue.
   */
  sessionQueue?: string;
}

export interface CallDeps extends AnswerDeps {
  pool: ServerPool;
  gate: PolicyGate;
  /** F2, F3: the node's rule for its slots, and its tenants' caps and rates. */
  shares: ShareGate;
  /** A first attempt may use a policy read this recent; a retry always reads it anew (B6). */
  policyMaxAgeMs: number;
  logger: Logger;
  node: NodeIdentity;
  /** How cancels reach this node, and so how often a running attempt heartbeats (./heartbeats.ts). */
  route: CancelRoute;
  /** Live sessions' calls on this node: their callers stop them and hear their progress through it (H5, H6). */
  relay: CallRelay;
  /** C1: the histories of the jobs whose calls run here, followed for their cancels (./job-follows.ts). */
  follows: JobFollows;
  /** O1: the node's series, when it serves them. */
  metrics?: NodeMetrics;
  /** Issue 56: what the node is, on each attempt's span (absent where a test makes the deps by hand). */
  release?: NodeRelease;
}
