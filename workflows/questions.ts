/**
 * Calls a person approves (SPEC A4-A7). A call whose verdict is `confirm` waits here, in the job workflow, before its
 * first attempt: for a person's answer (the `answerCall` Update), its time limit (a durable timer), a change of the
 * tenant's policy that may end the wait (its policy workflow signals the job), or a cancel (the job's, or its live
 * session's). Nothing is sent to its server until a person said yes; the yes covers that call's attempts — they carry
 * it under the call's one key — and no other call.
 */
import {
  CancellationScope,
  condition,
  getExternalWorkflowHandle,
  proxyActivities,
  setHandler,
  sleep,
  upsertMemo,
  workflowInfo,
} from '@temporalio/workflow';
import { answerProblem } from '../model/checks';
import { answerCallUpdate, policyChangedSignal, waitingCallsQuery } from '../model/messages';
import { WAITING_MEMO, WAITING_MEMO_PATCH } from '../model/job';
import type { Answer, QuestionTrace } from '../model/job';
import type { AnswerCallInput, CallAnswered, PolicyNews, WaitingCall } from '../model/messages';
import type { Activities, ApprovalNotice, CallAsks } from '../model/activities';
import { forgetQuestionSignal } from '../model/messages';
import { ALL_TENANTS, policyWorkflowId } from '../model/policy-rules';

/** A10: the marker of jobs whose questions tell the tenant's webhook (workflow versioning: older runs never do). */
const APPROVAL_NOTICES = 'oz0-approval-notices';

/** A call that waits: what the job shows of it, and how its wait ends. */
interface Question {
  call: WaitingCall;
  deadline: number;
  answer?: Answer;
  news?: PolicyNews;
}

/** How a wait ended, for the call: run it under the yes, refuse it (a no, or no answer in time), or look again. */
export type Settled = { approved: Answer } | { refused: { text: string; note: string } } | { news: PolicyNews };

/** What the workflow knows of the call that asks: its place, whose it is, its time limit and what the node found. */
export type Asking = Pick<WaitingCall, 'n' | 'activityId' | 'tool' | 'key' | 'session' | 'sessionRun'> & {
  tenant: string;
  timeoutSeconds: number;
  asks: CallAsks['asks'];
};

/** `24 h`, `90 min`, `45 s`: a time limit as a person says it. */
export function durationInWords(seconds: number): string {
  if (seconds >= 86400 && seconds % 86400 === 0) return `${seconds / 86400} d`;
  if (seconds >= 3600 && seconds % 3600 === 0) return `${seconds / 3600} h`;
  if (seconds >= 60 && seconds % 60 === 0) return `${seconds / 60} min`;
  return `${seconds} s`;
}

/** The calls of one job that wait for a person, and the handlers through which they hear. */
export class Questions {
  private readonly waiting = new Map<string, Question>();
  /**
   * Yeses given in this run, by key: a fresh run of a session after a lost node makes the same call again under the
   * same key (K4), and it is the same call: it is not asked again. A call under another key always is.
   */
  private readonly approved = new Map<string, Answer>();
  /**
   * News that came before its question was asked: its node had the policy workflow watch the question, and a change
   * was told before the node's answer reached the job. It is taken when the question is asked (at worst it makes the
   * call look again once more).
   */
  private readonly early = new Map<string, PolicyNews>();

  /** A10: the notices this run scheduled, which it never waits for but at its end, briefly (see {@link sent}). */
  private readonly notices: Promise<unknown>[] = [];

  constructor(
    /** Called when a call starts or stops waiting: the job's status and current details follow. */
    private readonly changed: () => void,
    /** N6: whether the run takes this release's change (workflows/marks.ts), writing its marker. */
    private readonly takes: (change: string) => boolean,
  ) {}

