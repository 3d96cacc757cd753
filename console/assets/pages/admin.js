// Instance administration (instance admins only): users, IP pools, admin API keys and the
// authentication audit trail.
import { del, get, patch, post } from '../api.js';
import { actionButton, badge, form, h, notice, pager, section, shownOnce, table, when } from '../ui.js';
import { signalCount, signalHealth } from './reputation.js';

export async function users(ctx) {
  const page = Number(ctx.query.get('page') || 1);
  const data = await get('/admin/users', { params: { page } });
  const shown = h('div', {});
  return h('div', {}, h('h1', {}, 'Users'), shown,
    section('Accounts', null, table([
      { label: 'Email', render: (u) => u.email_address },
      { label: 'Name', render: (u) => [u.first_name, u.last_name].filter(Boolean).join(' ') || '—' },
      { label: 'Flags', render: (u) => [u.admin ? badge('admin', 'role') : null, u.totp_enabled ? badge('2FA', 'good') : null,
        u.sso_linked ? badge('SSO', 'role') : null, u.locked_until && new Date(u.locked_until) > new Date() ? badge('locked', 'bad') : null] },
      { label: 'Last sign-in', render: (u) => when(u.last_login_at) },
      { label: 'Actions', render: (u) => h('span', { class: 'actions' },
        actionButton('Reset link', async () => {
          const r = (await post(`/admin/users/${u.id}/password_reset`)).password_reset;
          shown.replaceChildren(shownOnce(`Password reset link for ${u.email_address}`, r.reset_url || `${location.origin}/password-reset/${r.reset_token}`));
          window.scrollTo(0, 0);
        }),
        u.locked_until ? actionButton('Unlock', async () => { await patch(`/admin/users/${u.id}`, { locked: false }); ctx.render(); }) : null,
        u.id === ctx.me.user.id ? null : actionButton(u.admin ? 'Remove admin' : 'Make admin', async () => { await patch(`/admin/users/${u.id}`, { admin: !u.admin }); ctx.render(); }),
        u.id === ctx.me.user.id ? null : actionButton('Delete', async () => { await del(`/admin/users/${u.id}`); ctx.render(); }, { kind: 'danger', confirm: `Delete ${u.email_address}?` })) },
    ], data.users, { caption: 'Users' }), pager(data.pagination, (p) => ctx.go(`/admin/users?page=${p}`))),
    section('New user', null, form({
      fields: [
        { name: 'email_address', label: 'Email address', type: 'email', required: true },
        { name: 'first_name', label: 'First name' }, { name: 'last_name', label: 'Last name' },
        { name: 'password', label: 'Initial password', type: 'password', autocomplete: 'new-password', help: 'Leave empty and send a reset link instead.' },
        { name: 'admin', label: 'Instance administrator', type: 'checkbox' },
      ],
      submit: 'Create user',
      onSubmit: async (v) => {
        const body = { ...v };
        if (!body.password) delete body.password;
        await post('/admin/users', body);
        ctx.render();
      },
    })));
}

