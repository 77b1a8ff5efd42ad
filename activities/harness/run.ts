/**
 * A harness run on this node (H2, H7): its process — in a sandbox of its own (I1-I5), its own process group, its
 * session's folder, exactly the environment its config names plus OZ0_MCP_URL, OZ0_MCP_TOKEN, OZ0_JOB, OZ0_SESSION,
 * OZ0_SESSION_RUN and OZ0_INPUT —,
 * its token on the node's gateway, its heartbeat (the session's lease: it stops when the node is lost, T4), and how
 * it ended: its last line on stdout when it exits 0, else an error result that says which way it failed.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import type { ChildProcess } from 'node:child_process';
import { ApplicationFailure, CancelledFailure, Context } from '@temporalio/activity';
import type { HarnessConfig, LoadedConfig } from '../../common/config';
import type { Logger } from '../../common/logger';
import { FailureType } from '../../model/activities';
import type { HarnessInput, HarnessOutcome } from '../../model/activities';
import type { ToolResult } from '../../model/job';
import type { Started } from '../../common/process-group';
import type { Isolation } from '../sandbox';
import type { RunningHarnesses } from '../ended-jobs';
import { makeFreshFolder, sessionFolderName } from '../sandbox/folders';
import { envSecrets, resolveEnvRefs } from '../../mcp';
import { traceEnv } from '../observe/gateway';
import type { Gateway } from './gateway';
import { besideConfig, launchProblem } from '../launch';
import { StderrTail, endedWhy, sandboxHint, withLastWords } from '../../common/last-words';
import { Pulse } from '../heartbeats';
import type { CancelRoute } from '../heartbeats';

export interface HarnessDeps {
  config: LoadedConfig;
  gateway: Gateway;
  logger: Logger;
  /** How cancels reach this node, and so how often the session's lease beats (../heartbeats.ts). */
  route: CancelRoute;
  /** SIGTERM, then SIGKILL after this long (H5, H7). */
  killGraceMs: number;
  /** Where this node keeps its sessions' folders. */
  sessionRoot: string;
  /** How the harness is isolated (I1-I6). */
  isolation: Isolation;
  /** I9: the harnesses running on this node, which the node stops when their job ended (../ended-jobs.ts). */
  harnesses: RunningHarnesses;
  /**
   * Issue 56.4: aborted when the node, shutting down, has let its calls end: its sessions are then handed on (each
   * lease ends as a shutdown, {@link handedOn}) instead of waiting out the grace time.
   */
  handOver?: AbortSignal;
}

/** Issue 56.4: the failure with which a session's lease (or harness) ends when its node hands the session on. */
export function handedOn(node: string): ApplicationFailure {
  return ApplicationFailure.nonRetryable(
    `node ${node} shut down once its calls had ended: its session goes on elsewhere`,
    FailureType.nodeShutdown,
  );
}

/** The last stdout line is the result; a longer one is cut here (it would not fit the job's history anyway). */
const MAX_RESULT_LINE = 1024 * 1024;

