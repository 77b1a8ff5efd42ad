/**
 * Progress with a resume token, and the resume request of a later attempt (SPEC P1-P6). Resume is a convention
 * between oz0 and a remote server only: a plugin's shared server may send tokens, but oz0 takes none from it (P6).
 */
import { RESUME_META, RESUME_TOKEN } from '../../model/protocol';
import { ResumeRequestSchema } from '../../model/schemas';
import type { ResumeRequest } from '../../model/schemas';
import { requestMeta } from './keys';
import type { RequestWithMeta } from './keys';

export { RESUME_META, RESUME_TOKEN };
export type { ResumeRequest };

/** The notification {@link progress} sends. */
interface ProgressNotification {
  method: 'notifications/progress';
  params: { progressToken: string | number; progress: number; total?: number; _meta?: Record<string, unknown> };
}

/**
 * What {@link progress} needs of a tool handler's second argument: the request's `_meta` and a way to send a
 * notification related to it. The v2 SDK's context (`ctx.mcpReq.notify`) and the 1.x SDK's `extra`
 * (`extra.sendNotification`) both satisfy it.
 */
export interface ProgressExtra extends RequestWithMeta {
  mcpReq?: RequestWithMeta['mcpReq'] & { notify?(notification: ProgressNotification): Promise<void> };
  sendNotification?(notification: ProgressNotification): Promise<void>;
}

/** Whether a string may be a resume token: letters, digits and `._:~+/=-`, 1-256 characters (P3). */
export function isResumeToken(token: unknown): token is string {
  return typeof token === 'string' && RESUME_TOKEN.test(token);
}

/**
 * Reports progress for the current request: `notifications/progress` with `value` and `total`, and, when `token` is
 * given, `_meta["oz0/resume"]: token` saying where the work got to. A no-op when the request carried no
 * `_meta.progressToken` (oz0 asks for progress only on calls it may make again, P1).
 *
 * Progress must increase within one request; oz0 ignores a value that does not. oz0 keeps the value and total, never
 * a message, so this sends none. The token is what a later attempt hands back in {@link resumeRequest}: make it say
 * where to go on from, e.g. `shard:3`, and never put a secret in it (oz0 records it).
 *
 * @throws RangeError for a value that is not finite, or a token that breaks the rule (oz0 would ignore it and say so
 *   in the trace: it is a bug in the server, better found in its tests).
 */
export async function progress(extra: ProgressExtra, value: number, total?: number, token?: string): Promise<void> {
  if (!Number.isFinite(value)) throw new RangeError(`progress(): value must be a finite number, not ${value}`);
  if (total !== undefined && !Number.isFinite(total)) {
    throw new RangeError(`progress(): total must be a finite number, not ${total}`);
  }
  if (token !== undefined && !isResumeToken(token)) {
    throw new RangeError(
      `progress(): a resume token is 1-256 letters, digits or ._:~+/=-, not ${JSON.stringify(token)}`,
    );
  }
  const progressToken = requestMeta(extra)?.progressToken;
  if (typeof progressToken !== 'string' && typeof progressToken !== 'number') return;
  const notification: ProgressNotification = {
    method: 'notifications/progress',
    params: {
      progressToken,
      progress: value,
      ...(total !== undefined && { total }),
      ...(token !== undefined && { _meta: { [RESUME_META]: token } }),
    },
  };
  const send = extra.mcpReq?.notify?.bind(extra.mcpReq) ?? extra.sendNotification?.bind(extra);
  if (!send) throw new TypeError('progress(): pass the tool handler’s second argument (ctx, or extra on SDK 1.x)');
  await send(notification);
}

/**
 * The request's `_meta["oz0/resume"]`, `{ token, progress }`, when this attempt is to go on from where an earlier one
 * got to; `undefined` when it starts over (the first attempt, any retry oz0 does not resume, P4) or when what came is
 * not a valid resume request. Check the token yourself before trusting it: it is your own, but it came back through
 * the network.
 */
export function resumeRequest(extra: RequestWithMeta): ResumeRequest | undefined {
  const parsed = ResumeRequestSchema.safeParse(requestMeta(extra)?.[RESUME_META]);
  return parsed.success ? parsed.data : undefined;
}
