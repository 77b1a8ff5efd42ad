/**
 * A8-A9: the approvals inbox, `oz0 inbox`: a process of its own (it needs only a Temporal client, so it runs apart
 * from the nodes), on Hono. A person signs in with the operator's identity provider (./oidc.ts); the page lists the
 * calls that wait for them — those of tenants whose `approvers` name them, for that tool — follows the list live
 * (server-sent events, the list read from Temporal once a second while anyone watches), and answers through the
 * job's `answerCall` Update with the identity the provider vouched for. Anything else is 403.
 *
 * A11: a sign-in is bound to the browser that began it: its state, nonce and PKCE verifier ride in a short-lived
 * HttpOnly, SameSite=Lax cookie, and a callback whose state is not that cookie's signs nobody in. Every page carries a
 * Content-Security-Policy that runs only its own script (a nonce a response) and frames nowhere.
 *
 * A12: sessions are kept in Temporal (./sessions.ts), so a restart signs nobody out and several inbox processes
 * behind one address share them; the cookie is HttpOnly, SameSite=Lax and, when the inbox is served over TLS,
 * Secure; every form carries the session's CSRF token. A person who may not answer a call gets one refusal whatever
 * the call's state.
 *
 * D5: it is also the codec server of the Temporal UI (./codec.ts): a person signed in here reads the payloads of the
 * tenants that name them decoded there, and nothing else.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
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
import type { SignIn } from './oidc';
import { callList, inboxPage, signInPage } from './page';
import { decodeRecordFile, mountCodec } from './codec';
import type { ProcessData } from '../../data';
import { InboxSessions, SessionsUnreachable } from './sessions';
import type { Session } from './sessions';

const COOKIE = 'oz0_inbox';
/** A11: the sign-in under way in this browser. */
const SIGN_IN_COOKIE = 'oz0_signin';
/** What the page says after an answer, for the session that gave it. */
const FLASH_COOKIE = 'oz0_flash';
const PENDING_MS = 10 * 60_000;
const POLL_MS = 1000;
/** How long a stopping inbox waits for its requests to end. */
const CLOSE_MS = 5000;

/** A sign-in under way, as its browser keeps it (its own secrets: nothing in it signs anybody else in). */
const PendingSchema = z.object({
  state: z.string().min(1).max(200),
  nonce: z.string().min(1).max(200),
  verifier: z.string().min(1).max(200),
  expires: z.number(),
});

