/**
 * koffi, the FFI through which a node calls libseccomp (./seccomp.ts) and libc's flock (./uids.ts): loaded on first
 * use only, so a command that starts no sandbox never pays for it (~10 ms). koffi ships prebuilt bindings per
 * platform as optional packages (`@koromix/koffi-linux-x64`, …); its install script only checks them.
 */
import fs from 'node:fs';
import type * as KoffiModule from 'koffi' with { 'resolution-mode': 'import' };

export type Koffi = typeof KoffiModule;

let loaded: Koffi | undefined;

export function koffi(): Koffi {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded where a sandbox is first made
  return (loaded ??= require('koffi') as Koffi);
}

/** close_range(2)'s flag: mark close-on-exec rather than close. */
const CLOSE_RANGE_CLOEXEC = 4;
const F_SETFD = 2;
const FD_CLOEXEC = 1;
let markAll: (() => void) | undefined;

/**
 * I1: no sandbox inherits a file descriptor this process holds without close-on-exec (one it was given: a
 * supervisor's pipe, a socket, a terminal; or one native code opened so): every one above stderr is marked
 * close-on-exec before each sandbox starts (one system call). Node marks the ones it opens itself; neither it nor
 * bwrap closes the others in a child.
 */
export function closeInheritedOnExec(): void {
  (markAll ??= closeOnExecAll())();
}

function closeOnExecAll(): () => void {
  const libc = koffi().load('libc.so.6');
  try {
    const closeRange = libc.func('int close_range(unsigned int first, unsigned int last, int flags)');
    if (closeRange(3, 0xffffffff, CLOSE_RANGE_CLOEXEC) === 0)
      return () => closeRange(3, 0xffffffff, CLOSE_RANGE_CLOEXEC);
  } catch {
    // a glibc before 2.34 has no close_range wrapper
  }
  const fcntl = libc.func('int fcntl(int fd, int cmd, ...)');
  return () => {
    for (const name of fs.readdirSync('/proc/self/fd')) {
      const fd = Number(name);
      if (fd > 2) fcntl(fd, F_SETFD, 'int', FD_CLOEXEC);
    }
  };
}
