/**
 * SPEC D1-D3: a tool's answer kept in the payload store by the call that got it, so that a job's trace, its
 * continue-as-new and its queries carry a claim rather than a copy, whatever its answers weigh. The answer is a payload
 * like any other — Temporal's JSON, oz0's codecs, the store's driver and its claim (./converter.ts) — filed under its
 * job and its tenant; a reader gets it whole, byte for byte, only from a store that has it, for the job's own tenant.
 */
import { StorageDriverClaim } from '@temporalio/common';
import type { Payload, SerializationContext } from '@temporalio/common';
import { z } from 'zod';
import type { StoredAnswer, ToolResult } from '../model/job';
import type { PayloadData } from './converter';
import { ownerOf } from './owner-of';
import { ANSWER_ENCODING, decodeAnswer, encodeAnswer } from './answer-bytes';
import { OWNER_METADATA } from './owners';
import { holdsOf } from '../common/sizes';
import { rootWords } from '../common/causes';

/** An answer with the `_meta` its server gave it, as a live session's agent gets it. */
export type ToolAnswer = ToolResult & { _meta?: Record<string, unknown> };

/** What reads a stored answer back whole (the H9 helper takes one). */
export type AnswerReader = Pick<Answers, 'read'>;

export const StoredAnswerSchema = z.strictObject({
  driver: z.string().min(1).max(64),
  claim: z.record(z.string(), z.string()),
  bytes: z.number().int().min(0),
  holds: z.string().max(2000),
});

/** What comes back from the store: an answer's shape (a stored answer is never stored again). */
const AnswerSchema = z.looseObject({
  isError: z.boolean(),
  content: z.array(z.unknown()),
  structuredContent: z.record(z.string(), z.unknown()).optional(),
  _meta: z.record(z.string(), z.unknown()).optional(),
});

/** A reader that cannot have an answer: no store of its name here, another tenant's, or gone. */
export class AnswerUnreadable extends Error {
  override name = 'AnswerUnreadable';
}

/** Where an answer belongs: its job (its run, when known) and its tenant. */
export interface AnswerOf {
  jobId: string;
  tenant: string;
  runId?: string;
}

export class Answers {
  constructor(
    private readonly data: PayloadData,
    private readonly namespace: string,
  ) {}

  /** Whether an answer of this size is kept in the store rather than in its step. */
  keeps(bytes: number): boolean {
    return this.data.store !== undefined && bytes > this.data.answerInlineBytes;
  }

  /** The answer as its step holds it: itself, when small or with no store; else its claim. */
  async keep(answer: ToolAnswer, at: AnswerOf, bytes: number): Promise<ToolAnswer> {
    const { store } = this.data;
    if (!store || !this.keeps(bytes)) return answer;
    this.data.owners.learn(at.jobId, at.tenant);
    // Its long strings as their own bytes (./answer-bytes.ts): JSON, even Node's own (the SDK's portable encoder takes
    // a quarter of a second for 10 MiB), scans and copies them twice. Named as its tenant's whatever its size: the
    // store files it under the tenant, and a read checks the name.
    let payload: Payload = {
      metadata: { encoding: Buffer.from(ANSWER_ENCODING), [OWNER_METADATA]: Buffer.from(at.tenant) },
      data: encodeAnswer(answer),
    };
    for (const codec of this.data.codecs) [payload] = await codec.encode([payload], this.contextOf(at));
    const target = { kind: 'workflow' as const, namespace: this.namespace, id: at.jobId, runId: at.runId, type: 'job' };
    const [claim] = await store.store({ target }, [payload]).catch((err: unknown) => {
      throw new Error(`the store ${store.whereOf(at.tenant)} refused it: ${rootWords(err)}`, { cause: err });
    });
    const stored: StoredAnswer = { driver: store.name, claim: claim.claimData, bytes, holds: holdsOf(answer) };
    return { isError: answer.isError, content: [], stored };
  }

  /** The answer whole: itself when it is not stored; else read from the store, for its job's own tenant alone. */
  async read(result: ToolAnswer, at: AnswerOf): Promise<ToolAnswer> {
    if (result.stored === undefined) return result;
    const parsed = StoredAnswerSchema.safeParse(result.stored);
    if (!parsed.success) throw new AnswerUnreadable(`a stored answer's claim is not one: ${parsed.error.message}`);
    const ref = parsed.data;
    const driver = this.data.externalStorage?.getDriver(ref.driver);
    if (!driver) {
      throw new AnswerUnreadable(
        `the answer lies in the store ${ref.driver}, and this process has ${this.data.store ? `only ${this.data.store.name}` : 'no store (payloads.store: "off")'}`,
      );
    }
    // I12: a claim names its owner's prefix and its job; a trace of one tenant never leads to another's answers.
    if (ref.claim.owner !== at.tenant || !ref.claim.key?.includes(`/wi/${keySegment(at.jobId)}/`)) {
      throw new AnswerUnreadable(`the stored answer is not one of job ${at.jobId} of ${at.tenant}`);
    }
    let [payload]: Payload[] = await driver.retrieve({}, [new StorageDriverClaim(ref.claim)]);
    for (const codec of [...this.data.codecs].reverse()) [payload] = await codec.decode([payload], this.contextOf(at));
    if (ownerOf(payload) !== at.tenant) throw new AnswerUnreadable(`the stored answer is not ${at.tenant}'s`);
    const answer = AnswerSchema.safeParse(decodeAnswer(payload) ?? this.data.payloadConverter.fromPayload(payload));
    if (!answer.success) throw new AnswerUnreadable(`the stored answer is not an answer: ${answer.error.message}`);
    return answer.data as ToolAnswer;
  }

  private contextOf(at: AnswerOf): SerializationContext {
    return { type: 'workflow', namespace: this.namespace, workflowId: at.jobId };
  }
}

/** A key segment as Temporal's S3 driver writes it (percent-encoded, `~` too). */
function keySegment(value: string): string {
  return encodeURIComponent(value).replace(/~/g, '%7E');
}
