/**
 * I2: grants that name `{tenant}` (`"write": ["data/{tenant}"]`): each tenant's sandboxes of a server get a folder of
 * the tenant's own there, made by the node when a sandbox of the tenant first starts; a write grant without it is one
 * folder for every tenant's sandboxes of that server (the node says so at start). `{tenant}` is a whole component of a
 * path, and tenants' names (letters, digits, `_`, `.`, `-`, never `.` or `..` alone) cannot climb out of it.
 */
import fs from 'node:fs';
import type { SandboxConfig } from '../../common/config';
import { TENANT, fillTenant } from '../../model/checks';
import { at } from './disk';

export { TENANT };

/** Whether a grant is given per tenant. */
export function perTenant(p: string): boolean {
  return p.includes(TENANT);
}

/** What a grant names before its tenant's folder (`data` of `data/{tenant}/cache`): what exists whoever starts. */
export function beforeTenant(p: string): string {
  const parts = p.split('/');
  const i = parts.indexOf(TENANT);
  return i < 0 ? p : parts.slice(0, i).join('/') || '/';
}

/** A sandbox's grants for one tenant: `{tenant}` replaced by its name. */
export function forTenant(grants: SandboxConfig, tenant: string): SandboxConfig {
  if (![...grants.read, ...grants.write].some(perTenant)) return grants;
  const of = (p: string) => fillTenant(p, tenant);
  return { ...grants, read: grants.read.map(of), write: grants.write.map(of) };
}

/**
 * Makes a tenant's folders of its write grants that name `{tenant}` (absolute paths, before replacing), where the
 * folder before `{tenant}` exists: each made folder belongs to that folder's owner, with the sandboxes' group
 * (`gid`, every sandbox's) allowed to write it and to pass it on (set-group-ID), or to the node alone where sandboxes
 * have its uid (`gid` undefined). A folder already there is left as it is. Through descriptors, so that nothing a
 * sandbox placed is followed.
 */
export function makeTenantFolders(write: string[], tenant: string, gid: number | undefined): void {
  const templates = write.filter(perTenant);
  if (templates.length === 0) return;
  const name = fillTenant(TENANT, tenant);
  for (const template of templates) {
    const parent = beforeTenant(template);
    let dir: number;
    try {
      dir = fs.openSync(parent, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
    } catch {
      continue; // missing: the grant's check says so
    }
    try {
      const owner = fs.fstatSync(dir).uid;
      const rest = template
        .slice(template.indexOf(TENANT) + TENANT.length)
        .split('/')
        .filter(Boolean);
      for (const part of [name, ...rest]) {
        const where = at(dir, part);
        let made = false;
        try {
          fs.mkdirSync(where, { mode: 0o700 });
          made = true;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        }
        const next = fs.openSync(where, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW);
        fs.closeSync(dir);
        dir = next;
        if (made && gid !== undefined) {
          fs.fchownSync(dir, owner, gid);
          fs.fchmodSync(dir, 0o2770);
        }
      }
    } finally {
      fs.closeSync(dir);
    }
  }
}
