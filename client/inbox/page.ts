/**
 * A8: the inbox's page, written with Hono's `html` templates (every value escaped by Hono; nothing assembled by hand):
 * the calls that wait for the signed-in person, newest first — tenant, job (linked to the Temporal UI where the
 * config says where it is), tool, its arguments (folded when large), what the policy said, how long it has waited and
 * how long it may — each with Approve, and Deny with a reason. Labels on every field, buttons a keyboard reaches, one
 * column on a phone. It follows the list live (server-sent events) without a reload.
 *
 * A11: the page runs its one script and its one stylesheet by the response's nonce (server.ts's policy); nothing
 * else on it is inline, not even a style attribute, so the policy need allow nothing else.
 */
import { html, raw } from 'hono/html';
import type { HtmlEscapedString } from 'hono/utils/html';
import type { ListedCall } from '../calls';
import { waitedInWords } from '../calls';

type Html = HtmlEscapedString | Promise<HtmlEscapedString>;

const STYLE = `
body { font-family: system-ui, sans-serif; margin: 0; color: #1b1b1b; background: #f6f6f4; }
header { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: baseline; justify-content: space-between;
  padding: .75rem 1rem; background: #20303c; color: #fff; }
header h1 { font-size: 1.1rem; margin: 0; }
header form { margin: 0; }
main { max-width: 52rem; margin: 0 auto; padding: 1rem; }
.call { background: #fff; border: 1px solid #d4d4cf; border-radius: .5rem; padding: .75rem 1rem; margin: 0 0 1rem; }
.call h2 { font-size: 1.05rem; margin: 0 0 .25rem; overflow-wrap: anywhere; }
.call dl { display: grid; grid-template-columns: max-content 1fr; gap: .2rem .75rem; margin: .5rem 0; }
.call dt { color: #555; }
.call dd { margin: 0; overflow-wrap: anywhere; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f1f1ee; padding: .5rem; margin: .25rem 0; }
.answers { display: flex; flex-wrap: wrap; gap: .75rem; align-items: end; }
.answers form { display: flex; flex-wrap: wrap; gap: .5rem; align-items: end; margin: 0; }
label { display: flex; flex-direction: column; font-size: .9rem; gap: .2rem; }
input[type=text] { min-width: 14rem; padding: .45rem; font-size: 1rem; }
button { padding: .5rem 1rem; font-size: 1rem; border-radius: .35rem; border: 1px solid #444; cursor: pointer; }
button.approve { background: #1f6f43; color: #fff; border-color: #1f6f43; }
button.deny { background: #fff; color: #8a1c1c; border-color: #8a1c1c; }
button:focus-visible, a:focus-visible, input:focus-visible { outline: 3px solid #e0a100; outline-offset: 2px; }
.flash { background: #fff7d6; border: 1px solid #e0c060; padding: .5rem 1rem; border-radius: .35rem; }
.empty { color: #555; }
ul.calls { list-style: none; padding: 0; }
h2.waiting { font-size: 1rem; }
header a, header button { color: inherit; }
header button { background: transparent; border-color: #fff; padding: .25rem .75rem; }
@media (max-width: 36rem) { .call dl { grid-template-columns: 1fr; } input[type=text] { min-width: 0; width: 100%; } }
`;

/** Arguments longer than this are folded (a <details> the person opens). */
const FOLD_CHARS = 240;

export interface PageContext {
  who: string;
  csrf: string;
  /** The Temporal UI's address of a job, when the config says where the UI is. */
  jobLink?: (jobId: string) => string;
  flash?: string;
  /** A11: the response's nonce, which the page's own script and style carry. */
  nonce?: string;
}

/** The call's arguments as the job shows them (JSON, secrets redacted), laid out to read. */
function args(call: ListedCall): Html {
  let text = call.args;
  try {
    text = JSON.stringify(JSON.parse(call.args), null, 2);
  } catch {
    // shown as the job gave it
  }
  if (text.length <= FOLD_CHARS) return html`<pre>${text}</pre>`;
  return html`<details>
    <summary>arguments (${text.length} characters)</summary>
    <pre>${text}</pre>
  </details>`;
}

function timeLeft(call: ListedCall, now: number): string {
  const left = Date.parse(call.until) - now;
  return left > 0 ? `${waitedInWords(left)} more, until ${call.until}` : 'its time is up';
}

