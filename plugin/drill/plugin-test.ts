/**
 * `oz0 plugin test SERVER [--drill]`: opens a configured server as a node would (any kind), reads its listing and
 * says what is inconsistent, checks the progress of the drill file's sample calls, and with `--drill` runs the drill
 * (./drill.ts). It talks only to the MCP server, through oz0's MCP client (mcp/): no Temporal needed, and the server is
 * opened by the caller, as a node would open it (client/open-server.ts).
 */
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import type { CallToolResult, Tool } from '@modelcontextprotocol/client';
import { AskedForInput, hiddenFunctions, hiddenWhy, makeCall, offersTasks, taskPlan, taskSupportOf } from '../../mcp';
import type { CredentialReport, Listings, ServerConnection } from '../../mcp';
import type { LoadedConfig, ServerKind } from '../../common/config';
import { contentText } from '../../common/text';
import { IDEMPOTENCY_KEY_META, RESUME_META, declaresResume } from '../../model/protocol';
import { runDrill } from './drill';
import type { DrillCall, DrillTarget } from './drill';
import { DrillFileError, emptyDrillFile, loadDrillFile } from './drill-file';
import type { DrillFile } from './drill-file';
import { checkListing, checkProgress, listedFunctions } from './listing-checks';
import type { Finding, SeenProgress } from './listing-checks';
import type { PluginTestReport, SampleReport } from './report';

/**
 * A server opened as a node opens it (its kind, its sandbox, the protocol it speaks), for `oz0 plugin test` to talk
 * to. The CLI hands one in (client/open-server.ts: a short-lived pool of the node's own), so the drill needs oz0's MCP
 * client and nothing else of the node.
 */
export interface OpenedServer extends Listings {
  readonly server: string;
  readonly kind: ServerKind;
  /** Its connection, opened again when it has closed. */
  connection(): Promise<ServerConnection>;
  /**
   * I6: how its sandbox is isolated here, in words: bubblewrap and how its limits are held, or that it runs
   * unisolated (`node.isolation: "none"`); undefined for a plugin's or a remote server.
   */
  isolation(): string | undefined;
  /**
   * R1-R2: the tenant's credential a per-tenant remote server was opened with, and what the server's metadata asked
   * for; undefined for any other server, or when no tenant was named.
   */
  credential(): CredentialReport | undefined;
  /** C3: what a node does after it cancels a call: stops a sandboxed server, so the next call gets a fresh one. */
  afterCancel(): Promise<void>;
  /** Kills the server (SIGKILL, as when a node is lost) and opens it again; absent for a remote server. */
  readonly restart: (() => Promise<void>) | undefined;
  close(): Promise<void>;
}

/** Opens one server of the config as a node would. */
export type OpenServerFn = (config: LoadedConfig, server: string, tenant?: string) => OpenedServer;

/** One server, as the drill talks to it: through oz0's MCP client, over the connection a node would have. */
class OpenServer implements DrillTarget {
  readonly kind: ServerKind;

  constructor(
    private readonly opened: OpenedServer,
    private readonly timeoutMs: number,
  ) {
    this.kind = opened.kind;
  }

  isolation(): string | undefined {
    return this.opened.isolation();
  }

  private connection(): Promise<ServerConnection> {
    return this.opened.connection();
  }

  async listTools(): Promise<Tool[]> {
    return (await this.connection()).listTools(true);
  }

  /** Whether the server offers tasks, and in which form: the extension (2026-07-28) or SEP-1686 (2025-11-25). */
  async tasks(): Promise<{ offered: boolean; form?: 'extension' | 'SEP-1686' }> {
    const connection = await this.connection();
    if (!offersTasks(connection)) return { offered: false };
    return { offered: true, form: connection.offersTaskExtension ? 'extension' : 'SEP-1686' };
  }

  /** The MCP revision the server speaks with oz0. */
  async protocol(): Promise<string> {
    return (await this.connection()).protocol;
  }

  /** What each function the drill file had called asked for that oz0 does not offer (issue 25.5). */
  readonly asked = new Map<string, string>();