export async function ipPools(ctx) {
  const pools = (await get('/admin/ip_pools', { params: { per_page: 100 } })).ip_pools;
  const details = await Promise.all(pools.map((p) => get(`/admin/ip_pools/${p.id}`).then((d) => d.ip_pool)));
  return h('div', {}, h('h1', {}, 'IP pools'),
    h('p', { class: 'sub' }, 'Groups of sending addresses: a server in a pool (or, without one, in the default pool) sends from one of its addresses and greets with that address\'s hostname. Each address needs reverse DNS: a PTR record naming that hostname, which resolves back to the address. It is checked daily, or now with Check. Refusals that blame an address (a block list, its reputation, its reverse DNS) or its senders\' domains are counted here as they happen, so a listing shows before tenants notice it.'),
    ...details.map((p) => section(`${p.name}${p.default ? ' (default)' : ''}`,
      actionButton('Delete pool', async () => { await del(`/admin/ip_pools/${p.id}`); ctx.render(); }, { kind: 'danger', confirm: `Delete pool ${p.name}?` }),
      p.ip_addresses.length || p.relay_host ? null
        : notice('This pool has no address and no relay: mail of its servers waits (SoftFail) until you add one.', 'error'),
      table([
        { label: 'Hostname', render: (a) => a.hostname }, { label: 'IPv4', render: (a) => a.ipv4 || '—' },
        { label: 'IPv6', render: (a) => a.ipv6 || '—' }, { label: 'Priority', class: 'num', render: (a) => String(a.priority) },
        { label: 'Reverse DNS', render: reverseDns }, { label: 'Checked', render: (a) => when(a.dns_check?.checked_at) },
        { label: 'Refusals', render: (a) => signalCount(a.signals) },
        { label: 'Actions', render: (a) => h('span', { class: 'actions' },
          actionButton('Check', async () => { await get(`/admin/ip_pools/${p.id}/ip_addresses/${a.id}/check`); ctx.render(); }),
          actionButton('Remove', async () => { await del(`/admin/ip_pools/${p.id}/ip_addresses/${a.id}`); ctx.render(); }, { kind: 'danger' })) },
      ], p.ip_addresses, { caption: `Addresses of ${p.name}`, empty: 'No address in this pool.' }),
      dnsProblems(p),
      h('h3', {}, 'Refusals blaming its addresses or senders'),
      signalHealth(p.signals, `the pool ${p.name}`),
      form({
        className: 'inline',
        fields: [{ name: 'hostname', label: 'Hostname', required: true }, { name: 'ipv4', label: 'IPv4' }, { name: 'ipv6', label: 'IPv6' },
          { name: 'priority', label: 'Priority', type: 'number', value: '100' }],
        submit: 'Add address',
        onSubmit: async (v) => {
          const body = { hostname: v.hostname };
          if (v.ipv4) body.ipv4 = v.ipv4;
          if (v.ipv6) body.ipv6 = v.ipv6;
          if (v.priority) body.priority = Number(v.priority);
          await post(`/admin/ip_pools/${p.id}/ip_addresses`, body); ctx.render();
        },
      }),
      form({
        className: 'inline',
        fields: [{ name: 'relay_host', label: 'Relay host', value: p.relay_host || '', placeholder: 'host:port',
          help: 'For hosts that own none of the addresses (Lambda behind NAT): an MTA that does, e.g. the gateway\'s outbound relay.' }],
        submit: 'Save relay',
        onSubmit: async (v) => { await patch(`/admin/ip_pools/${p.id}`, { relay_host: v.relay_host || null }); ctx.render(); },
      }))),
    section('New pool', null, form({
      className: 'inline',
      fields: [{ name: 'name', label: 'Name', required: true }, { name: 'relay_host', label: 'Relay host', placeholder: 'host:port (optional)' },
        { name: 'default', label: 'Default pool', type: 'checkbox' }],
      submit: 'Create pool',
      onSubmit: async (v) => { await post('/admin/ip_pools', { ...v, relay_host: v.relay_host || null }); ctx.render(); },
    })));
}

// The last reverse-DNS check of a sending address: ok, its problems, or not checked yet.
function reverseDns(a) {
  if (!a.dns_check) return badge('not checked', 'pending');
  const n = a.dns_check.problems;
  return n ? badge(n === 1 ? '1 problem' : `${n} problems`, 'bad') : badge('ok', 'good');
}

