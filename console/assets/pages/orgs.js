// Organizations: the list (and creating one), and one organization's servers, members and
// invitations. What the user's role cannot do is not offered.
import { enc, del, get, patch, post } from '../api.js';
import { actionButton, badge, form, h, link, notice, pager, section, shownOnce, table, when } from '../ui.js';
import { ROLES } from '../generated/rules.js';

// The roles are the service's; this is only how the role pickers describe them.
const ROLE_HELP = { viewer: 'reads', member: 'sends, domains, webhooks', admin: 'servers, credentials, people', owner: 'everything' };
const ROLE_OPTIONS = ROLES.map((role) => {
  const name = role.charAt(0).toUpperCase() + role.slice(1);
  return [role, ROLE_HELP[role] ? `${name} — ${ROLE_HELP[role]}` : name];
});

export async function organizations(ctx) {
  const page = Number(ctx.query.get('page') || 1);
  const [data, opts] = await Promise.all([
    get('/admin/organizations', { params: { page } }),
    get('/auth/options', { auth: false }).then((d) => d.options),
  ]);
  const list = data.organizations;
  const canCreate = ctx.me.user.admin || opts.organization_creation;
  const create = canCreate ? section('New organization', null, form({
    fields: [{ name: 'name', label: 'Name', required: true, placeholder: 'Acme Inc.' }],
    submit: 'Create organization',
    onSubmit: async (v) => {
      const org = (await post('/admin/organizations', v)).organization;
      await ctx.refreshMe();
      ctx.go(`/orgs/${enc(org.permalink)}`);
    },
  })) : null;
  return h('div', {},
    h('h1', {}, 'Organizations'),
    list.length ? null : notice(canCreate ? 'You belong to no organization yet. Create one below, or accept an invitation link from a colleague.' : 'You belong to no organization yet. Ask a colleague for an invitation link.', 'info'),
    table([
      { label: 'Name', render: (o) => link(`/orgs/${enc(o.permalink)}`, o.name) },
      { label: 'Permalink', render: (o) => h('code', {}, o.permalink) },
      { label: 'Your role', render: (o) => ctx.me.user.admin && !ctx.me.memberships.some((m) => m.organization.permalink === o.permalink) ? 'instance admin' : (ctx.me.memberships.find((m) => m.organization.permalink === o.permalink) || {}).role || '—' },
      { label: 'Created', render: (o) => when(o.created_at) },
    ], list, { caption: 'Organizations', empty: '' }),
    pager(data.pagination, (p) => ctx.go(`/?page=${p}`)),
    create);
}

