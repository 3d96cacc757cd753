// Incoming mail: inbound messages (held ones too, retry and bypass), bounces received, and
// the routes that decide where incoming mail goes.
import { del, get, patch, post } from '../../api.js';
import { actionButton, badge, dl, form, h, link, notice, pager, section, table, when } from '../../ui.js';
import { adminBase, serverBase } from './routes.js';

const INBOUND_STATUSES = ['', 'Queued', 'Retrying', 'Delivered', 'Failed', 'Held', 'Accepted', 'Bounced'];

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
      INBOUND_STATUSES.map((s) => h('option', { value: s, selected: (q.get('status') || '') === s }, s || 'Any')))),
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
      ['Failed', 'Retrying', 'Held'].includes(m.status) ? actionButton('Retry delivery', async () => { await post(`/inbound/${id}/retry`, {}, { server: ctx.server }); ctx.render(); }) : null) : null,
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

const MODES = [['endpoint', 'Deliver to an endpoint'], ['accept', 'Accept and store'], ['hold', 'Hold for review'], ['bounce', 'Bounce'], ['reject', 'Reject']];

function endpointText(e) {
  if (!e) return '—';
  if (e.type === 'http') return `HTTP ${e.format || 'json'} → ${e.url}`;
  if (e.type === 'smtp') return `SMTP → ${e.host}:${e.port}`;
  if (e.type === 'address') return `Forward → ${e.address}`;
  return JSON.stringify(e);
}

function endpointFrom(v) {
  if (v.mode !== 'endpoint') return undefined;
  if (v.endpoint_type === 'http') return { type: 'http', url: v.endpoint_target, format: v.endpoint_format };
  if (v.endpoint_type === 'smtp') {
    const [host, port] = v.endpoint_target.split(':');
    return { type: 'smtp', host, port: Number(port || 25) };
  }
  return { type: 'address', address: v.endpoint_target };
}

export async function routes(ctx) {
  const base = `${adminBase(ctx)}/routes`;
  const [list, domains] = await Promise.all([
    get(base, { params: { per_page: 100 } }).then((d) => d.routes),
    get(`${adminBase(ctx)}/domains`, { params: { per_page: 100 } }).then((d) => d.domains),
  ]);
  const manage = ctx.can('routes.manage');
  return h('div', {}, h('h1', {}, 'Routes'),
    h('p', { class: 'sub' }, 'Which incoming addresses this server receives, and where that mail goes. A name is the local part (support, or * for any) on a verified domain.'),
    section('Routes', null, table([
      { label: 'Address', render: (r) => h('code', {}, r.address || `${r.name}@${r.domain}`) },
      { label: 'Mode', render: (r) => r.mode },
      { label: 'Endpoint', class: 'wrap', render: (r) => endpointText(r.endpoint) },
      { label: 'Actions', render: (r) => (manage ? h('span', { class: 'actions' },
        h('label', { class: 'sr-only', for: `mode-${r.id}` }, `Mode of ${r.name}`),
        (() => {
          const sel = h('select', { id: `mode-${r.id}` }, MODES.map(([v, l]) => h('option', { value: v, selected: v === r.mode }, l)));
          const err = h('span', { class: 'inline-error', role: 'alert' });
          sel.addEventListener('change', async () => {
            try { await patch(`${base}/${r.id}`, { mode: sel.value }); ctx.render(); } catch (e) { err.textContent = e.message; sel.value = r.mode; }
          });
          return h('span', {}, sel, err);
        })(),
        actionButton('Delete', async () => { await del(`${base}/${r.id}`); ctx.render(); }, { kind: 'danger', confirm: `Delete route ${r.name}@${r.domain}?` })) : '') },
    ], list, { caption: 'Routes', empty: 'No route: this server receives no mail.' })),
    manage ? section('New route', null, form({
      fields: [
        { name: 'name', label: 'Local part', required: true, placeholder: 'support' },
        { name: 'domain', label: 'Domain', type: 'select', options: domains.map((d) => [d.name, `${d.name}${d.verified ? '' : ' (not verified)'}`]) },
        { name: 'mode', label: 'Mode', type: 'select', options: MODES, value: 'endpoint' },
        { name: 'endpoint_type', label: 'Endpoint type', type: 'select', options: [['http', 'HTTP POST'], ['smtp', 'SMTP server'], ['address', 'Email address']], value: 'http' },
        { name: 'endpoint_target', label: 'Endpoint (URL, host:port or address)', placeholder: 'https://app.example.com/inbound' },
        { name: 'endpoint_format', label: 'HTTP format', type: 'select', options: [['json', 'JSON (parsed)'], ['raw', 'Raw MIME']], value: 'json' },
      ],
      submit: 'Create route',
      onSubmit: async (v) => {
        const body = { name: v.name, domain: v.domain, mode: v.mode };
        const endpoint = endpointFrom(v);
        if (endpoint) body.endpoint = endpoint;
        try {
          await post(base, body);
        } catch (err) {
          if (err.field && String(err.field).startsWith('endpoint')) err.field = 'endpoint_target';
          throw err;
        }
        ctx.render();
      },
    })) : null);
}