// What is wrong with a pool's addresses, per record (PTR, forward confirmation, HELO match).
function dnsProblems(pool) {
  const rows = pool.ip_addresses.flatMap((a) => (a.dns_check?.records || [])
    .filter((r) => r.status !== 'ok').map((r) => ({ ...r, hostname: a.hostname })));
  if (!rows.length) return null;
  const label = { ptr: 'PTR record', forward: 'Resolves back', helo: 'HELO name' };
  return [h('h3', {}, 'Reverse DNS problems'), table([
    { label: 'Address', render: (r) => r.address }, { label: 'Check', render: (r) => label[r.kind] || r.kind },
    { label: 'Status', render: (r) => badge(r.status, 'bad') },
    { label: 'What to do', render: (r) => r.detail || '' },
    { label: 'Broke', render: (r) => (r.lost_at ? when(r.lost_at) : '—') },
  ], rows, { caption: `Reverse DNS problems of ${pool.name}` })];
}

export async function apiKeys(ctx) {
  const keys = (await get('/admin/admin_api_keys', { params: { per_page: 100 } })).admin_api_keys;
  const shown = h('div', {});
  return h('div', {}, h('h1', {}, 'Admin API keys'),
    h('p', { class: 'sub' }, 'Machine keys with full management access (header X-Admin-API-Key). Keep them in a secret store.'),
    shown,
    section('Keys', null, table([
      { label: 'Name', render: (k) => k.name }, { label: 'Key', render: (k) => h('code', {}, `…${k.key_hint || ''}`) },
      { label: 'State', render: (k) => (k.revoked_at ? badge('Revoked', 'revoked') : badge(k.seeded ? 'Active (seeded)' : 'Active', 'active')) },
      { label: 'Last used', render: (k) => when(k.last_used_at) }, { label: 'Created', render: (k) => when(k.created_at) },
      { label: 'Actions', render: (k) => (k.revoked_at ? '' : actionButton('Revoke', async () => { await del(`/admin/admin_api_keys/${k.id}`); ctx.render(); }, { kind: 'danger', confirm: `Revoke ${k.name}? Anything using it stops working.` })) },
    ], keys, { caption: 'Admin API keys' })),
    section('New key', null, form({
      className: 'inline',
      fields: [{ name: 'name', label: 'Name', required: true, placeholder: 'deploy pipeline' }],
      submit: 'Create key',
      onSubmit: async (v, f) => {
        const k = (await post('/admin/admin_api_keys', v)).admin_api_key;
        shown.replaceChildren(shownOnce(`Admin API key "${k.name}"`, k.key));
        f.reset();
      },
    })));
}

export async function audit(ctx) {
  const q = ctx.query;
  const params = { limit: q.get('limit') || 100 };
  if (q.get('event')) params.event = q.get('event');
  if (q.get('user_id')) params.user_id = q.get('user_id');
  const data = await get('/admin/auth_events', { params });
  const filters = form({
    className: 'inline',
    fields: [
      { name: 'event', label: 'Event', value: q.get('event') || '', placeholder: 'login_failed' },
      { name: 'user_id', label: 'User id', type: 'number', value: q.get('user_id') || '' },
      { name: 'limit', label: 'Most recent', type: 'number', value: params.limit },
    ],
    submit: 'Filter',
    onSubmit: async (v) => {
      const u = new URLSearchParams(Object.entries(v).filter(([, x]) => x));
      ctx.go(`/admin/audit?${u}`);
    },
  });
  return h('div', {}, h('h1', {}, 'Audit trail'),
    h('p', { class: 'sub' }, 'Sign-ins and failures, lockouts, 2FA and password changes, SSO, invitations, user and key administration.'),
    filters,
    table([
      { label: 'When', render: (e) => when(e.created_at) }, { label: 'Event', render: (e) => e.event },
      { label: 'Result', render: (e) => (e.success ? badge('ok', 'good') : badge('failed', 'bad')) },
      { label: 'User', render: (e) => e.email_address || (e.user_id ? `#${e.user_id}` : '—') },
      { label: 'IP', render: (e) => e.ip_address || '—' }, { label: 'Details', class: 'wrap', render: (e) => e.details || '' },
    ], data.auth_events, { caption: 'Audit trail', empty: 'No events match.' }));
}
