/**
 * A10: telling people that a call waits for them. A tenant's `notify.webhook` (Slack's or Teams' incoming webhook, or
 * any that takes `{ "text": … }`) is posted a line when one of its calls starts waiting for a person and when the wait
 * ends (approved, denied, no answer in time, withdrawn), with a link to the inbox where the config says where it is.
 * The job schedules this activity beside the call and never waits for it: Temporal retries it with backoff (a
 * webhook that is down), a webhook that refuses it for good (4xx) is not asked again, and the call goes on either way.
 * The message holds what a person needs to find the call — tool, tenant, job, call — never its arguments, a reason
 * someone typed, or the webhook's own URL (its secret, read by reference when it is used).
 */
import { ApplicationFailure } from '@temporalio/common';
import type { LoadedConfig } from '../common/config';
import { readSecret } from '../common/credentials';
import type { ApprovalNotice } from '../model/activities';

const TIMEOUT_MS = 10_000;

/** The line a person reads, and the fields a script reads. */
export function noticeMessage(notice: ApprovalNotice, inbox: string | undefined): Record<string, unknown> {
  const what = `${notice.tool} (${notice.call} of job ${notice.jobId}, tenant ${notice.tenant})`;
  const words: Record<ApprovalNotice['event'], string> = {
    waiting: `waits for a person's yes${notice.until ? ` until ${notice.until}` : ''}${inbox ? `: answer it at ${inbox}` : ''}`,
    approved: `was approved by ${notice.by ?? 'someone'}`,
    denied: `was denied by ${notice.by ?? 'someone'}`,
    'timed out': `was refused: ${notice.ended ?? 'nobody answered in time'}`,
    withdrawn: `no longer waits: ${notice.ended ?? 'its wait ended'}`,
  };
  return {
    text: `oz0: ${what} ${words[notice.event]}`,
    oz0: { ...notice, ...(inbox && { inbox }) },
  };
}

/** Posts the notice to the tenant's webhook; `none` when the tenant has none. Throws for Temporal to try again. */
export async function sendNotice(
  config: Pick<LoadedConfig, 'tenants' | 'inbox' | 'baseDir'>,
  notice: ApprovalNotice,
  env: NodeJS.ProcessEnv = process.env,
): Promise<'sent' | 'none'> {
  const tenant = Object.hasOwn(config.tenants, notice.tenant) ? config.tenants[notice.tenant] : undefined;
  if (!tenant?.notify) return 'none';
  const field = `tenants.${notice.tenant}.notify.webhook`;
  const url = readSecret(tenant.notify.webhook, { env, baseDir: config.baseDir }, field);
  const inbox = config.inbox?.publicUrl ? `${config.inbox.publicUrl.replace(/\/+$/, '')}/` : undefined;
  let status: number;
  try {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(noticeMessage(notice, inbox)),
      signal: AbortSignal.timeout(TIMEOUT_MS),
      redirect: 'error',
    });
    status = res.status;
    await res.body?.cancel();
  } catch (err) {
    // Never the URL (it is the webhook's secret): only that it could not be reached, and why.
    throw new Error(`${field} could not be reached: ${(err as Error).name}`);
  }
  if (status >= 200 && status < 300) return 'sent';
  const refused = `${field} answered HTTP ${status}`;
  if (status >= 400 && status < 500 && status !== 408 && status !== 429) {
    throw ApplicationFailure.nonRetryable(`${refused}: not tried again`, 'WebhookRefused');
  }
  throw new Error(`${refused}: tried again`);
}
