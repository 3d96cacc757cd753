// Captured mail: the server's inbox of outgoing mail kept instead of sent (the installation's
// DELIVERY_RELAY=capture, or the server in Development mode), as a developer's mail catcher
// shows it: a searchable list, each message read as its recipient would (mailview.js), and
// the inbox cleared on request. Reading needs the role that reads messages; clearing, the
// one that manages them.
import { del, enc, get } from '../../api.js';
import { contentExpired, mailView } from '../../mailview.js';
import { actionButton, badge, h, link, notice, pager, table, when } from '../../ui.js';
import { serverBase } from './base.js';

const REASONS = { capture: 'captured (DELIVERY_RELAY=capture)', development: 'Development mode' };

export async function inbox(ctx) {
  const q = ctx.query;
  const page = Number(q.get('page') || 1);
  const query = q.get('query') || '';
  const data = await get('/captured', { server: ctx.server, params: { page, per_page: 25, query } });
  const base = `${serverBase(ctx)}/captured`;
  const url = (p, text) => {
    const u = new URLSearchParams();
    if (text) u.set('query', text);
    if (p > 1) u.set('page', String(p));
    const s = u.toString();
    return s ? `${base}?${s}` : base;
  };
  const search = h('form', { class: 'filters', role: 'search' },
    h('div', {}, h('label', { for: 'c-query' }, 'Search'),
      h('input', { id: 'c-query', name: 'query', type: 'search', value: query, placeholder: 'subject or address' })),
    h('button', { type: 'submit', class: 'primary' }, 'Search'),
    query ? link(base, 'Clear search') : null);
  search.addEventListener('submit', (e) => { e.preventDefault(); ctx.go(url(1, search.elements.query.value.trim())); });
  const clear = ctx.can('messages.manage') && data.pagination.total ? actionButton('Clear the inbox', async () => {
    await del('/captured', { server: ctx.server });
    ctx.go(base);
  }, { kind: 'danger', confirm: 'Remove every message from this inbox? The messages themselves stay in the message list.' }) : null;
  return h('div', {},
    h('h1', {}, 'Captured mail'),
    h('p', { class: 'sub' }, 'Mail this server sent that was kept here instead of delivered: with DELIVERY_RELAY=capture on this installation, or while the server is in Development mode. Nothing here reached its recipient.'),
    h('div', { class: 'toolbar' }, search, clear),
    table([
      { label: 'To', render: (c) => link(`${base}/${c.id}`, c.rcpt_to || '—') },
      { label: 'From', render: (c) => c.mail_from || '—' },
      { label: 'Subject', render: (c) => c.subject || h('em', {}, '(no subject)') },
      { label: 'Why', render: (c) => REASONS[c.reason] || c.reason },
      { label: 'Status', render: (c) => badge(c.status) },
      { label: 'Captured', render: (c) => when(c.created_at) },
    ], data.captured, { caption: 'Captured mail', empty: query ? 'No captured message matches.' : 'No captured mail. Messages appear here when the installation captures mail (DELIVERY_RELAY=capture, what make run does) or the server is in Development mode.' }),
    pager(data.pagination, (p) => ctx.go(url(p, query))));
}

export async function message(ctx) {
  const id = ctx.params.id;
  const base = `${serverBase(ctx)}/captured`;
  let detail;
  try {
    detail = await get(`/captured/${enc(id)}`, { server: ctx.server });
  } catch (err) {
    if (err.code !== 'ContentExpired') throw err;
    return h('div', {}, h('p', {}, link(base, '← Captured mail')), h('h1', {}, `Captured message ${id}`), contentExpired(null));
  }
  const c = detail.captured;
  return h('div', {},
    h('p', {}, link(base, '← Captured mail')),
    h('h1', {}, c.subject || '(no subject)'),
    h('p', { class: 'sub' }, `From ${c.mail_from || '—'} to ${c.rcpt_to || '—'} · ${REASONS[c.reason] || c.reason} · `,
      when(c.created_at), ' · ', link(`${serverBase(ctx)}/messages/${c.message_id}`, `message ${c.message_id}`)),
    c.reason === 'development' ? notice('Held because the server is in Development mode: never sent.', 'info') : null,
    ctx.can('messages.manage') ? h('p', {}, actionButton('Remove from the inbox', async () => {
      await del(`/captured/${enc(id)}`, { server: ctx.server });
      ctx.go(base);
    })) : null,
    await mailView(ctx, { kind: 'captured', id: c.id, base: `/captured/${enc(id)}`, content: detail.content }));
}
