/**
 * Calls a person approves (A4, A5), from any Temporal client: the calls that wait for a person's yes — every job's
 * (the jobs whose `Oz0Status` is `waiting`, each asked with its `waitingCalls` query) — and a person's answer, the
 * job's `answerCall` Update. `oz0 call list|approve|deny` is this module at the terminal.
 *
 * ```ts
 * await answerCall(client, 'job-42', { approve: true, by: 'alice' });
 * await answerCall(client, 'job-42', { call: 'c3', approve: false, by: 'alice', reason: 'too large' });
 * ```
 */
import os from 'node:os';
import { WorkflowUpdateFailedError } from '@temporalio/client';
import type { Client } from '@temporalio/client';
import { decodeTypedSearchAttributes } from '@temporalio/common/lib/converter/payload-search-attributes';
import type { LoadedDataConverter, Payload, SerializationContext } from '@temporalio/common';
import { z } from 'zod';
import { openedWith } from '../data';
import { tenantNameProblem } from '../model/checks';
import { Oz0Status, Oz0Tenant, WAITING_MEMO } from '../model/job';
import { WaitingCallSchema } from '../model/schemas';
import { answerCallUpdate, waitingCallsQuery } from '../model/messages';
import type { AnswerCallInput, CallAnswered, WaitingCall } from '../model/messages';

/** A call that waits, with its job and how long it has waited so far. */
export interface ListedCall extends WaitingCall {
  jobId: string;
  tenant?: string;
  /** How long it has waited, in ms, when it was listed. */
  waitedMs: number;
}

/** An answer the job refused (no such call waits, several do and none was named, a bad field), in its words. */
export class AnswerRefused extends Error {
  override name = 'AnswerRefused';
}

/** The OS user: who answers when nobody said. */
export function osUser(): string {
  try {
    return os.userInfo().username;
  } catch {
    return process.env.USER ?? 'unknown';
  }
}

const WaitingCallsSchema = z.array(WaitingCallSchema);

/** N3: the waiting jobs a visibility page holds: one request per this many, never one per job. */
const LIST_PAGE = 1000;

/**
 * Every call that waits for a person's yes, oldest first (of one tenant with `tenant`). N3: one visibility list of the
 * waiting jobs, each job's calls read from its memo ({@link WAITING_MEMO}, sealed: opened with the client's codecs);
 * only a job without one (its run begun by an older oz0, or under upgrade.rollbackSafe) or whose memo cannot be read
 * is asked with its query. A job that does not answer that query (no node is up to run it) is named in `unreachable`.
 */
export async function listWaitingCalls(
  client: Client,
  opts: { tenant?: string } = {},
): Promise<{ calls: ListedCall[]; unreachable: string[] }> {
  // A tenant's name has no quote in it: checked, it cannot change the list's filter.
  const problem = opts.tenant === undefined ? undefined : tenantNameProblem(opts.tenant);
  if (problem) throw new Error(problem);
  const tenant = opts.tenant ? ` AND ${Oz0Tenant.name} = "${opts.tenant}"` : '';
  const query = `${Oz0Status.name} = "waiting"${tenant}`;
  const { namespace, loadedDataConverter } = client.options;
  const jobs: { jobId: string; tenant?: string; memo?: Payload }[] = [];
  let nextPageToken: Uint8Array | undefined;
  do {
    const page = await client.workflowService.listWorkflowExecutions({
      namespace,
      query,
      pageSize: LIST_PAGE,
      nextPageToken,
    });
    for (const run of page.executions ?? []) {
      jobs.push({
        jobId: run.execution?.workflowId ?? '',
        tenant: decodeTypedSearchAttributes(run.searchAttributes?.indexedFields).get(Oz0Tenant),
        memo: run.memo?.fields?.[WAITING_MEMO] ?? undefined,
      });
    }
    nextPageToken = page.nextPageToken?.length ? page.nextPageToken : undefined;
  } while (nextPageToken);

  const now = Date.now();
  const unreachable: string[] = [];
  const found = await Promise.all(
    jobs.map(async ({ memo, ...job }) => {
      const context = { type: 'workflow' as const, namespace, workflowId: job.jobId };
      const kept = memo ? await memoOf(loadedDataConverter, memo, context) : undefined;
      try {
        const waiting =
          kept ?? WaitingCallsSchema.parse(await client.workflow.getHandle(job.jobId).query(waitingCallsQuery));
        return waiting.map((call) => ({ ...call, ...job, waitedMs: now - Date.parse(call.askedAt) }));
      } catch {
        unreachable.push(job.jobId);
        return [];
      }
    }),
  );
  const calls = found.flat().sort((a, b) => a.askedAt.localeCompare(b.askedAt));
  return { calls, unreachable };
}

