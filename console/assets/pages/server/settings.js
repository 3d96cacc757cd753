// A server's settings (tracking, retention, mode, suspension, deletion) and its suppression
// list (recipients never sent to).
import { del, enc, get, patch, post } from '../../api.js';
import { actionButton, badge, form, h, link, notice, pager, plainMessage, section, table, when } from '../../ui.js';
import { FAILURE_REASONS, SUPPRESSION_REASONS } from '../../generated/rules.js';
import { adminBase, serverBase } from './base.js';
import { reputationCard } from '../reputation.js';

export async function settings(ctx) {
  const base = adminBase(ctx);
  const [srv, rep] = await Promise.all([get(base).then((d) => d.server),
    get(`${base}/reputation`).then((d) => d.reputation)]);
  const manage = ctx.can('servers.manage');
  const saved = h('div', { 'aria-live': 'polite' });
  if (!manage) {
    return h('div', {}, h('h1', {}, 'Settings'),
      notice('Only admins and owners of the organization change a server’s settings.', 'info'),
      section('Current settings', null, table([
        { label: 'Setting', render: (r) => r[0] }, { label: 'Value', render: (r) => r[1] },
      ], [['Mode', srv.mode], ['Track opens', srv.track_opens ? 'yes' : 'no'], ['Track clicks', srv.track_clicks ? 'yes' : 'no'],
        ['Keep messages', `${srv.message_retention_days} days`], ['Keep content', `${srv.content_retention_days} days`], ['Suspended', srv.suspended ? 'yes' : 'no']], { caption: 'Settings' })),
      reputationCard(rep));
  }
  // A pause by the reputation guard is lifted by instance admins only (the API says 403).
  const guardPaused = srv.suspended && srv.reputation.state === 'paused';
  const lift = guardPaused && !ctx.me.user.admin
    ? h('p', { class: 'help' }, 'Only an instance administrator can lift a pause of the reputation guard: clean the list of the addresses that bounce or complain, then ask them.')
    : actionButton(guardPaused ? 'Lift the pause' : 'Lift suspension', async () => { await post(`${base}/unsuspend`); ctx.render(); },
      { kind: 'primary', confirm: guardPaused ? 'Lift the reputation guard\'s pause? Its window restarts now.' : undefined });
  return h('div', {}, h('h1', {}, 'Settings'),
    section('Server', null, saved, form({
      fields: [
        { name: 'name', label: 'Name', value: srv.name, required: true },
        { name: 'mode', label: 'Mode', type: 'select', options: [['Live', 'Live'], ['Development', 'Development']], value: srv.mode },
        { name: 'track_opens', label: 'Track opens (HTML messages get a pixel)', type: 'checkbox', value: srv.track_opens },
        { name: 'track_clicks', label: 'Track clicks (links are rewritten)', type: 'checkbox', value: srv.track_clicks },
        { name: 'message_retention_days', label: 'Keep messages for (days)', type: 'number', value: srv.message_retention_days,
          help: 'Older messages, their raw source and tracking are deleted; statistics stay.' },
        { name: 'content_retention_days', label: 'Keep content for (days)', type: 'number', value: srv.content_retention_days,
          help: 'After this the raw source and signed copy are erased ("content expired"); the record, events and statistics stay. At most the days messages are kept.' },
      ],
      submit: 'Save settings',
      onSubmit: async (v) => {
        const days = Number(v.message_retention_days);
        const content = Number(v.content_retention_days);
        await patch(base, { ...v, message_retention_days: Number.isFinite(days) && v.message_retention_days !== '' ? days : undefined,
          content_retention_days: Number.isFinite(content) && v.content_retention_days !== '' ? content : undefined });
        saved.replaceChildren(notice('Saved.', 'success'));
      },
    })),
    ctx.me.user.admin ? await ipPoolSection(ctx, base, srv) : null,
    reputationCard(rep),
    section('Suspension', null, srv.suspended
      ? h('div', {}, notice(`Sending is suspended since ${when(srv.suspended_at)}${srv.suspension_reason ? `: ${srv.suspension_reason}` : ''}.`, 'error'),
        lift)
      : form({
        className: 'inline',
        fields: [{ name: 'reason', label: 'Reason', placeholder: 'investigating a complaint' }],
        submit: 'Suspend sending',
        onSubmit: async (v) => { await post(`${base}/suspend`, v.reason ? v : {}); ctx.render(); },
      })),
    ctx.can('data.remove') ? dataRemovalSection(ctx, base) : null,
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

// What each reason of a suppression means (the reasons are the service's: generated/rules.js).
const REASON_HELP = {
  HardBounce: 'the address bounced', SpamComplaint: 'the recipient marked mail as spam',
  Unsubscribe: 'the recipient unsubscribed', Manual: 'added by hand',
};
const FILTERS = ['query', 'reason', 'stream'];
const IMPORT_MAX = 10000; // entries per POST .../suppressions/import (the API's limit)

/** CSV rows (RFC 4180: quoted fields, doubled quotes, CRLF or LF). */
function csvRows(text) {
  const rows = [];
  let row = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { cell += '"'; i += 1; } else if (c === '"') quoted = false;
      else cell += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') { row.push(cell); cell = ''; } else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') i += 1;
      row.push(cell); rows.push(row); row = []; cell = '';
    } else cell += c;
  }
  if (cell || row.length) { row.push(cell); rows.push(row); }
  return rows.map((r) => r.map((x) => x.trim())).filter((r) => r.some(Boolean));
}

