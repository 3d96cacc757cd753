// Messages: a filtered, server-side paged list (with a date range in the organization's time
// zone), and one message's whole story, with the message as its recipient sees it.
import { get, post } from '../../api.js';
import { contentExpired, mailView } from '../../mailview.js';
import { actionButton, badge, dl, h, link, notice, pager, section, table, timeZone, when } from '../../ui.js';
import { INCOMING_MEANINGS, INCOMING_STATUSES, OUTGOING_MEANINGS, OUTGOING_STATUSES, RETRYABLE_STATUSES } from '../../generated/rules.js';
import { messageStatus, serverBase } from './base.js';

// Whether a message's status_details is good news, bad news or neither.
const DETAILS_KIND = new Map([[messageStatus('Sent'), 'success'], [messageStatus('HardFail'), 'error']]);
const FILTERS = ['scope', 'status', 'tag', 'stream', 'query', 'from', 'until'];

// Midnight starting the day `day` (YYYY-MM-DD) in the time zone shown (the organization's;
// the browser's when it has none), as an ISO instant for the API's from/to.
function midnight(day, plusDays = 0) {
  const [y, m, d] = day.split('-').map(Number);
  const guess = Date.UTC(y, m - 1, d + plusDays);
  const zone = timeZone();
  if (!zone) return new Date(y, m - 1, d + plusDays).toISOString();
  // The zone's wall clock at `guess`, read back as if it were UTC, gives the zone's offset.
  const parts = Object.fromEntries(new Intl.DateTimeFormat('en-US', {
    timeZone: zone, hourCycle: 'h23', year: 'numeric', month: '2-digit', day: '2-digit',
    hour: '2-digit', minute: '2-digit', second: '2-digit',
  }).formatToParts(new Date(guess)).map((p) => [p.type, p.value]));
  const wall = Date.UTC(+parts.year, +parts.month - 1, +parts.day, +parts.hour, +parts.minute, +parts.second);
  return new Date(guess - (wall - guess)).toISOString();
}

// The status filter offers the statuses of the chosen direction; with both, grouped by the
// direction they belong to (Held and Bounced are statuses of either). The service's own
// vocabularies and meanings (generated/rules.js).
const EITHER = OUTGOING_STATUSES.filter((s) => INCOMING_STATUSES.includes(s));

function statusOptions(scope, chosen) {
  const opt = (s) => h('option', { value: s, selected: chosen === s }, s);
  const only = (list) => list.filter((s) => !EITHER.includes(s)).map(opt);
  const any = h('option', { value: '', selected: !chosen }, 'Any');
  if (scope === 'outgoing') return [any, ...OUTGOING_STATUSES.map(opt)];
  if (scope === 'incoming') return [any, ...INCOMING_STATUSES.map(opt)];
  return [any, h('optgroup', { label: 'Outgoing' }, only(OUTGOING_STATUSES)),
    h('optgroup', { label: 'Incoming' }, only(INCOMING_STATUSES)),
    h('optgroup', { label: 'Outgoing or incoming' }, EITHER.map(opt))];
}

function statusMeanings() {
  const list = (meanings) => dl(Object.entries(meanings).map(([s, text]) => [s, text]));
  return h('details', { class: 'meanings' }, h('summary', {}, 'What the statuses mean'),
    h('h3', {}, 'Outgoing mail'), list(OUTGOING_MEANINGS),
    h('h3', {}, 'Incoming mail (received for a route, and bounce and complaint reports)'), list(INCOMING_MEANINGS));
}