  /**
   * A10: tells the tenant's webhook (activities/notices.ts), beside the call: scheduled, never awaited by the call; a
   * node retries it with backoff. Jobs that began before notices were (their histories have no marker) send none.
   */
  private notice(asking: Asking, notice: Omit<ApprovalNotice, 'tenant' | 'jobId' | 'tool' | 'call' | 'key'>): void {
    if (!this.takes(APPROVAL_NOTICES)) return;
    const { noticeApprovers } = proxyActivities<Activities>({
      priority: { fairnessKey: asking.tenant },
      startToCloseTimeout: '20s',
      scheduleToCloseTimeout: '10m',
      retry: { initialInterval: '2s', backoffCoefficient: 2, maximumInterval: '60s', maximumAttempts: 8 },
    });
    const sent = CancellationScope.nonCancellable(() =>
      noticeApprovers({
        ...notice,
        tenant: asking.tenant,
        jobId: workflowInfo().workflowId,
        tool: asking.tool,
        call: asking.activityId,
        key: asking.key,
      }),
    );
    this.notices.push(sent.catch(() => undefined));
  }

  /** A10: the job's end waits up to 10 s for its last notices (an answer's), then ends whatever became of them. */
  async sent(): Promise<void> {
    if (!this.notices.length) return;
    await CancellationScope.nonCancellable(() => Promise.race([Promise.all(this.notices), sleep('10s')]));
  }

  /** Before the job's first await, like its other handlers: an answer sent as it starts finds them. */
  register(): void {
    setHandler(answerCallUpdate, (input) => this.answer(input), {
      validator: (input) => this.check(input),
      description: "A5: a person's answer to a call that waits for one: { call?, approve, by, reason? }",
    });
    setHandler(waitingCallsQuery, () => this.list(), {
      description: "A4: the calls that wait for a person's yes now, oldest first",
    });
    setHandler(
      policyChangedSignal,
      (news) => {
        const q = this.waiting.get(news.key);
        if (!q) this.early.set(news.key, news);
        else if (!q.answer) q.news ??= news;
      },
      { description: "A4: the tenant's policy changed in a way that may end a call's wait: it looks again" },
    );
  }

  /**
   * A call started or stopped waiting: the job's status follows, and (N3) the memo that lists its waiting calls, which
   * `oz0 call list` and the inbox read from visibility. A run an older oz0 began, or one begun under
   * `upgrade.rollbackSafe`, keeps none (N6: the previous release could not replay it): it is asked.
   */
  private moved(): void {
    this.changed();
    if (!this.takes(WAITING_MEMO_PATCH)) return;
    upsertMemo({ [WAITING_MEMO]: this.waiting.size ? this.list() : null });
  }

  get size(): number {
    return this.waiting.size;
  }

  /** Whether the call under this key waits for a person now (so nothing of it was sent). */
  waits(key: string): boolean {
    return this.waiting.has(key);
  }

  list(): WaitingCall[] {
    return [...this.waiting.values()].map((q) => q.call).sort((a, b) => a.askedAt.localeCompare(b.askedAt));
  }

