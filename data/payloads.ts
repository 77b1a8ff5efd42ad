/**
 * Payloads read outside the SDK's own paths — a run's start event read from history (`oz0 job trace` walking a job's
 * runs) — the way the SDK reads them: each claim from its store, then oz0's codecs, then Temporal's JSON. A claim of a
 * store this process lacks fails the read, naming the store.
 */
import {
  ExternalStorageRunner,
  decode,
  decodeReferencePayload,
  isReferencePayload,
} from '@temporalio/common/lib/internal-non-workflow';
import type { LoadedDataConverter, Payload, SerializationContext } from '@temporalio/common';
import type { PayloadData } from './converter';

/** The values of payloads as their writer meant them. */
export async function valuesOf(
  data: PayloadData,
  payloads: Payload[],
  context: SerializationContext,
): Promise<unknown[]> {
  const retrieved = await retrievedFrom(data, payloads);
  const decoded = await decode(data.codecs, retrieved, context);
  return decoded.map((p) => data.payloadConverter.fromPayload(p));
}

async function retrievedFrom(data: PayloadData, payloads: Payload[]): Promise<Payload[]> {
  const references = payloads.filter(isReferencePayload);
  if (references.length === 0) return payloads;
  for (const ref of references) {
    const { driverName } = decodeReferencePayload(ref);
    if (!data.externalStorage?.getDriver(driverName)) {
      throw new Error(
        `a payload lies in the store ${driverName}, and this process has ${data.store ? `only ${data.store.name}` : 'no store (payloads.store: "off")'}`,
      );
    }
  }
  return new ExternalStorageRunner(data.externalStorage!).retrieve(payloads);
}

/**
 * Payloads read from history by hand, opened the way a client's own reads open them (its store's claims retrieved,
 * its codecs undone): for code that reads a history or a description raw (a policy watch, a call's heartbeat).
 */
export async function openedWith(
  converter: LoadedDataConverter,
  payloads: Payload[],
  context: SerializationContext,
): Promise<Payload[]> {
  const retrieved =
    converter.externalStorage && payloads.some(isReferencePayload)
      ? await new ExternalStorageRunner(converter.externalStorage).retrieve(payloads)
      : payloads;
  return decode(converter.payloadCodecs, retrieved, context);
}