export async function runHarness(deps: HarnessDeps, input: HarnessInput): Promise<HarnessOutcome> {
  const ctx = Context.current();
  const harness = Object.hasOwn(deps.config.harnesses, input.harness)
    ? deps.config.harnesses[input.harness]
    : undefined;
  if (!harness) return failed(`this node's config has no harness named "${input.harness}"`, 'not started');
  const log = deps.logger.child({
    harness: input.harness,
    job: input.jobId,
    session: input.session,
    sessionRun: input.sessionRun,
  });
  // It runs in its session's folder: relative paths are the config's folder's, and a missing command is named.
  const launch = besideConfig(deps.config.baseDir, harness);
  const problem = launchProblem(`harness "${input.harness}"`, deps.config, launch);
  if (problem) return failed(problem, 'could not start');
  const env = resolveEnvRefs(harness.env, process.env, `harnesses.${input.harness}.env`);
  // The token and every value taken from the node's environment are secrets: never in the log (H7).
  const token = randomBytes(32).toString('base64url');
  const secrets = [token, ...envSecrets(harness.env, env)];
  const entry = deps.gateway.open(token, {
    jobId: input.jobId,
    tenant: input.tenant,
    session: input.session,
    sessionRun: input.sessionRun,
    harness: input.harness,
    patterns: harness.tools,
  });
  const cwd = makeFreshFolder(deps.sessionRoot, sessionFolderName(input, input.session, input.sessionRun), log);
  let started: Started;
  try {
    started = await deps.isolation.start({
      who: `harness "${input.harness}" (${input.jobId} ${input.session})`,
      field: `harnesses.${input.harness}.sandbox`,
      ...launch,
      cwd,
      env: {
        ...env,
        OZ0_MCP_URL: deps.gateway.url,
        OZ0_MCP_TOKEN: token,
        OZ0_JOB: input.jobId,
        OZ0_SESSION: input.session,
        OZ0_SESSION_RUN: String(input.sessionRun),
        OZ0_INPUT: JSON.stringify(input.input ?? null),
        // O3: the session's trace, for a harness that traces: OZ0_TRACEPARENT, OZ0_TRACESTATE (./observe/gateway.ts).
        ...traceEnv(),
      },
      grants: harness.sandbox,
      tenant: input.tenant,
      gateway: {
        port: deps.gateway.port,
        accept: (socket) => deps.gateway.accept(socket),
        maxConnections: deps.config.node.gatewayConnectionsPerHarness,
      },
    });
  } catch (err) {
    await entry.close();
    fs.rmSync(cwd, { recursive: true, force: true });
    return failed(`the harness could not start: ${(err as Error).message}`, 'could not start');
  }
  const { child } = started;
  log.info({ pid: child.pid, isolated: started.isolated }, 'harness started');
  if (!started.isolated) log.warn('the harness runs unisolated (node.isolation: "none")');
  const output = readOutput(child);
  // I10: a tenant's code: what it may put in the node's log is bounded, the rest counted.
  const stderr = new StderrTail(
    child.stderr,
    secrets,
    (line) => log.info({ stderr: line }, 'harness stderr'),
    (dropped) =>
      log.warn(
        { droppedLines: dropped.lines, droppedBytes: dropped.bytes, lastLines: dropped.last },
        'harness stderr past its bound (I10): the rest was not logged, only counted, with its last lines',
      ),
  );
  const ended = await endOf(child, ctx, harness, deps, started, input);
  await started.stop(deps.killGraceMs);
  await entry.close();
  fs.rmSync(cwd, { recursive: true, force: true });
  log.info({ ended: ended.why }, 'harness ended');
  if (ended.cause === 'cancelled' || ended.cause === 'ended') {
    throw new CancelledFailure(`the harness was stopped: ${ended.why}`);
  }
  if (ended.cause === 'shutdown') {
    // Like a lost node: the session runs again elsewhere (the workflow decides whether it may).
    throw ApplicationFailure.create({
      type: FailureType.nodeShutdown,
      message: `the harness was stopped: ${ended.why}`,
    });
  }
  if (ended.cause === 'exit' && ended.code === 0) return { result: resultOf(output.last()), ended: 'exited 0' };
  await stderr.drained();
  // S2: what its sandbox kept from it, when its words name that.
  const hint = started.isolated ? sandboxHint(stderr.text()) : undefined;
  return failed(
    `${withLastWords(`the harness ${ended.why}`, stderr.tail())}${hint ? ` (hint: ${hint})` : ''}`,
    ended.why,
  );
}

type End =
  | { cause: 'exit'; code: number | null; why: string }
  | { cause: 'timeout' | 'cancelled' | 'shutdown' | 'ended'; why: string };

