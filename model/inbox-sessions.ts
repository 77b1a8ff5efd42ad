/**
 * A12: the inbox's sessions, kept in Temporal (workflows/inbox.ts) so that a restart of `oz0 inbox` signs nobody out
 * and every inbox process behind one address knows every session. A session is named by the SHA-256 of its cookie's
 * secret: the history holds who signed in and until when, never a cookie that would sign anybody in. Pure: the
 * workflow and the inbox share these.
 */
import { defineQuery, defineUpdate } from '@temporalio/workflow';

/** The one workflow of every inbox process of a namespace (I11: an id of the platform's own). */
export const INBOX_SESSIONS_ID = 'oz0-inbox/sessions';
export const INBOX_SESSIONS_WORKFLOW = 'inboxSessions';
/** Sessions at once, at most: a sign-in past this is refused until some end or expire. */
export const MAX_SESSIONS = 10_000;

/** Who signed in, as the identity provider vouched for them (common/approvers.ts's Identity). */
export interface SessionIdentity {
  issuer: string;
  subject: string;
  email?: string;
  name?: string;
  groups: string[];
}

export interface InboxSession {
  /** The SHA-256 of the cookie's secret, in hex. */
  id: string;
  identity: SessionIdentity;
  /** When it ends, in ms since the epoch. */
  expires: number;
}

export interface InboxSessionsInput {
  sessions: InboxSession[];
}

/** The sessions workflow, as the inbox starts it. */
export type InboxSessionsWorkflow = (input: InboxSessionsInput) => Promise<void>;

export const beginSessionUpdate = defineUpdate<void, [InboxSession]>('beginSession');
/** Sign-out: the session ends for every inbox process, whatever its cookie says. */
export const endSessionUpdate = defineUpdate<void, [string]>('endSession');
/** A session by its id, while it lasts; null once it ended or expired (or never was). */
export const sessionQuery = defineQuery<InboxSession | null, [string]>('session');

const ID = /^[0-9a-f]{64}$/;

export function sessionIdProblem(id: unknown): string | undefined {
  return typeof id === 'string' && ID.test(id) ? undefined : "a session's id is a SHA-256 in hex";
}

/** What is wrong with a session a client begins, if anything: any Temporal client can send one. */
export function sessionProblem(input: unknown): string | undefined {
  if (!input || typeof input !== 'object' || Array.isArray(input)) return 'a session is { id, identity, expires }';
  const { id, identity, expires, ...rest } = input as Record<string, unknown>;
  if (Object.keys(rest).length) return `a session has no field ${Object.keys(rest).map((k) => `"${k}"`)}`;
  const idIssue = sessionIdProblem(id);
  if (idIssue) return idIssue;
  if (typeof expires !== 'number' || !Number.isFinite(expires)) return 'expires is a time in ms since the epoch';
  const what = 'identity is { issuer, subject, email?, name?, groups }';
  if (!identity || typeof identity !== 'object' || Array.isArray(identity)) return what;
  const { issuer, subject, email, name, groups, ...more } = identity as Record<string, unknown>;
  const short = (v: unknown) => typeof v === 'string' && v.length > 0 && v.length <= 1000;
  if (Object.keys(more).length || !short(issuer) || !short(subject)) return what;
  if ((email !== undefined && !short(email)) || (name !== undefined && !short(name))) return what;
  if (!Array.isArray(groups) || groups.length > 1000 || !groups.every(short)) return what;
  return undefined;
}