export async function organization(ctx) {
  const org = ctx.params.org;
  const base = `/admin/organizations/${enc(org)}`;
  const [orgData, servers, members] = await Promise.all([
    get(base), get(`${base}/servers`, { params: { per_page: 100 } }), get(`${base}/members`, { params: { per_page: 100 } }),
  ]);
  const o = orgData.organization;
  const out = h('div', {}, h('h1', {}, o.name),
    h('p', { class: 'sub' }, 'Your role: ', badge(ctx.me.memberships.some((m) => m.organization.permalink === org)
      ? ctx.role : 'instance admin', 'role')));

  out.append(section('Mail servers', null,
    table([
      { label: 'Server', render: (s) => link(`/orgs/${enc(org)}/servers/${enc(s.permalink)}`, s.name) },
      { label: 'Mode', render: (s) => s.mode },
      { label: 'State', render: (s) => (s.suspended ? badge('Suspended', 'bad') : badge('Active', 'good')) },
      { label: 'Created', render: (s) => when(s.created_at) },
    ], servers.servers, { caption: 'Mail servers', empty: 'No mail server yet. A server holds domains, credentials and messages.' }),
    ctx.can('servers.manage') ? form({
      className: 'inline',
      fields: [{ name: 'name', label: 'New server name', required: true, placeholder: 'Production' },
        { name: 'mode', label: 'Mode', type: 'select', options: [['Live', 'Live'], ['Development', 'Development']], value: 'Live' }],
      submit: 'Create server',
      onSubmit: async (v) => {
        const s = (await post(`${base}/servers`, v)).server;
        ctx.go(`/orgs/${enc(org)}/servers/${enc(s.permalink)}`);
      },
    }) : null));

  const manage = ctx.can('members.manage');
  const isSelf = (m) => m.user_id === ctx.me.user.id;
  out.append(section('Members', null, table([
    { label: 'Name', render: (m) => [m.first_name, m.last_name].filter(Boolean).join(' ') || '—' },
    { label: 'Email', render: (m) => m.email_address },
    { label: 'Role', render: (m) => {
      if (!manage) return m.role;
      const sel = h('select', { 'aria-label': `Role of ${m.email_address}` }, ROLE_OPTIONS.map(([v, l]) => h('option', { value: v, selected: v === m.role }, l.split(' — ')[0])));
      const err = h('span', { class: 'inline-error', role: 'alert' });
      sel.addEventListener('change', async () => {
        err.textContent = '';
        try { await patch(`${base}/members/${m.user_id}`, { role: sel.value }); } catch (e) { err.textContent = e.message; sel.value = m.role; }
      });
      return h('span', {}, sel, err);
    } },
    { label: 'Since', render: (m) => when(m.created_at) },
    { label: 'Actions', render: (m) => (manage || isSelf(m)) ? actionButton(isSelf(m) ? 'Leave' : 'Remove', async () => {
      await del(`${base}/members/${m.user_id}`);
      if (isSelf(m)) { await ctx.refreshMe(); ctx.go('/'); } else ctx.render();
    }, { kind: 'danger', confirm: isSelf(m) ? `Leave ${o.name}?` : `Remove ${m.email_address} from ${o.name}?` }) : '' },
  ], members.members, { caption: 'Members' }),
  manage ? [
    h('h3', {}, 'Add an existing account'),
    h('p', { class: 'help' }, 'Someone who already has an account on this installation joins at once. For an address without an account, send an invitation instead.'),
    form({
      className: 'inline',
      fields: [{ name: 'email_address', label: 'Account email', type: 'email', required: true, autocomplete: 'off' },
        { name: 'role', label: 'Role', type: 'select', options: ROLE_OPTIONS, value: 'member' }],
      submit: 'Add member',
      onSubmit: async (v) => {
        try {
          await post(`${base}/members`, v);
        } catch (err) {
          // The API names user_id (an address is looked up to one): show it at the address.
          if (err.field === 'user_id' || err.field === 'email_address') {
            err.field = 'email_address';
            err.message = err.message.replace(/^user_id: /, '');
          }
          throw err;
        }
        ctx.render();
      },
    })] : null));

  if (ctx.can('invitations.read')) {
    const invites = await get(`${base}/invitations`, { params: { per_page: 100 } });
    const shown = h('div', {});
    out.append(section('Invitations', null,
      h('p', { class: 'help' }, 'The service does not email invitations: send the link yourself. It is shown once.'),
      shown,
      table([
        { label: 'Email', render: (i) => i.email_address },
        { label: 'Role', render: (i) => i.role },
        { label: 'Status', render: (i) => badge(i.status) },
        { label: 'Expires', render: (i) => when(i.expires_at) },
        { label: 'Actions', render: (i) => i.status === 'pending' && ctx.can('invitations.manage')
          ? actionButton('Revoke', async () => { await del(`${base}/invitations/${i.id}`); ctx.render(); }, { kind: 'danger' }) : '' },
      ], invites.invitations, { caption: 'Invitations', empty: 'No invitations.' }),
      ctx.can('invitations.manage') ? form({
        className: 'inline',
        fields: [{ name: 'email_address', label: 'Email address', type: 'email', required: true },
          { name: 'role', label: 'Role', type: 'select', options: ROLE_OPTIONS, value: 'member' }],
        submit: 'Invite',
        onSubmit: async (v, f) => {
          const inv = (await post(`${base}/invitations`, v)).invitation;
          const url = inv.url || `${location.origin}/invitations/${inv.token}`;
          shown.replaceChildren(shownOnce(`Invitation link for ${inv.email_address}`, url));
          f.reset();
        },
      }) : null));
  }

  if (ctx.can('organization.update')) out.append(settings(ctx, base, o));

  if (ctx.can('organization.delete')) {
    out.append(section('Danger zone', null, actionButton('Delete organization', async () => {
      await del(base); await ctx.refreshMe(); ctx.go('/');
    }, { kind: 'danger', confirm: `Delete ${o.name} with all its servers and messages? This cannot be undone.` })));
  }
  return out;
}

/** Name and time zone (the permalink in URLs stays). The zone names come from the browser. */
function settings(ctx, base, o) {
  const known = typeof Intl.supportedValuesOf === 'function' ? Intl.supportedValuesOf('timeZone') : [];
  const zones = [...new Set(['UTC', o.time_zone, ...known])];
  return section('Settings', null, form({
    fields: [
      { name: 'name', label: 'Organization name', required: true, value: o.name },
      { name: 'time_zone', label: 'Time zone', type: 'select', value: o.time_zone,
        options: zones.map((z) => [z, z.replace(/_/g, ' ')]),
        help: 'Dates on this organization’s pages are shown in this zone. The address (permalink) does not change.' },
    ],
    submit: 'Save settings',
    onSubmit: async (v) => {
      await patch(base, v);
      ctx.forgetZone();
      await ctx.refreshMe();
      await ctx.render();
    },
  }));
}
