/** `oz0 job start|status|trace|watch|cancel`. */
import fs from 'node:fs';
import type { Command } from 'commander';
import { UsageError, config, jobIdArg, print, readFile, withConfig, withJobClient } from './common';
import type { ConfigOpts } from './common';

export function registerJobCommands(program: Command): void {
  const job = program.command('job').description('start, watch and stop jobs');

  withConfig(job.command('start'))
    .description(
      'start a job from a spec file (- for stdin); prints its id, or with --wait its trace (exit 1 unless COMPLETED)',
    )
    .argument('<spec>', 'job spec JSON file')
    .option('--id <id>', 'job id (the workflow id)', jobIdArg)
    .option('--wait', 'wait for the job to end and print its trace')
    .option('--json', 'print JSON')
    .action(async (specFile: string, opts: ConfigOpts & { id?: string; wait?: boolean; json?: boolean }) => {
      const text = specFile === '-' ? fs.readFileSync(0, 'utf8') : readFile(specFile);
      let spec: unknown;
      try {
        spec = JSON.parse(text);
      } catch (err) {
        throw new UsageError(`${specFile} is not JSON: ${(err as Error).message}`);
      }
      const [{ startJob, jobTrace }, { formatTrace, traceJson }] = await Promise.all([
        import('../jobs.js'),
        import('../format.js'),
      ]);
      await withJobClient(await config(opts), async (jc) => {
        const handle = await startJob(jc, spec, { workflowId: opts.id });
        // I14: each external session's token, for its agent to reach it through a node's gateway (said once, here).
        const tokens = handle.sessionTokens;
        const tokenLines = tokens.map(
          (t) =>
            `steps[${t.step}], an external session: its agent sends "Authorization: Bearer ${t.token}" to a node's gateway (/mcp)`,
        );
        if (!opts.wait) {
          return print({ jobId: handle.workflowId, sessionTokens: tokens }, opts.json, () =>
            [handle.workflowId, ...tokenLines].join('\n'),
          );
        }
        for (const line of tokenLines) process.stderr.write(`${line}\n`);
        await handle.result().catch(() => undefined);
        const trace = await jobTrace(jc.client, handle.workflowId, { data: jc.data, whole: opts.json });
        print(traceJson(trace), opts.json, () => formatTrace(trace));
        // Like a process: 0 when the job completed, 1 when it ended any other way.
        if (trace.status !== 'COMPLETED') process.exitCode = 1;
      });
    });

  withConfig(job.command('status'))
    .description(
      "running, waiting (a call waits for a person's yes: each such call follows), cancelling, or Temporal's final status",
    )
    .argument('<id>', 'job id', jobIdArg)
    .option('--json', 'print JSON')
    .action(async (id: string, opts: ConfigOpts & { json?: boolean }) => {
      const [{ jobStatus, stuckOf }, { waitingCallsQuery }] = await Promise.all([
        import('../jobs.js'),
        import('../../model/messages.js'),
      ]);
      await withJobClient(await config(opts), async (jc) => {
        const status = await jobStatus(jc.client, id);
        // D3: a job whose workflow task fails on every try says why, and what would free it.
        const stuck = status === 'stuck' ? await stuckOf(jc.client, id) : undefined;
        if (stuck) {
          const text = `stuck: its workflow task failed ${stuck.tries} times in a row: ${stuck.why}`;
          return print({ jobId: id, status, stuck }, opts.json, () =>
            [text, ...(stuck.remedy ? [`  ${stuck.remedy}`] : [])].join('\n'),
          );
        }
        // A4: what waits is named under the status: the call, its tool, its arguments (redacted), the answer.
        const waiting =
          status === 'waiting'
            ? await jc.client.workflow
                .getHandle(id)
                .query(waitingCallsQuery)
                .catch(() => [])
            : [];
        const json = { jobId: id, status, ...(status === 'waiting' ? { waiting } : {}) };
        print(json, opts.json, () =>
          [
            status,
            ...waiting.map(
              (w) =>
                `  ${w.activityId} ${w.tool} ${w.args} since ${w.askedAt}: oz0 call approve|deny ${id} ${w.activityId}`,
            ),
          ].join('\n'),
        );
      });
    });

  withConfig(job.command('trace'))
    .description("the job's steps and every attempt")
    .argument('<id>', 'job id', jobIdArg)
    .option('--json', 'print JSON')
    .action(async (id: string, opts: ConfigOpts & { json?: boolean }) => {
      const [{ jobTrace }, { formatTrace, traceJson }] = await Promise.all([
        import('../jobs.js'),
        import('../format.js'),
      ]);
      await withJobClient(await config(opts), async (jc) => {
        // D1, D3: every run's steps; with --json each stored answer read back whole (the table says what it holds).
        const trace = await jobTrace(jc.client, id, { data: jc.data, whole: opts.json });
        print(traceJson(trace), opts.json, () => formatTrace(trace));
      });
    });

  withConfig(job.command('watch'))
    .description("live progress bars for the job's running calls, with attempts and busy waits, until it ends")
    .argument('<id>', 'job id', jobIdArg)
    .option('--json', 'print a JSON snapshot per change')
    .action(async (id: string, opts: ConfigOpts & { json?: boolean }) => {
      const { watchJob } = await import('../watch.js');
      await withJobClient(await config(opts), async (jc) => {
        const status = await watchJob(jc.client, id, { json: opts.json });
        if (!opts.json) process.stdout.write(`job ${id}: ${status}\n`);
      });
    });

  withConfig(job.command('cancel'))
    .description('cancel a job: its running calls are stopped, then it ends CANCELED')
    .argument('<id>', 'job id', jobIdArg)
    .action(async (id: string, opts: ConfigOpts) => {
      const { cancelJob } = await import('../jobs.js');
      await withJobClient(await config(opts), async (jc) => {
        await cancelJob(jc.client, id);
        process.stdout.write(`cancel requested for ${id}\n`);
      });
    });
}
