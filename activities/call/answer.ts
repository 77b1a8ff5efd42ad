/**
 * SPEC D1-D3, the last phase of an attempt that got an answer: what the answer weighs (as its server sent it, or as
 * its transport dropped it past the bound: settle decides with that), then the answer as the job gets it — itself when
 * small, its claim in the payload store when not (data/answers.ts), so that nothing the job carries grows with it.
 * A live session's agent on this node is handed the whole answer the call already holds, not a copy read back.
 */
import type { CallToolResult } from '@modelcontextprotocol/client';
import { answerBytes } from '../../common/sizes';
import type { CallInput, CallOutput } from '../../model/activities';
import { droppedBytesOf } from '../../mcp';
import type { Answers } from '../../data';
import { resultOf, settleUnkept } from './settle';
import type { AnswerFacts, AttemptFacts, Ending } from './settle';

/** What the attempt needs of the node for its answers. */
export interface AnswerDeps {
  answers: Answers;
  /** D1: the largest answer a call may hand on (node.maxResultMiB, in bytes), and why, when not that. */
  answerBound: AnswerBound;
}

export interface AnswerBound {
  maxBytes: number;
  why?: string;
}

/** Less than Temporal's 2 MiB on a payload: room for the rest of what a call's activity answers. */
const INLINE_LIMIT = 1.9 * 1024 * 1024;

/**
 * D1: the node's bound on an answer: node.maxResultMiB; with no payload store, no more than Temporal's history takes
 * in one payload (a bigger answer would be refused there, and the call with it).
 */
export function answerBoundOf(maxResultMiB: number, stores: boolean): AnswerBound {
  const maxBytes = maxResultMiB * 1024 * 1024;
  if (stores || maxBytes <= INLINE_LIMIT) return { maxBytes };
  return {
    maxBytes: INLINE_LIMIT,
    why: 'the 1.9 MiB Temporal takes in history with no payload store (payloads.store is "off")',
  };
}

/** The whole answer behind an output whose step holds only its claim: for the live session's agent on this node. */
const wholeAnswers = new WeakMap<CallOutput, CallOutput['result']>();

export function wholeAnswerOf(out: CallOutput): CallOutput['result'] {
  return wholeAnswers.get(out) ?? out.result;
}

/** D1: an answer's size as its server sent it: what its transport counted of one it dropped, else about its bytes. */
export function sizeOf(result: CallToolResult, deps: AnswerDeps): AnswerFacts {
  const { maxBytes, why } = deps.answerBound;
  return { bytes: droppedBytesOf(result) ?? answerBytes(result), maxBytes, ...(why ? { bound: why } : {}) };
}

/** An ending that hands the job an answer, with that answer as the job's step will hold it (its claim, if stored). */
export interface Handed {
  ending: Ending;
  result?: CallOutput['result'];
  whole?: CallOutput['result'];
}

/**
 * D2, D3: the answer goes to the store when it is past the inline bound; a store that fails it fails the attempt as
 * the answer's loss (./settle.ts, settleUnkept), never silently.
 */
export async function handOn(
  deps: AnswerDeps,
  input: CallInput,
  runId: string | undefined,
  ending: Ending & { answer: CallToolResult },
  facts: Pick<AttemptFacts, 'tool' | 'key' | 'again' | 'last'> & { bytes: number },
): Promise<Handed> {
  const whole = resultOf(ending.answer);
  try {
    const at = { jobId: input.jobId, tenant: input.tenant, ...(runId ? { runId } : {}) };
    const result = await deps.answers.keep(whole, at, facts.bytes);
    return { ending, result, whole };
  } catch (err) {
    return { ending: settleUnkept(err, facts) };
  }
}

/** The output the job gets, remembering the whole answer behind a stored one. */
export function handed(out: CallOutput, whole: CallOutput['result'] | undefined): CallOutput {
  if (whole && whole !== out.result) wholeAnswers.set(out, whole);
  return out;
}
