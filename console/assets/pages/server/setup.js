// Setting a server up: sending domains (the DNS records to publish, verify) and credentials
// (API keys and SMTP passwords, each shown once).
import { del, enc, get, patch, post } from '../../api.js';
import { actionButton, badge, copyable, dl, form, h, link, notice, section, shownOnce, table, when } from '../../ui.js';
import { adminBase, serverBase } from './base.js';
import { signalHealth } from '../reputation.js';

// What each record of a domain's dns_records is for, in the order a person publishes them.
// A record the service adds later is shown too, under its key, after these.
const RECORDS = [
  ['verification', 'Verification', 'Proves the domain is yours; needed to verify it.'],
  ['spf', 'SPF', 'Lets receivers accept mail for this domain from this service.'],
  ['dkim', 'DKIM', 'The public key receivers check each message’s signature with.'],
  ['dkim_next', 'DKIM, next key', 'The key a rotation is moving to: publish it now, beside the current one.'],
  ['return_path', 'Return path', 'Bounces come back through it, and SPF then aligns with your domain (DMARC).'],
  ['dmarc', 'DMARC (suggested)', 'A starting policy: p=none only asks for reports. Keep your own if you have one.'],
  ['tracking', 'Tracking', 'Open and click links on your own domain.'],
];

/** Every record the API lists for the domain, each name and value with a copy button. */
function dnsRecords(domain) {
  const records = domain.dns_records || {};
  // The operator publishes the report authorization in the service's zone, not the tenant.
  const known = new Set([...RECORDS.map(([key]) => key), 'dmarc_report_authorization']);
  const rows = [...RECORDS.filter(([key]) => records[key]),
    ...Object.keys(records).filter((key) => !known.has(key)).map((key) => [key, key.replace(/_/g, ' '), ''])];
  return h('ul', { class: 'dns-records', 'aria-label': `DNS records for ${domain.name}` }, rows.map(([key, purpose, help]) => {
    const rec = records[key];
    return h('li', { class: 'dns-record', dataset: { record: key } },
      h('h3', {}, purpose, ' ', badge(rec.type, 'role')),
      help ? h('p', { class: 'help' }, help) : null,
      dl([['Name', copyable(rec.name, `Copy ${purpose} record name`)],
        ['Value', copyable(rec.value, `Copy ${purpose} record value`)]]));
  }));
}

export async function domains(ctx) {
  const base = `${adminBase(ctx)}/domains`;
  const list = (await get(base, { params: { per_page: 100 } })).domains;
  const manage = ctx.can('domains.manage');
  const out = h('div', {}, h('h1', {}, 'Domains'),
    h('p', { class: 'sub' }, 'Mail can be sent from verified domains only. Publish the records at your DNS provider (the verification record is what Verify checks; DMARC\'s sends you reports), then verify.'));
  if (manage) {
    out.append(section('Add a domain', null, form({
      className: 'inline',
      fields: [{ name: 'name', label: 'Domain name', required: true, placeholder: 'example.com' }],
      submit: 'Add domain',
      onSubmit: async (v) => { await post(base, { name: v.name.trim() }); ctx.render(); },
    })));
  }
  if (!list.length) out.append(notice('No domain yet.', 'info'));
  for (const d of list) {
    const result = h('div', {});
    const actions = [];
    if (manage && !d.verified) {
      actions.push(actionButton('Verify', async () => {
        await post(`${base}/${enc(d.name)}/verify`);
        ctx.render();
      }, { kind: 'primary' }));
    }
    if (manage) {
      actions.push(actionButton('Delete', async () => { await del(`${base}/${enc(d.name)}`); ctx.render(); },
        { kind: 'danger', confirm: `Delete ${d.name}? Mail from it will be refused.` }));
    }
    out.append(h('section', { class: 'card', 'aria-labelledby': `dom-${d.id}` },
      h('div', { class: 'card-head' }, h('h2', { id: `dom-${d.id}` }, d.name, ' ', d.verified ? badge('Verified', 'verified') : badge('Not verified', 'unverified')),
        h('div', { class: 'actions' }, actions)),
      result,
      h('p', {}, link(`${serverBase(ctx)}/domains/${enc(d.name)}/dmarc`, `DMARC reports for ${d.name}`)),
      h('p', { class: 'help' }, d.verified ? `Verified ${when(d.verified_at)}. Keep the records published: receivers check SPF and DKIM on every message.` : 'Publish these records, then press Verify.'),
      h('h3', {}, 'Refusals blaming the sending IP or the domain'),
      signalHealth(d.signals, d.name),
      dnsRecords(d),
      d.dns_records.dmarc_report_authorization ? h('p', { class: 'help' },
        'DMARC reports come to this service; receivers accept that because its operator publishes ',
        h('code', {}, `${d.dns_records.dmarc_report_authorization.name} TXT "${d.dns_records.dmarc_report_authorization.value}"`),
        ' (nothing for you to publish).') : null));
  }
  return out;
}

