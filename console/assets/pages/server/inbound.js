// Incoming mail: inbound messages (held ones too, retry and bypass) and bounces received.
// The routes that decide where incoming mail goes are in inbound_routes.js.
import { get, post } from '../../api.js';
import { actionButton, badge, dl, h, link, notice, pager, section, table, when } from '../../ui.js';
import { INBOUND_STATUSES } from '../../generated/rules.js';
import { inboundStatus, serverBase } from './base.js';

// The statuses a Retry button is offered for. Not Held: the service refuses to retry a held
// message (services/inbound.py retry); Deliver anyway is its button.
const RETRYABLE = [inboundStatus('Failed'), inboundStatus('Retrying')];

export async function inbound(ctx) {
  const q = ctx.query;
  const params = { page: Number(q.get('page') || 1) };
  if (q.get('status')) params.status = q.get('status');
  if (q.get('query')) params.query = q.get('query');
  const data = await get('/inbound', { server: ctx.server, params });
  const base = serverBase(ctx);
  const filters = h('form', { class: 'filters', role: 'search' },
    h('div', {}, h('label', { for: 'in-query' }, 'Search'), h('input', { id: 'in-query', name: 'query', type: 'search', value: q.get('query') || '' })),
    h('div', {}, h('label', { for: 'in-status' }, 'Status'), h('select', { id: 'in-status', name: 'status' },
      ['', ...INBOUND_STATUSES].map((s) => h('option', { value: s, selected: (q.get('status') || '') === s }, s || 'Any')))),
    h('button', { type: 'submit', class: 'primary' }, 'Filter'));
  filters.addEventListener('submit', (e) => {
    e.preventDefault();
    const u = new URLSearchParams([...new FormData(filters).entries()].filter(([, v]) => v));
    ctx.go(`${base}/inbound${u.toString() ? `?${u}` : ''}`);
  });
  return h('div', {}, h('h1', {}, 'Inbound'),
    h('p', { class: 'sub' }, 'Mail received for this server’s routes, and what happened to it.'),
    filters,
    table([
      { label: 'Status', render: (m) => badge(m.status) },
      { label: 'To', render: (m) => link(`${base}/inbound/${m.id}`, m.rcpt_to || '—') },
      { label: 'From', render: (m) => m.mail_from || '—' },
      { label: 'Subject', render: (m) => m.subject || '' },
      { label: 'Route', render: (m) => (m.route ? m.route.name : '—') },
      { label: 'Received', render: (m) => when(m.created_at) },
    ], data.messages, { caption: 'Inbound messages', empty: 'No incoming mail yet. Add a route to receive some.' }),
    pager(data.pagination, (p) => { const u = new URLSearchParams(q); u.set('page', p); ctx.go(`${base}/inbound?${u}`); }));
}

export async function inboundMessage(ctx) {
  const id = encodeURIComponent(ctx.params.id);
  const m = (await get(`/inbound/${id}`, { server: ctx.server })).message;
  const manage = ctx.can('messages.manage');
  return h('div', {},
    h('p', {}, link(`${serverBase(ctx)}/inbound`, '← All inbound')),
    h('h1', {}, m.subject || '(no subject)'),
    h('p', { class: 'sub' }, badge(m.status), ` from ${m.mail_from || '—'} to ${m.rcpt_to}`),
    m.status_details ? notice(m.status_details, 'info') : null,
    manage ? h('p', { class: 'actions' },
      m.held ? actionButton('Deliver anyway (bypass hold)', async () => { await post(`/inbound/${id}/bypass`, {}, { server: ctx.server }); ctx.render(); }, { kind: 'primary' }) : null,
      RETRYABLE.includes(m.status) ? actionButton('Retry delivery', async () => { await post(`/inbound/${id}/retry`, {}, { server: ctx.server }); ctx.render(); }) : null) : null,
    section('Details', null, dl([
      ['ID', String(m.id)], ['Route', m.route ? `${m.route.name} (${m.route.mode})` : '—'], ['Size', m.size != null ? `${m.size} bytes` : '—'],
      ['Attempts', String(m.attempts ?? 0)], ['Next attempt', when(m.next_attempt_at)], ['Received', when(m.created_at)],
    ])),
    section('Delivery attempts to the endpoint', null, table([
      { label: 'When', render: (d) => when(d.created_at) }, { label: 'Status', render: (d) => badge(d.status) },
      { label: 'Target', class: 'wrap', render: (d) => d.target || '—' }, { label: 'Code', render: (d) => (d.code != null ? String(d.code) : '—') },
      { label: 'Reply', class: 'wrap', render: (d) => h('code', {}, d.output || d.details || '—') },
    ], m.deliveries || [], { caption: 'Delivery attempts', empty: 'No attempt yet.' })));
}

export async function bounces(ctx) {
  const data = await get('/bounces', { server: ctx.server, params: { page: Number(ctx.query.get('page') || 1) } });
  const base = serverBase(ctx);
  return h('div', {}, h('h1', {}, 'Bounces'),
    h('p', { class: 'sub' }, 'Delivery status notifications received for messages this server sent. A hard bounce suppresses the recipient.'),
    table([
      { label: 'Recipient', render: (b) => link(`${base}/bounces/${b.id}`, b.final_recipient || b.rcpt_to || '—') },
      { label: 'Type', render: (b) => badge(b.bounce_type || 'unknown', b.bounce_type === 'hard' ? 'bad' : 'warn') },
      { label: 'Status', render: (b) => b.status_code || '—' },
      { label: 'Diagnostic', class: 'wrap', render: (b) => b.diagnostic || '' },
      { label: 'Original', render: (b) => (b.original_message_id ? link(`${base}/messages/${b.original_message_id}`, `#${b.original_message_id}`) : '—') },
      { label: 'Received', render: (b) => when(b.created_at) },
    ], data.bounces, { caption: 'Bounces', empty: 'No bounce received.' }),
    pager(data.pagination, (p) => ctx.go(`${base}/bounces?page=${p}`)));
}

export async function bounce(ctx) {
  const b = (await get(`/bounces/${encodeURIComponent(ctx.params.id)}`, { server: ctx.server })).bounce;
  const base = serverBase(ctx);
  return h('div', {}, h('p', {}, link(`${base}/bounces`, '← All bounces')),
    h('h1', {}, `Bounce for ${b.final_recipient || b.rcpt_to}`),
    section('Details', null, dl([
      ['Type', b.bounce_type || '—'], ['Action', b.action || '—'], ['Status code', b.status_code || '—'],
      ['Diagnostic', b.diagnostic || '—'], ['Remote MTA', b.remote_mta || '—'], ['Reporting MTA', b.reporting_mta || '—'],
      ['Original message', b.original_message_id ? link(`${base}/messages/${b.original_message_id}`, `#${b.original_message_id}`) : '—'],
      ['Received', when(b.created_at)],
    ])));
}
