// Routes: which incoming addresses a server receives and where that mail goes. The list
// (create, mode, delete) and one route's page, where its name, mode and endpoint change
// (PATCH .../routes/{id} takes all three).
import { del, get, patch, post } from '../../api.js';
import { actionButton, dl, form, h, link, section, table, when } from '../../ui.js';
import { adminBase, serverBase } from './base.js';

const MODES = [['endpoint', 'Deliver to an endpoint'], ['accept', 'Accept and store'], ['hold', 'Hold for review'], ['bounce', 'Bounce'], ['reject', 'Reject']];
const TYPES = [['http', 'HTTP POST'], ['smtp', 'SMTP server'], ['address', 'Email address']];

function endpointText(e) {
  if (!e) return '—';
  if (e.type === 'http') return `HTTP ${e.format || 'json'} → ${e.url}`;
  if (e.type === 'smtp') return `SMTP → ${e.host}:${e.port}`;
  if (e.type === 'address') return `Forward → ${e.address}`;
  return JSON.stringify(e);
}

function endpointTarget(e) {
  if (!e) return '';
  if (e.type === 'http') return e.url || '';
  if (e.type === 'smtp') return `${e.host}:${e.port}`;
  return e.address || '';
}

/** The endpoint object the form describes; null when its box is empty. */
function endpointFrom(v) {
  const target = v.endpoint_target.trim();
  if (!target) return null;
  if (v.endpoint_type === 'http') return { type: 'http', url: target, format: v.endpoint_format };
  if (v.endpoint_type === 'smtp') {
    const [host, port] = target.split(':');
    // A port that is not a number goes to the API as is, which names the field.
    return { type: 'smtp', host, port: port === undefined ? 25 : (/^\d+$/.test(port) ? Number(port) : port) };
  }
  return { type: 'address', address: target };
}

function endpointFields(e) {
  return [
    { name: 'endpoint_type', label: 'Endpoint type', type: 'select', options: TYPES, value: e ? e.type : 'http' },
    { name: 'endpoint_target', label: 'Endpoint (URL, host:port or address)', value: endpointTarget(e), placeholder: 'https://app.example.com/inbound' },
    { name: 'endpoint_format', label: 'HTTP format', type: 'select', options: [['json', 'JSON (parsed)'], ['raw', 'Raw MIME']], value: (e && e.format) || 'json' },
  ];
}

/** The API names endpoint.url, endpoint.port ...: show those next to the form's fields. */
async function endpointErrors(fn) {
  try {
    return await fn();
  } catch (err) {
    const f = String(err.field || '');
    if (f === 'endpoint.type') err.field = 'endpoint_type';
    else if (f === 'endpoint.format') err.field = 'endpoint_format';
    else if (f.startsWith('endpoint')) err.field = 'endpoint_target';
    throw err;
  }
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
      { label: 'Address', render: (r) => link(`${serverBase(ctx)}/routes/${r.id}`, h('code', {}, r.address || `${r.name}@${r.domain}`)) },
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
        link(`${serverBase(ctx)}/routes/${r.id}`, 'Edit', { class: 'button', 'aria-label': `Edit ${r.address || r.name}` }),
        actionButton('Delete', async () => { await del(`${base}/${r.id}`); ctx.render(); }, { kind: 'danger', confirm: `Delete route ${r.name}@${r.domain}?` })) : '') },
    ], list, { caption: 'Routes', empty: 'No route: this server receives no mail.' })),
    manage ? section('New route', null, form({
      fields: [
        { name: 'name', label: 'Local part', required: true, placeholder: 'support' },
        { name: 'domain', label: 'Domain', type: 'select', options: domains.map((d) => [d.name, `${d.name}${d.verified ? '' : ' (not verified)'}`]) },
        { name: 'mode', label: 'Mode', type: 'select', options: MODES, value: 'endpoint' },
        ...endpointFields(null),
      ],
      submit: 'Create route',
      onSubmit: async (v) => {
        const body = { name: v.name, domain: v.domain, mode: v.mode };
        const endpoint = v.mode === 'endpoint' ? endpointFrom(v) : null;
        if (endpoint) body.endpoint = endpoint;
        await endpointErrors(() => post(base, body));
        ctx.render();
      },
    })) : null);
}

export async function route(ctx) {
  const list = `${serverBase(ctx)}/routes`;
  const base = `${adminBase(ctx)}/routes/${encodeURIComponent(ctx.params.id)}`;
  const r = (await get(base)).route;
  const manage = ctx.can('routes.manage');
  return h('div', {},
    h('p', {}, link(list, '← All routes')),
    h('h1', {}, r.address || `${r.name}@${r.domain}`),
    section('Route', manage ? actionButton('Delete', async () => { await del(base); ctx.go(list); },
      { kind: 'danger', confirm: `Delete route ${r.address}?` }) : null, dl([
      ['Mode', (MODES.find(([v]) => v === r.mode) || [r.mode, r.mode])[1]],
      ['Endpoint', endpointText(r.endpoint)], ['Created', when(r.created_at)], ['Changed', when(r.updated_at)],
    ])),
    manage ? section('Change', null, form({
      fields: [
        { name: 'name', label: 'Local part', required: true, value: r.name },
        { name: 'mode', label: 'Mode', type: 'select', options: MODES, value: r.mode },
        ...endpointFields(r.endpoint),
      ],
      submit: 'Save changes',
      onSubmit: async (v) => {
        // An empty endpoint box clears the endpoint (only allowed when the mode needs none).
        await endpointErrors(() => patch(base, { name: v.name, mode: v.mode, endpoint: endpointFrom(v) }));
        ctx.go(list);
      },
    }), h('p', { class: 'help' }, 'The endpoint is kept when the mode is not "Deliver to an endpoint", so switching back reuses it.')) : null);
}
