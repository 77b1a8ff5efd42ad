/**
 * A12: the inbox's sessions (model/inbox-sessions.ts), one workflow for every `oz0 inbox` process of a namespace:
 * a sign-in begins one, a sign-out ends it, and each process reads a session by the hash of its cookie. Sessions past
 * their time are dropped as changes come; a run continues as new after CHANGES_PER_RUN of them, carrying those left.
 */
import { allHandlersFinished, condition, continueAsNew, setHandler, workflowInfo } from '@temporalio/workflow';
import {
  MAX_SESSIONS,
  beginSessionUpdate,
  endSessionUpdate,
  sessionIdProblem,
  sessionProblem,
  sessionQuery,
} from '../model/inbox-sessions';
import type { InboxSession, InboxSessionsInput, InboxSessionsWorkflow } from '../model/inbox-sessions';

const CHANGES_PER_RUN = 500;

function refuse(problem: string | undefined): void {
  if (problem) throw new Error(problem);
}

export async function inboxSessions(input: InboxSessionsInput): Promise<void> {
  const sessions = new Map<string, InboxSession>(input.sessions.map((s) => [s.id, s]));
  let changes = 0;
  const prune = () => {
    const now = Date.now();
    for (const [id, s] of sessions) if (s.expires <= now) sessions.delete(id);
  };
  setHandler(
    beginSessionUpdate,
    (session) => {
      prune();
      sessions.set(session.id, session);
      changes++;
    },
    {
      validator: (session) => {
        refuse(sessionProblem(session));
        if (sessions.size >= MAX_SESSIONS && !sessions.has(session.id))
          throw new Error(`${MAX_SESSIONS} people are signed in to the inbox: a sign-in waits until some sign out`);
      },
    },
  );
  setHandler(
    endSessionUpdate,
    (id) => {
      sessions.delete(id);
      prune();
      changes++;
    },
    { validator: (id) => refuse(sessionIdProblem(id)) },
  );
  setHandler(sessionQuery, (id) => {
    const s = sessions.get(id);
    return s && s.expires > Date.now() ? s : null;
  });
  await condition(() => changes >= CHANGES_PER_RUN || workflowInfo().continueAsNewSuggested);
  await condition(allHandlersFinished);
  prune();
  await continueAsNew<InboxSessionsWorkflow>({ sessions: [...sessions.values()] });
}
