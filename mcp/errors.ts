/** Why an attempt could not reach its server, as facts the attempt reads: error classes, never flags on an Error. */

/** Nothing of the call was sent: the server could not be started or reached. Any call may try again. */
export class NothingSent extends Error {
  override name = 'NothingSent';
}

/**
 * The call may or may not have been made: its request was sent (or the session it rode on broke) and no answer
 * came. Only a call that may be made again tries again.
 */
export class OutcomeUnknown extends Error {
  override name = 'OutcomeUnknown';
}
