// Webhooks: the list (create, enable/disable), and one webhook with a test send, its pending
// queue and the attempt log that says why deliveries fail.
import { del, get, patch, post } from '../../api.js';
import { actionButton, badge, dl, form, h, link, notice, pager, section, table, when } from '../../ui.js';
import { pairsEditor } from '../../pairs.js';
import { adminBase, serverBase } from './base.js';

const EVENTS = ['MessageSent', 'MessageDelayed', 'MessageDeliveryFailed', 'MessageHeld'];
// The API's limits (services/webhooks.py) and the mask it shows for a stored header value.
const MAX_HEADERS = 20;
const MASK = '••••••';

/** The custom-headers field of the create and change forms. */
function headersField(current) {
  return {
    name: 'headers', type: 'custom',
    control: pairsEditor({
      name: 'headers', label: 'Custom headers', pairs: current || {}, masked: current ? MASK : null,
      max: MAX_HEADERS, nameLabel: 'Header name', valueLabel: 'Header value', addLabel: 'Add header',
      help: current && Object.keys(current).length
        ? 'Sent with every delivery, such as a shared secret. Stored values are never shown: leave a value empty to keep it, type to replace it.'
        : `Sent with every delivery, such as a shared secret (at most ${MAX_HEADERS}). Values are stored encrypted and never shown again.`,
    }),
  };
}

// A body that says nothing: empty, or a JSON null (what some frameworks answer a 404 with).
const SAYS_NOTHING = /^\s*(null)?\s*$/;

/** What a test send found: the outcome in words, and the endpoint's answer when it said one. */
function testResult(r) {
  const answered = r.status_code != null;
  const http = `HTTP ${r.status_code}`;
  // The error of an answered failure is "HTTP 404", maybe with a note ("(redirects are not followed)").
  const note = r.error && r.error.startsWith(http) ? r.error.slice(http.length) : '';
  let outcome = `Failed: ${r.error || 'no answer'}.`;
  if (r.success) outcome = `Delivered: the endpoint answered ${http} in ${r.duration_ms} ms.`;
  else if (answered) outcome = `Failed: the endpoint answered ${http}${note} in ${r.duration_ms} ms; a delivery needs a 2xx answer.`;
  const body = r.response_body || '';
  return h('div', {}, notice(outcome, r.success ? 'success' : 'error'),
    answered ? (SAYS_NOTHING.test(body)
      ? h('p', { class: 'help' }, 'The answer had no body.')
      : h('div', {}, h('p', { class: 'help' }, 'Its answer (the first 2 KB):'), h('pre', {}, body))) : null);
}

export async function list(ctx) {
  const base = `${adminBase(ctx)}/webhooks`;
  const hooks = (await get(base, { params: { per_page: 100 } })).webhooks;
  const manage = ctx.can('webhooks.manage');
  const eventBoxes = EVENTS.map((e) => ({ name: `ev_${e}`, label: e, type: 'checkbox' }));
  return h('div', {}, h('h1', {}, 'Webhooks'),
    h('p', { class: 'sub' }, 'Signed POSTs about outgoing messages: sent, delayed, failed, held.'),
    section('Webhooks', null, table([
      { label: 'Name', render: (w) => link(`${serverBase(ctx)}/webhooks/${w.id}`, w.name || w.url) },
      { label: 'URL', class: 'wrap', render: (w) => w.url },
      { label: 'Events', render: (w) => (w.events.length ? w.events.join(', ') : 'all') },
      { label: 'State', render: (w) => (w.enabled ? badge('Enabled', 'enabled') : badge('Disabled', 'disabled')) },
      { label: 'Last used', render: (w) => when(w.last_used_at) },
      { label: 'Actions', render: (w) => (manage ? actionButton(w.enabled ? 'Disable' : 'Enable', async () => {
        await post(`${base}/${w.id}/${w.enabled ? 'disable' : 'enable'}`); ctx.render();
      }) : '') },
    ], hooks, { caption: 'Webhooks', empty: 'No webhook yet.' })),
    manage ? section('New webhook', null, form({
      fields: [
        { name: 'name', label: 'Name', placeholder: 'delivery events' },
        { name: 'url', label: 'URL', type: 'url', required: true, placeholder: 'https://app.example.com/hooks/mail' },
        ...eventBoxes,
        { name: 'sign', label: 'Sign deliveries (X-Service-Signature)', type: 'checkbox', value: true },
        headersField(null),
      ],
      submit: 'Create webhook',
      onSubmit: async (v) => {
        const body = { url: v.url, sign: v.sign, events: EVENTS.filter((e) => v[`ev_${e}`]), headers: v.headers };
        if (v.name) body.name = v.name;
        const w = (await post(base, body)).webhook;
        ctx.go(`${serverBase(ctx)}/webhooks/${w.id}`);
      },
    }), h('p', { class: 'help' }, 'No event ticked means every event.')) : null);
}