/** Import entries from CSV text: `address[,reason[,stream]]` a line, or the export's columns
 * (a header row naming address, reason, stream). */
function importEntries(text) {
  const rows = csvRows(text);
  let columns = { address: 0, reason: 1, stream: 2 };
  if (rows.length && rows[0].map((x) => x.toLowerCase()).includes('address')) {
    const header = rows.shift().map((x) => x.toLowerCase());
    columns = Object.fromEntries(['address', 'reason', 'stream'].map((k) => [k, header.indexOf(k)]));
  }
  return rows.map((r) => {
    const entry = { address: r[columns.address] || '' };
    if (columns.reason >= 0 && r[columns.reason]) entry.reason = r[columns.reason];
    if (columns.stream >= 0 && r[columns.stream]) entry.stream = r[columns.stream];
    return entry;
  });
}

export async function suppressions(ctx) {
  const base = `${adminBase(ctx)}/suppressions`;
  const q = ctx.query;
  const filters = {};
  for (const k of FILTERS) if (q.get(k)) filters[k] = q.get(k);
  const [data, streams] = await Promise.all([
    get(base, { params: { page: Number(q.get('page') || 1), ...filters } }),
    get('/streams', { server: ctx.server, params: { per_page: 100 } }).then((d) => d.streams),
  ]);
  const manage = ctx.can('suppressions.manage');
  const here = `${serverBase(ctx)}/suppressions`;
  const streamName = (permalink) => (streams.find((x) => x.permalink === permalink) || {}).name || permalink;
  const url = (params) => {
    const u = new URLSearchParams(Object.entries(params).filter(([, v]) => v));
    return u.toString() ? `${here}?${u}` : here;
  };
  const reasons = SUPPRESSION_REASONS.map((r) => [r, `${r} — ${REASON_HELP[r] || r}`]);
  const streamChoices = streams.map((x) => [x.permalink, x.name]);

  const select = (id, name, options, value) => h('select', { id, name },
    options.map(([v, l]) => h('option', { value: v, selected: (value || '') === v }, l)));
  const search = h('form', { class: 'filters', role: 'search' },
    h('div', {}, h('label', { for: 'sup-q' }, 'Address contains'), h('input', { id: 'sup-q', name: 'query', type: 'search', value: q.get('query') || '' })),
    h('div', {}, h('label', { for: 'sup-reason' }, 'Reason'), select('sup-reason', 'reason', [['', 'Any'], ...SUPPRESSION_REASONS.map((r) => [r, r])], q.get('reason'))),
    h('div', {}, h('label', { for: 'sup-stream' }, 'Stream'), select('sup-stream', 'stream', [['', 'Any'], ['all', 'Every stream'], ...streamChoices], q.get('stream'))),
    h('button', { type: 'submit' }, 'Search'),
    FILTERS.some((k) => q.get(k)) ? link(here, 'Clear filters') : null);
  search.addEventListener('submit', (e) => {
    e.preventDefault();
    ctx.go(url(Object.fromEntries(new FormData(search).entries())));
  });

  const exported = h('span', { 'aria-live': 'polite' });
  const exportButton = actionButton('Export CSV', async () => {
    // The export answers text/csv behind the session's token: fetched, then saved from a
    // blob (a plain link could not send the token).
    const blob = await get(`${base}/export`, { params: filters, file: true });
    const a = h('a', { href: URL.createObjectURL(blob), download: `suppressions-${ctx.params.server}.csv` });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
    exported.textContent = 'Downloaded.';
  });

  const importResult = h('div', { class: 'import-result', 'aria-live': 'polite' });
  const importForm = manage ? form({
    fields: [
      { name: 'file', label: 'CSV file', type: 'file', help: 'Optional: its text is imported with what is typed below.' },
      { name: 'text', label: 'Addresses', type: 'textarea', rows: 5,
        help: 'One a line: address, or address,reason,stream (the reason and stream may be left out: Manual, every stream). A file exported here imports as it is.' },
    ],
    submit: 'Import',
    onSubmit: async (v, f) => {
      const file = f.inputs.file.files && f.inputs.file.files[0];
      const text = [file ? await file.text() : '', v.text].filter(Boolean).join('\n');
      const entries = importEntries(text);
      if (!entries.length) throw Object.assign(new Error('Addresses is required.'), { field: 'text' });
      const total = { imported: 0, skipped: 0, errors: [] };
      for (let i = 0; i < entries.length; i += IMPORT_MAX) {
        const r = await post(`${base}/import`, { suppressions: entries.slice(i, i + IMPORT_MAX) });
        total.imported += r.imported;
        total.skipped += r.skipped;
        total.errors.push(...r.errors.map((e) => ({ ...e, index: e.index + i })));
      }
      await ctx.render();
      const slot = document.querySelector('#main .import-result');
      if (slot) {
        slot.replaceChildren(notice(`Imported ${total.imported}, skipped ${total.skipped}.`, 'success'),
          total.errors.length ? h('ul', {}, total.errors.map((e) => h('li', {}, `Line ${e.index + 1} (${entries[e.index] ? entries[e.index].address : ''}): ${plainMessage({ message: e.message })}`))) : null);
      }
    },
  }) : null;

  return h('div', {}, h('h1', {}, 'Suppressions'),
    h('p', { class: 'sub' }, 'Recipients this server will not send to: their messages are held. An entry applies to every stream or to one; hard failures add them automatically for a while.'),
    search,
    table([
      { label: 'Address', class: 'wrap', render: (s) => s.address },
      { label: 'Reason', render: (s) => badge(s.reason, 'role') },
      { label: 'Details', render: (s) => s.details || '—' },
      { label: 'Stream', render: (s) => (s.stream ? streamName(s.stream) : 'Every stream') },
      // Why a failure or bounce added it: the failure's reason and what it means.
      { label: 'Why', class: 'wrap', render: (s) => (s.bounce_reason ? h('span', { title: (FAILURE_REASONS[s.bounce_reason] || {}).description || '' },
        badge(s.bounce_reason.replaceAll('_', ' '), 'role'), ` ${(FAILURE_REASONS[s.bounce_reason] || {}).description || ''}`) : REASON_HELP[s.reason] || '—') },
      { label: 'Added by', render: (s) => s.origin },
      { label: 'Added', render: (s) => when(s.created_at) },
      { label: 'Expires', render: (s) => (s.expires_at ? when(s.expires_at) : 'never') },
      { label: 'Actions', render: (s) => (manage ? actionButton('Remove', async () => {
        // Only this entry: the address may have others (another stream, every stream).
        await del(`${base}/${enc(s.address)}`, { params: { stream: s.stream || 'all' } }); ctx.render();
      }) : '') },
    ], data.suppressions, { caption: 'Suppressions', empty: FILTERS.some((k) => q.get(k)) ? 'No suppression matches these filters.' : 'No suppressed recipient.' }),
    pager(data.pagination, (p) => ctx.go(url({ ...filters, page: String(p) }))),
    manage ? section('Suppress an address', null, form({
      className: 'inline',
      fields: [
        { name: 'address', label: 'Email address', type: 'email', required: true },
        { name: 'reason', label: 'Reason', type: 'select', options: reasons, value: 'Manual' },
        { name: 'details', label: 'Details', placeholder: 'asked us to stop' },
        { name: 'stream', label: 'Stream', type: 'select', options: [['', 'Every stream'], ...streamChoices], value: '' },
        { name: 'days', label: 'For days (empty: until removed)', type: 'number' },
      ],
      submit: 'Suppress',
      onSubmit: async (v) => {
        const body = { address: v.address, reason: v.reason };
        if (v.details) body.details = v.details;
        if (v.stream) body.stream = v.stream;
        if (v.days) body.days = Number(v.days);
        await post(base, body); ctx.render();
      },
    })) : null,
    section('Import and export', h('span', { class: 'actions' }, exportButton, exported),
      h('p', { class: 'help' }, `Export: the list as CSV (address, reason, stream, origin, details, created_at, expires_at), with the filters above.${manage ? ` Import: up to ${IMPORT_MAX.toLocaleString()} addresses a request; addresses already suppressed for that stream are skipped.` : ''}`),
      importResult, importForm));
}