  /**
   * One call as a node makes it (a plain request, or a task followed to its end). A function that asks for what oz0
   * does not offer answers what the node would answer, and is remembered.
   */
  private async make(
    name: string,
    params: { arguments: Record<string, unknown>; _meta: Record<string, unknown> },
    signal: AbortSignal,
  ): Promise<CallToolResult> {
    const connection = await this.connection();
    const tool = (await connection.listTools()).find((t) => t.name === name) ?? {
      name,
      inputSchema: { type: 'object' as const },
    };
    const plan = taskPlan({
      support: taskSupportOf(tool),
      offered: connection.offersLegacyTasks,
      extension: connection.offersTaskExtension,
      priorTask: false,
    });
    if ('refused' in plan) throw new Error(`oz0 refuses its calls: ${plan.refused}`);
    try {
      return await makeCall({
        connection,
        tool,
        params: { name, ...params },
        asTask: plan.as !== 'request',
        ttlMs: this.timeoutMs * 2,
        signal,
        timeoutMs: this.timeoutMs,
        onTask: () => undefined,
      });
    } catch (err) {
      if (!(err instanceof AskedForInput)) throw err;
      this.asked.set(name, err.message);
      return err.result();
    }
  }

  /** The functions the server lists only to clients that offer what oz0 does not, and what each needs. */
  hidden(tools: Tool[]) {
    return hiddenFunctions(this.opened, this.opened.server, tools);
  }

  async call(call: DrillCall): Promise<CallToolResult> {
    const connection = await this.connection();
    // Progress is read off the transport, under a token of the drill's own, as oz0 reads it (see ServerConnection).
    const progressToken = call.onProgress ? `oz0-drill:${call.key}` : undefined;
    const unwatch =
      progressToken && call.onProgress ? connection.watchProgress(progressToken, call.onProgress) : undefined;
    try {
      return await this.make(
        call.name,
        {
          arguments: call.args,
          _meta: { [IDEMPOTENCY_KEY_META]: call.key, ...(progressToken ? { progressToken } : {}) },
        },
        call.signal ?? new AbortController().signal,
      );
    } finally {
      unwatch?.();
    }
  }

  /** Calls with progress asked for, and keeps each notification as it came. */
  async sample(name: string, args: Record<string, unknown>, key: string, resume?: object) {
    const connection = await this.connection();
    const seen: SeenProgress[] = [];
    const progressToken = `oz0-drill:${key}:${resume ? 'resume' : 'sample'}`;
    const unwatch = connection.watchProgress(progressToken, (p) => {
      const token = p._meta?.[RESUME_META];
      seen.push({
        progress: p.progress,
        ...(p.total !== undefined && { total: p.total }),
        ...(token !== undefined && { token }),
      });
    });
    try {
      const result = await this.make(
        name,
        {
          arguments: args,
          _meta: { [IDEMPOTENCY_KEY_META]: key, progressToken, ...(resume ? { [RESUME_META]: resume } : {}) },
        },
        new AbortController().signal,
      );
      return { result, seen };
    } finally {
      unwatch();
    }
  }

  afterCancel(): Promise<void> {
    return this.opened.afterCancel();
  }

  get restart(): (() => Promise<void>) | undefined {
    return this.opened.restart;
  }

  close(): Promise<void> {
    return this.opened.close();
  }
}

function text(result: CallToolResult): string {
  const t = contentText(result.content);
  return `${result.isError ? 'error: ' : ''}${t.length > 120 ? `${t.slice(0, 117)}...` : t}`;
}

