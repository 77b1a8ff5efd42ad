/**
 * A8-A9: the approvals inbox, `oz0 inbox`: a process of its own (it needs only a Temporal client, so it runs apart
 * from the nodes), on Hono. A person signs in with the operator's identity provider (./oidc.ts); the page lists the
 * calls that wait for them — those of tenants whose `approvers` name them, for that tool — follows the list live
 * (server-sent events, the list read from Temporal once a second while anyone watches), and answers through the
 * job's `answerCall` Update with the identity the provider vouched for. Anything else is 403.
 *
 * Sessions live in this process's memory (a restart signs everyone out): a random id in a cookie that is HttpOnly,
 * SameSite=Lax and, when the inbox is served over TLS, Secure; every form carries the session's CSRF token.
 *
 * D5: it is also the codec server of the Temporal UI (./codec.ts): a person signed in here reads the payloads of the
 * tenants that name them decoded there, and nothing else.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import type { Client } from '@temporalio/client';
import { Hono } from 'hono';
import type { Context } from 'hono';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import { streamSSE } from 'hono/streaming';
import { z } from 'zod';
import { answererName, mayAnswer } from '../../common/approvers';
import type { Identity } from '../../common/approvers';
import type { LoadedConfig } from '../../common/config';
import { Oz0Tenant, callsOf } from '../../model/job';
import { traceQuery } from '../../model/messages';
import { AnswerRefused, answerCall, listWaitingCalls } from '../calls';
import type { ListedCall } from '../calls';
import type { PendingSignIn, SignIn } from './oidc';
import { callList, inboxPage, signInPage } from './page';
import { decodeRecordFile, mountCodec } from './codec';
import type { ProcessData } from '../../data';

const COOKIE = 'oz0_inbox';
const PENDING_MS = 10 * 60_000;
const POLL_MS = 1000;
/** Sign-ins under way at once, at most: each is a few hundred bytes until it ends or expires. */
const MAX_PENDING = 10_000;

interface Session {
  identity: Identity;
  csrf: string;
  expires: number;
  flash?: string;
}

export interface InboxOptions {
  config: LoadedConfig;
  client: Client;
  signIn: SignIn;
  /** The Temporal UI's address (`http://127.0.0.1:8233`), for links to each job; default `inbox.temporalUi`. */
  temporalUi?: string;
  /** D5: the process's payloads (its keys, its store), for the codec server; without it, no codec server. */
  data?: ProcessData;
  log?: (line: string) => void;
}

export interface RunningInbox {
  url: string;
  close(): Promise<void>;
}

const AnswerFormSchema = z.object({
  csrf: z.string().min(1).max(200),
  job: z.string().min(1).max(1000),
  key: z.string().min(1).max(1000),
  decision: z.enum(['approve', 'deny']),
  reason: z.string().max(1000).optional(),
});