// A data subject's request: one address's messages lose their content and personal fields
// on this server or every server of the organization (POST …/data_removal); the answer's
// counts are shown as the record of what was done.
function dataRemovalSection(ctx, base) {
  const result = h('div', { 'aria-live': 'polite', class: 'data-removal-result' });
  const orgBase = `/admin/organizations/${enc(ctx.params.org)}`;
  return section('Remove a recipient’s data', null,
    h('p', { class: 'help' }, 'Erases the content of the messages to (or from) this address and removes the address, subjects, metadata, event details, remote replies, tracking IPs and webhook history that name it. Statistics stay. Cannot be undone.'),
    form({
      fields: [
        { name: 'address', label: 'Email address', type: 'email', required: true, placeholder: 'person@example.com' },
        { name: 'scope', label: 'Where', type: 'select', value: 'server', options: [['server', 'This server'], ['organization', 'Every server of the organization']] },
        { name: 'keep_suppression', label: 'Keep it suppressed (stored as a hash, not the address)', type: 'checkbox', value: true },
      ],
      submit: 'Remove data',
      onSubmit: async (v) => {
        if (!window.confirm(`Remove everything stored about ${v.address}? This cannot be undone.`)) return;
        const path = v.scope === 'organization' ? `${orgBase}/data_removal` : `${base}/data_removal`;
        const done = (await post(path, { address: v.address, keep_suppression: !!v.keep_suppression })).data_removal;
        const rows = Object.entries(done).filter(([k]) => !['address_hash', 'scope'].includes(k));
        result.replaceChildren(notice(`Removed (${done.scope}, ${done.servers} server${done.servers === 1 ? '' : 's'}); recorded in the audit trail as ${done.address_hash}.`, 'success'),
          table([{ label: 'What', render: (r) => r[0].replaceAll('_', ' ') }, { label: 'Count', class: 'num', render: (r) => String(r[1]) }], rows, { caption: 'What was removed' }));
      },
    }), result);
}
