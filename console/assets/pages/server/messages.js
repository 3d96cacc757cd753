// Messages: a filtered, server-side paged list, and one message's whole story.
import { get, post } from '../../api.js';
import { actionButton, badge, dl, h, link, notice, pager, section, table, when } from '../../ui.js';
import { MESSAGE_STATUSES, RETRYABLE_STATUSES } from '../../generated/rules.js';
import { messageStatus, serverBase } from './base.js';

// Whether a message's status_details is good news, bad news or neither.
const DETAILS_KIND = new Map([[messageStatus('Sent'), 'success'], [messageStatus('HardFail'), 'error']]);
const FILTERS = ['scope', 'status', 'tag', 'stream', 'query'];

export async function list(ctx) {
  const q = ctx.query;
  const page = Number(q.get('page') || 1);
  const params = { page, per_page: 25 };
  for (const k of FILTERS) if (q.get(k)) params[k] = q.get(k);
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
    field('status', 'Status', select('status', [['', 'Any'], ...MESSAGE_STATUSES.map((s) => [s, s])])),
    field('scope', 'Direction', select('scope', [['', 'Both'], ['outgoing', 'Outgoing'], ['incoming', 'Incoming']])),
    field('stream', 'Stream', select('stream', [['', 'Any'], ...streams.map((s) => [s.permalink, s.name])])),
    field('tag', 'Tag', h('input', { id: 'f-tag', name: 'tag', value: q.get('tag') || '' })),
    h('button', { type: 'submit', class: 'primary' }, 'Filter'),
    FILTERS.some((k) => q.get(k)) ? link(`${base}/messages`, 'Clear filters') : null);
  filters.addEventListener('submit', (e) => {
    e.preventDefault();
    const values = Object.fromEntries(new FormData(filters).entries());
    ctx.go(url({ ...values, page: '' }));
  });
  return h('div', {},
    h('h1', {}, 'Messages'),
    filters,
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

export async function show(ctx) {
  const id = ctx.params.id;
  const m = (await get(`/messages/${encodeURIComponent(id)}`, { server: ctx.server })).message;
  const deliveries = m.deliveries || (await get(`/messages/${id}/deliveries`, { server: ctx.server })).deliveries;
  const [opens, clicks] = m.scope === 'outgoing' ? await Promise.all([
    get(`/messages/${id}/opens`, { server: ctx.server }).then((d) => d.opens),
    get(`/messages/${id}/clicks`, { server: ctx.server }).then((d) => d.clicks),
  ]) : [[], []];
  const base = serverBase(ctx);
  const raw = h('div', {});
  const retryable = m.scope === 'outgoing' && RETRYABLE_STATUSES.includes(m.status) && ctx.can('messages.manage');
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
        ['Attempts', String(m.attempts ?? 0)], ['Next attempt', when(m.next_attempt_at)], ['Sent', when(m.sent_at)],
        ['Created', when(m.created_at)],
        ['Metadata', m.metadata && Object.keys(m.metadata).length ? h('code', {}, JSON.stringify(m.metadata)) : '—'],
      ])),
      section('Events', null, (m.events || []).length
        ? h('ol', { class: 'timeline' }, m.events.map((e) => h('li', {}, h('strong', {}, e.event), ' ', h('span', { class: 't' }, when(e.timestamp)), e.details ? h('div', {}, e.details) : null)))
        : h('p', { class: 'empty' }, 'No events yet.'))),
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
    section('Raw source', h('button', { type: 'button', onclick: async (e) => {
      e.target.disabled = true;
      try {
        const r = await get(`/messages/${id}/raw`, { server: ctx.server });
        raw.replaceChildren(h('p', { class: 'help' }, `${r.size} bytes${r.signed ? ', exactly as sent (DKIM-signed)' : ', as stored before sending'}.`), h('pre', {}, r.raw));
      } catch (err) { raw.replaceChildren(notice(err.message, 'error')); e.target.disabled = false; }
    } }, 'Show raw source'), raw));
}