/** A job's waiting calls as its memo keeps them; none when it cannot be opened or is not such a list (then it is asked). */
async function memoOf(
  converter: LoadedDataConverter,
  payload: Payload,
  context: SerializationContext,
): Promise<WaitingCall[] | undefined> {
  try {
    const [opened] = await openedWith(converter, [payload], context);
    const read = WaitingCallsSchema.safeParse(converter.payloadConverter.fromPayload(opened!));
    return read.success ? read.data : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A5: a person's answer to one of a job's waiting calls: `call` is its number, its activity id (`c3`) or its key, and
 * may be left out when only one call waits; `by` defaults to the OS user. Resolves once the job has it; a refusal
 * (no such call waits, …) throws {@link AnswerRefused} in the job's words.
 */
export async function answerCall(
  client: Client,
  jobId: string,
  answer: Omit<AnswerCallInput, 'by'> & { by?: string },
): Promise<CallAnswered> {
  const input: AnswerCallInput = {
    approve: answer.approve,
    by: answer.by ?? osUser(),
    ...(answer.call !== undefined ? { call: answer.call } : {}),
    ...(answer.reason !== undefined ? { reason: answer.reason } : {}),
    ...(answer.identity !== undefined ? { identity: answer.identity } : {}),
  };
  const handle = client.workflow.getHandle(jobId);
  try {
    return await handle.executeUpdate(answerCallUpdate, { args: [input] });
  } catch (err) {
    if (!(err instanceof WorkflowUpdateFailedError)) throw err;
    const refusal = err.cause?.message ?? err.message;
    const older =
      input.identity && /^an answer has no field "identity"$/.test(refusal) ? olderAnswer(input) : undefined;
    if (!older) throw new AnswerRefused(refusal);
    // A12: a job running on a bundle from before A9 takes { call, approve, by, reason } alone; its validator refused
    // the answer before it reached the history, so it is given again in that shape, the identity in its words.
    try {
      return await handle.executeUpdate(answerCallUpdate, { args: [older] });
    } catch (again) {
      if (again instanceof WorkflowUpdateFailedError) throw new AnswerRefused(again.cause?.message ?? again.message);
      throw again;
    }
  }
}

/** An answer as a job of a release before A9 takes it: who vouched for the person said in `by` (at most 200). */
function olderAnswer(input: AnswerCallInput): AnswerCallInput {
  const { identity, ...rest } = input;
  const vouched = identity ? ` (vouched for by ${identity.issuer} as ${identity.subject})` : '';
  return { ...rest, by: `${input.by}${vouched}`.slice(0, 200) };
}

/** `3 min 12 s`, `2 h 5 min`, `1 d 3 h`: a wait as a person says it, to the two largest units. */
export function waitedInWords(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  const units: [number, string][] = [
    [Math.floor(s / 86400), 'd'],
    [Math.floor((s % 86400) / 3600), 'h'],
    [Math.floor((s % 3600) / 60), 'min'],
    [s % 60, 's'],
  ];
  const first = units.findIndex(([n]) => n > 0);
  if (first < 0) return '0 s';
  return units
    .slice(first, first + 2)
    .filter(([n]) => n > 0)
    .map(([n, unit]) => `${n} ${unit}`)
    .join(' ');
}
