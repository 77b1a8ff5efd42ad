/**
 * oz0's public surface for Temporal clients: the job spec's type and zod schema, the trace's types, the
 * workflow's queries, the data converter its processes share, and a small typed client.
 */
export { JOB_WORKFLOW, Oz0Status, Oz0Tenant, Oz0Tools, LEGACY_STATUS } from './model/job';
export { statusQuery, traceQuery } from './model/messages';
export { FailureType } from './model/activities';
export type { JobTrace, JobStatus, StepTrace, StoredAnswer, ToolResult } from './model/job';
export { answerCall, listWaitingCalls, AnswerRefused } from './client/calls';
export type { ListedCall } from './client/calls';
export { answerCallUpdate, waitingCallsQuery } from './model/messages';
export type { AnswerCallInput, CallAnswered, WaitingCall } from './model/messages';
export type { QuestionTrace, Answer } from './model/job';
export {
  JobSpecSchema,
  CallStepSchema,
  SessionStepSchema,
  HarnessSessionSchema,
  ExternalSessionSchema,
  JobSpecError,
  parseJobSpec,
} from './model/schemas';
export type {
  JobSpec,
  CallStep,
  SessionStep,
  HarnessSession,
  ExternalSession,
  Step,
  AttemptRecord,
  Outcome,
} from './model/schemas';
export { defaultKey, sessionKey, argsDigest } from './model/keys';
export { jobPriority, liveCallPriority, DEFAULT_PRIORITY } from './model/shares';
export type { Shares, Limits, Limit } from './model/shares';
export { tenantStatus, setShares } from './client/tenants';
export type { TenantShown, SharesChange } from './client/tenants';
export { jobSummary, jobDetails } from './model/details';
export { connectJobClient, startJob, jobStatus, jobTrace, cancelJob, statusFilter, stuckOf } from './client/jobs';
export type { JobClient, JobClientConfig, SessionToken, ShownTrace, StartedJob, Stuck } from './client/jobs';
/**
 * D2: the data converter every oz0 process uses, for a plain Temporal client: `processDataOf(config).dataConverter`
 * reads and writes payloads the way nodes do (big ones in the config's store); its `answers` read an answer a job keeps
 * in the store back whole (D1, D3).
 */
export { processDataOf, Answers, AnswerUnreadable, PLATFORM } from './data';
export type { AnswerOf, AnswerReader, ProcessData, ToolAnswer } from './data';
export { openSession, LiveSession, SessionUpdateError } from './client/sessions';
export type { CallOptions, SessionCallResult } from './client/sessions';
export {
  openSessionUpdate,
  callToolUpdate,
  cancelCallUpdate,
  closeSessionUpdate,
  sessionCallQuery,
} from './model/messages';
export { callsOf, isSessionTrace } from './model/job';
export type { SessionTrace, TraceStep } from './model/job';
export type { SessionCallInput, SessionCallOutput } from './model/messages';
export { loadConfig, parseConfig, ConfigSchema } from './common/config';
export type { Config } from './common/config';
export { createNode } from './worker/node';
export type { NodeOptions, Oz0Node } from './worker/node';
export { createLogger } from './common/logger';
export type { Logger } from './common/logger';