/** A11: the page's policy: its own script (by the response's nonce) and style, its own origin, no frames. */
function contentSecurityPolicy(nonce: string): string {
  return [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    `style-src 'nonce-${nonce}'`,
    "connect-src 'self'",
    "img-src 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
  ].join('; ');
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
  // On the policy queue, which every node polls whatever its own queue (as tenants' policies are).
  const sessions = new InboxSessions(client, config.temporal.policyTaskQueue);
  /** Set by close(): the live lists end, so that their connections close with the server. */
  let closing = false;
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

  const sessionOf = (c: Context, fresh = false): Promise<Session | undefined> =>
    sessions.of(getCookie(c, COOKIE), fresh);
  const cookieOptions = (maxAge: number) =>
    ({ httpOnly: true, sameSite: 'Lax', secure: secure(), path: '/', maxAge }) as const;
  /** What the page says next, bound to the session (an HMAC under its cookie): another site cannot plant one. */
  const flashMac = (cookie: string, text: string) =>
    createHmac('sha256', cookie).update(`flash:${text}`).digest('base64url');
  const setFlash = (c: Context, text: string) => {
    const cookie = getCookie(c, COOKIE) ?? '';
    setCookie(
      c,
      FLASH_COOKIE,
      `${Buffer.from(text).toString('base64url')}.${flashMac(cookie, text)}`,
      cookieOptions(60),
    );
  };
  const takeFlash = (c: Context): string | undefined => {
    const value = getCookie(c, FLASH_COOKIE);
    if (!value) return undefined;
    deleteCookie(c, FLASH_COOKIE, { path: '/' });
    const [text64, mac] = value.split('.');
    const text = Buffer.from(text64 ?? '', 'base64url').toString();
    return mac && sameToken(mac, flashMac(getCookie(c, COOKIE) ?? '', text)) ? text : undefined;
  };

  const app = new Hono<{ Variables: { nonce: string } }>();
  app.use(async (c, next) => {
    const nonce = randomBytes(18).toString('base64');
    c.set('nonce', nonce);
    await next();
    c.header('Content-Security-Policy', contentSecurityPolicy(nonce));
    c.header('X-Content-Type-Options', 'nosniff');
    c.header('Referrer-Policy', 'same-origin');
    c.header('X-Frame-Options', 'DENY');
    c.header('Cache-Control', 'no-store');
  });
  app.onError((err, c) => {
    if (!(err instanceof SessionsUnreachable)) throw err;
    log(err.message);
    return c.html(signInPage(c.get('nonce'), `${err.message}.`), 503);
  });

  if (opts.data) {
    mountCodec(app, {
      config,
      data: opts.data,
      identityOf: async (c) => (await sessionOf(c))?.identity,
      origins: temporalUi ? [new URL(temporalUi).origin] : [],
      recordFile: decodeRecordFile(config),
      log,
    });
  }

  app.get('/login', async (c) => {
    let started: Awaited<ReturnType<SignIn['start']>>;
    try {
      started = await opts.signIn.start(`${base}/callback`);
    } catch (err) {
      log(`a sign-in could not begin: ${(err as Error).message}`);
      return c.html(
        signInPage(c.get('nonce'), `The identity provider could not be reached: ${(err as Error).message}`),
        502,
      );
    }
    const pending = { ...started.pending, expires: Date.now() + PENDING_MS };
    // A11: the browser that began the sign-in keeps it; the callback is taken only with this cookie.
    setCookie(
      c,
      SIGN_IN_COOKIE,
      Buffer.from(JSON.stringify(pending)).toString('base64url'),
      cookieOptions(PENDING_MS / 1000),
    );
    return c.redirect(started.url, 302);
  });

  app.get('/callback', async (c) => {
    const url = new URL(c.req.url);
    const state = url.searchParams.get('state') ?? '';
    const kept = getCookie(c, SIGN_IN_COOKIE);
    deleteCookie(c, SIGN_IN_COOKIE, { path: '/' });
    let p: z.infer<typeof PendingSchema> | undefined;
    try {
      p = PendingSchema.parse(JSON.parse(Buffer.from(kept ?? '', 'base64url').toString()));
    } catch {
      p = undefined;
    }
    if (!p || !sameToken(p.state, state) || p.expires < Date.now()) {
      log(
        `a sign-in's callback was refused: ${p ? 'not the one this browser began, or too old' : 'no sign-in was begun in its browser'}`,
      );
      return c.html(
        signInPage(
          c.get('nonce'),
          'That sign-in was not begun in this browser (or it took over 10 minutes): sign in again.',
        ),
        400,
      );
    }
    let identity: Identity;
    try {
      identity = await opts.signIn.finish(new URL(`${base}/callback${url.search}`), p);
    } catch (err) {
      log(`a sign-in failed: ${(err as Error).message}`);
      return c.html(
        signInPage(c.get('nonce'), `The identity provider's answer was not accepted: ${(err as Error).message}`),
        400,
      );
    }
    const cookie = await sessions.begin(identity, inbox.sessionHours);
    setCookie(c, COOKIE, cookie, {
      ...cookieOptions(Math.floor(inbox.sessionHours * 3600)),
      // D5: a Temporal UI on another site (Temporal Cloud's) sends the cookie only if it is SameSite=None (and Secure,
      // which the config's check asks: publicUrl on https).
      sameSite: inbox.crossSiteUi ? 'None' : 'Lax',
    });
    log(`${answererName(identity)} signed in (${identity.issuer}, subject ${identity.subject})`);
    return c.redirect('./', 303);
  });

  app.post('/logout', async (c) => {
    const cookie = getCookie(c, COOKIE);
    const s = await sessionOf(c, true);
    const form = await c.req.parseBody();
    if (s && cookie && typeof form.csrf === 'string' && sameToken(form.csrf, s.csrf)) {
      await sessions.end(cookie);
      deleteCookie(c, COOKIE, { path: '/' });
      log(`${answererName(s.identity)} signed out`);
    }
    return c.redirect('./', 303);
  });

  app.get('/', async (c) => {
    const s = await sessionOf(c);
    if (!s) return c.html(signInPage(c.get('nonce')));
    const calls = visibleTo(config, s.identity, await waiting());
    const flash = takeFlash(c);
    return c.html(
      inboxPage(calls, { who: answererName(s.identity), csrf: s.csrf, jobLink, flash, nonce: c.get('nonce') }),
    );
  });

  /** The calls as JSON, for a script: the same the page lists. */
  app.get('/calls', async (c) => {
    const s = await sessionOf(c);
    if (!s) return c.json({ error: 'sign in first' }, 401);
    return c.json({ calls: visibleTo(config, s.identity, await waiting()) });
  });

  app.get('/events', async (c) => {
    const s = await sessionOf(c);
    if (!s) return c.text('sign in first', 401);
    return streamSSE(c, async (stream) => {
      let last = '';
      let open = true;
      stream.onAbort(() => {
        open = false;
      });
      // A sign-out (here or on another inbox process) ends the stream within a second or so.
      while (open && !closing && (await sessionOf(c).catch(() => s))) {
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
    const s = await sessionOf(c, true);
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
    // A12: a call that does not wait, or waits for others, is refused alike: what is said is what the trace tells a
    // person who may answer it, and for anyone else one sentence whatever the call's state.
    const refuse = async () => {
      setFlash(c, await alreadyAnswered(client, config, s.identity, form.job, form.key));
      return c.redirect('./', 303);
    };
    if (!call) return refuse();
    if (!call.tenant || !mayAnswer(config.tenants[call.tenant]?.approvers, s.identity, call.tool)) {
      log(
        `${answererName(s.identity)} was refused ${call.tool} of ${call.jobId}: not an approver of tenant ${call.tenant}`,
      );
      return refuse();
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
      return refuse();
    }
    latest = { at: 0, calls: [] };
    setFlash(
      c,
      `${approve ? 'Approved' : 'Denied'} ${call.tool} of ${call.jobId}${!approve && form.reason ? `: ${form.reason}` : ''}.`,
    );
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
    close: () =>
      new Promise((resolve) => {
        closing = true;
        server.close(() => resolve());
        // A live list ends within a second; a connection still open after CLOSE_MS is cut.
        setTimeout(() => (server as { closeAllConnections?: () => void }).closeAllConnections?.(), CLOSE_MS).unref();
      }),
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
