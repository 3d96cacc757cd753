// A server at a glance: what to do next, delivery outcomes over time, opens and clicks over
// time (/stats/engagement) and in all.
import { get } from '../../api.js';
import { badge, barChart, h, link, section, tabs } from '../../ui.js';
import { adminBase, serverBase } from './base.js';
import { reputationBanner } from '../reputation.js';

const OUTCOMES = [
  { key: 'sent', label: 'Sent' }, { key: 'delayed', label: 'Delayed' },
  { key: 'failed', label: 'Failed' }, { key: 'held', label: 'Held' },
];
const ENGAGEMENT = [{ key: 'opens', label: 'Opens' }, { key: 'clicks', label: 'Clicks' }];
const RANGES = { '24h': [1, 'hour', 'Last 24 hours'], '7d': [7, 'day', 'Last 7 days'], '30d': [30, 'day', 'Last 30 days'] };

function stat(n, label) { return h('div', { class: 'stat' }, h('span', { class: 'n' }, String(n ?? 0)), h('span', { class: 'l' }, label)); }

function hbars(rows) {
  // Opens and clicks as horizontal bars: total, unique, likely machines.
  const max = Math.max(1, ...rows.map((r) => r[1]));
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 420 ${rows.length * 28}`);
  svg.setAttribute('class', 'chart hchart');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', rows.map((r) => `${r[0]}: ${r[1]}`).join(', '));
  rows.forEach(([label, n, cls], i) => {
    const y = i * 28;
    const t = document.createElementNS(ns, 'text');
    t.setAttribute('x', 0); t.setAttribute('y', y + 17); t.setAttribute('class', 'axis'); t.textContent = label;
    const r = document.createElementNS(ns, 'rect');
    r.setAttribute('x', 130); r.setAttribute('y', y + 5); r.setAttribute('height', 16);
    r.setAttribute('width', Math.max(n ? 2 : 0, (n / max) * 250)); r.setAttribute('class', `bar ${cls}`);
    const v = document.createElementNS(ns, 'text');
    v.setAttribute('x', 136 + (n / max) * 250); v.setAttribute('y', y + 17); v.setAttribute('class', 'axis'); v.textContent = String(n);
    svg.append(t, r, v);
  });
  return svg;
}

/** The steps of setting a server up, each ticked off when done; shown until all are. A step
 * whose state the role cannot read (credentials, webhooks of a viewer) is left out. */
function gettingStarted(base, n) {
  const steps = [
    [n.domains > 0, `${base}/domains`, 'Add a sending domain', ' and publish its DNS records.'],
    [n.verified > 0, `${base}/domains`, 'Verify your domain', ' once its DNS records are published.'],
    n.credentials === null ? null : [n.credentials > 0, `${base}/credentials`, 'Create an API or SMTP credential', ' for your application.'],
    [n.messages > 0, `${base}/messages`, 'Send a first message', ' over the API or SMTP with that credential.'],
    n.webhooks === null ? null : [n.webhooks > 0, `${base}/webhooks`, 'Add a webhook', ' to hear about deliveries and failures.'],
  ].filter(Boolean);
  if (steps.every(([done]) => done)) return null;
  return section('Getting started', null, h('ol', { class: 'steps' }, steps.map(([done, href, text, rest]) => (done
    ? h('li', { class: 'done' }, h('span', { class: 'tick', 'aria-hidden': 'true' }, '✓ '), h('span', { class: 'sr-only' }, 'Done: '), text, rest)
    : h('li', {}, link(href, text), rest)))));
}

export async function overview(ctx) {
  const range = RANGES[ctx.query.get('range')] ? ctx.query.get('range') : '24h';
  const [days, interval, rangeLabel] = RANGES[range];
  const from = new Date(Date.now() - days * 86400000).toISOString().replace(/\.\d+Z$/, 'Z');
  const count = (path, action) => (ctx.can(action)
    ? get(`${adminBase(ctx)}${path}`, { params: { per_page: 1 } }).then((d) => d.pagination.total) : null);
  const [srv, summary, deliveries, engagement, domains, credentials, webhooks, messages] = await Promise.all([
    get(adminBase(ctx)).then((d) => d.server),
    get('/stats', { server: ctx.server, params: { from } }).then((d) => d.stats),
    get('/stats/deliveries', { server: ctx.server, params: { from, interval } }).then((d) => d.stats),
    get('/stats/engagement', { server: ctx.server, params: { from, interval } }).then((d) => d.stats),
    get(`${adminBase(ctx)}/domains`, { params: { per_page: 100 } }).then((d) => d.domains),
    count('/credentials', 'credentials.read'),
    count('/webhooks', 'webhooks.read'),
    get('/messages', { server: ctx.server, params: { per_page: 1, scope: 'outgoing' } }).then((d) => d.pagination.total),
  ]);
  const base = serverBase(ctx);
  const verified = domains.filter((d) => d.verified).length;

  const t = deliveries.totals;
  return h('div', {},
    h('h1', {}, srv.name),
    h('p', { class: 'sub' }, `${srv.mode} server · `, srv.suspended ? badge('Suspended', 'bad') : badge('Active', 'good'),
      ` · ${verified} of ${domains.length} domain(s) verified`),
    srv.reputation.state !== 'ok' ? reputationBanner(srv.reputation)
      : (srv.suspended ? h('p', { class: 'notice error' }, `Sending is suspended${srv.suspension_reason ? `: ${srv.suspension_reason}` : ''}.`) : null),
    gettingStarted(base, { domains: domains.length, verified, credentials, messages, webhooks }),
    tabs(Object.entries(RANGES).map(([k, v]) => [`${base}?range=${k}`, v[2]]), `${base}?range=${range}`),
    h('div', { class: 'stats' },
      stat(summary.messages, 'messages'), stat(t.sent, 'sent'), stat(t.delayed, 'delayed'), stat(t.failed, 'failed'),
      stat(summary.held, 'held'), stat(summary.bounces, 'bounces'), stat(summary.incoming, 'incoming')),
    section(`Delivery outcomes · ${rangeLabel}`, null,
      barChart(deliveries.buckets, OUTCOMES, { title: `Delivery outcomes per ${interval}, ${rangeLabel.toLowerCase()}` })),
    section(`Opens and clicks · ${rangeLabel}`, null,
      barChart(engagement.buckets, ENGAGEMENT, { title: `Opens and clicks per ${interval}, ${rangeLabel.toLowerCase()}`, grouped: true }),
      hbars([['Opens', summary.opens, 'opens'], ['Unique opens', summary.unique_opens, 'opens'],
        ['Machine opens', summary.machine_opens, 'held'], ['Clicks', summary.clicks, 'clicks'],
        ['Unique clicks', summary.unique_clicks, 'clicks'], ['Machine clicks', summary.machine_clicks, 'held']]),
      h('p', { class: 'help' }, 'Machine opens and clicks: mail privacy proxies and link scanners, counted apart.')));
}
