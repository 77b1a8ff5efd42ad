/** The workflows a node registers; loaded by path (workflowsPath), never imported by node code. */
import type { JobWorkflow, TenantPolicyWorkflow, TenantSharesWorkflow } from '../model/messages';
import type { job } from './job';
import type { tenantPolicy } from './policy';
import type { tenantShares } from './shares';
import type { inboxSessions } from './inbox';
import type { InboxSessionsWorkflow } from '../model/inbox-sessions';

export { job } from './job';
export { tenantPolicy } from './policy';
export { tenantShares } from './shares';
export { probeCancelPush } from './probe';
export { inboxSessions } from './inbox';

/**
 * Clients start these workflows by the signatures model/messages.ts gives them, never by importing them: each must
 * be callable as its signature says, or this fails to compile.
 */
type StartedAs<Signature, _Workflow extends Signature> = Signature;
export type Signatures = [
  StartedAs<JobWorkflow, typeof job>,
  StartedAs<TenantPolicyWorkflow, typeof tenantPolicy>,
  StartedAs<TenantSharesWorkflow, typeof tenantShares>,
  StartedAs<InboxSessionsWorkflow, typeof inboxSessions>,
];