export async function list(ctx) {
  const q = ctx.query;
  const page = Number(q.get('page') || 1);
  const params = { page, per_page: 25 };
  for (const k of FILTERS) if (q.get(k) && k !== 'from' && k !== 'until') params[k] = q.get(k);
  // The range is whole days, both ends included: from the first day's midnight to the
  // midnight after the last.
  if (q.get('from')) params.from = midnight(q.get('from'));
  if (q.get('until')) params.to = midnight(q.get('until'), 1);
  const [data, streams] = await Promise.all([
    get('/messages', { server: ctx.server, params }),
    get('/streams', { server: ctx.server, params: { per_page: 100 } }).then((d) => d.streams).catch(() => []),
  ]);
  const base = serverBase(ctx);
  const url = (overrides) => {
    const u = new URLSearchParams();
    for (const k of FILTERS) if (q.get(k)) u.set(k, q.get(k));
    for (const [k, v] of Object.entries(overrides)) { if (v) u.set(k, v); else u.delete(k); }
    const s = u.toString();
    return `${base}/messages${s ? `?${s}` : ''}`;
  };
  const field = (name, label, control) => h('div', {}, h('label', { for: `f-${name}` }, label), control);
  const select = (name, options) => h('select', { id: `f-${name}`, name }, options.map(([v, l]) => h('option', { value: v, selected: (q.get(name) || '') === v }, l)));
  const filters = h('form', { class: 'filters', role: 'search' },
    field('query', 'Search', h('input', { id: 'f-query', name: 'query', type: 'search', value: q.get('query') || '', placeholder: 'subject or address' })),
    field('scope', 'Direction', select('scope', [['', 'Both'], ['outgoing', 'Outgoing'], ['incoming', 'Incoming']])),
    field('status', 'Status', h('select', { id: 'f-status', name: 'status' }, statusOptions(q.get('scope') || '', q.get('status') || ''))),
    field('stream', 'Stream', select('stream', [['', 'Any'], ...streams.map((s) => [s.permalink, s.name])])),
    field('tag', 'Tag', h('input', { id: 'f-tag', name: 'tag', value: q.get('tag') || '' })),
    field('from', 'From day', h('input', { id: 'f-from', name: 'from', type: 'date', value: q.get('from') || '' })),
    field('until', 'Until day', h('input', { id: 'f-until', name: 'until', type: 'date', value: q.get('until') || '' })),
    h('button', { type: 'submit', class: 'primary' }, 'Filter'),
    FILTERS.some((k) => q.get(k)) ? link(`${base}/messages`, 'Clear filters') : null);
  const scope = filters.querySelector('#f-scope');
  const status = filters.querySelector('#f-status');
  scope.addEventListener('change', () => status.replaceChildren(...statusOptions(scope.value, status.value)));
  filters.addEventListener('submit', (e) => {
    e.preventDefault();
    const values = Object.fromEntries(new FormData(filters).entries());
    ctx.go(url({ ...values, page: '' }));
  });
  return h('div', {},
    h('h1', {}, 'Messages'),
    filters,
    statusMeanings(),
    table([
      { label: 'Status', render: (m) => badge(m.status) },
      { label: 'To', render: (m) => link(`${base}/messages/${m.id}`, m.rcpt_to || '—') },
      { label: 'From', render: (m) => m.mail_from || '—' },
      { label: 'Subject', render: (m) => m.subject || h('em', {}, '(no subject)') },
      { label: 'Tag', render: (m) => m.tag || '' },
      { label: 'Opens / clicks', class: 'num', render: (m) => `${m.opens_count || 0} / ${m.clicks_count || 0}` },
      { label: 'Created', render: (m) => when(m.created_at) },
    ], data.messages, { caption: 'Messages', empty: FILTERS.some((k) => q.get(k)) ? 'No message matches these filters.' : 'No messages yet. Send one over the API or SMTP with a credential of this server.' }),
    pager(data.pagination, (p) => ctx.go(url({ page: String(p) }))));
}

/** The message's story in time order: its events, and its opens and clicks among them. */
function timeline(m, opens, clicks) {
  const machine = (x) => (x.likely_machine ? ` (likely a machine${x.detection ? `: ${x.detection}` : ''})` : '');
  const items = [
    ...(m.events || []).map((e) => ({ at: e.timestamp, title: e.event, details: e.details })),
    ...opens.map((o) => ({ at: o.created_at, title: 'Opened', details: `${o.ip_address || 'unknown address'}${machine(o)}` })),
    ...clicks.map((c) => ({ at: c.created_at, title: 'Clicked', details: `${c.url}${machine(c)}` })),
  ].sort((a, b) => new Date(a.at) - new Date(b.at));
  if (!items.length) return h('p', { class: 'empty' }, 'No events yet.');
  return h('ol', { class: 'timeline' }, items.map((e) => h('li', {},
    h('strong', {}, e.title), ' ', h('span', { class: 't' }, when(e.at)), e.details ? h('div', {}, e.details) : null)));
}

