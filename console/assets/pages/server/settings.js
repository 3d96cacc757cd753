// A server's settings (tracking, retention, mode, suspension, deletion) and its suppression
// list (recipients never sent to).
import { del, enc, get, patch, post } from '../../api.js';
import { actionButton, badge, form, h, notice, pager, section, table, when } from '../../ui.js';
import { adminBase, serverBase } from './base.js';

export async function settings(ctx) {
  const base = adminBase(ctx);
  const srv = (await get(base)).server;
  const manage = ctx.can('servers.manage');
  const saved = h('div', { 'aria-live': 'polite' });
  if (!manage) {
    return h('div', {}, h('h1', {}, 'Settings'),
      notice('Only admins and owners of the organization change a server’s settings.', 'info'),
      section('Current settings', null, table([
        { label: 'Setting', render: (r) => r[0] }, { label: 'Value', render: (r) => r[1] },
      ], [['Mode', srv.mode], ['Track opens', srv.track_opens ? 'yes' : 'no'], ['Track clicks', srv.track_clicks ? 'yes' : 'no'],
        ['Keep messages', `${srv.message_retention_days} days`], ['Suspended', srv.suspended ? 'yes' : 'no']], { caption: 'Settings' })));
  }
  return h('div', {}, h('h1', {}, 'Settings'),
    section('Server', null, saved, form({
      fields: [
        { name: 'name', label: 'Name', value: srv.name, required: true },
        { name: 'mode', label: 'Mode', type: 'select', options: [['Live', 'Live'], ['Development', 'Development']], value: srv.mode },
        { name: 'track_opens', label: 'Track opens (HTML messages get a pixel)', type: 'checkbox', value: srv.track_opens },
        { name: 'track_clicks', label: 'Track clicks (links are rewritten)', type: 'checkbox', value: srv.track_clicks },
        { name: 'message_retention_days', label: 'Keep messages for (days)', type: 'number', value: srv.message_retention_days,
          help: 'Older messages, their raw source and tracking are deleted; statistics stay.' },
      ],
      submit: 'Save settings',
      onSubmit: async (v) => {
        const days = Number(v.message_retention_days);
        await patch(base, { ...v, message_retention_days: Number.isFinite(days) && v.message_retention_days !== '' ? days : undefined });
        saved.replaceChildren(notice('Saved.', 'success'));
      },
    })),
    ctx.me.user.admin ? await ipPoolSection(ctx, base, srv) : null,
    section('Suspension', null, srv.suspended
      ? h('div', {}, notice(`Sending is suspended since ${when(srv.suspended_at)}${srv.suspension_reason ? `: ${srv.suspension_reason}` : ''}.`, 'error'),
        actionButton('Lift suspension', async () => { await post(`${base}/unsuspend`); ctx.render(); }, { kind: 'primary' }))
      : form({
        className: 'inline',
        fields: [{ name: 'reason', label: 'Reason', placeholder: 'investigating a complaint' }],
        submit: 'Suspend sending',
        onSubmit: async (v) => { await post(`${base}/suspend`, v.reason ? v : {}); ctx.render(); },
      })),
    section('Danger zone', null, actionButton('Delete server', async () => {
      await del(base); ctx.go(`/orgs/${enc(ctx.params.org)}`);
    }, { kind: 'danger', confirm: `Delete ${srv.name} with its domains, credentials and messages? This cannot be undone.` })));
}

async function ipPoolSection(ctx, base, srv) {
  // IP pools are instance-wide: only instance admins list them (ip_pools.read).
  const pools = (await get('/admin/ip_pools', { params: { per_page: 100 } })).ip_pools;
  const note = h('div', { 'aria-live': 'polite' });
  return section('IP pool', null, note, form({
    className: 'inline',
    fields: [{ name: 'ip_pool_id', label: 'Send from', type: 'select', value: srv.ip_pool_id ?? '',
      options: [['', 'The default pool'], ...pools.map((p) => [String(p.id), p.name])] }],
    submit: 'Assign pool',
    onSubmit: async (v) => {
      await post(`${base}/ip_pool`, { ip_pool_id: v.ip_pool_id ? Number(v.ip_pool_id) : null });
      note.replaceChildren(notice('Saved.', 'success'));
    },
  }));
}

export async function suppressions(ctx) {
  const base = `${adminBase(ctx)}/suppressions`;
  const q = ctx.query;
  const params = { page: Number(q.get('page') || 1) };
  if (q.get('query')) params.query = q.get('query');
  const data = await get(base, { params });
  const manage = ctx.can('suppressions.manage');
  const here = `${serverBase(ctx)}/suppressions`;
  const search = h('form', { class: 'filters', role: 'search' },
    h('div', {}, h('label', { for: 'sup-q' }, 'Address contains'), h('input', { id: 'sup-q', name: 'query', type: 'search', value: q.get('query') || '' })),
    h('button', { type: 'submit' }, 'Search'));
  search.addEventListener('submit', (e) => {
    e.preventDefault();
    const v = new FormData(search).get('query');
    ctx.go(v ? `${here}?query=${enc(v)}` : here);
  });
  return h('div', {}, h('h1', {}, 'Suppressions'),
    h('p', { class: 'sub' }, 'Recipients this server will not send to: their messages are held. Hard failures add them automatically for a while.'),
    search,
    table([
      { label: 'Address', render: (s) => s.address },
      { label: 'Reason', class: 'wrap', render: (s) => s.reason || '' },
      { label: 'Source', render: (s) => badge(s.source || 'manual', 'role') },
      { label: 'Added', render: (s) => when(s.created_at) },
      { label: 'Expires', render: (s) => (s.expires_at ? when(s.expires_at) : 'never') },
      { label: 'Actions', render: (s) => (manage ? actionButton('Remove', async () => { await del(`${base}/${enc(s.address)}`); ctx.render(); }) : '') },
    ], data.suppressions, { caption: 'Suppressions', empty: 'No suppressed recipient.' }),
    pager(data.pagination, (p) => ctx.go(`${here}?page=${p}${q.get('query') ? `&query=${enc(q.get('query'))}` : ''}`)),
    manage ? section('Suppress an address', null, form({
      className: 'inline',
      fields: [{ name: 'address', label: 'Email address', type: 'email', required: true }, { name: 'reason', label: 'Reason' },
        { name: 'days', label: 'For days (empty: until removed)', type: 'number' }],
      submit: 'Suppress',
      onSubmit: async (v) => {
        const body = { address: v.address };
        if (v.reason) body.reason = v.reason;
        if (v.days) body.days = Number(v.days);
        await post(base, body); ctx.render();
      },
    })) : null);
}
