/**
 * The drill file a plugin ships for `oz0 plugin test` (docs/plugin-authors.md, "The drill"): arguments for each
 * write the drill makes again under its key, how to count what it did, and sample calls whose progress is checked.
 */
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { formatPath } from '../../model/schemas';

/** The drill file's default name, looked for in the config's folder. */
export const DRILL_FILE = 'oz0.drill.json';

const ArgsSchema = z.record(z.string(), z.unknown());

/** A dotted path into an answer's structured content, e.g. `charges` or `totals.charges`. */
const PathSchema = z
  .string()
  .regex(/^[A-Za-z0-9_$-]+(\.[A-Za-z0-9_$-]+)*$/, 'a path is names joined by dots, e.g. "charges" or "totals.charges"');

const CountSchema = z.strictObject({
  /** A read-only function of the same server that counts the function's effects. */
  function: z.string().min(1),
  args: ArgsSchema.default({}),
  /** Where the count is in its answer: structuredContent, else its text content parsed as JSON. */
  path: PathSchema,
});

const FunctionDrillSchema = z.strictObject({
  /** Arguments of a call that succeeds: the drill makes it under several keys. */
  args: ArgsSchema,
  /** Other valid arguments: made under a used key, they must be refused (case other-args). */
  otherArgs: ArgsSchema.optional(),
  /** Arguments of the call that is cancelled mid-way (case cancelled), default `args`: make it run long enough. */
  cancelArgs: ArgsSchema.optional(),
  /** How the drill sees the effect: without it some cases can only compare answers. */
  count: CountSchema.optional(),
});

const SampleSchema = z.strictObject({ args: ArgsSchema.default({}) });

export const DrillFileSchema = z.strictObject({
  /** The writes to drill, by function name. */
  functions: z.record(z.string().min(1), FunctionDrillSchema).default({}),
  /** Calls made once, with progress asked for, to check the progress and the resume tokens they report. */
  samples: z.record(z.string().min(1), SampleSchema).default({}),
  /** The cancelled call is cancelled at its first progress, or after this long, whichever comes first. */
  cancelAfterMs: z.number().int().min(1).max(60_000).default(100),
  /** How long the drill waits after a call before it counts, for work a cancelled handler may still finish. */
  settleMs: z.number().int().min(0).max(60_000).default(200),
  /** Each call's time limit. */
  timeoutSeconds: z.number().positive().max(600).default(30),
});

export type DrillFile = z.infer<typeof DrillFileSchema>;
export type FunctionDrill = z.infer<typeof FunctionDrillSchema>;
export type CountSpec = z.infer<typeof CountSchema>;

/** The empty drill file: no drilled functions, no samples, the defaults. */
export function emptyDrillFile(): DrillFile {
  return DrillFileSchema.parse({});
}

/** A drill file that cannot be used; the message names the file and each bad field. */
export class DrillFileError extends Error {
  override name = 'DrillFileError';
}

/** Validates a parsed drill file. */
export function parseDrillFile(input: unknown, source = 'drill file'): DrillFile {
  const parsed = DrillFileSchema.safeParse(input);
  if (parsed.success) return parsed.data;
  const lines = parsed.error.issues.map((i) => `${formatPath(i.path)}: ${i.message}`);
  throw new DrillFileError(`bad drill file (${source}): ${lines.join('; ')}`);
}

/**
 * Reads the drill file: `file` when given (it must exist), else `oz0.drill.json` in `baseDir`; `undefined` when
 * that default is not there.
 */
export function loadDrillFile(opts: {
  file?: string;
  baseDir: string;
}): { file: string; drill: DrillFile } | undefined {
  const file = opts.file ? path.resolve(opts.file) : path.join(opts.baseDir, DRILL_FILE);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' && !opts.file) return undefined;
    throw new DrillFileError(`cannot read the drill file ${file}: ${(err as NodeJS.ErrnoException).code ?? err}`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new DrillFileError(`bad drill file (${file}): not JSON: ${(err as Error).message}`);
  }
  return { file, drill: parseDrillFile(raw, file) };
}
