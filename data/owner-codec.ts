/**
 * The first of oz0's payload codecs: each payload it encodes that will go to the store names its owner — a tenant, or
 * the platform — in its metadata, so that the store files it under that tenant's prefix (SPEC D2) and every process
 * that reads it learns whose job it is (./owners.ts). A payload that stays in history is left as it was: the Temporal
 * UI and CLI show a payload with metadata of another's as raw bytes. A payload whose owner cannot be told goes on
 * unnamed, and the store keeps it apart.
 */
import type { Payload, PayloadCodec, SerializationContext } from '@temporalio/common';
import { OWNER_METADATA, isOwner } from './owners';
import type { PayloadOwners } from './owners';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A payload's owner as its metadata names it, if it does. */
export function ownerOf(payload: Payload): string | undefined {
  const raw = payload.metadata?.[OWNER_METADATA];
  if (!raw) return undefined;
  const owner = decoder.decode(raw);
  return isOwner(owner) ? owner : undefined;
}

/** The workflow a payload belongs to, as Temporal's serialization context says. */
export function workflowOf(context?: SerializationContext): string | undefined {
  return context?.workflowId || undefined;
}

/** Bytes a payload's encoding adds to its data and metadata, and a margin: a payload near the threshold is named. */
const MARGIN = 1024;

export class OwnerCodec implements PayloadCodec {
  constructor(
    private readonly owners: PayloadOwners,
    /** A payload this big or bigger goes to the store (Temporal's External Storage threshold). */
    private readonly storedFrom: number,
  ) {}

  async encode(payloads: Payload[], context?: SerializationContext): Promise<Payload[]> {
    const workflowId = workflowOf(context);
    if (!workflowId || !payloads.some((p) => this.stored(p))) return payloads;
    const owner = await this.owners.of(workflowId, () => payloads.map(jsonOf));
    if (!owner) return payloads;
    const named = encoder.encode(owner);
    return payloads.map((p) => (this.stored(p) ? { ...p, metadata: { ...p.metadata, [OWNER_METADATA]: named } } : p));
  }

  /** Whether a payload will go to the store, about: its data and metadata past the threshold, less a margin. */
  private stored(payload: Payload): boolean {
    let bytes = payload.data?.length ?? 0;
    for (const [key, value] of Object.entries(payload.metadata ?? {})) bytes += key.length + (value?.length ?? 0);
    return bytes + MARGIN >= this.storedFrom;
  }

  async decode(payloads: Payload[], context?: SerializationContext): Promise<Payload[]> {
    const workflowId = workflowOf(context);
    if (workflowId) {
      for (const payload of payloads) {
        const owner = ownerOf(payload);
        if (owner) this.owners.learn(workflowId, owner);
      }
    }
    return payloads;
  }
}

/** A JSON payload's value (a job's spec names its tenant), else undefined; read only for a job nothing was known of. */
function jsonOf(payload: Payload): unknown {
  if (payload.metadata?.encoding && decoder.decode(payload.metadata.encoding) !== 'json/plain') return undefined;
  if (!payload.data) return undefined;
  try {
    return JSON.parse(decoder.decode(payload.data));
  } catch {
    return undefined;
  }
}
