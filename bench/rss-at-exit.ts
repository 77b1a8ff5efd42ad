/**
 * Preloaded (`node -r`) into each process the CLI measure starts (bench/measures/cli.ts): at exit it writes its peak
 * resident memory, in KiB, to the file OZ0_BENCH_RSS names. Node reports no child's rusage to its parent.
 */
import fs from 'node:fs';

process.on('exit', () => {
  const file = process.env.OZ0_BENCH_RSS;
  if (file) fs.writeFileSync(file, String(process.resourceUsage().maxRSS));
});