export async function show(ctx) {
  const id = ctx.params.id;
  const m = (await get(`/messages/${encodeURIComponent(id)}`, { server: ctx.server })).message;
  const deliveries = m.deliveries || (await get(`/messages/${id}/deliveries`, { server: ctx.server })).deliveries;
  const [opens, clicks] = m.scope === 'outgoing' ? await Promise.all([
    get(`/messages/${id}/opens`, { server: ctx.server }).then((d) => d.opens),
    get(`/messages/${id}/clicks`, { server: ctx.server }).then((d) => d.clicks),
  ]) : [[], []];
  const base = serverBase(ctx);
  const retryable = m.scope === 'outgoing' && RETRYABLE_STATUSES.includes(m.status) && ctx.can('messages.manage')
    && !m.content_expired_at;
  return h('div', {},
    h('p', {}, link(`${base}/messages`, '← All messages')),
    h('h1', {}, m.subject || '(no subject)'),
    h('p', { class: 'sub' }, badge(m.status), ` ${m.scope} · to ${m.rcpt_to}`),
    m.status_details ? notice(m.status_details, DETAILS_KIND.get(m.status) || 'info') : null,
    retryable ? h('p', {}, actionButton('Retry delivery', async () => {
      await post(`/messages/${id}/retry`, {}, { server: ctx.server }); ctx.render();
    }, { kind: 'primary' }), h('span', { class: 'help' }, ' Queues a fresh delivery; remove a suppression first if the recipient is suppressed.')) : null,
    h('div', { class: 'grid2' },
      section('Details', null, dl([
        ['ID', String(m.id)], ['Token', h('code', {}, m.token)], ['From', m.mail_from], ['To', m.rcpt_to],
        ['Message-ID', m.message_id ? h('code', {}, m.message_id) : '—'], ['Submission', String(m.submission_id ?? '—')],
        ['Stream', m.stream || '—'], ['Tag', m.tag || '—'], ['Size', m.size != null ? `${m.size} bytes` : '—'],
        ...(m.scope === 'outgoing' ? [['Return path', m.return_path ? h('code', {}, m.return_path) : '—']] : []),
        ['Attempts', String(m.attempts ?? 0)], ['Next attempt', when(m.next_attempt_at)], ['Sent', when(m.sent_at)],
        ['Created', when(m.created_at)],
        ['Metadata', m.metadata && Object.keys(m.metadata).length ? h('code', {}, JSON.stringify(m.metadata)) : '—'],
      ])),
      section('Events', null, timeline(m, opens, clicks))),
    section('Delivery attempts', null, table([
      { label: 'When', render: (d) => when(d.timestamp) },
      { label: 'Status', render: (d) => badge(d.status) },
      { label: 'Host', render: (d) => (d.source_address ? `${d.host || '—'} from ${d.source_address}` : d.host || '—') },
      { label: 'Code', render: (d) => (d.code != null ? String(d.code) : '—') },
      { label: 'SMTP reply', class: 'wrap', render: (d) => h('code', {}, d.output || d.details || '—') },
      { label: 'TLS', render: (d) => `${d.tls ? (d.tls_verified ? 'verified' : 'yes') : 'no'}${d.mta_sts ? ` (MTA-STS ${d.mta_sts})` : ''}` },
      { label: 'Time', class: 'num', render: (d) => (d.duration_ms != null ? `${d.duration_ms} ms` : '—') },
    ], deliveries, { caption: 'Delivery attempts', empty: 'No delivery attempt yet.' })),
    m.scope === 'outgoing' ? h('div', { class: 'grid2' },
      section(`Opens (${opens.length})`, null, table([
        { label: 'When', render: (o) => when(o.created_at) }, { label: 'IP', render: (o) => o.ip_address || '—' },
        { label: 'Machine', render: (o) => (o.likely_machine ? `yes (${o.detection || ''})` : 'no') },
      ], opens, { caption: 'Opens', empty: m.track_opens ? 'Not opened yet.' : 'Opens are not tracked for this message.' })),
      section(`Clicks (${clicks.length})`, null, table([
        { label: 'When', render: (c) => when(c.created_at) }, { label: 'URL', class: 'wrap', render: (c) => c.url },
        { label: 'Machine', render: (c) => (c.likely_machine ? 'yes' : 'no') },
      ], clicks, { caption: 'Clicks', empty: m.track_clicks ? 'No clicks yet.' : 'Clicks are not tracked for this message.' }))) : null,
    m.content_expired_at ? contentExpired(m.content_expired_at)
      : await mailView(ctx, { kind: 'message', id: m.id, base: `/messages/${id}` }));
}
