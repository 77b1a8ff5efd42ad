/**
 * The zod schemas of what crosses oz0's edges into workflows: job specs and policy changes. Used by the client,
 * the CLI and the node (which checks a job's input in a local activity); never by workflow code, so zod stays out
 * of the workflow bundle. The rules themselves (patterns, names) are the pure ones in definitions and
 * policy-rules, so the policy workflow's validators and these schemas cannot disagree.
 */
import { z } from 'zod';
import { TOOL_PATTERN } from './definitions';
import type { JobSpec } from './definitions';
import type { Approval } from './policy-rules';
import { DECISIONS, approvalProblem, patternProblem, serverNameProblem, tenantNameProblem } from './policy-rules';

export const ToolNameSchema = z
  .string()
  .regex(TOOL_PATTERN, 'a tool is "<server>.<function>", e.g. "ledger.charge"')
  .max(200);

export const CallStepSchema = z.strictObject({
  call: ToolNameSchema,
  args: z.record(z.string(), z.unknown()).optional(),
});

export const SessionStepSchema = z.strictObject({
  session: z.array(CallStepSchema).min(1, 'a session holds at least one call'),
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
  return z.unknown().transform((value, ctx): z.output<A> | z.output<B> => {
    if (!value || typeof value !== 'object' || Array.isArray(value)) {
      ctx.addIssue({ code: 'custom', message });
      return z.NEVER;
    }
    const parsed = (key in value ? withKey : withoutKey).safeParse(value);
    if (parsed.success) return parsed.data as z.output<A> | z.output<B>;
    for (const issue of parsed.error.issues) ctx.addIssue({ code: 'custom', message: issue.message, path: issue.path });
    return z.NEVER;
  });
}

/** A step is a call or a session, told apart by its `session` key. */
export const StepSchema = eitherBy(
  'session',
  SessionStepSchema,
  CallStepSchema,
  'a step is either { "call": "<server>.<function>", "args": {…} } or { "session": [ …calls ] }',
);

/** A job spec: the tenant who owns it and the steps it runs in order. */
export const JobSpecSchema = z.strictObject({
  tenant: checkedBy(z.string(), tenantNameProblem),
  steps: z.array(StepSchema).min(1, 'a job has at least one step'),
});

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

/** Validates a job spec, or throws a {@link JobSpecError} naming every field that is wrong. */
export function parseJobSpec(input: unknown): JobSpec {
  const parsed = JobSpecSchema.safeParse(input);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.map((issue) => ({ path: formatPath(issue.path), message: issue.message }));
  throw new JobSpecError(`bad job spec: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`, issues);
}

export const DecisionSchema = z.enum(DECISIONS);

/** A schema over one of policy-rules' pure checks: its problem, if any, is the issue. */
function checkedBy<T extends z.ZodType>(base: T, problemOf: (value: unknown) => string | undefined): T {
  return base.superRefine((value, ctx) => {
    const problem = problemOf(value);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  }) as unknown as T;
}

/** `server.function`, `server.*` or `*`. */
export const PatternSchema = checkedBy(z.string(), patternProblem);
export const TenantNameSchema = checkedBy(z.string(), tenantNameProblem);
export const ServerNameSchema = checkedBy(z.string(), serverNameProblem);
/** An approval pins a server's listing: its digest, and each tool's own digest to say what changed. */
export const ApprovalSchema = checkedBy(z.unknown(), approvalProblem);

/** A tenant's policy state as its workflow keeps it: read back from its history by a node that watches it. */
export const TenantStateSchema = z.strictObject({
  version: z.number().int().min(0),
  policy: z.record(PatternSchema, DecisionSchema),
  kills: z.array(PatternSchema),
  approvals: z.record(ServerNameSchema, ApprovalSchema as z.ZodType<Approval>),
});

/** The policy workflow's input: its first run's seed, or the state a run before it carried over. */
export const PolicyInputSchema = z.object({
  tenant: z.string(),
  seed: z.record(PatternSchema, DecisionSchema).optional(),
  state: TenantStateSchema.optional(),
});
