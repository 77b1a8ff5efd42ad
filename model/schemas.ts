/**
 * The zod schemas of what crosses oz0's edges — job specs, the trace's attempt records, policy state, a resume
 * request, the protocol a server is spoken to with — and the types inferred from them, written once: the one module
 * of model/ that imports zod. Workflows take `import type` of these types; zod itself stays out of the
 * workflow bundle (it would be most of it, in every cached workflow). The rules of names and patterns are the pure
 * ones in ./checks, which the policy workflow's validators use as they are.
 */
import { z } from 'zod';
import {
  DECISIONS,
  approvalProblem,
  watchedQuestionProblem,
  patternProblem,
  serverNameProblem,
  tenantNameProblem,
  toolProblem,
} from './checks';
import { LEGACY_PROTOCOL, MODERN_PROTOCOL, RESUME_TOKEN } from './protocol';
import { originsProblem } from './origins';
import type { Origins } from './origins';
import {
  DEFAULT_MAX_PRIORITY,
  DEFAULT_WEIGHT,
  MAX_CALLS_PER_SECOND,
  MAX_RUNNING_CALLS,
  MAX_WEIGHT,
  MIN_WEIGHT,
  PRIORITY_LEVELS,
} from './shares';

/** A schema over one of the pure checks: its problem, if any, is the issue. */
function checkedBy(problemOf: (value: unknown) => string | undefined) {
  return z.string().superRefine((value, ctx) => {
    const problem = problemOf(value);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  });
}

/** `<server>.<function>`. */
export const ToolNameSchema = checkedBy(toolProblem);
/** `server.function`, `server.*` or `*`. */
export const PatternSchema = checkedBy(patternProblem);
export const TenantNameSchema = checkedBy(tenantNameProblem);
export const ServerNameSchema = checkedBy(serverNameProblem);
export const DecisionSchema = z.enum(DECISIONS);
/**
 * I11: ids of the form `oz0-<word>/…` are the platform's own: tenants' policies (`oz0-policy/<tenant>`), their
 * limiters (`oz0-shares/<tenant>`), a node's probes (`oz0-probe/…`), and whatever oz0 names so later. A job under
 * one would stand where the platform reads a tenant's policy.
 */
const PLATFORM_ID = /^oz0-[a-z]+\//i;

/** Why a job may not have this id, if it may not. */
export function reservedIdProblem(id: string): string | undefined {
  return PLATFORM_ID.test(id)
    ? `${id} is the platform's: ids that start oz0-<word>/ are its tenants' policies, limiters and probes`
    : undefined;
}

export const JobIdSchema = z
  .string()
  .regex(/^[A-Za-z0-9_.:@/-]{1,200}$/, 'a job id is 1-200 letters, digits or _.:@/-')
  .superRefine((id, ctx) => {
    const problem = reservedIdProblem(id);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  });

/**
 * A schema for "one of two shapes, told apart by a key": errors name the field inside the chosen shape
 * (`steps[1].args`) rather than only saying that no shape matched, as a plain union would.
 */
export function eitherBy<A extends z.ZodType, B extends z.ZodType>(
  key: string,
  withKey: A,
  withoutKey: B,
  message: string,
): z.ZodType<z.output<A> | z.output<B>> {
  return shapedBy((value) => {
    if (!value || typeof value !== 'object' || Array.isArray(value)) return undefined;
    return key in value ? withKey : withoutKey;
  }, message);
}

/**
 * A schema that picks the schema for a value by its shape, so errors name the field inside the chosen shape; a value
 * of no known shape gets `message`.
 */
export function shapedBy<S extends z.ZodType>(
  choose: (value: unknown) => S | undefined,
  message: string,
): z.ZodType<z.output<S>> {
  return z.unknown().transform((value, ctx): z.output<S> => {
    const schema = choose(value);
    if (!schema) {
      ctx.addIssue({ code: 'custom', message });
      return z.NEVER;
    }
    const parsed = schema.safeParse(value);
    if (parsed.success) return parsed.data as z.output<S>;
    for (const issue of parsed.error.issues) ctx.addIssue({ code: 'custom', message: issue.message, path: issue.path });
    return z.NEVER;
  });
}

export const CallStepSchema = z.strictObject({
  call: ToolNameSchema,
  args: z.record(z.string(), z.unknown()).optional(),
});

/** A harness's name in the config (`harnesses.<name>`): the same rule as a server's. */
export const HarnessNameSchema = ServerNameSchema;

/** OZ0_INPUT carries a harness's input: an environment variable, so it stays well under Linux's 128 KiB per string. */
export const MAX_HARNESS_INPUT_BYTES = 64 * 1024;

