/**
 * I1: the system-call filter of every sandbox. It refuses at least what Docker's default profile refuses a container
 * without capabilities — new namespaces (`unshare`, `setns`, `clone` with a namespace flag), `mount`, `keyctl`, `bpf`,
 * `perf_event_open`, `userfaultfd`, `io_uring_*`, `kexec_*`, modules, and every other call outside its list — and a
 * few it allows that no sandbox needs (see {@link REFUSED_BEYOND_DOCKER}).
 *
 * The profile is Docker's own file (./docker-seccomp.json, moby/profiles seccomp/default.json, unchanged), read for
 * this machine's architecture and no capabilities; the filter is compiled by libseccomp (`libseccomp.so.2`, on every
 * Debian, Ubuntu and Fedora: apt itself depends on it) through koffi, an FFI with prebuilt bindings, so a node needs
 * neither Python nor a compiler, and no BPF is written by hand. It is built once per process (~20 ms) and handed to
 * each sandbox's bwrap as bytes on a file descriptor (`--seccomp FD`).
 *
 * Two choices Docker (runc) makes too: `clone3` answers ENOSYS, since its flags sit behind a pointer a filter cannot
 * read, so glibc falls back to `clone`, whose flags it can; and every call numbered above the newest this libseccomp
 * knows answers ENOSYS rather than EPERM, so a newer libc falls back as it would on an older kernel.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import dockerProfile from './docker-seccomp.json';
import { koffi } from './ffi';
import type { Koffi } from './ffi';

/** One syscall rule of a Docker (OCI) seccomp profile, as its JSON says it. */
interface ProfileRule {
  names: string[];
  action: string;
  errnoRet?: number;
  args?: Array<{ index: number; value: number; valueTwo?: number; op: string }> | null;
  includes?: { caps?: string[]; arches?: string[]; minKernel?: string } | null;
  excludes?: { caps?: string[]; arches?: string[] } | null;
}

export interface SeccompProfile {
  defaultAction: string;
  defaultErrnoRet?: number;
  syscalls: ProfileRule[];
}

/** A comparison of one argument: libseccomp's `scmp_arg_cmp` (for MASKED_EQ, `a` is the mask and `b` the value). */
export interface ArgCompare {
  arg: number;
  op: 'NE' | 'LT' | 'LE' | 'EQ' | 'GE' | 'GT' | 'MASKED_EQ';
  a: number;
  b: number;
}

/** What the filter does with one call: allow it (when its arguments compare so), or answer an errno. */
export interface FilterRule {
  name: string;
  action: 'allow' | { errno: number };
  args?: ArgCompare[];
}

export interface FilterPlan {
  /** The errno of every call no rule names. */
  defaultErrno: number;
  rules: FilterRule[];
}

const EPERM = 1;
const ENOSYS = 38;

/**
 * Calls Docker's profile allows that a sandbox never gets: reading or writing another process's memory (`ptrace`,
 * `process_vm_readv`, `process_vm_writev`; Docker allows them from kernel 4.8), and `sched_setaffinity`, so a sandbox
 * pinned to its cores (its CPU share where the node has no control group, ./limits.ts) cannot widen them.
 */
export const REFUSED_BEYOND_DOCKER = ['ptrace', 'process_vm_readv', 'process_vm_writev', 'sched_setaffinity'];

/** Node's `process.arch` as Docker's profile names architectures. */
const PROFILE_ARCH: Record<string, string> = {
  x64: 'amd64',
  arm64: 'arm64',
  ia32: 'x86',
  arm: 'arm',
  s390x: 's390x',
  ppc64: 'ppc64le',
  riscv64: 'riscv64',
  loong64: 'loong64',
};

/** `6.1.0-18-amd64` → [6, 1]. */
function kernelVersion(release: string): [number, number] {
  const [major = 0, minor = 0] = release.split(/[.-]/).map(Number);
  return [major, minor];
}

