/** `oz0 plugin test`'s report as a person reads it: the findings, the samples, and the drill, as tables. */
import type { ServerKind } from '../../common/config';
import type { CredentialReport } from '../../mcp';
import { table } from '../../common/text';
import type { DrillReport } from './drill';
import type { Finding, ListedFunction, SeenProgress } from './listing-checks';

/** What `oz0 plugin test` prints with --json. */
export interface PluginTestReport {
  server: string;
  kind: ServerKind;
  /** The MCP revision the server speaks with oz0: 2026-07-28, or what the `initialize` handshake agreed. */
  protocol: string;
  /** I6: a sandboxed server's isolation on this machine, in words (`none: runs unisolated…` where it is off). */
  isolation?: string;
  /** `--tenant`: the tenant whose calls the server was opened for. */
  tenant?: string;
  /** R1-R2: a per-tenant server's credential of that tenant, and what the server's metadata asked for. */
  credential?: CredentialReport;
  functions: string[];
  /** Each function: its hints, and whether oz0 makes a failed call again. */
  listing: ListedFunction[];
  /**
   * MCP tasks: whether the server offers them, in which form (the extension of 2026-07-28, where the server decides
   * per call, or SEP-1686 of 2025-11-25, for tools/call), and each function whose 2025-11-25 listing requires or
   * offers one.
   */
  tasks: {
    offered: boolean;
    form?: 'extension' | 'SEP-1686';
    functions: Array<{ function: string; support: string }>;
  };
  /** Functions the server lists only to clients that offer sampling, elicitation or roots, which oz0 does not. */
  hidden: Array<{ function: string; needs: string[] }>;
  drillFile?: string;
  findings: Finding[];
  samples: SampleReport[];
  drill?: DrillReport;
  /** False when any finding is an error or any drill case failed: the exit status is then 1. */
  ok: boolean;
}

export interface SampleReport {
  function: string;
  answer: string;
  progress: SeenProgress[];
  /** A remote function that declares resume, called again with its last token: what it answered. */
  resumed?: string;
}

/** The whole report: what was found, then each sample, then the drill table and its counts. */
export function formatReport(report: PluginTestReport): string {
  const out = [
    `${report.server} (${report.kind} server, MCP ${report.protocol}): ${report.functions.length} function${report.functions.length === 1 ? '' : 's'}`,
  ];
  if (report.isolation) out.push(`isolation: ${report.isolation}`);
  if (report.credential) out.push(...credentialLines(report.credential));
  else if (report.tenant && report.kind === 'remote')
    out.push(`credential: the server's own headers, the same for every tenant (its credentials are "shared")`);
  if (report.drillFile) out.push(`drill file: ${report.drillFile}`);
  const tasks = report.tasks.functions.map((t) => `${t.function} (${t.support})`);
  const offered = report.tasks.offered
    ? `offered (${report.tasks.form === 'extension' ? 'the extension: the server decides per call' : 'SEP-1686'})`
    : 'not offered';
  out.push(`tasks: ${offered}${tasks.length ? `; ${tasks.join(', ')}` : ''}`);
  if (report.hidden.length) {
    const hidden = report.hidden.map((h) => `${h.function} (${h.needs.join(' or ')})`);
    out.push(`not listed to oz0, which offers no sampling, elicitation or roots: ${hidden.join(', ')}`);
  }
  out.push('', 'functions:');
  out.push(
    ...table(
      ['function', 'hints', 'a failed call'],
      report.listing.map((f) => [
        f.function,
        f.hints.join(', ') || '-',
        f.calls === 'again' ? 'made again' : 'not made again: one attempt',
      ]),
    ),
  );
  out.push('', 'listing:');
  out.push(
    ...(report.findings.length
      ? table(
          ['severity', 'function', 'check', 'message'],
          report.findings.map((f) => [f.severity, f.function ?? '-', f.check, f.message]),
        )
      : ['no findings']),
  );
  for (const s of report.samples) {
    const tokens = s.progress.filter((p) => p.token !== undefined).length;
    out.push(
      '',
      `sample ${s.function}: ${s.progress.length} progress notifications (${tokens} with a resume token); ${s.answer}`,
    );
    if (s.resumed !== undefined) out.push(`  again from its last token: ${s.resumed}`);
  }
  const drill = report.drill;
  if (drill) {
    out.push('', 'drill:');
    const rows = drill.functions.flatMap((f) =>
      f.problem
        ? [[f.function, '-', 'FAIL', f.problem]]
        : f.cases.map((c) => [f.function, c.case, c.result.toUpperCase(), c.note]),
    );
    out.push(...(rows.length ? table(['function', 'case', 'result', 'note'], rows) : ['no function to drill']));
    out.push('', `drill: ${drill.passed} passed, ${drill.failed} failed, ${drill.skipped} skipped`);
  }
  const errors = report.findings.filter((f) => f.severity === 'error').length;
  out.push('', report.ok ? 'ok' : `not ok: ${errors} error findings${drill ? `, ${drill.failed} drill failures` : ''}`);
  return out.join('\n');
}

/** R1-R2: which credential of the tenant was used, and what the server and its authorization server asked for. */
function credentialLines(c: CredentialReport): string[] {
  const out: string[] = [];
  const headers = c.headers.length ? `headers ${c.headers.join(', ')}` : '';
  if (!c.oauth) return [`credential: ${c.field} (${headers})`];
  const o = c.oauth;
  out.push(
    `credential: ${c.field}: OAuth client ${o.clientId} (${o.method}) at ${o.issuer}${headers ? `, and ${headers}` : ''}`,
  );
  const s = o.seen;
  const list = (xs: string[] | undefined) => (xs?.length ? xs.join(' ') : 'none said');
  out.push(
    `  the server's metadata (RFC 9728): resource ${s.resource ?? 'not read'}, authorization servers ${list(s.authorizationServers)}, scopes ${list(s.scopesSupported)}`,
  );
  if (s.issuer)
    out.push(`  its authorization server (RFC 8414): ${s.issuer}, client authentication ${list(s.authMethods)}`);
  if (s.challenge?.scope)
    out.push(`  its last challenge (HTTP ${s.challenge.status}) asked for scope ${s.challenge.scope}`);
  out.push(
    s.scopeGranted !== undefined || s.expiresInSeconds !== undefined
      ? `  token: asked for scope ${s.scopeAsked || '(none)'}, granted ${s.scopeGranted ?? '(not said)'}, for ${s.expiresInSeconds ?? '?'} s`
      : '  token: none taken (the server asked for none)',
  );
  return out;
}
