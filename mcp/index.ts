/**
 * oz0's MCP client, behind one surface: the rest of the code imports this file for it, never a module of mcp/ itself.
 * The server side has a door of its own, ./http-server.ts, so that an MCP server (an example's, the node's gateway)
 * loads it without the client (some 40 ms and 4 MB less for each example server the tests and the demo start).
 *
 * - Connecting: a server's connection and its negotiated revision (./connection.ts, ./negotiate.ts), over a process's
 *   stdio (./process-transport.ts) or Streamable HTTP to a remote server (./remote.ts), with the node's environment
 *   in its config (./env.ts); why a connect sent nothing or left the call's outcome unknown (./errors.ts).
 * - Authorizing (SPEC R): each tenant's credentials for a per-tenant remote server and what the node holds of them
 *   (./credentials.ts), its OAuth client on the SDK's providers with the token cache (./tenant-oauth.ts), and the
 *   authorization traffic watched, its failures said (./authorization.ts).
 * - Calling: one `tools/call` to its end (./request.ts), a plain request or an MCP task in either form (./task.ts:
 *   SEP-2663's extension in ./task-extension.ts, SEP-1686's in ./task-legacy.ts), what a server asked for that oz0
 *   does not offer (./asked.ts), and the functions a server lists only to other clients (./capabilities.ts).
 * - Serving (./http-server.ts, imported as it is): an MCP server over Streamable HTTP, both revisions on one endpoint,
 *   for the node's gateway and the example servers.
 */
export { ServerConnection } from './connection';
export type { ProgressParams } from './connection';
export { connectClient, rateLimited } from './negotiate';
export type { EraVerdicts } from './negotiate';
export { ProcessTransport } from './process-transport';
export { droppedBytesOf, messageBound } from './dropped';
export { createRemoteTransport } from './remote';
export { envSecrets, resolveEnvRefs } from './env';
export { CannotStart, NotAuthorized, NothingSent, OutcomeUnknown, lastingStartFailure } from './errors';
export type { AuthorizationEnd } from './errors';
export { TenantCredential, TenantCredentials } from './credentials';
export type { CredentialReport } from './credentials';
export { challengeWords } from './authorization';
export type { OAuthSeen } from './tenant-oauth';

export { makeCall } from './request';
export type { MakeCall } from './request';
export { TaskGone, cancelTask, offersTasks, taskPlan, taskSupportOf } from './task';
export type { TaskPlan, TaskSeen, TaskState, TaskSupport } from './task';
export { AskedForInput } from './asked';
export { hiddenFunctions, hiddenWhy } from './capabilities';
export type { ClientCapability, Listings } from './capabilities';
