/**
 * oz0's public surface for Temporal clients: the job spec's type and zod schema, the trace's types, the
 * workflow's queries, and a small typed client.
 */
export {
  JOB_WORKFLOW,
  statusQuery,
  traceQuery,
  Oz0Status,
  Oz0Tenant,
  Oz0Tools,
  FailureType,
} from './workflows/definitions';
export { JobSpecSchema, CallStepSchema, SessionStepSchema, JobSpecError, parseJobSpec } from './workflows/schemas';
export type {
  JobSpec,
  CallStep,
  SessionStep,
  Step,
  JobTrace,
  JobStatus,
  StepTrace,
  AttemptRecord,
  Outcome,
  ToolResult,
} from './workflows/definitions';
export { defaultKey, sessionKey, argsDigest } from './workflows/keys';
export { connectJobClient, startJob, jobStatus, jobTrace, cancelJob } from './client/jobs';
export { loadConfig, parseConfig, ConfigSchema } from './worker/config';
export type { Config } from './worker/config';
export { createNode } from './worker/node';
