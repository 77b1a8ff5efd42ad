/** `oz0 call list|approve|deny`: the calls that wait for a person's yes, and a person's answer (A4, A5). */
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import { config, jobIdArg, print, tenantArg, withConfig, withJobClient } from './common';
import type { ConfigOpts } from './common';

/** A call is named by its number, its activity id (`c3`) or its key. */
function callArg(value: string): string {
  if (!value || value.length > 1000) throw new InvalidArgumentError("a call is the step's number, c<N> or its key");
  return value;
}

function byArg(value: string): string {
  if (!value.trim() || value.length > 200) throw new InvalidArgumentError('--by names who answers: 1-200 characters');
  return value;
}

function reasonArg(value: string): string {
  if (value.length > 1000) throw new InvalidArgumentError('a reason is at most 1000 characters');
  return value;
}

export function registerCallCommands(program: Command): void {
  const call = program.command('call').description("calls that wait for a person's yes (policy verdict confirm)");

  withConfig(call.command('list'))
    .description("every call that waits for a person's yes, oldest first, with how long it has waited")
    .option('--tenant <tenant>', 'only this tenant', tenantArg)
    .option('--json', 'print JSON')
    .action(async (opts: ConfigOpts & { tenant?: string; json?: boolean }) => {
      const [{ listWaitingCalls }, { formatWaiting }] = await Promise.all([
        import('../calls.js'),
        import('../format.js'),
      ]);
      await withJobClient(await config(opts), async (jc) => {
        const { calls, unreachable } = await listWaitingCalls(jc.client, { tenant: opts.tenant });
        print({ calls, unreachable }, opts.json, () => formatWaiting(calls, unreachable));
      });
    });

  for (const [name, approve] of [
    ['approve', true],
    ['deny', false],
  ] as const) {
    const cmd = withConfig(call.command(name))
      .description(
        approve
          ? 'say yes to a waiting call: it runs (its retries too, under its one key), and no other call'
          : 'say no to a waiting call: it ends as an error result with the reason, and the job goes on',
      )
      .argument('<job>', 'job id', jobIdArg)
      .argument('[call]', "the call: the step's number, c<N> or its key (none: the one call that waits)", callArg)
      .option('--by <who>', 'who answers, for the trace as cli:<who> (default: the OS user)', byArg);
    if (!approve) cmd.option('--reason <text>', 'why: the model reads it in the error result', reasonArg);
    cmd
      .option('--json', 'print JSON')
      .action(
        async (
          jobId: string,
          which: string | undefined,
          opts: ConfigOpts & { by?: string; reason?: string; json?: boolean },
        ) => {
          const { answerCall, osUser } = await import('../calls.js');
          await withJobClient(await config(opts), async (jc) => {
            const answered = await answerCall(jc.client, jobId, {
              approve,
              // A9: the operator's own word, labelled so: only the inbox's answers carry a vouched identity.
              by: `cli:${opts.by ?? osUser()}`,
              ...(which !== undefined ? { call: which } : {}),
              ...(opts.reason !== undefined ? { reason: opts.reason } : {}),
            });
            print(answered, opts.json, () => {
              const verb = approve ? 'approved' : 'denied';
              const why = answered.reason ? `: ${answered.reason}` : '';
              return `${verb} ${answered.activityId} (${answered.tool}, key ${answered.key}) of ${jobId}, by ${answered.by} at ${answered.at}${why}`;
            });
          });
        },
      );
  }
}