/** The sample calls of the drill file: each once with progress, and again from its last token if it resumes. */
async function runSamples(open: OpenServer, tools: Tool[], drill: DrillFile) {
  const findings: Finding[] = [];
  const samples: SampleReport[] = [];
  const byName = new Map(tools.map((t) => [t.name, t]));
  for (const [name, sample] of Object.entries(drill.samples)) {
    const tool = byName.get(name);
    if (!tool) {
      findings.push({
        severity: 'error',
        function: name,
        check: 'sample-unknown',
        message: 'the drill file samples a function the server does not list',
      });
      continue;
    }
    const key = `oz0-drill/${randomUUID()}/sample`;
    try {
      const { result, seen } = await open.sample(name, sample.args, key);
      const report: SampleReport = { function: name, answer: text(result), progress: seen };
      if (open.asked.has(name)) {
        findings.push(askedFinding(name, open.asked.get(name)!));
      } else if (result.isError) {
        findings.push({
          severity: 'error',
          function: name,
          check: 'sample-error',
          message: `the sample call answered ${text(result)}`,
        });
      }
      findings.push(...checkProgress(tool, open.kind, seen));
      const last = [...seen].reverse().find((p) => typeof p.token === 'string');
      if (open.kind === 'remote' && declaresResume(tool) && last && !result.isError) {
        // As oz0's next attempt would send it (P3): the last token and the progress reported with it.
        const again = await open.sample(name, sample.args, key, { token: last.token, progress: last.progress });
        report.resumed = text(again.result);
        if (again.result.isError) {
          findings.push({
            severity: 'error',
            function: name,
            check: 'resume-error',
            message: `called again from its last token, it answered ${text(again.result)}`,
          });
        }
      }
      samples.push(report);
    } catch (err) {
      findings.push({
        severity: 'error',
        function: name,
        check: 'sample-error',
        message: `the sample call got no answer: ${(err as Error).message}`,
      });
    }
  }
  return { findings, samples };
}

/** Issue 25.5: a function that asked for what oz0 does not offer when the drill file had it called. */
function askedFinding(name: string, asked: string): Finding {
  return {
    severity: 'error',
    function: name,
    check: 'asks-for-input',
    message: `${asked}, which oz0 does not offer: a node ends each such call with an error result that says so`,
  };
}

/** Runs `oz0 plugin test` against one server of the config. */
export async function pluginTest(
  config: LoadedConfig,
  server: string,
  opts: { drill?: boolean; drillFile?: string; tenant?: string },
  openServer: OpenServerFn,
): Promise<PluginTestReport> {
  const loaded = loadDrillFile({ file: opts.drillFile, baseDir: config.baseDir });
  if (opts.drill && !loaded) {
    throw new DrillFileError(
      `--drill needs a drill file: none at ${path.join(config.baseDir, 'oz0.drill.json')} (or give --drill-file)`,
    );
  }
  const drill = loaded?.drill ?? emptyDrillFile();
  const opened = openServer(config, server, opts.tenant);
  const open = new OpenServer(opened, drill.timeoutSeconds * 1000);
  try {
    const tools = await open.listTools();
    const findings = checkListing(tools, open.kind);
    const protocol = await open.protocol();
    const { offered, form } = await open.tasks();
    const tasks = tools
      .filter((t) => taskSupportOf(t) !== 'forbidden')
      .map((t) => ({ function: t.name, support: taskSupportOf(t) }));
    for (const t of tasks) {
      if (t.support !== 'required' || offered) continue;
      findings.push({
        severity: 'error',
        function: t.function,
        check: 'task-not-offered',
        message: 'must run as an MCP task, and the server does not offer tasks for tools/call: oz0 refuses its calls',
      });
    }
    const hidden = [...(await open.hidden(tools))].map(([name, needs]) => ({ function: name, needs }));
    for (const h of hidden) {
      findings.push({
        severity: 'warning',
        function: h.function,
        check: 'not-listed-to-oz0',
        message: hiddenWhy(h.needs),
      });
    }
    const sampled = await runSamples(open, tools, drill);
    findings.push(...sampled.findings);
    const report = opts.drill ? await runDrill(open, tools, drill) : undefined;
    const sampledNames = new Set(Object.keys(drill.samples));
    for (const [name, asked] of open.asked) if (!sampledNames.has(name)) findings.push(askedFinding(name, asked));
    const isolation = open.isolation();
    const credential = opened.credential();
    return {
      server,
      kind: open.kind,
      protocol,
      ...(isolation && { isolation }),
      ...(opts.tenant && { tenant: opts.tenant }),
      ...(credential && { credential }),
      functions: tools.map((t) => t.name),
      listing: listedFunctions(tools),
      tasks: { offered, ...(form && { form }), functions: tasks },
      hidden,
      ...(loaded && { drillFile: loaded.file }),
      findings,
      samples: sampled.samples,
      ...(report && { drill: report }),
      ok: !findings.some((f) => f.severity === 'error') && (report?.failed ?? 0) === 0,
    };
  } finally {
    await open.close();
  }
}
