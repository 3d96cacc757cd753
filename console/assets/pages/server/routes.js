// The pages of one mail server, under /orgs/{org}/servers/{server}. app.js imports this
// table; each page module is loaded on first use. Pages import what they share from base.js,
// never this module.
const overview = () => import('./overview.js');
const messages = () => import('./messages.js');
const captured = () => import('./captured.js');
const setup = () => import('./setup.js');
const webhooks = () => import('./webhooks.js');
const inbound = () => import('./inbound.js');
const inboundRoutes = () => import('./inbound_routes.js');
const content = () => import('./content.js');
const settings = () => import('./settings.js');
const dmarc = () => import('./dmarc.js');

export const serverRoutes = [
  { path: '', title: 'Overview', load: () => overview().then((m) => m.overview) },
  { path: '/messages', title: 'Messages', load: () => messages().then((m) => m.list) },
  { path: '/messages/:id', title: 'Message', load: () => messages().then((m) => m.show) },
  { path: '/captured', title: 'Captured mail', load: () => captured().then((m) => m.inbox) },
  { path: '/captured/:id', title: 'Captured message', load: () => captured().then((m) => m.message) },
  { path: '/domains', title: 'Domains', load: () => setup().then((m) => m.domains) },
  { path: '/domains/:name/dmarc', title: 'DMARC reports', load: () => dmarc().then((m) => m.dmarc) },
  { path: '/credentials', title: 'Credentials', load: () => setup().then((m) => m.credentials) },
  { path: '/webhooks', title: 'Webhooks', load: () => webhooks().then((m) => m.list) },
  { path: '/webhooks/:id', title: 'Webhook', load: () => webhooks().then((m) => m.show) },
  { path: '/inbound', title: 'Inbound', load: () => inbound().then((m) => m.inbound) },
  { path: '/inbound/:id', title: 'Inbound message', load: () => inbound().then((m) => m.inboundMessage) },
  { path: '/bounces', title: 'Bounces', load: () => inbound().then((m) => m.bounces) },
  { path: '/bounces/:id', title: 'Bounce', load: () => inbound().then((m) => m.bounce) },
  { path: '/routes', title: 'Routes', load: () => inboundRoutes().then((m) => m.routes) },
  { path: '/routes/:id', title: 'Route', load: () => inboundRoutes().then((m) => m.route) },
  { path: '/suppressions', title: 'Suppressions', load: () => settings().then((m) => m.suppressions) },
  { path: '/streams', title: 'Streams', load: () => content().then((m) => m.streams) },
  { path: '/templates', title: 'Templates', load: () => content().then((m) => m.templates) },
  { path: '/templates/:permalink', title: 'Template', load: () => content().then((m) => m.template) },
  { path: '/settings', title: 'Settings', load: () => settings().then((m) => m.settings) },
];

/** The side navigation of a server: [href, label] pairs the role may open; ``orgName``
 * labels the way back to its organization. */
export function serverNav(org, orgName, server, can) {
  const base = `/orgs/${encodeURIComponent(org)}/servers/${encodeURIComponent(server)}`;
  const items = [
    ['', 'Overview'], ['/messages', 'Messages'], ['/captured', 'Captured mail'], ['/domains', 'Domains'],
    can('credentials.read') ? ['/credentials', 'Credentials'] : null,
    can('webhooks.read') ? ['/webhooks', 'Webhooks'] : null,
    ['/inbound', 'Inbound'], ['/bounces', 'Bounces'], ['/routes', 'Routes'],
    ['/suppressions', 'Suppressions'], ['/streams', 'Streams'], ['/templates', 'Templates'],
    ['/settings', 'Settings'],
  ].filter(Boolean);
  return [[`/orgs/${encodeURIComponent(org)}`, `← ${orgName}`], ...items.map(([p, l]) => [base + p, l])];
}
