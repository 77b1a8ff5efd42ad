/**
 * I4: which of a sandbox's limits a node can hold, and which it cannot, in words (pure). A limit held is one no
 * process of the sandbox can pass without being stopped; what cannot be held makes the node refuse the sandbox, as I6
 * refuses one it cannot isolate, unless `node.limits` is `"best-effort"`, where it warns instead.
 *
 * | limit     | cgroup v2 / v1                         | no writable cgroup (rlimit)                                      |
 * | --------- | -------------------------------------- | ---------------------------------------------------------------- |
 * | processes | `pids.max`                             | RLIMIT_NPROC, counted per uid (its own) or per user namespace    |
 * | memory    | `memory.max`, tmpfs pages counted      | not held: per process (RLIMIT_DATA), and the node's sum of reads |
 * | CPU time  | `cpu.stat`, `cpuacct.usage`            | not held: per process (RLIMIT_CPU), and the node's sum of reads  |
 * | CPU share | `cpu.max`, `cpu.cfs_quota_us`          | pinned to `ceil(cpus)` whole cores, `sched_setaffinity` refused  |
 * | disk      | the node's walks, RLIMIT_FSIZE, tmpfs size (every mode); write grants need a uid of its own       |
 */
import type { SandboxConfig } from '../../common/config';

export interface NodeLimits {
  /** `cgroup v2`, `cgroup v1` or `rlimit`. */
  kind: string;
  /** How its CPU share is held: a control group's quota, or pinning to whole cores. */
  cpuShare: 'quota' | 'cores';
  /** Whether each sandbox has a uid of its own (a node run as root). */
  ownUid: boolean;
  /** The kernel's release (`6.1.0-18-amd64`). */
  kernel: string;
}

export type SandboxLimits = Pick<SandboxConfig, 'cpus' | 'write'>;

/** RLIMIT_NPROC counts per user namespace from Linux 5.14 (ucounts); before, per uid across every namespace. */
function perNamespaceNproc(kernel: string): boolean {
  const [major = 0, minor = 0] = kernel.split(/[.-]/).map(Number);
  return major > 5 || (major === 5 && minor >= 14);
}

/** The limits a node holds for no sandbox, whatever its config: said once at start. */
export function nodeGaps(node: NodeLimits): string[] {
  if (node.kind !== 'rlimit') return [];
  const gaps = [
    'memory: without a control group the node holds it per process (RLIMIT_DATA) and reads the sum every 250 ms, so a sandbox can take more than sandbox.memoryMiB between two reads',
    'CPU time: without a control group the node holds it per process (RLIMIT_CPU) and reads the sum, which misses children the kernel reaps for a parent that ignores SIGCHLD',
  ];
  if (!node.ownUid && !perNamespaceNproc(node.kernel)) {
    gaps.push(
      `processes: Linux ${node.kernel} counts RLIMIT_NPROC per uid across user namespaces (5.14 counts it per namespace), and every sandbox has the node's uid`,
    );
  }
  return gaps;
}

/** What this node cannot hold for one sandbox's config: its node's gaps and its own. */
export function sandboxGaps(node: NodeLimits, limits: SandboxLimits): string[] {
  const gaps = nodeGaps(node);
  if (node.cpuShare === 'cores' && !Number.isInteger(limits.cpus)) {
    gaps.push(
      `CPU share: sandbox.cpus is ${limits.cpus}, and without a control group the node pins a sandbox to whole cores (${Math.ceil(limits.cpus)})`,
    );
  }
  if (!node.ownUid && limits.write.length > 0) {
    gaps.push(
      "disk: what it writes in its write grants cannot be told apart from other sandboxes' files: each sandbox has the node's uid (run the node as root for a uid per sandbox)",
    );
  }
  return gaps;
}
