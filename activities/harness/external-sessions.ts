/**
 * I14: external sessions' tokens at the gateway. A session token is taken by any node's gateway: its job is asked
 * whether the token's digest is the one its starter gave for the session open (or next) in it, and the holder made for
 * it is asked again while it serves, so the token answers 401 once its session has ended.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@temporalio/client';
import type { Logger } from '../../common/logger';
import { SessionUpdateError, offered } from '../../common/session-client';
import { jobOfSessionToken, sameDigest, sessionTokenDigest } from '../../common/session-token';
import { externalSessionQuery, openSessionUpdate } from '../../model/messages';
import type { HarnessEntry, Holder } from './holder';
import { tokenId } from './holder';

/** I14: how long a request with an external session's token waits for its job to reach that session. */
const EXTERNAL_WAIT_MS = 20_000;
/** I14: how often an external session's holder asks its job again whether the session is still the one open. */
const EXTERNAL_CHECK_MS = 2_000;

/** The external sessions' tokens a gateway takes: each looked up in its job, and its holder checked while it serves. */
export class ExternalSessions {
  /** I14: external sessions' tokens being looked up, by token id: one lookup (and one open) per token at once. */
  private readonly looking = new Map<string, Promise<Holder | undefined>>();

  constructor(
    private readonly deps: {
      client: Client;
      logger: Logger;
      /** Serves a token's run (the gateway's holders). */
      hold(token: string, entry: HarnessEntry): Holder;
      /** Lets a holder go: its token answers 401. */
      release(holder: Holder): Promise<void>;
    },
  ) {}

  /**
   * I14: the holder of an external session's token: its job asked (any node's gateway can), the token's digest held
   * against the one its starter gave the job, and the session opened if it waits (`openSession`, as the Temporal
   * helper does). A token for a session still ahead in its job waits for it, up to {@link EXTERNAL_WAIT_MS}; any
   * other token, a job that does not answer, or a session already ended is undefined (401).
   */
  externalHolder(token: string): Promise<Holder | undefined> {
    const id = tokenId(token);
    let looking = this.looking.get(id);
    if (!looking) {
      looking = this.lookUp(token)
        .catch((err: unknown) => {
          this.deps.logger.debug({ err: (err as Error).message }, 'gateway: an external session’s token not taken');
          return undefined;
        })
        .finally(() => this.looking.delete(id));
      this.looking.set(id, looking);
    }
    return looking;
  }

  private async lookUp(token: string): Promise<Holder | undefined> {
    const jobId = jobOfSessionToken(token);
    if (!jobId) return undefined;
    const digest = sessionTokenDigest(token);
    const handle = this.deps.client.workflow.getHandle(jobId);
    const until = Date.now() + EXTERNAL_WAIT_MS;
    for (;;) {
      const state = await handle.query(externalSessionQuery);
      const current = state.current;
      if (current?.digest && sameDigest(current.digest, digest)) {
        let { session, run } = current;
        if (!current.open) {
          try {
            ({ session, run } = await offered(() =>
              handle.executeUpdate(openSessionUpdate, { args: [{ client: 'its agent, through a gateway (I14)' }] }),
            ));
          } catch (err) {
            // Another gateway is opening it: asked again in a moment.
            if (!(err instanceof SessionUpdateError) || Date.now() > until) throw err;
            await sleep(200);
            continue;
          }
        }
        const holder = this.deps.hold(token, {
          jobId,
          tenant: state.tenant,
          session,
          sessionRun: run,
          harness: '(external)',
          patterns: ['*'],
          external: true,
        });
        this.deps.logger.info({ jobId, session, sessionRun: run }, 'gateway: an external session’s agent came in');
        return holder;
      }
      if (!state.ahead.some((d) => sameDigest(d, digest)) || Date.now() > until) return undefined;
      await sleep(1000);
    }
  }

  /** I14: whether an external session's holder still holds the session open now (asked again every 2 s at most). */
  async stillOpen(holder: Holder): Promise<boolean> {
    if (holder.closed) return false;
    if (Date.now() - holder.checkedAt < EXTERNAL_CHECK_MS) return true;
    const { jobId, session, sessionRun } = holder.entry;
    const state = await this.deps.client.workflow
      .getHandle(jobId)
      .query(externalSessionQuery)
      .catch(() => undefined);
    const c = state?.current;
    if (c?.open && c.session === session && c.run === sessionRun) {
      holder.checkedAt = Date.now();
      return true;
    }
    void this.deps.release(holder);
    return false;
  }
}
