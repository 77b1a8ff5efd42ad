/**
 * A payload's owner — a tenant, or the platform — as its metadata names it (a stored answer names its tenant), and
 * a JSON payload's value, from which a job's spec or a call's input tells its tenant.
 */
import type { Payload } from '@temporalio/common';
import { OWNER_METADATA, isOwner } from './owners';

const decoder = new TextDecoder();

/** A payload's owner as its metadata names it, if it does. */
export function ownerOf(payload: Payload): string | undefined {
  const raw = payload.metadata?.[OWNER_METADATA];
  if (!raw) return undefined;
  const owner = decoder.decode(raw);
  return isOwner(owner) ? owner : undefined;
}

/** A JSON payload's value (a job's spec names its tenant), else undefined; read only for a job nothing was known of. */
export function jsonOf(payload: Payload): unknown {
  if (payload.metadata?.encoding && decoder.decode(payload.metadata.encoding) !== 'json/plain') return undefined;
  if (!payload.data) return undefined;
  try {
    return JSON.parse(decoder.decode(payload.data));
  } catch {
    return undefined;
  }
}