/** H1: a live session that runs a harness named in the config, with its input (any JSON). */
export const HarnessSessionSchema = z.strictObject({
  harness: HarnessNameSchema,
  input: z
    .json()
    .optional()
    .refine((input) => Buffer.byteLength(JSON.stringify(input ?? null)) <= MAX_HARNESS_INPUT_BYTES, {
      error: `a harness's input is at most ${MAX_HARNESS_INPUT_BYTES / 1024} KiB of JSON (it travels in OZ0_INPUT)`,
    })
    // Checked as JSON; typed as any value, so a spec written in TypeScript takes any object.
    .transform((input): unknown => input),
});

/** H9: a live session driven by a Temporal client outside the job; the job waits for it to open and close. */
export const ExternalSessionSchema = z.strictObject({
  external: z.literal(true),
  /**
   * I14: the SHA-256 (hex) of the token its agent reaches it with through a node's gateway; `startJob` and `oz0 job
   * start` make the token and write this. Without it, only a Temporal client (the platform's own) can drive it.
   */
  tokenDigest: z
    .string()
    .regex(/^[0-9a-f]{64}$/, { error: "tokenDigest is a token's SHA-256, 64 hex digits" })
    .optional(),
  /** How long the job waits for the client to open the session and close it; none: as long as it takes. */
  timeoutSeconds: z
    .number()
    .positive()
    .max(365 * 24 * 3600)
    .optional(),
});

const SESSION_SHAPES = 'a session is [ …calls ], { "harness": "<name>", "input": {…} } or { "external": true }';

/** A session is a list of calls (scripted), a harness named in the config, or an external client's. */
export const SessionStepSchema = z.strictObject({
  session: shapedBy(
    (value) =>
      Array.isArray(value)
        ? z.array(CallStepSchema).min(1, 'a session holds at least one call')
        : eitherBy('harness', HarnessSessionSchema, ExternalSessionSchema, SESSION_SHAPES),
    SESSION_SHAPES,
  ),
});

/** A step is a call or a session, told apart by its `session` key. */
export const StepSchema = eitherBy(
  'session',
  SessionStepSchema,
  CallStepSchema,
  'a step is either { "call": "<server>.<function>", "args": {…} } or { "session": [ …calls ] }',
);

/** F4: 1 (first) to 5; a job without one gets Temporal's default, 3. */
export const PrioritySchema = z
  .number({ error: 'priority is a whole number from 1 (first) to 5' })
  .int('priority is a whole number from 1 (first) to 5')
  .min(1, 'priority is a whole number from 1 (first) to 5')
  .max(PRIORITY_LEVELS, 'priority is a whole number from 1 (first) to 5');

/** A job spec: the tenant who owns it, the steps it runs in order, and its priority (F4). */
export const JobSpecSchema = z.strictObject({
  tenant: TenantNameSchema,
  steps: z.array(StepSchema).min(1, 'a job has at least one step'),
  priority: PrioritySchema.optional(),
});

/** One call: `<server>.<function>` and its arguments. */
export type CallStep = z.infer<typeof CallStepSchema>;
/** A session: a scripted list of calls, a harness, or an external client's; on one node. */
export type SessionStep = z.infer<typeof SessionStepSchema>;
export type HarnessSession = z.infer<typeof HarnessSessionSchema>;
export type ExternalSession = z.infer<typeof ExternalSessionSchema>;
export type Step = CallStep | SessionStep;
export type JobSpec = z.infer<typeof JobSpecSchema>;

/** Thrown by {@link parseJobSpec}; its message names the field that is wrong. */
export class JobSpecError extends Error {
  constructor(
    message: string,
    readonly issues: { path: string; message: string }[],
  ) {
    super(message);
    this.name = 'JobSpecError';
  }
}

/** Renders a zod path as `steps[1].session[0].call`. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const part of path) out += typeof part === 'number' ? `[${part}]` : out ? `.${String(part)}` : String(part);
  return out || '(top level)';
}

/**
 * Validates a job spec, or throws a {@link JobSpecError} naming every field that is wrong. With `harnesses` (the
 * names a config defines), a session naming any other harness is refused too (H1: a spec can never make a node run a
 * command its config does not name).
 */
export function parseJobSpec(input: unknown, known: { harnesses?: readonly string[] } = {}): JobSpec {
  const parsed = JobSpecSchema.safeParse(input);
  const issues = parsed.success
    ? unknownHarnesses(parsed.data, known.harnesses)
    : parsed.error.issues.map((issue) => ({ path: formatPath(issue.path), message: issue.message }));
  if (parsed.success && issues.length === 0) return parsed.data;
  throw new JobSpecError(`bad job spec: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`, issues);
}

