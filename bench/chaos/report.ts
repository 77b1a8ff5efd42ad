/**
 * The chaos run's counts, read on the servers' side: each ledger's key store (exactly one record per write that
 * answered, none for a call that gave up busy), the trials' tallies, and the violations; printed as a table and kept.
 */
import fs from 'node:fs';
import { readKeyStore } from '../../plugin';
import { machine, table, writeResults } from '../common';
import type { Row } from '../common';
import type { Rig, Scenario, Tally } from './rig';

const FAULT_NAME: Record<Scenario, string> = {
  node: 'nodes killed',
  temporal: 'Temporal server kills + restarts',
  cancel: 'cancels',
  busy: '429s sent',
  partition: 'nodes stopped past their heartbeat timeout',
  postgres: 'PostgreSQL restarts',
  upgrade: 'deploys (nodes replaced one at a time by the other release)',
};

/** Prints the table and the violations, keeps the results; true when nothing was lost, written twice or CANCELED early. */
export function report(
  rig: Rig,
  tallies: Map<Scenario, Tally>,
  run: { trials: number; jobsPerTrial: number; short?: boolean; cluster: boolean },
): boolean {
  const { violations, cli, server } = rig;
  // A key store keeps one record per key (its table says so): the plugin's and the remote ledger's, and the sandboxed
  // one's; a key in both would be a write made twice. What is checked here
  // is that every answered key is in it, and no key that gave up busy.
  const perKey = new Map<string, number>();
  const boxKeys = fs.existsSync(rig.boxLedger) ? readKeyStore(rig.boxLedger) : [];
  for (const { key } of [...readKeyStore(rig.ledger), ...boxKeys]) perKey.set(key, (perKey.get(key) ?? 0) + 1);
  const twice = [...perKey].filter(([, n]) => n > 1).map(([k]) => k);
  const missing = [...rig.expectedKeys].filter((k) => !perKey.has(k));
  const gaveUpButWritten = [...rig.gaveUpKeys].filter((k) => perKey.has(k));
  for (const k of twice) violations.push(`key ${k} written ${perKey.get(k)} times`);
  for (const k of missing) violations.push(`key ${k} answered but not in the ledger`);
  for (const k of gaveUpButWritten) violations.push(`key ${k} gave up busy but was written`);
  if (rig.nodesDied > 0) violations.push(`${rig.nodesDied} node(s) died by themselves`);

  type Count = { [K in keyof Tally]: Tally[K] extends number ? K : never }[keyof Tally];
  const total = (f: Count) => [...tallies.values()].reduce((a, t) => a + t[f], 0);
  const keysOf = (s: Scenario) => [...perKey].filter(([k]) => k.startsWith(`chaos-${s}-`));
  const rows: Row[] = [...tallies].map(([s, t]) => ({
    measure: `${s}: ${t.trials} trials, ${t.jobs} jobs, ${t.faults} ${FAULT_NAME[s]}`,
    figure:
      `${t.finished} finished, ${t.cancelled} cancelled, ${t.failed} failed, ${t.lost} lost; ` +
      `${keysOf(s).length} keys, ${keysOf(s).filter(([, n]) => n > 1).length} written twice` +
      (s === 'busy' ? `; ${t.gaveUpBusy} calls gave up busy` : `; ${t.canceledBeforeStopped} CANCELED early`) +
      (s === 'partition'
        ? `; ${t.lateAnswers} late answers, ${t.lateAccepted} taken; ${t.leftToReaper} idle sandboxes left to the reaper`
        : '') +
      (s === 'upgrade'
        ? `; ${t.nondeterministic} workflow tasks failed for nondeterminism; ${t.crossed} jobs run by both ` +
          `releases' nodes; calls ended with an error result: ${errorsSaid(t.errorResults)}`
        : ''),
    met:
      t.failed === 0 &&
      t.lost === 0 &&
      t.canceledBeforeStopped === 0 &&
      t.lateAccepted === 0 &&
      t.nondeterministic === 0,
  }));
  rows.push({
    measure: 'effects per key (ledger)',
    figure: `${perKey.size} keys written, ${twice.length} twice, ${missing.length} answered but missing, ${gaveUpButWritten.length} gave up but written`,
    target: 'exactly once',
    met: twice.length === 0 && missing.length === 0 && gaveUpButWritten.length === 0,
  });
  rows.push({
    measure: 'jobs',
    figure: `${total('jobs')} started, ${total('lost')} lost, ${total('canceledBeforeStopped')} CANCELED before their calls stopped`,
    target: '0 lost, 0',
    met: total('lost') === 0 && total('canceledBeforeStopped') === 0,
  });
  process.stdout.write(`machine: ${JSON.stringify(machine(cli))}\nTemporal: ${server.kind}\n${table(rows)}`);
  for (const v of violations) process.stdout.write(`violation: ${v}\n`);
  const out = writeResults(`chaos${run.cluster ? '-cluster' : ''}${run.short ? '-short' : ''}`, {
    machine: machine(cli),
    temporal: server.kind,
    trials: run.trials,
    jobsPerTrial: run.jobsPerTrial,
    tallies: Object.fromEntries(tallies),
    keysWritten: perKey.size,
    writtenTwice: twice,
    answeredButMissing: missing,
    gaveUpButWritten,
    nodesDied: rig.nodesDied,
    violations,
  });
  process.stdout.write(`results: ${out}\n`);
  if (violations.length > 0) {
    process.stdout.write(`kept for a look: ${rig.dir} (ledger, what the servers received, the server's log)\n`);
    return false;
  }
  fs.rmSync(rig.dir, { recursive: true, force: true });
  return true;
}

/** `none`, or each error result's words with how many calls ended so. */
function errorsSaid(errors: Record<string, number>): string {
  const said = Object.entries(errors).map(([words, n]) => `${n} × "${words}"`);
  return said.length ? said.join(', ') : 'none';
}