  /**
   * Waits for the call's answer. `trace` is the call's question on its step: new, or the one it asked before it
   * looked again after a change of policy (the same question, its time limit counted from when it was first asked).
   * A cancel (the job's, or its session's) is thrown on, after the question is withdrawn.
   */
  async ask(asking: Asking, trace: QuestionTrace): Promise<Settled> {
    const earlier = this.approved.get(asking.key);
    if (earlier) {
      trace.answer = earlier;
      await forget(asking.tenant, asking.key);
      return { approved: earlier };
    }
    const askedAt = Date.parse(trace.askedAt);
    const deadline = askedAt + asking.timeoutSeconds * 1000;
    const q: Question = {
      deadline,
      call: {
        n: asking.n,
        activityId: asking.activityId,
        tool: asking.tool,
        key: asking.key,
        session: asking.session,
        ...(asking.sessionRun ? { sessionRun: asking.sessionRun } : {}),
        args: asking.asks.args,
        pattern: asking.asks.pattern,
        askedAt: trace.askedAt,
        until: new Date(deadline).toISOString(),
      },
    };
    trace.pattern = asking.asks.pattern;
    q.news = this.early.get(asking.key);
    this.early.delete(asking.key);
    this.waiting.set(asking.key, q);
    this.moved();
    this.notice(asking, { event: 'waiting', until: q.call.until });
    let ended: Omit<ApprovalNotice, 'tenant' | 'jobId' | 'tool' | 'call' | 'key'> = {
      event: 'withdrawn',
      ended: 'the job or its session was cancelled',
    };
    try {
      // At least 1 ms: a question asked again past its time limit ends at once, never waits for ever.
      const left = Math.max(1, deadline - Date.now());
      const settled = await condition(() => q.answer !== undefined || q.news !== undefined, left);
      if (q.answer) {
        trace.answer = q.answer;
        ended = { event: q.answer.approved ? 'approved' : 'denied', by: q.answer.by };
        if (!q.answer.approved) return { refused: denied(q.answer) };
        this.approved.set(asking.key, q.answer);
        return { approved: q.answer };
      }
      if (q.news) {
        trace.ended = `the policy changed while it waited (${q.news.change})`;
        ended = { event: 'withdrawn', ended: trace.ended };
        return { news: q.news };
      }
      if (!settled) {
        const limit = durationInWords(asking.timeoutSeconds);
        trace.ended = `no answer within ${limit}`;
        ended = { event: 'timed out', ended: trace.ended };
        return {
          refused: {
            text: `oz0: refused: nobody answered within ${limit} whether this call may run (${asking.tool} waits for a person's yes; confirmTimeoutSeconds)`,
            note: `refused: no answer within ${limit} (confirmTimeoutSeconds)`,
          },
        };
      }
      throw new Error('a question ended without a reason');
    } finally {
      this.waiting.delete(asking.key);
      this.moved();
      this.notice(asking, ended);
      await forget(asking.tenant, asking.key);
    }
  }

  private find(call: string | undefined): Question[] {
    const open = [...this.waiting.values()].filter((q) => q.answer === undefined);
    if (call === undefined) return open;
    return open.filter((q) => String(q.call.n) === call || q.call.activityId === call || q.call.key === call);
  }

  private check(input: AnswerCallInput): void {
    const problem = answerProblem(input);
    if (problem) throw new Error(problem);
    const found = this.find(input.call);
    const open = this.find(undefined);
    const named = open.map((q) => `${q.call.activityId} (${q.call.tool})`).join(', ');
    if (found.length === 1) return;
    if (open.length === 0) throw new Error("no call of this job waits for a person's yes");
    if (input.call === undefined) throw new Error(`${open.length} calls wait: ${named}; name one`);
    throw new Error(`no call ${input.call} waits for a person's yes; waiting: ${named}`);
  }

  private answer(input: AnswerCallInput): CallAnswered {
    const [q] = this.find(input.call);
    const answer: Answer = {
      approved: input.approve,
      by: input.by,
      at: new Date().toISOString(),
      ...(input.reason ? { reason: input.reason } : {}),
      ...(input.identity ? { identity: input.identity } : {}),
    };
    q.answer = answer;
    const { n, activityId, tool, key } = q.call;
    return { n, activityId, tool, key, ...answer };
  }
}

/** A no, as the model reads it in the call's error result, and as the trace's note says it. */
function denied(answer: Answer): { text: string; note: string } {
  const why = answer.reason ? `: ${answer.reason}` : ' (no reason given)';
  return {
    text: `oz0: refused: a person (${answer.by}) denied this call${why}`,
    note: `refused: denied by ${answer.by} at ${answer.at}${answer.reason ? `: ${answer.reason}` : ''}`,
  };
}

/** The question's wait is over: its policy workflows need not watch it any longer (at worst they tell in vain). */
async function forget(tenant: string, key: string): Promise<void> {
  const jobId = workflowInfo().workflowId;
  await CancellationScope.nonCancellable(() =>
    Promise.all(
      [tenant, ALL_TENANTS].map((t) =>
        getExternalWorkflowHandle(policyWorkflowId(t))
          .signal(forgetQuestionSignal, { jobId, key })
          .catch(() => undefined),
      ),
    ),
  );
}
