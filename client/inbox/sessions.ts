/**
 * A12: the inbox's side of its sessions (workflows/inbox.ts keeps them). A session's cookie is 32 random bytes; the
 * workflow knows it only by its SHA-256, and its CSRF token is an HMAC of the cookie, so nothing in Temporal signs
 * anybody in or forges a form. Each process keeps what it read a second (SEEN_MS) before it asks again, so a sign-out
 * on one process ends the session on every other within that; a form's answer and a sign-out always ask afresh.
 */
import { createHash, createHmac, randomBytes } from 'node:crypto';
import { WithStartWorkflowOperation, WorkflowNotFoundError } from '@temporalio/client';
import type { Client } from '@temporalio/client';
import type { Identity } from '../../common/approvers';
import {
  INBOX_SESSIONS_ID,
  INBOX_SESSIONS_WORKFLOW,
  beginSessionUpdate,
  endSessionUpdate,
  sessionQuery,
} from '../../model/inbox-sessions';
import type { InboxSession, InboxSessionsWorkflow } from '../../model/inbox-sessions';

const SEEN_MS = 1000;
/** How long a read of the sessions may take before the inbox says it cannot reach them. */
const DEADLINE_MS = 10_000;
/** Sessions a process remembers reading, at most (a flood of made-up cookies does not grow it past this). */
const REMEMBERED = 10_000;

export interface Session {
  identity: Identity;
  csrf: string;
  expires: number;
}

/** The sessions cannot be read: no node runs the inbox's sessions workflow, or Temporal is down. */
export class SessionsUnreachable extends Error {
  override name = 'SessionsUnreachable';
}

function idOf(cookie: string): string {
  return createHash('sha256').update(cookie).digest('hex');
}

function csrfOf(cookie: string): string {
  return createHmac('sha256', cookie).update('oz0 inbox csrf').digest('base64url');
}

export class InboxSessions {
  private readonly seen = new Map<string, { session: InboxSession | null; at: number }>();

  constructor(
    private readonly client: Client,
    private readonly taskQueue: string,
  ) {}

  /** Begins a session for `identity`; its cookie. */
  async begin(identity: Identity, hours: number): Promise<string> {
    const cookie = randomBytes(32).toString('base64url');
    const session: InboxSession = {
      id: idOf(cookie),
      identity: {
        issuer: identity.issuer,
        subject: identity.subject,
        ...(identity.email && { email: identity.email }),
        ...(identity.name && { name: identity.name }),
        groups: identity.groups,
      },
      expires: Date.now() + hours * 3600_000,
    };
    const start = new WithStartWorkflowOperation<InboxSessionsWorkflow>(INBOX_SESSIONS_WORKFLOW, {
      workflowId: INBOX_SESSIONS_ID,
      taskQueue: this.taskQueue,
      args: [{ sessions: [] }],
      workflowIdConflictPolicy: 'USE_EXISTING',
    });
    await this.reaching(() =>
      this.client.workflow.executeUpdateWithStart(beginSessionUpdate, {
        args: [session],
        startWorkflowOperation: start,
      }),
    );
    this.remember(session.id, session);
    return cookie;
  }

  /** The session a cookie names, while it lasts; `fresh` asks the workflow whatever this process read before. */
  async of(cookie: string | undefined, fresh = false): Promise<Session | undefined> {
    if (!cookie || cookie.length > 100) return undefined;
    const id = idOf(cookie);
    const known = this.seen.get(id);
    let session = known?.session;
    if (!known || fresh || Date.now() - known.at > SEEN_MS) {
      session = await this.reaching(async () => {
        try {
          return await this.client.workflow.getHandle(INBOX_SESSIONS_ID).query(sessionQuery, id);
        } catch (err) {
          if (err instanceof WorkflowNotFoundError) return null;
          throw err;
        }
      });
      this.remember(id, session);
    }
    if (!session || session.expires <= Date.now()) return undefined;
    return { identity: session.identity, csrf: csrfOf(cookie), expires: session.expires };
  }

  /** Ends a cookie's session for every process. */
  async end(cookie: string): Promise<void> {
    const id = idOf(cookie);
    await this.reaching(async () => {
      try {
        await this.client.workflow.getHandle(INBOX_SESSIONS_ID).executeUpdate(endSessionUpdate, { args: [id] });
      } catch (err) {
        // No sessions workflow (an operator ended it): no session lasts, this one neither.
        if (!(err instanceof WorkflowNotFoundError)) throw err;
      }
    });
    this.remember(id, null);
  }

  private remember(id: string, session: InboxSession | null): void {
    if (this.seen.size >= REMEMBERED) this.seen.clear();
    this.seen.set(id, { session, at: Date.now() });
  }

  private async reaching<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await this.client.withDeadline(Date.now() + DEADLINE_MS, fn);
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) throw err;
      throw new SessionsUnreachable(
        `the inbox cannot read its sessions (${INBOX_SESSIONS_ID}: ${(err as Error).message}); is a node running?`,
      );
    }
  }
}