function unknownHarnesses(spec: JobSpec, harnesses: readonly string[] | undefined) {
  if (!harnesses) return [];
  return spec.steps.flatMap((step, i) =>
    'session' in step && !Array.isArray(step.session) && 'harness' in step.session
      ? harnesses.includes(step.session.harness)
        ? []
        : [
            {
              path: `steps[${i}].session.harness`,
              message: `no harness named "${step.session.harness}" in the config${harnesses.length ? ` (it has ${harnesses.join(', ')})` : ''}`,
            },
          ]
      : [],
  );
}

/** How one attempt of a call ended (SPEC "Trace JSON"). */
export const OutcomeSchema = z.enum([
  'ok',
  'error',
  'busy',
  'timeout',
  'cancelled',
  'killed',
  'lost',
  'refused',
  'failed',
]);
export type Outcome = z.infer<typeof OutcomeSchema>;

/** The last progress a server reported: value and total, never its message (P1). */
export const ProgressSchema = z.object({ progress: z.number(), total: z.number().optional() });
export type Progress = z.infer<typeof ProgressSchema>;

export const AttemptRecordSchema = z.object({
  attempt: z.number().int().min(1),
  outcome: OutcomeSchema,
  note: z.string().optional(),
  progress: ProgressSchema.optional(),
});
export type AttemptRecord = z.infer<typeof AttemptRecordSchema>;

/**
 * What an attempt hands on, in its heartbeat, to the next attempt (and to the workflow, in its failure's details).
 * A heartbeat comes back from Temporal as data of unknown shape: it is read through this schema.
 */
export const CallProgressStateSchema = z.object({
  /** The call, so a pending activity's heartbeat in the UI (and `oz0 job watch`) says which it is. */
  tool: z.string().optional(),
  key: z.string().optional(),
  progress: z.number().optional(),
  total: z.number().optional(),
  /** P3: the last valid resume token, and the progress reported with it. */
  token: z.string().optional(),
  tokenProgress: ProgressSchema.optional(),
  /** A token was reported but invalid (and ignored). */
  invalidToken: z.boolean().optional(),
  attempts: z.array(AttemptRecordSchema).default([]),
  /**
   * The MCP task this call runs as, its last status, and the revision it was made under (2026-07-28: the extension,
   * SEP-2663; none or older: SEP-1686): a later attempt polls it instead of calling again, so the call is made once
   * whatever its hints.
   */
  task: z
    .object({
      id: z.string(),
      status: z.enum(['working', 'input_required', 'completed', 'failed', 'cancelled']),
      protocol: z.string().optional(),
    })
    .optional(),
  /** The MCP revision the last attempt that reached the server spoke with it (2026-07-28, 2025-11-25, …). */
  protocol: z.string().optional(),
  /** Attempts known to have ended before their request was sent: safe to follow for any call. */
  unsent: z.array(z.number().int()).optional(),
  /**
   * The node queues where this call's attempts started a sandboxed server of the job: the job's end stops them there,
   * even when an attempt's answer never reached Temporal (a node cut off from it).
   */
  sandboxQueues: z.array(z.string()).optional(),
});
export type CallProgressState = z.infer<typeof CallProgressStateSchema>;

/**
 * N3: a waiting call as a job's memo keeps it (read from visibility by `oz0 call list` and the inbox): checked, since
 * whoever can start a workflow can write a memo. Fields a later oz0 adds are dropped, not refused.
 */
export const WaitingCallSchema = z.object({
  n: z.number().int().positive(),
  activityId: z.string().min(1),
  tool: z.string().min(1),
  key: z.string().min(1),
  session: z.string().nullable(),
  sessionRun: z.number().int().positive().optional(),
  args: z.string(),
  pattern: z.string(),
  askedAt: z.iso.datetime(),
  until: z.iso.datetime(),
});

export type Decision = z.infer<typeof DecisionSchema>;

/** An approval pins a server's listing: its digest, and each tool's own digest to say what changed. */
export const ApprovalSchema = z.custom<{ digest: string; tools: Record<string, string>; approvedAt: string }>(
  (value) => approvalProblem(value) === undefined,
  { error: (issue) => approvalProblem(issue.input) ?? 'not an approval' },
);
export type Approval = z.infer<typeof ApprovalSchema>;

/** F3: a cap on running calls and a rate of new ones, for a tenant or one of its servers. */
const LimitSchema = z.strictObject({
  /** At most this many of the calls run at once, on every node together. */
  maxRunningCalls: z.number().int().min(1).max(MAX_RUNNING_CALLS).optional(),
  /** Calls start at least 1/callsPerSecond apart, on every node together. */
  callsPerSecond: z.number().positive().max(MAX_CALLS_PER_SECOND).optional(),
});