/** Where a mail client connects, as the installation is configured (GET /auth/options). */
function smtpSettings(smtp, type) {
  const ports = [
    ...smtp.starttls_ports.map((p) => [p, `${p} — STARTTLS${p === 587 ? ' (submission, recommended)' : ''}`]),
    ...(smtp.tls_port ? [[smtp.tls_port, `${smtp.tls_port} — implicit TLS (SSL/TLS)`]] : []),
  ];
  const auth = type === 'SMTP-IP'
    ? 'None: connect from an address in the range.'
    : `AUTH PLAIN or LOGIN, any user name, the key above as password${smtp.auth_requires_tls ? ' (only after STARTTLS or on the TLS port)' : ''}.`;
  return h('div', { class: 'smtp-settings', role: 'region', 'aria-label': 'SMTP settings' },
    h('h3', {}, 'SMTP settings'),
    dl([['Host', copyable(smtp.host, 'Copy SMTP host')],
      ['Ports', h('ul', { class: 'plain' }, ports.map(([, label]) => h('li', {}, label)))],
      ['Authentication', auth]]));
}

export async function credentials(ctx) {
  const base = `${adminBase(ctx)}/credentials`;
  const list = (await get(base, { params: { per_page: 100 } })).credentials;
  const manage = ctx.can('credentials.manage');
  const out = h('div', {}, h('h1', {}, 'Credentials'),
    h('p', { class: 'sub' }, 'API credentials send over HTTP (header X-Server-API-Key); SMTP credentials are the password for SMTP submission (any user name); SMTP-IP credentials let an address range send without a password.'));
  if (manage) {
    const create = form({
      className: 'inline',
      fields: [
        { name: 'type', label: 'Type', type: 'select', options: [['API', 'API'], ['SMTP', 'SMTP'], ['SMTP-IP', 'SMTP-IP']], value: 'API' },
        { name: 'name', label: 'Name', required: true, placeholder: 'production app' },
        { name: 'ip_range', label: 'IP range', required: true, placeholder: '192.0.2.0/24',
          help: 'Addresses that may send without a password, as CIDR.' },
      ],
      submit: 'Create credential',
      onSubmit: async (v, f) => {
        const body = { type: v.type, name: v.name };
        if (v.type === 'SMTP-IP') body.ip_range = v.ip_range;
        const c = (await post(base, body)).credential;
        f.reset();
        await ctx.render();
        const box = document.querySelector('#main .once-slot');
        const smtp = c.type === 'API' ? null : (await get('/auth/options', { auth: false })).options.smtp;
        if (box) {
          box.replaceChildren(c.key ? shownOnce(`${c.type} key "${c.name}"`, c.key) : '',
            smtp ? smtpSettings(smtp, c.type) : '');
        }
      },
    });
    // The IP range belongs to SMTP-IP credentials only: offered when that type is chosen.
    const range = create.inputs.ip_range.closest('.field');
    const follow = () => { range.hidden = create.inputs.type.value !== 'SMTP-IP'; };
    create.inputs.type.addEventListener('change', follow);
    follow();
    out.append(section('New credential', null, create));
  }
  out.append(section('Credentials', null, h('div', { class: 'once-slot' }), table([
    { label: 'Name', render: (c) => c.name },
    { label: 'Type', render: (c) => c.type },
    { label: 'Key', render: (c) => (c.type === 'SMTP-IP' ? (c.ip_range || '—') : h('code', {}, `…${c.key_hint || ''}`)) },
    { label: 'State', render: (c) => (c.hold ? badge('On hold', 'held') : badge('Active', 'active')) },
    { label: 'Last used', render: (c) => when(c.last_used_at) },
    { label: 'Actions', render: (c) => (manage ? h('span', { class: 'actions' },
      actionButton(c.hold ? 'Release' : 'Hold', async () => { await patch(`${base}/${c.id}`, { hold: !c.hold }); ctx.render(); }),
      actionButton('Delete', async () => { await del(`${base}/${c.id}`); ctx.render(); }, { kind: 'danger', confirm: `Delete credential ${c.name}? Anything using it stops working.` })) : '') },
  ], list, { caption: 'Credentials', empty: 'No credential yet.' })));
  return out;
}