function sameToken(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The calls a person may answer, newest first. */
function visibleTo(config: LoadedConfig, who: Identity, calls: ListedCall[]): ListedCall[] {
  return calls
    .filter((c) => c.tenant !== undefined && mayAnswer(config.tenants[c.tenant]?.approvers, who, c.tool))
    .sort((a, b) => b.askedAt.localeCompare(a.askedAt));
}

/** Builds the inbox's app and serves it. */
export async function startInbox(opts: InboxOptions): Promise<RunningInbox> {
  const { config, client } = opts;
  const inbox = config.inbox!;
  const log = opts.log ?? (() => undefined);
  const sessions = new Map<string, Session>();
  const pending = new Map<string, PendingSignIn & { expires: number }>();
  let base = inbox.publicUrl ?? '';
  const secure = () => base.startsWith('https:');
  const temporalUi = opts.temporalUi ?? inbox.temporalUi?.replace(/\/+$/, '');
  const jobLink = temporalUi
    ? (jobId: string) =>
        `${temporalUi}/namespaces/${encodeURIComponent(config.temporal.namespace)}/workflows/${encodeURIComponent(jobId)}`
    : undefined;

  // One read of Temporal a second, shared by every page that watches.
  let latest: { at: number; calls: ListedCall[] } = { at: 0, calls: [] };
  let reading: Promise<ListedCall[]> | undefined;
  const waiting = async (): Promise<ListedCall[]> => {
    if (Date.now() - latest.at < POLL_MS / 2) return latest.calls;
    reading ??= listWaitingCalls(client)
      .then(({ calls }) => {
        latest = { at: Date.now(), calls };
        return calls;
      })
      .finally(() => (reading = undefined));
    return reading;
  };

  const sessionOf = (c: Context): Session | undefined => {
    const id = getCookie(c, COOKIE);
    const s = id ? sessions.get(id) : undefined;
    if (s && s.expires < Date.now()) {
      sessions.delete(id!);
      return undefined;
    }
    return s;
  };

  const app = new Hono();
  app.use(async (c, next) => {
    await next();
    c.header('X-Content-Type-Options', 'nosniff');
    c.header('Referrer-Policy', 'same-origin');
    c.header('X-Frame-Options', 'DENY');
    c.header('Cache-Control', 'no-store');
  });

  if (opts.data) {
    mountCodec(app, {
      config,
      data: opts.data,
      identityOf: (c) => sessionOf(c)?.identity,
      origins: temporalUi ? [new URL(temporalUi).origin] : [],
      recordFile: decodeRecordFile(config),
      log,
    });
  }

  app.get('/login', async (c) => {
    // Sign-ins begun and never finished are dropped after 10 minutes, and there are never more than MAX_PENDING.
    const now = Date.now();
    for (const [state, p] of pending) if (p.expires < now) pending.delete(state);
    if (pending.size >= MAX_PENDING)
      return c.html(signInPage('Too many sign-ins are under way: try again in a minute.'), 503);
    let started: Awaited<ReturnType<SignIn['start']>>;
    try {
      started = await opts.signIn.start(`${base}/callback`);
    } catch (err) {
      log(`a sign-in could not begin: ${(err as Error).message}`);
      return c.html(signInPage(`The identity provider could not be reached: ${(err as Error).message}`), 502);
    }
    pending.set(started.pending.state, { ...started.pending, expires: now + PENDING_MS });
    return c.redirect(started.url, 302);
  });

  app.get('/callback', async (c) => {
    const url = new URL(c.req.url);
    const state = url.searchParams.get('state') ?? '';
    const p = pending.get(state);
    pending.delete(state);
    if (!p || p.expires < Date.now())
      return c.html(
        signInPage('That sign-in is not one this inbox began (or it took over 10 minutes): sign in again.'),
        400,
      );
    let identity: Identity;
    try {
      identity = await opts.signIn.finish(new URL(`${base}/callback${url.search}`), p);
    } catch (err) {
      log(`a sign-in failed: ${(err as Error).message}`);
      return c.html(signInPage(`The identity provider's answer was not accepted: ${(err as Error).message}`), 400);
    }
    const id = randomBytes(32).toString('base64url');
    sessions.set(id, {
      identity,
      csrf: randomBytes(24).toString('base64url'),
      expires: Date.now() + inbox.sessionHours * 3600_000,
    });
    setCookie(c, COOKIE, id, {
      httpOnly: true,
      // D5: a Temporal UI on another site (Temporal Cloud's) sends the cookie only if it is SameSite=None (and Secure,
      // which the config's check asks: publicUrl on https).
      sameSite: inbox.crossSiteUi ? 'None' : 'Lax',
      secure: secure(),
      path: '/',
      maxAge: Math.floor(inbox.sessionHours * 3600),
    });
    log(`${answererName(identity)} signed in (${identity.issuer}, subject ${identity.subject})`);
    return c.redirect('./', 303);
  });

  app.post('/logout', async (c) => {
    const s = sessionOf(c);
    const form = await c.req.parseBody();
    if (s && typeof form.csrf === 'string' && sameToken(form.csrf, s.csrf)) {
      sessions.delete(getCookie(c, COOKIE)!);
      deleteCookie(c, COOKIE, { path: '/' });
    }
    return c.redirect('./', 303);
  });

  app.get('/', async (c) => {
    const s = sessionOf(c);
    if (!s) return c.html(signInPage());
    const calls = visibleTo(config, s.identity, await waiting());
    const flash = s.flash;
    s.flash = undefined;
    return c.html(inboxPage(calls, { who: answererName(s.identity), csrf: s.csrf, jobLink, flash }));
  });

  /** The calls as JSON, for a script: the same the page lists. */
  app.get('/calls', async (c) => {
    const s = sessionOf(c);
    if (!s) return c.json({ error: 'sign in first' }, 401);
    return c.json({ calls: visibleTo(config, s.identity, await waiting()) });
  });

  app.get('/events', (c) => {
    const s = sessionOf(c);
    if (!s) return c.text('sign in first', 401);
    return streamSSE(c, async (stream) => {
      let last = '';
      let open = true;
      stream.onAbort(() => {
        open = false;
      });
      while (open && sessions.has(getCookie(c, COOKIE) ?? '')) {
        const calls = visibleTo(config, s.identity, await waiting().catch(() => latest.calls));
        const fragment = String(await callList(calls, { who: answererName(s.identity), csrf: s.csrf, jobLink }));
        const digest = JSON.stringify(calls.map((x) => [x.jobId, x.key]));
        if (digest !== last) {
          await stream.writeSSE({ event: 'calls', data: fragment });
          last = digest;
        }
        await stream.sleep(POLL_MS);
      }
    });
  });

  app.post('/answer', async (c) => {
    const s = sessionOf(c);
    if (!s) return c.text('sign in first', 401);
    const parsed = AnswerFormSchema.safeParse(await c.req.parseBody());
    if (!parsed.success)
      return c.text(
        `a bad answer: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
        400,
      );
    const form = parsed.data;
    if (!sameToken(form.csrf, s.csrf)) return c.text('this form is not from your page (CSRF token): reload it', 403);
    const { calls } = await listWaitingCalls(client);
    const call = calls.find((x) => x.jobId === form.job && x.key === form.key);
    if (!call) {
      s.flash = await alreadyAnswered(client, config, s.identity, form.job, form.key);
      return c.redirect('./', 303);
    }
    if (!call.tenant || !mayAnswer(config.tenants[call.tenant]?.approvers, s.identity, call.tool)) {
      log(
        `${answererName(s.identity)} was refused ${call.tool} of ${call.jobId}: not an approver of tenant ${call.tenant}`,
      );
      return c.text(`you are not an approver of tenant ${call.tenant ?? '?'} for ${call.tool}`, 403);
    }
    const approve = form.decision === 'approve';
    try {
      await answerCall(client, call.jobId, {
        call: call.key,
        approve,
        by: answererName(s.identity),
        identity: {
          issuer: s.identity.issuer,
          subject: s.identity.subject,
          ...(s.identity.email && { email: s.identity.email }),
        },
        ...(!approve && form.reason ? { reason: form.reason } : {}),
      });
    } catch (err) {
      if (!(err instanceof AnswerRefused)) throw err;
      s.flash = await alreadyAnswered(client, config, s.identity, form.job, form.key);
      return c.redirect('./', 303);
    }
    latest = { at: 0, calls: [] };
    s.flash = `${approve ? 'Approved' : 'Denied'} ${call.tool} of ${call.jobId}${!approve && form.reason ? `: ${form.reason}` : ''}.`;
    log(
      `${answererName(s.identity)} ${approve ? 'approved' : 'denied'} ${call.activityId} (${call.tool}) of ${call.jobId}`,
    );
    return c.redirect('./', 303);
  });

  const server = serve({ fetch: app.fetch, hostname: inbox.host, port: inbox.port });
  await new Promise<void>((resolve, reject) => {
    server.once('listening', () => resolve());
    server.once('error', reject);
  });
  const { port } = server.address() as AddressInfo;
  if (!base) base = `http://${inbox.host.includes(':') ? `[${inbox.host}]` : inbox.host}:${port}`;
  return {
    url: base,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/**
 * Why a call no longer waits, from its job's trace: who answered it first, or how its wait ended — said only to a
 * person who may answer that tenant's call of that tool; anyone else learns nothing of another tenant's job.
 */
async function alreadyAnswered(
  client: Client,
  config: LoadedConfig,
  who: Identity,
  jobId: string,
  key: string,
): Promise<string> {
  const nothing = `That call of ${jobId} does not wait for you.`;
  try {
    const handle = client.workflow.getHandle(jobId);
    const tenant = (await handle.describe()).typedSearchAttributes.get(Oz0Tenant);
    const trace = await handle.query(traceQuery);
    const call = callsOf(trace).find((c) => c.key === key && c.question);
    if (!call || !tenant || !mayAnswer(config.tenants[tenant]?.approvers, who, call.tool)) return nothing;
    const a = call?.question?.answer;
    if (call && a)
      return `${call.tool} of ${jobId} was already ${a.approved ? 'approved' : 'denied'} by ${a.by} at ${a.at}.`;
    if (call?.question?.ended) return `${call.tool} of ${jobId} no longer waits: ${call.question.ended}.`;
  } catch {
    // the job is gone, or no node answers its query
  }
  return nothing;
}