/** F3: `tenants.<t>.limits`: the tenant's own, and per server (`servers.<s>`), to spare the service behind it. */
export const LimitsSchema = LimitSchema.extend({ servers: z.record(ServerNameSchema, LimitSchema).optional() });

/** F1, F4: `tenants.<t>.fairness`: its weight in fair dispatch, and the highest priority its jobs may ask. */
export const FairnessSchema = z.strictObject({
  weight: z.number().min(MIN_WEIGHT).max(MAX_WEIGHT).default(DEFAULT_WEIGHT),
  maxPriority: PrioritySchema.default(DEFAULT_MAX_PRIORITY),
});

/**
 * A tenant's share of the platform as its policy state keeps it (model/shares.ts; its workflow's validator,
 * sharesProblem, says the same without zod).
 */
export const SharesSchema = z.strictObject({
  weight: z.number().min(MIN_WEIGHT).max(MAX_WEIGHT),
  maxPriority: PrioritySchema,
  limits: LimitsSchema,
});

/** A tenant's policy, kill switches and approvals, as its workflow keeps them (A1-A3, C5). */
export const TenantStateSchema = z.strictObject({
  /** Grows by one with every change: a node can tell a fresh read from a stale one. */
  version: z.number().int().min(0),
  policy: z.record(PatternSchema, DecisionSchema),
  /** Tools (or `server.*`, `*`) whose kill switch is on. */
  kills: z.array(PatternSchema),
  approvals: z.record(ServerNameSchema, ApprovalSchema),
  /** F1-F5: its share of the platform, once set (`oz0 tenant set`) or seeded; absent: the config's, else defaults. */
  shares: SharesSchema.optional(),
});
export type TenantState = z.infer<typeof TenantStateSchema>;

/** A13: what of a tenant's state a command set (model/origins.ts); kept beside the state, not in it. */
export const OriginsSchema = z.custom<Origins>((value) => originsProblem(value) === undefined, {
  error: (issue) => originsProblem(issue.input) ?? 'not origins',
});

/** A13: a tenant's state and its origins, as its workflow answers them in one read. */
export const StateWithOriginsSchema = z.strictObject({ state: TenantStateSchema, origins: OriginsSchema });

/**
 * A4: a call that waits for a person's yes, as its tenant's policy workflow (and the all-tenants one) keeps it: a
 * change of the policy or a kill switch that matches its tool is told to its job, which then looks again.
 */
export const WatchedQuestionSchema = z.custom<{
  jobId: string;
  /** The call's idempotency key: one call, one question. */
  key: string;
  tool: string;
  /** When its wait ends at the latest (ms since the epoch): a question past it is dropped unsaid. */
  until: number;
}>((value) => watchedQuestionProblem(value) === undefined, {
  error: (issue) => watchedQuestionProblem(issue.input) ?? 'not a question',
});
export type WatchedQuestion = z.infer<typeof WatchedQuestionSchema>;

/** The policy workflow's input: its first run's seed, or the state a run before it carried over. */
export const PolicyInputSchema = z.object({
  tenant: z.string(),
  /** The config's policy: used only when the workflow starts for the first time. */
  seed: z.record(PatternSchema, DecisionSchema).optional(),
  /** The config's shares for the tenant (F5): used, like `seed`, only when the workflow starts for the first time. */
  shares: SharesSchema.optional(),
  state: TenantStateSchema.optional(),
  /** A13: what of `state` a command set, as the run before it kept it; absent from an older oz0's run. */
  origins: OriginsSchema.optional(),
  /** A4: the questions a run before it was watching. */
  waiting: z.array(WatchedQuestionSchema).optional(),
});
export type PolicyInput = z.infer<typeof PolicyInputSchema>;

/** P3: what a later attempt's request carries in `_meta["oz0/resume"]`. */
export const ResumeRequestSchema = z.object({
  token: z.string().regex(RESUME_TOKEN),
  progress: z.number().finite().min(0),
});
export type ResumeRequest = z.infer<typeof ResumeRequestSchema>;

/**
 * Which MCP revision oz0 speaks with a server (`servers.<name>.protocol`): `auto` asks the server with `server/discover`
 * and speaks 2026-07-28 when it offers it, else the `initialize` handshake (2025-11-25 or older); a version pins it.
 */
export const ProtocolChoiceSchema = z.enum(['auto', MODERN_PROTOCOL, LEGACY_PROTOCOL]);
export type ProtocolChoice = z.infer<typeof ProtocolChoiceSchema>;
