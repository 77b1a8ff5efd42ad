/**
 * One long-running workflow per tenant keeps its policy, kill switches and approvals (A3): durable in
 * Temporal, visible in the UI, changed only through updates, read through a query. `oz0-policy/*` holds the
 * kill switches thrown for every tenant. It keeps the tenant's share of the platform too (F1-F5: weight, priority,
 * caps and rates; the counting behind caps is its limiter's, ./shares.ts). It also watches the tenant's calls that
 * wait for a person's yes (A4): a change that may end such a wait (the call's pattern set again, a kill switch over its
 * tool) is told to its job. A13: beside its state it keeps which fields a command set, the rest being its config seed's.
 */
import {
  allHandlersFinished,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { PolicyInput, TenantState } from '../model/schemas';
import {
  approvalProblem,
  batchProblem,
  decisionProblem,
  matches,
  patternProblem,
  serverNameProblem,
  watchedQuestionProblem,
} from '../model/checks';
import {
  approveUpdate,
  forgetQuestionSignal,
  killUpdate,
  policyChangedSignal,
  policyOriginsQuery,
  policyStateQuery,
  reviveUpdate,
  revokeUpdate,
  setPolicyUpdate,
  setSharesUpdate,
  watchQuestionUpdate,
  watchQuestionsUpdate,
} from '../model/messages';
import { emptyState } from '../model/policy-rules';
import { defaultShares, sharesProblem } from '../model/shares';
import { changedShareFields, seededOrigins, setBy, shareFieldsProblem } from '../model/origins';

/** Changes kept in one run's history before it continues as new. */
const CHANGES_PER_RUN = 500;
/** A watched question is dropped this long after its wait's own end, had its job never said it ended. */
const QUESTION_SLACK_MS = 3600_000;

function questionId(q: { jobId: string; key: string }): string {
  return `${q.jobId}\n${q.key}`;
}

export async function tenantPolicy(input: PolicyInput): Promise<void> {
  const state: TenantState = input.state ?? emptyState(input.seed, input.shares);
  // A13: kept outside the state, whose shape older nodes check strictly; a run an older oz0 continued kept none.
  const origins = input.origins ?? (input.state ? { ...seededOrigins(), complete: false } : seededOrigins());
  let changes = 0;
  const waiting = new Map((input.waiting ?? []).map((q) => [questionId(q), q]));
  /** Jobs being told of a change: the run continues as new only once each was told. */
  let telling = 0;
  const change = (apply: () => void) => () => {
    apply();
    state.version++;
    changes++;
    return state;
  };
  /** A4: tells the jobs whose waiting call `pattern` covers that it changed; each is told once, then forgotten. */
  const tell = (pattern: string, what: string) => {
    const now = Date.now();
    for (const [id, q] of waiting) {
      if (q.until + QUESTION_SLACK_MS < now) waiting.delete(id);
      if (!waiting.has(id) || !matches(pattern, q.tool)) continue;
      waiting.delete(id);
      telling++;
      changes++;
      const news = { key: q.key, tenant: input.tenant, version: state.version, change: what };
      // A job that has ended meanwhile cannot be told, and need not be.
      void getExternalWorkflowHandle(q.jobId)
        .signal(policyChangedSignal, news)
        .catch(() => undefined)
        .finally(() => telling--);
    }
  };
  /** Update validators: a bad argument is refused before it reaches the history, with what is wrong. */
  const check = (...problems: (string | undefined)[]) => {
    const found = problems.filter(Boolean);
    if (found.length) throw new Error(found.join('; '));
  };

  setHandler(policyStateQuery, () => state, {
    description: "the tenant's policy: decisions by tool pattern, kill switches, approved listings, version",
  });
  setHandler(policyOriginsQuery, () => ({ state, origins }), {
    description: 'A13: the state, and which of its fields a command set (the rest came from the config that seeded it)',
  });
  setHandler(
    setPolicyUpdate,
    (pattern, decision) => {
      setBy(origins, 'policy', [pattern]);
      change(() => (state.policy[pattern] = decision))();
      tell(pattern, `${pattern}: ${decision}`);
      return state;
    },
    {
      validator: (pattern, decision) => {
        check(patternProblem(pattern), decisionProblem(decision));
      },
      description: 'A1, A4: sets allow, deny, ask or confirm for a tool pattern',
    },
  );
  setHandler(
    killUpdate,
    (tool) => {
      change(() => (state.kills = [...new Set([...state.kills, tool])]))();
      tell(tool, `the kill switch for ${tool}`);
      return state;
    },
    {
      validator: (tool) => check(patternProblem(tool)),
      description:
        "C5: throws a tool pattern's kill switch: its running calls stop, new ones (and waiting ones) are refused",
    },
  );
  setHandler(reviveUpdate, (tool) => change(() => (state.kills = state.kills.filter((k) => k !== tool)))(), {
    validator: (tool) => check(patternProblem(tool)),
    description: "C5: takes a tool pattern's kill switch off",
  });
  setHandler(approveUpdate, (server, approval) => change(() => (state.approvals[server] = approval))(), {
    validator: (server, approval) => {
      check(serverNameProblem(server), approvalProblem(approval));
    },
    description: "A2: approves a server's listing, pinned to its digest",
  });
  setHandler(revokeUpdate, (server) => change(() => delete state.approvals[server])(), {
    validator: (server) => check(serverNameProblem(server)),
    description: "A2: takes a server's approval back",
  });
  setHandler(
    setSharesUpdate,
    (shares, named?: string[]) => {
      setBy(origins, 'shares', named ?? changedShareFields(state.shares ?? defaultShares(), shares));
      return change(() => (state.shares = shares))();
    },
    {
      validator: (shares, named?: string[]) => check(sharesProblem(shares), shareFieldsProblem(named)),
      description:
        "F1-F5: sets the tenant's weight, highest priority, caps and rates; A13: the fields named are marked set",
    },
  );
  setHandler(
    watchQuestionUpdate,
    (q) => {
      waiting.set(questionId(q), q);
      changes++;
      return state;
    },
    {
      validator: (q) => check(watchedQuestionProblem(q)),
      description:
        "A4: watches a call that waits for a person's yes: a change that matches its tool is told to its job",
    },
  );
  setHandler(
    watchQuestionsUpdate,
    (questions) => {
      for (const q of questions) waiting.set(questionId(q), q);
      changes++;
      return state;
    },
    {
      // One bad question refuses the batch: a node's own questions are all well made (it checks what it sends).
      validator: (questions) =>
        check(batchProblem(questions), ...(Array.isArray(questions) ? questions.map(watchedQuestionProblem) : [])),
      description: "N4: watches a node's waiting calls since its last batch, in one Update (as watchQuestion each)",
    },
  );
  setHandler(
    forgetQuestionSignal,
    (q) => {
      // Not counted as a change: a run recorded before this counted none, and its replay must continue as new where
      // it did (Temporal's continueAsNewSuggested bounds a history that signals grow).
      waiting.delete(questionId(q));
    },
    { description: "A4: a watched call's wait has ended" },
  );

  // The history stays short: after enough changes (or when Temporal says so) the state moves to a new run.
  await condition(() => changes >= CHANGES_PER_RUN || workflowInfo().continueAsNewSuggested);
  await condition(() => allHandlersFinished() && telling === 0);
  await continueAsNew<typeof tenantPolicy>({ tenant: input.tenant, state, origins, waiting: [...waiting.values()] });
}
