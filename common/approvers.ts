/**
 * A9: who may answer a tenant's calls. `tenants.<t>.approvers` names people as the operator's identity provider
 * vouches for them — an email (`alice@acme.example`, or `email:…`), a subject (`sub:…`), or a group of its groups
 * claim (`group:finance`) — for every call of the tenant, or per tool pattern (`{ "ledger.refund": ["group:finance"],
 * "*": ["alice@acme.example"] }`: every pattern that matches the call's tool counts). A tenant that names none has
 * its calls answered from the CLI only.
 */
import { z } from 'zod';
import { matches } from '../model/checks';
import { PatternSchema } from '../model/schemas';

/** A person or a group, as the config names them. */
export const PrincipalSchema = z
  .string()
  .max(320)
  .regex(
    /^(?:(?:email:)?[^@\s:]+@[^@\s]+|sub:\S+|group:\S+)$/,
    'an approver is an email ("alice@acme.example" or "email:…"), a subject ("sub:…") or a group ("group:finance")',
  );

export const ApproversSchema = z.union([z.array(PrincipalSchema), z.record(PatternSchema, z.array(PrincipalSchema))]);
export type Approvers = z.infer<typeof ApproversSchema>;

/** A person signed in: what the identity provider vouched for. */
export interface Identity {
  issuer: string;
  subject: string;
  /** Only when the provider says it is verified. */
  email?: string;
  name?: string;
  groups: string[];
}

function names(principal: string, who: Identity): boolean {
  if (principal.startsWith('sub:')) return principal.slice(4) === who.subject;
  if (principal.startsWith('group:')) return who.groups.includes(principal.slice(6));
  const email = principal.startsWith('email:') ? principal.slice(6) : principal;
  return who.email !== undefined && email.toLowerCase() === who.email.toLowerCase();
}

/** Whether `who` may answer a call of `tool` under these approvers (none: nobody signs in for this tenant). */
export function mayAnswer(approvers: Approvers | undefined, who: Identity, tool: string): boolean {
  if (!approvers) return false;
  const principals = Array.isArray(approvers)
    ? approvers
    : Object.entries(approvers)
        .filter(([pattern]) => matches(pattern, tool))
        .flatMap(([, list]) => list);
  return principals.some((p) => names(p, who));
}

/** How an answer names the person in the trace: their email, else their subject at the issuer. */
export function answererName(who: Identity): string {
  return who.email ?? `${who.subject} at ${who.issuer}`;
}

/**
 * D5: whether `who` may read an owner's payloads decoded: a tenant's viewers and approvers (of any of its tools) read
 * the tenant's; the platform's own workflows (policies, limiters) only `inbox.operators`. Nobody else reads anything.
 */
export function mayRead(
  config: {
    tenants: Record<string, { viewers?: readonly string[]; approvers?: Approvers }>;
    inbox?: { operators?: readonly string[] };
  },
  who: Identity,
  owner: string,
  platform: string,
): boolean {
  const named = (list: readonly string[] | undefined) => (list ?? []).some((p) => names(p, who));
  if (owner === platform) return named(config.inbox?.operators);
  const tenant = Object.hasOwn(config.tenants, owner) ? config.tenants[owner] : undefined;
  if (!tenant) return false;
  const approvers = tenant.approvers;
  const approving = Array.isArray(approvers) ? approvers : Object.values(approvers ?? {}).flat();
  return named(tenant.viewers) || named(approving);
}
