/**
 * The tenant's policy check before an attempt sends anything (A1-A4, B6, C5): one verdict on the call, from the
 * node's live copy of the tenant's policy or a fresh read, and, when that verdict is `confirm` and no person approved
 * the call yet, the question a person answers (A4). Nothing is sent here: a refusal, a policy that could not be read
 * and a question each end the attempt before its request (./settle.ts's AttemptEnd, or AsksPerson).
 */
import type { Tool } from '@modelcontextprotocol/client';
import { redactSecrets } from '../../common/logger';
import { FailureType } from '../../model/activities';
import type { CallAsks, CallInput, CallWaits } from '../../model/activities';
import type { CallProgressState } from '../../model/schemas';
import type { MustWait } from '../policy/shares';
import { listingDigest, verdict } from '../../model/policy-rules';
import type { Verdict } from '../../model/policy-rules';
import type { PolicyGate, PolicyRead } from '../policy/gate';
import { AttemptEnd, Unsent } from './settle';
import type { CallRelay } from './relay';

/** A question shows this much of a call's arguments (JSON); the rest is cut. */
export const QUESTION_ARGS_CHARS = 2000;

/** A4: the call's verdict is `confirm` and no person approved it yet: nothing was sent, and its job asks. */
export class AsksPerson extends Error {
  constructor(readonly pattern: string) {
    super(`waits for a person's yes (${pattern}: confirm)`);
  }
}

/** A4: what the job needs to ask a person: the pattern, and the arguments as a person may read them. */
export function questionOf(pattern: string, args: Record<string, unknown>): CallAsks['asks'] {
  const json = JSON.stringify(redactSecrets(args));
  return { pattern, args: json.length > QUESTION_ARGS_CHARS ? `${json.slice(0, QUESTION_ARGS_CHARS - 1)}…` : json };
}

export interface PolicyDeps {
  gate: PolicyGate;
  /** A first attempt may use a policy read this recent; a retry always reads it anew (B6). */
  policyMaxAgeMs: number;
}

/** The call the check is about: which attempt of it this is, and its server's listing as this attempt read it. */
export interface CheckedCall {
  input: CallInput;
  attempt: number;
  server: string;
  tools: Tool[];
  remote: boolean;
  /** The read of the tenant's policy this attempt began with ({@link readTenantPolicy}). */
  read: PolicyRead;
}

/**
 * The call may be sent: the tenant's current policy, kill switches and approvals allow it, and a person said yes
 * when its verdict is `confirm`. Resolves to whether the tenant approved its server's current listing (A2); throws
 * an {@link AttemptEnd} (refused, or the policy unread) or {@link AsksPerson}.
 */
export async function checkPolicy(deps: PolicyDeps, call: CheckedCall): Promise<{ approved: boolean }> {
  let allowed = await policyVerdict(deps, call);
  if (waitingOn(allowed, call.input)) allowed = await question(deps.gate, call);
  if (!allowed.allowed) throw refused(call.input, allowed.why);
  return { approved: allowed.approved };
}

function refused(input: CallInput, why: string): AttemptEnd {
  return new AttemptEnd('refused', why, {
    type: FailureType.refused,
    retryable: false,
    message: `${input.tool}: refused: ${why}`,
  });
}

/**
 * A1-A3, B6, C5: the tenant's current policy, kill switches and approvals, read once as an attempt begins. A first
 * attempt may use the node's live copy; a retry reads anew (B6). Without it nothing is sent, and the call may try
 * again ({@link Unsent}).
 */
export async function readTenantPolicy(deps: PolicyDeps, input: CallInput, attempt: number): Promise<PolicyRead> {
  try {
    return await deps.gate.read(input.tenant, attempt > 1 ? 0 : deps.policyMaxAgeMs, attempt === 1);
  } catch (err) {
    throw unread(input, err);
  }
}