/** Heartbeats (the session's lease) until the harness exits, runs past its time limit, or Temporal stops it. */
async function endOf(
  child: ChildProcess,
  ctx: Context,
  harness: HarnessConfig,
  deps: HarnessDeps,
  started: Started,
  input: HarnessInput,
): Promise<End> {
  const timers: NodeJS.Timeout[] = [];
  let pulse: Pulse | undefined;
  let unlist: (() => void) | undefined;
  let onHandOver: (() => void) | undefined;
  try {
    return await new Promise<End>((resolve) => {
      // I9: a job terminated or timed out runs no code to stop it: the node finds out and stops it.
      unlist = deps.harnesses.add({ tenant: input.tenant, jobId: input.jobId }, (why) =>
        resolve({ cause: 'ended', why }),
      );
      const onExit = (code: number | null, signal: NodeJS.Signals | null) => {
        const { why, killedBy, limit } = endedWhy({ code, signal }, started);
        resolve({ cause: 'exit', code: killedBy || limit ? null : code, why });
      };
      if (child.exitCode !== null || child.signalCode !== null) onExit(child.exitCode, child.signalCode);
      child.once('exit', onExit);
      timers.push(
        setTimeout(
          () =>
            resolve({ cause: 'timeout', why: `ran past its timeout of ${harness.timeoutSeconds} s and was stopped` }),
          harness.timeoutSeconds * 1000,
        ),
      );
      pulse = new Pulse(ctx, deps.route.pace(ctx.info.heartbeatTimeoutMs));
      const onCancel = () => {
        const shutdown = ctx.cancellationDetails?.workerShutdown === true;
        resolve({
          cause: shutdown ? 'shutdown' : 'cancelled',
          why: shutdown ? 'its node is shutting down' : 'job cancelled',
        });
      };
      if (ctx.cancellationSignal.aborted) onCancel();
      else ctx.cancellationSignal.addEventListener('abort', onCancel, { once: true });
      // Issue 56.4: the node's calls have ended: its session goes on elsewhere (the workflow hands it on).
      onHandOver = () => resolve({ cause: 'shutdown', why: 'its node is shutting down' });
      if (deps.handOver?.aborted) onHandOver();
      else deps.handOver?.addEventListener('abort', onHandOver, { once: true });
    });
  } finally {
    for (const t of timers) clearInterval(t);
    pulse?.stop();
    unlist?.();
    if (onHandOver) deps.handOver?.removeEventListener('abort', onHandOver);
  }
}

/** Keeps the harness's last stdout line. */
function readOutput(child: ChildProcess) {
  let stdout = '';
  let last = '';
  // stdio are socket pairs: a harness killed with bytes unread makes a read fail (ECONNRESET); its exit says the rest.
  for (const stream of [child.stdin, child.stdout]) stream?.on('error', () => undefined);
  child.stdout?.on('data', (chunk: Buffer) => {
    stdout += chunk.toString('utf8');
    const lines = stdout.split('\n');
    stdout = lines.pop() ?? '';
    if (stdout.length > MAX_RESULT_LINE) stdout = stdout.slice(0, MAX_RESULT_LINE);
    const full = lines.filter((l) => l.trim() !== '').at(-1);
    if (full !== undefined) last = full.slice(0, MAX_RESULT_LINE);
  });
  return {
    last: () => (stdout.trim() !== '' ? stdout : last),
  };
}

/** H7: the result is the last line, as JSON when it parses (an object is also structured content), else as text. */
export function resultOf(line: string): ToolResult {
  const text = line.trim();
  try {
    const value: unknown = JSON.parse(text);
    const structured = value && typeof value === 'object' && !Array.isArray(value);
    return {
      isError: false,
      content: [{ type: 'text', text: JSON.stringify(value) }],
      ...(structured ? { structuredContent: value as Record<string, unknown> } : {}),
    };
  } catch {
    return { isError: false, content: text ? [{ type: 'text', text }] : [] };
  }
}

function failed(why: string, ended: string): HarnessOutcome {
  return { result: { isError: true, content: [{ type: 'text', text: `oz0: ${why}` }] }, ended };
}
