// A domain's DMARC aggregate reports (…/domains/{name}/dmarc_*): the pass rate per UTC day,
// the sources that sent as the domain (ours or not, failing ones highlighted) and the reports.
import { enc, get } from '../../api.js';
import { badge, barChart, copyable, h, link, notice, pager, section, table, tabs, when } from '../../ui.js';
import { adminBase, serverBase } from './base.js';

const RANGES = { '7d': [7, 'Last 7 days'], '30d': [30, 'Last 30 days'], '90d': [90, 'Last 90 days'] };
const SERIES = [{ key: 'passed', label: 'Passed DMARC', class: 'sent' }, { key: 'failed', label: 'Failed DMARC', class: 'failed' }];

const rate = (passed, total) => (total ? `${Math.round((passed / total) * 1000) / 10}%` : '—');
const day = (value) => new Date(value).toLocaleDateString(undefined, { dateStyle: 'medium', timeZone: 'UTC' });

function stat(n, label) { return h('div', { class: 'stat' }, h('span', { class: 'n' }, String(n)), h('span', { class: 'l' }, label)); }

// Failing alignment is what a tenant acts on: an unknown source is a forgotten sender or a
// spoofer; one of ours means our signing or return path is not set up for the domain.
function verdict(s) {
  if (!s.failed) return badge('Passing', 'good');
  return s.ours ? badge('Ours, failing alignment', 'warn') : badge('Unknown sender, failing', 'bad');
}

export async function dmarc(ctx) {
  const { name } = ctx.params;
  const range = RANGES[ctx.query.get('range')] ? ctx.query.get('range') : '30d';
  const [days, rangeLabel] = RANGES[range];
  const page = Math.max(1, Number(ctx.query.get('page')) || 1);
  const today = new Date();
  // Whole UTC days: the reports' periods begin on them.
  const from = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() - days + 1)).toISOString().replace(/\.\d+Z$/, 'Z');
  const base = `${adminBase(ctx)}/domains/${enc(name)}`;
  const here = `${serverBase(ctx)}/domains/${enc(name)}/dmarc`;
  const [summary, sources, reports] = await Promise.all([
    get(`${base}/dmarc_summary`, { params: { from } }).then((d) => d.dmarc_summary),
    get(`${base}/dmarc_sources`, { params: { from, per_page: 100 } }),
    get(`${base}/dmarc_reports`, { params: { from, page, per_page: 25 } }),
  ]);
  const t = summary.totals;
  const out = h('div', {},
    h('p', { class: 'sub' }, link(`${serverBase(ctx)}/domains`, '← Domains')),
    h('h1', {}, `DMARC reports for ${name}`),
    h('p', { class: 'sub' }, 'Mailbox providers report daily which addresses sent mail as this domain and whether SPF and DKIM passed aligned with it. Reports come to ',
      copyable(summary.report_address, 'Copy report address'), ' (the rua of the suggested DMARC record).'),
    tabs(Object.entries(RANGES).map(([k, v]) => [`${here}?range=${k}`, v[1]]), `${here}?range=${range}`));
  if (!t.reports) {
    out.append(notice(`No report in this range. Publish the DMARC record shown on the Domains page; receivers send their first reports a day after they see it.`, 'info'));
    return out;
  }
  out.append(h('div', { class: 'stats' },
    stat(rate(t.passed, t.messages), 'pass DMARC'), stat(t.messages, 'messages'), stat(t.failed, 'failed'),
    stat(t.sources, 'sources'), stat(t.reports, 'reports')));
  out.append(section(`Pass rate · ${rangeLabel}`, null,
    barChart(summary.buckets, SERIES, { title: `Messages passing and failing DMARC per UTC day, ${rangeLabel.toLowerCase()}` }),
    h('ul', { class: 'plain help', 'aria-label': 'Pass rate per day' }, summary.buckets.filter((b) => b.messages).map((b) =>
      h('li', {}, `${day(b.start)}: ${rate(b.passed, b.messages)} of ${b.messages} passed`)))));

  const rows = sources.dmarc_sources;
  const failingUnknown = rows.filter((s) => s.failed && !s.ours).length;
  const failingOurs = rows.filter((s) => s.failed && s.ours).length;
  out.append(section('Sources', null,
    failingUnknown ? notice(`${failingUnknown} source(s) that are not ours sent mail as ${name} that failed DMARC: a service you forgot to set up (sign its mail with your domain's DKIM key, or send it through this service), or someone spoofing the domain. Move to p=quarantine or p=reject once only your own sources remain.`, 'warn') : null,
    failingOurs ? notice(`${failingOurs} of our own sending address(es) failed alignment: check that the DKIM record of ${name} is published and verified.`, 'warn') : null,
    table([
      { label: 'Source', render: (s) => h('span', {}, h('code', {}, s.source_ip), ' ', s.ours ? badge(`Ours · ${s.known_as}`, 'active') : badge('Not ours', 'unverified')) },
      { label: 'Messages', class: 'num', render: (s) => String(s.messages) },
      { label: 'Passed', class: 'num', render: (s) => String(s.passed) },
      { label: 'Failed', class: 'num', render: (s) => String(s.failed) },
      { label: 'SPF aligned', class: 'num', render: (s) => String(s.spf_aligned) },
      { label: 'DKIM aligned', class: 'num', render: (s) => String(s.dkim_aligned) },
      { label: 'Reported by', render: (s) => s.reporters.join(', ') },
      { label: 'Status', render: verdict },
    ], rows, { caption: `Sources of mail as ${name}`, rowClass: (s) => (s.failed ? (s.ours ? 'fail-ours' : 'fail-unknown') : null) }),
    sources.pagination.total > rows.length ? h('p', { class: 'help' }, `The ${rows.length} sources with the most messages of ${sources.pagination.total}.`) : null));

  const go = (p) => ctx.go(`${here}?range=${range}&page=${p}`);
  out.append(section('Reports', null, table([
    { label: 'Reporter', render: (r) => h('span', {}, r.reporter, r.reporter_email ? h('span', { class: 'help' }, ` ${r.reporter_email}`) : null) },
    // An end at midnight closes the day before (Microsoft's periods end at 00:00:00).
    { label: 'Period (UTC)', render: (r) => { const last = day(new Date(r.end_at) - 1000); return `${day(r.begin_at)}${last !== day(r.begin_at) ? ` – ${last}` : ''}`; } },
    { label: 'Messages', class: 'num', render: (r) => String(r.messages) },
    { label: 'Passed', class: 'num', render: (r) => rate(r.passed, r.messages) },
    { label: 'Policy seen', render: (r) => `p=${r.policy.p || '?'}` },
    { label: 'Format', render: (r) => r.attachment },
    { label: 'Received', render: (r) => when(r.received_at) },
  ], reports.dmarc_reports, { caption: 'DMARC reports' }), pager(reports.pagination, go)));
  return out;
}