function unread(input: CallInput, err: unknown): Unsent {
  const message = (err as Error).message;
  return new Unsent(
    `could not read the tenant's policy: ${message}`,
    `could not read the policy of ${input.tenant}: ${message}`,
  );
}

/** The one verdict builder: a read of the tenant's policy against this call, and its server's listing (A2). */
function verdictOf(policy: PolicyRead, call: Omit<CheckedCall, 'read'>): Verdict {
  const { input, server, tools, remote } = call;
  return verdict({
    ...policy,
    tool: input.tool,
    remote,
    listing: remote || policy.state.approvals[server] ? listingDigest(tools) : undefined,
  });
}

/** A4, A5: the pattern whose verdict is `confirm`, when the call is not the one a person said yes to. */
function waitingOn(v: Verdict, input: CallInput): string | undefined {
  return v.allowed && input.confirmed?.key !== input.key ? v.confirm : undefined;
}

/**
 * A1-A3, B6, C5: the verdict on the tenant's policy as the attempt read it; a refusal from the live copy is made again
 * on a fresh read.
 */
async function policyVerdict(deps: PolicyDeps, call: CheckedCall): Promise<Verdict> {
  const first = verdictOf(call.read, call);
  if (first.allowed || !call.read.watched) return first;
  try {
    return verdictOf(await deps.gate.read(call.input.tenant, 0), call);
  } catch (err) {
    throw unread(call.input, err);
  }
}

/**
 * A4: the live verdict says `confirm` and no person approved this call yet. Its tenant's policy workflows watch
 * the question from now on, and the verdict is made again with their states as of that moment: still `confirm`,
 * the call waits (nothing is sent); changed meanwhile, the new verdict holds.
 */
async function question(gate: PolicyGate, call: CheckedCall): Promise<Verdict> {
  const { input } = call;
  const until = Date.now() + (input.confirmTimeoutSeconds ?? 0) * 1000;
  const question = { jobId: input.jobId, key: input.key, tool: input.tool, until };
  let policy: PolicyRead;
  try {
    policy = await gate.watchQuestion(input.tenant, question);
  } catch (err) {
    const message = (err as Error).message;
    throw new Unsent(
      `could not ask the tenant's policy to watch the question: ${message}`,
      `could not reach the policy of ${input.tenant}: ${message}`,
    );
  }
  const now = verdictOf(policy, call);
  const pattern = waitingOn(now, input);
  if (pattern) throw new AsksPerson(pattern);
  await gate.forgetQuestion(input.tenant, question);
  return now;
}

/**
 * A4: what the job is told when the call waits for a person's yes; a live session's caller hears that it waits, and
 * the command that answers it.
 */
export function asksPerson(
  deps: { node: { id: string }; relay: CallRelay },
  input: CallInput,
  pattern: string,
  activityId: string,
  sandboxQueues: string[] | undefined,
): CallAsks {
  if (input.relay) {
    const words = `waiting for a person's yes (${pattern}: confirm): oz0 call approve ${input.jobId} ${activityId}`;
    deps.relay.waiting(input.jobId, input.relay.callId, words);
  }
  return { asks: questionOf(pattern, input.args), node: deps.node.id, ...(sandboxQueues ? { sandboxQueues } : {}) };
}

/**
 * F2, F3: the call waits, in its job, having taken nothing here: its slot goes back as the activity ends. A live
 * session's caller hears that it waits, and why.
 */
export function waitsTurn(
  deps: { node: { id: string }; relay: CallRelay },
  input: CallInput,
  err: MustWait,
  before: { attempts: number; state: CallProgressState },
): CallWaits {
  if (input.relay) deps.relay.waiting(input.jobId, input.relay.callId, `waiting for its turn: ${err.why}`);
  const waits = { for: err.kind, why: err.why, ...(err.retryInMs !== undefined ? { retryInMs: err.retryInMs } : {}) };
  return { waits, ...before, node: deps.node.id };
}