function atLeast(release: string, min: string): boolean {
  const [a, b] = kernelVersion(release);
  const [x, y] = kernelVersion(min);
  return a > x || (a === x && b >= y);
}

/**
 * The rules of a profile for one architecture and a process with no capabilities (pure): Docker's conditions read as
 * runc reads them, then {@link REFUSED_BEYOND_DOCKER} taken out. Every call it does not name gets the default errno.
 */
export function profileRules(
  profile: SeccompProfile,
  opts: { arch: string; kernel: string; refused?: string[] },
): FilterPlan {
  const arch = PROFILE_ARCH[opts.arch] ?? opts.arch;
  const refused = new Set(opts.refused ?? REFUSED_BEYOND_DOCKER);
  const rules: FilterRule[] = [];
  for (const rule of profile.syscalls) {
    const { includes, excludes } = rule;
    if (includes?.caps?.length) continue;
    if (includes?.arches?.length && !includes.arches.includes(arch)) continue;
    if (excludes?.arches?.includes(arch)) continue;
    if (includes?.minKernel && !atLeast(opts.kernel, includes.minKernel)) continue;
    const action =
      rule.action === 'SCMP_ACT_ALLOW'
        ? ('allow' as const)
        : rule.action === 'SCMP_ACT_ERRNO'
          ? { errno: rule.errnoRet ?? profile.defaultErrnoRet ?? EPERM }
          : undefined;
    if (!action) throw new Error(`seccomp profile: action ${rule.action} is not one oz0 reads`);
    const args = (rule.args ?? []).map((a) => ({
      arg: a.index,
      op: a.op.replace(/^SCMP_CMP_/, '') as ArgCompare['op'],
      a: a.value,
      b: a.valueTwo ?? 0,
    }));
    for (const name of rule.names) {
      if (action === 'allow' && refused.has(name)) continue;
      rules.push({ name, action, ...(args.length ? { args } : {}) });
    }
  }
  return { defaultErrno: profile.defaultErrnoRet ?? EPERM, rules };
}

/** The plan of every sandbox's filter on this machine. */
export function sandboxFilterPlan(): FilterPlan {
  return profileRules(dockerProfile as SeccompProfile, { arch: process.arch, kernel: os.release() });
}

// ---- libseccomp, through koffi ----

const ACT_ALLOW = 0x7fff0000;
const actErrno = (errno: number) => (0x00050000 | (errno & 0xffff)) >>> 0;
const CMP_OPS: Record<ArgCompare['op'], number> = { NE: 1, LT: 2, LE: 3, EQ: 4, GE: 5, GT: 6, MASKED_EQ: 7 };
/** seccomp_attr_set's SCMP_FLTATR_CTL_OPTIMIZE: 2 sorts the calls into a binary tree (libseccomp 2.5). */
const ATTR_OPTIMIZE = 8;
/** Calls numbered up to this get ENOSYS when this libseccomp does not know them (the kernel's table is far below). */
const HIGHEST_CALL = 1023;

export interface BuiltFilter {
  /** The BPF program, as bwrap's `--seccomp FD` reads it. */
  bpf: Buffer;
  /** libseccomp's version, and what it did not know by name (left to the default, or to ENOSYS by number). */
  libseccomp: string;
  unknown: string[];
  /** The newest call number this libseccomp knows; every one above it answers ENOSYS. */
  newestKnown: number;
  /** The rules compiled (a call with several argument cases counts once for each). */
  rules: number;
}

let built: BuiltFilter | undefined;

/** Why a node cannot build its filter, with how to get libseccomp. */
export class SeccompUnavailable extends Error {
  override name = 'SeccompUnavailable';
}

/** Every sandbox's filter, compiled once per process; throws {@link SeccompUnavailable} saying why it cannot be. */
export function sandboxFilter(): BuiltFilter {
  return (built ??= compile(sandboxFilterPlan()));
}

