/**
 * What a call carries (SPEC D), one room: the data converter every oz0 process uses — Temporal's JSON, oz0's codecs,
 * Temporal's External Storage on a folder or an S3-compatible store, a prefix per tenant (./converter.ts) — and the
 * answers a call keeps in that store (./answers.ts). The worker, the CLI, the inbox and the converter the package
 * exports for plain clients all take it from here, so a payload is stored and read one way.
 */
import type { Client } from '@temporalio/client';
import { Answers } from './answers';
import { payloadDataOf } from './converter';
import type { PayloadData, PayloadsSettings } from './converter';
import { ownerLookupOf } from './lookup';
import { valuesOf } from './payloads';
import type { Payload, SerializationContext } from '@temporalio/common';

export { Answers, AnswerUnreadable, StoredAnswerSchema } from './answers';
export type { ToolAnswer, AnswerOf, AnswerReader } from './answers';
export { payloadDataOf, whereOf } from './converter';
export type { PayloadData, PayloadsSettings } from './converter';
export { PLATFORM, PayloadOwners } from './owners';
export { UNOWNED } from './tenant-store';
export { FolderObjects } from './folder-objects';
export { newS3Client } from './s3-client';
export { sweepEveryHour, sweepFolder } from './sweep';
export { openedWith } from './payloads';
export { isSealed, open as openSealed, sealedWith } from './seal';
export type { Sealed } from './seal';
export { KeyMissing } from './keys';
export type { Swept } from './sweep';

/** A process's payloads and its answers' reader, for a config's namespace. */
export interface ProcessData extends PayloadData {
  answers: Answers;
  /** Once the process has a client: it asks Temporal whose a job is when nothing it read said so. */
  useClient(client: Client): void;
  /** Payloads read from history as their writer meant them (./payloads.ts). */
  valuesOf(payloads: Payload[], context: SerializationContext): Promise<unknown[]>;
}

export function processDataOf(
  settings: PayloadsSettings & { temporal: { namespace: string } },
  opts: { env?: NodeJS.ProcessEnv } = {},
): ProcessData {
  const data = payloadDataOf(settings, opts);
  return {
    ...data,
    answers: new Answers(data, settings.temporal.namespace),
    useClient: (client) => data.owners.lookUpWith(ownerLookupOf(client)),
    valuesOf: (payloads, context) => valuesOf(data, payloads, context),
  };
}