export async function show(ctx) {
  const base = `${adminBase(ctx)}/webhooks/${encodeURIComponent(ctx.params.id)}`;
  const page = Number(ctx.query.get('page') || 1);
  const [w, logs, pending] = await Promise.all([
    get(base).then((d) => d.webhook),
    get(`${base}/logs`, { params: { page } }),
    get(`${base}/requests`, { params: { per_page: 100 } }),
  ]);
  const manage = ctx.can('webhooks.manage');
  const result = h('div', { 'aria-live': 'polite' });
  return h('div', {},
    h('p', {}, link(`${serverBase(ctx)}/webhooks`, '← All webhooks')),
    h('h1', {}, w.name || 'Webhook'),
    h('p', { class: 'sub' }, w.enabled ? badge('Enabled', 'enabled') : badge('Disabled', 'disabled'), ` ${w.url}`),
    h('div', { class: 'grid2' },
      section('Configuration', manage ? [
        actionButton(w.enabled ? 'Disable' : 'Enable', async () => { await post(`${base}/${w.enabled ? 'disable' : 'enable'}`); ctx.render(); }),
        actionButton('Delete', async () => { await del(base); ctx.go(`${serverBase(ctx)}/webhooks`); }, { kind: 'danger', confirm: 'Delete this webhook and its pending deliveries?' }),
      ] : null, dl([
        ['URL', w.url], ['Events', w.events.length ? w.events.join(', ') : 'all'], ['Signed', w.sign ? 'yes' : 'no'],
        ['Headers', Object.keys(w.headers || {}).length ? Object.keys(w.headers).join(', ') : '—'],
        ['Last used', when(w.last_used_at)], ['Created', when(w.created_at)],
      ])),
      manage ? section('Test send', null,
        h('p', { class: 'help' }, 'Delivers one sample payload now, marked "test": true, signed like the real ones. Nothing is queued or logged.'),
        form({
          className: 'inline',
          fields: [{ name: 'event', label: 'Event', type: 'select', options: EVENTS.map((e) => [e, e]), value: 'MessageSent' }],
          submit: 'Send test',
          onSubmit: async (v) => {
            result.replaceChildren(h('p', { class: 'help' }, 'Sending…'));
            result.replaceChildren(testResult((await post(`${base}/test`, v)).result));
          },
        }), result) : null),
    manage ? section('Change', null, form({
      fields: [
        { name: 'name', label: 'Name', value: w.name || '' },
        { name: 'url', label: 'URL', type: 'url', required: true, value: w.url },
        ...EVENTS.map((e) => ({ name: `ev_${e}`, label: e, type: 'checkbox', value: w.events.includes(e) })),
        { name: 'sign', label: 'Sign deliveries (X-Service-Signature)', type: 'checkbox', value: w.sign },
        headersField(w.headers || {}),
      ],
      submit: 'Save changes',
      onSubmit: async (v) => {
        const body = { url: v.url, sign: v.sign, events: EVENTS.filter((e) => v[`ev_${e}`]), headers: v.headers };
        if (v.name) body.name = v.name;
        await patch(base, body);
        ctx.render();
      },
    }), h('p', { class: 'help' }, 'No event ticked means every event. The log and pending deliveries are kept.')) : null,
    section(`Pending deliveries (${pending.pagination.total})`, null, table([
      { label: 'Event', render: (r) => r.event }, { label: 'Message', render: (r) => (r.message_id ? link(`${serverBase(ctx)}/messages/${r.message_id}`, String(r.message_id)) : '—') },
      { label: 'Attempts', class: 'num', render: (r) => String(r.attempts) }, { label: 'Next attempt', render: (r) => when(r.next_attempt_at) },
    ], pending.requests, { caption: 'Pending deliveries', empty: 'Nothing waiting.' })),
    section('Attempt log', null, table([
      { label: 'When', render: (l) => when(l.created_at) },
      { label: 'Event', render: (l) => l.event },
      { label: 'Attempt', class: 'num', render: (l) => String(l.attempt) },
      { label: 'Result', render: (l) => (l.success ? badge(`${l.status_code}`, 'good') : badge(l.status_code ? String(l.status_code) : 'error', 'bad')) },
      { label: 'Response / error', class: 'wrap', render: (l) => h('code', {}, l.error || l.response_body || '—') },
      { label: 'Retry', render: (l) => (l.will_retry ? when(l.next_attempt_at) : '—') },
    ], logs.logs, { caption: 'Attempt log', empty: 'No delivery attempted yet.' }),
    pager(logs.pagination, (p) => ctx.go(`${serverBase(ctx)}/webhooks/${w.id}?page=${p}`))));
}