/** Compiles a plan with libseccomp into a BPF program for this machine's architecture. */
export function compile(plan: FilterPlan): BuiltFilter {
  const ffi = koffi();
  let lib: ReturnType<Koffi['load']>;
  try {
    lib = ffi.load('libseccomp.so.2');
  } catch (err) {
    throw new SeccompUnavailable(
      `libseccomp is not installed (${(err as Error).message.split('\n')[0]}): \`apt-get install libseccomp2\` (Debian, Ubuntu), \`dnf install libseccomp\` (Fedora), \`apk add libseccomp\` (Alpine)`,
    );
  }
  const cmp = ffi.struct({ arg: 'uint', op: 'int', datum_a: 'uint64', datum_b: 'uint64' });
  const version = ffi.struct({ major: 'uint', minor: 'uint', micro: 'uint' });
  const fn = {
    version: lib.func('seccomp_version', ffi.pointer(version), []),
    init: lib.func('void *seccomp_init(uint32_t def_action)'),
    release: lib.func('void seccomp_release(void *ctx)'),
    attrSet: lib.func('int seccomp_attr_set(void *ctx, int attr, uint32_t value)'),
    resolveName: lib.func('int seccomp_syscall_resolve_name(const char *name)'),
    resolveNum: lib.func('const char *seccomp_syscall_resolve_num_arch(uint32_t arch, int num)'),
    ruleAdd: lib.func('seccomp_rule_add_array', 'int', ['void *', 'uint32_t', 'int', 'uint', ffi.pointer(cmp)]),
    exportBpf: lib.func('int seccomp_export_bpf(void *ctx, int fd)'),
  };
  const v = ffi.decode(fn.version(), version) as { major: number; minor: number; micro: number };
  const ctx = fn.init(actErrno(plan.defaultErrno));
  if (!ctx) throw new SeccompUnavailable('libseccomp could not make a filter (seccomp_init failed)');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-seccomp-'));
  try {
    fn.attrSet(ctx, ATTR_OPTIMIZE, 2);
    let newestKnown = 0;
    for (let n = 0; n <= HIGHEST_CALL; n++) if (fn.resolveNum(0, n)) newestKnown = n;
    const unknown: string[] = [];
    const named = new Set<number>();
    for (const rule of plan.rules) {
      const nr = fn.resolveName(rule.name) as number;
      if (nr === -1) {
        unknown.push(rule.name);
        continue;
      }
      // A negative number is libseccomp's for a call this architecture does not have (chown32 on x86-64): skipped.
      if (nr < 0) continue;
      named.add(nr);
      const action = rule.action === 'allow' ? ACT_ALLOW : actErrno(rule.action.errno);
      const args = (rule.args ?? []).map((a) => ({ arg: a.arg, op: CMP_OPS[a.op], datum_a: a.a, datum_b: a.b }));
      const rc = fn.ruleAdd(ctx, action, nr, args.length, args.length ? args : null) as number;
      if (rc < 0) throw new SeccompUnavailable(`libseccomp refused the rule for ${rule.name} (${rc})`);
    }
    for (let n = newestKnown + 1; n <= HIGHEST_CALL; n++) {
      if (!named.has(n)) fn.ruleAdd(ctx, actErrno(ENOSYS), n, 0, null);
    }
    const file = path.join(dir, 'filter.bpf');
    const fd = fs.openSync(file, 'w', 0o600);
    try {
      const rc = fn.exportBpf(ctx, fd) as number;
      if (rc < 0) throw new SeccompUnavailable(`libseccomp could not export the filter (${rc})`);
    } finally {
      fs.closeSync(fd);
    }
    return {
      bpf: fs.readFileSync(file),
      libseccomp: `${v.major}.${v.minor}.${v.micro}`,
      unknown: [...new Set(unknown)].sort(),
      newestKnown,
      rules: plan.rules.length - unknown.length,
    };
  } finally {
    fn.release(ctx);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