/** One waiting call, with its answers. */
function callCard(call: ListedCall, ctx: PageContext, now: number): Html {
  const id = `${call.jobId}-${call.activityId}`.replace(/[^A-Za-z0-9_-]/g, '-');
  const job = ctx.jobLink ? html`<a href="${ctx.jobLink(call.jobId)}">${call.jobId}</a>` : html`${call.jobId}`;
  return html`<li class="call" id="call-${id}" data-key="${call.key}">
    <h2>${call.tool}</h2>
    <dl>
      <dt>tenant</dt>
      <dd>${call.tenant ?? '-'}</dd>
      <dt>job</dt>
      <dd>${job} · ${call.activityId}${call.session ? html` · session ${call.session}` : ''}</dd>
      <dt>policy</dt>
      <dd>${call.pattern}: confirm</dd>
      <dt>waiting</dt>
      <dd class="time">${waitedInWords(now - Date.parse(call.askedAt))}, since ${call.askedAt}</dd>
      <dt>may wait</dt>
      <dd class="time">${timeLeft(call, now)}</dd>
      <dt>arguments</dt>
      <dd>${args(call)}</dd>
    </dl>
    <div class="answers">
      <form method="post" action="answer">
        <input type="hidden" name="csrf" value="${ctx.csrf}" />
        <input type="hidden" name="job" value="${call.jobId}" />
        <input type="hidden" name="key" value="${call.key}" />
        <input type="hidden" name="decision" value="approve" />
        <button class="approve" type="submit" aria-label="Approve ${call.tool} of ${call.jobId}">Approve</button>
      </form>
      <form method="post" action="answer">
        <input type="hidden" name="csrf" value="${ctx.csrf}" />
        <input type="hidden" name="job" value="${call.jobId}" />
        <input type="hidden" name="key" value="${call.key}" />
        <input type="hidden" name="decision" value="deny" />
        <label for="reason-${id}"
          >Reason (the model reads it)
          <input type="text" id="reason-${id}" name="reason" maxlength="1000" autocomplete="off" />
        </label>
        <button class="deny" type="submit" aria-label="Deny ${call.tool} of ${call.jobId}">Deny</button>
      </form>
    </div>
  </li>`;
}

/** The list of calls, as the page shows it and as each live update replaces it. */
export function callList(calls: ListedCall[], ctx: PageContext, now = Date.now()): Html {
  if (!calls.length) return html`<p class="empty">Nothing waits for you.</p>`;
  return html`<ul class="calls">
    ${calls.map((c) => callCard(c, ctx, now))}
  </ul>`;
}

/**
 * The live list: each update's cards are matched to the page's by their call's key. A card that left is removed, a
 * new one put in its place, and a card still there is left as it is — its reason half-typed, its button under the
 * person's finger — only its times brought up to date.
 */
const LIVE = `
const list = document.getElementById('calls');
const events = new EventSource('events');
events.addEventListener('calls', (e) => {
  const next = document.createElement('template');
  next.innerHTML = e.data;
  const cards = [...next.content.querySelectorAll('li.call')];
  if (!cards.length) { list.replaceChildren(...next.content.childNodes); }
  else {
    let ul = list.querySelector('ul.calls');
    if (!ul) { list.replaceChildren(next.content.querySelector('ul.calls')); }
    else {
      const keep = new Map([...ul.querySelectorAll('li.call')].map((li) => [li.dataset.key, li]));
      const order = cards.map((card) => {
        const old = keep.get(card.dataset.key);
        if (!old) return card;
        keep.delete(card.dataset.key);
        const times = old.querySelectorAll('dd.time');
        card.querySelectorAll('dd.time').forEach((dd, i) => { if (times[i]) times[i].textContent = dd.textContent; });
        return old;
      });
      for (const gone of keep.values()) gone.remove();
      order.forEach((li, i) => { if (ul.children[i] !== li) ul.insertBefore(li, ul.children[i] || null); });
    }
  }
  const n = list.querySelectorAll('.call').length;
  document.title = (n ? '(' + n + ') ' : '') + 'oz0 approvals';
});
`;

/** The whole page of a signed-in person. */
export function inboxPage(calls: ListedCall[], ctx: PageContext): Html {
  return html`<!DOCTYPE html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>${calls.length ? `(${calls.length}) ` : ''}oz0 approvals</title>
        <style nonce="${ctx.nonce}">
          ${raw(STYLE)}
        </style>
      </head>
      <body>
        <header>
          <h1>oz0 approvals</h1>
          <span>signed in as ${ctx.who}</span>
          <form method="post" action="logout">
            <input type="hidden" name="csrf" value="${ctx.csrf}" /><button type="submit">Sign out</button>
          </form>
        </header>
        <main>
          ${ctx.flash ? html`<p class="flash" role="status">${ctx.flash}</p>` : ''}
          <h2 id="waiting-heading" class="waiting">Calls waiting for your answer, newest first</h2>
          <div id="calls" aria-live="polite" aria-labelledby="waiting-heading">${callList(calls, ctx)}</div>
        </main>
        <script nonce="${ctx.nonce}">
          ${raw(LIVE)};
        </script>
      </body>
    </html>`;
}

/** The page of someone not signed in. */
export function signInPage(nonce: string, why?: string): Html {
  return html`<!DOCTYPE html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>oz0 approvals: sign in</title>
        <style nonce="${nonce}">
          ${raw(STYLE)}
        </style>
      </head>
      <body>
        <header><h1>oz0 approvals</h1></header>
        <main>
          ${why ? html`<p class="flash" role="alert">${why}</p>` : ''}
          <p>Calls that wait for a person's yes are answered here by the people their tenant names.</p>
          <p><a href="login">Sign in</a></p>
        </main>
      </body>
    </html>`;
}
