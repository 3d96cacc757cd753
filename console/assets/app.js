// The console's entry: a history router over page modules (loaded on demand), the shell
// (top bar, section navigation), the signed-in user and what their role allows.
import { ApiError, get, onUnauthorized, post, session } from './api.js';
import { clear, h, notice, setTimeZone, timeZone } from './ui.js';
import { serverRoutes, serverNav } from './pages/server/routes.js';
import { ACTIONS, RANK, ROLES } from './generated/rules.js';

const auth = () => import('./pages/auth.js');
const orgs = () => import('./pages/orgs.js');
const account = () => import('./pages/account.js');
const admin = () => import('./pages/admin.js');

// {path, title, load, public}: load() resolves to the page function (ctx) => Node.
const routes = [
  { path: '/sign-in', title: 'Sign in', public: true, load: () => auth().then((m) => m.signIn) },
  { path: '/register', title: 'Create an account', public: true, load: () => auth().then((m) => m.register) },
  { path: '/first-run', title: 'Set up this installation', public: true, load: () => auth().then((m) => m.firstRun) },
  { path: '/forgot-password', title: 'Forgot password', public: true, load: () => auth().then((m) => m.forgotPassword) },
  { path: '/password-reset/:token', title: 'Choose a new password', public: true, load: () => auth().then((m) => m.passwordReset) },
  { path: '/invitations/:token', title: 'Invitation', public: true, load: () => auth().then((m) => m.invitation) },
  { path: '/sign-out', title: 'Sign out', public: true, load: async () => signOut },
  { path: '/', title: 'Organizations', load: () => orgs().then((m) => m.organizations) },
  { path: '/orgs/:org', title: 'Organization', load: () => orgs().then((m) => m.organization) },
  ...serverRoutes.map((r) => ({ ...r, path: `/orgs/:org/servers/:server${r.path}`, server: true })),
  { path: '/account', title: 'Your account', load: () => account().then((m) => m.account) },
  { path: '/admin/users', title: 'Users', admin: true, load: () => admin().then((m) => m.users) },
  { path: '/admin/ip-pools', title: 'IP pools', admin: true, load: () => admin().then((m) => m.ipPools) },
  { path: '/admin/api-keys', title: 'Admin API keys', admin: true, load: () => admin().then((m) => m.apiKeys) },
  { path: '/admin/audit', title: 'Audit trail', admin: true, load: () => admin().then((m) => m.audit) },
];

const compiled = routes.map((r) => {
  const names = [];
  const pattern = r.path.replace(/:(\w+)/g, (_, name) => { names.push(name); return '([^/]+)'; });
  return { ...r, re: new RegExp(`^${pattern}/?$`), names };
});

function match(pathname) {
  for (const r of compiled) {
    const m = r.re.exec(pathname);
    if (m) {
      const params = {};
      r.names.forEach((n, i) => { params[n] = decodeURIComponent(m[i + 1]); });
      return { route: r, params };
    }
  }
  return null;
}

let me = null;
// Organization permalink -> {name, time_zone} of its record (fetched once per session, again
// after a change: ctx.forgetZone).
const orgRecords = new Map();

async function orgInfo(org) {
  if (!orgRecords.has(org)) {
    try {
      const { name, time_zone: zone } = (await get(`/admin/organizations/${encodeURIComponent(org)}`)).organization;
      orgRecords.set(org, { name, zone });
    } catch (err) {
      if (err instanceof ApiError && err.code === 'Unauthorized') throw err;
      return null; // the page's own request reports what is wrong
    }
  }
  return orgRecords.get(org);
}

async function loadMe(force = false) {
  if (!session.token) { me = null; return null; }
  if (me && !force) return me;
  me = await get('/auth/me');
  return me;
}

export function roleIn(org) {
  if (!me) return null;
  if (me.user.admin) return ROLES[ROLES.length - 1]; // full access: the highest role
  const m = me.memberships.find((x) => x.organization.permalink === org);
  return m ? m.role : null;
}

// What the role allows, by the service's own table (generated/rules.js); the API enforces
// it anyway, this only decides what is offered.
export function can(action, org) {
  if (!me) return false;
  if (me.user.admin) return true;
  if (!(action in ACTIONS)) {
    console.error(`can(): the service has no action ${action}`); // a typo offers nothing
    return false;
  }
  const least = ACTIONS[action]; // null: instance administrators only
  const role = roleIn(org);
  return least !== null && !!role && RANK[role] >= RANK[least];
}

export function go(path, { replace = false } = {}) {
  if (replace) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  render();
}

function here() { return location.pathname + location.search; }

onUnauthorized(() => {
  me = null;
  if (!location.pathname.startsWith('/sign-in')) go(`/sign-in?next=${encodeURIComponent(here())}`, { replace: true });
});

async function signOut() {
  try { if (session.token) await post('/auth/logout'); } catch { /* already gone */ }
  session.clear();
  me = null;
  go('/sign-in', { replace: true });
  return null;
}

export function signedIn(data, next) {
  session.set(data.session_token, data.expires_at);
  me = null;
  const target = next && next.startsWith('/') && !next.startsWith('//') ? next : '/';
  go(target, { replace: true });
}

// On a narrow screen (app.css, below 700 px) the section navigation hides behind this button.
function menuButton(side) {
  const button = h('button', { type: 'button', class: 'menu', 'aria-controls': 'side', 'aria-expanded': 'false' }, 'Menu');
  button.addEventListener('click', () => {
    const open = document.body.classList.toggle('nav-open');
    button.setAttribute('aria-expanded', String(open));
    if (open) side.querySelector('a')?.focus();
  });
  return button;
}

function shell(route, params, org) {
  const top = clear(document.getElementById('top'));
  const side = clear(document.getElementById('side'));
  document.body.classList.remove('nav-open'); // every page opens with the menu closed
  top.append(h('a', { class: 'brand', href: me ? '/' : '/sign-in' }, 'Email service'));
  if (me) {
    const name = [me.user.first_name, me.user.last_name].filter(Boolean).join(' ') || me.user.email_address;
    top.append(h('div', { class: 'who' },
      me.user.admin ? h('a', { href: '/admin/users' }, 'Administration') : null,
      h('a', { href: '/account', title: me.user.email_address }, name),
      h('button', { type: 'button', class: 'link', onclick: () => go('/sign-out') }, 'Sign out')));
  }
  const links = [];
  if (route.server) {
    links.push(...serverNav(params.org, org ? org.name : params.org, params.server, (a) => can(a, params.org)));
  } else if (route.admin) {
    links.push(['/admin/users', 'Users'], ['/admin/ip-pools', 'IP pools'], ['/admin/api-keys', 'Admin API keys'], ['/admin/audit', 'Audit trail']);
  } else if (me && !route.public) {
    links.push(['/', 'Organizations']);
    if (params.org) links.push([`/orgs/${encodeURIComponent(params.org)}`, org ? org.name : params.org]);
    links.push(['/account', 'Your account']);
  }
  side.hidden = links.length === 0;
  if (links.length) {
    top.querySelector('.brand').after(menuButton(side));
    const current = location.pathname;
    side.append(h('ul', {}, links.map(([href, label]) => h('li', {},
      h('a', { href, 'aria-current': current === href || (href.split('/').length > 5 && current.startsWith(`${href}/`)) ? 'page' : null }, label)))));
    if (params.org && timeZone()) side.append(h('p', { class: 'zone-note' }, `Times in ${timeZone()}, the organization’s time zone.`));
  }
}

let renderCount = 0;

async function render() {
  const ticket = ++renderCount;
  const main = document.getElementById('main');
  const url = new URL(location.href);
  const found = match(url.pathname);
  if (!found) {
    document.title = 'Not found · Email service';
    clear(main).append(h('h1', {}, 'Page not found'), h('p', {}, 'There is no page at this address. ', h('a', { href: '/' }, 'Go to your organizations')));
    return;
  }
  const { route, params } = found;
  setTimeZone(null);
  try {
    if (!route.public) {
      if (!session.token) { go(`/sign-in?next=${encodeURIComponent(here())}`, { replace: true }); return; }
      await loadMe();
    } else if (session.token && !me) {
      try { await loadMe(); } catch { /* a stale token: the public page works without it */ }
    }
    if (route.admin && !me.user.admin) throw new ApiError(404, 'NotFound', 'This page is for instance administrators.');
    const org = !route.public && params.org ? await orgInfo(params.org) : null;
    const page = await route.load();
    if (ticket !== renderCount) return;
    setTimeZone(org && org.zone);
    shell(route, params, org);
    const ctx = {
      params, query: url.searchParams, me, go, can: (action) => can(action, params.org),
      role: roleIn(params.org), server: params.server ? `${params.org}/${params.server}` : null,
      refreshMe: () => loadMe(true), signedIn, render,
      forgetZone: () => orgRecords.delete(params.org), // after the organization's name or time_zone changed
    };
    document.title = `${route.title} · Email service`;
    const node = await page(ctx);
    if (ticket !== renderCount || node === null) return;
    clear(main).append(node);
    const heading = main.querySelector('h1');
    if (heading && heading.textContent) document.title = `${heading.textContent} · Email service`;
    main.focus({ preventScroll: true });
  } catch (err) {
    if (ticket !== renderCount) return;
    if (err instanceof ApiError && err.code === 'Unauthorized') return; // on its way to sign-in
    shell(route, params, orgRecords.get(params.org));
    const title = err instanceof ApiError && err.status === 404 ? 'Not found' : 'Something went wrong';
    clear(main).append(h('h1', {}, title), notice(err.message || String(err), 'error'));
  }
}

// Links inside the console navigate without reloading.
document.addEventListener('click', (event) => {
  const a = event.target.closest('a');
  if (!a || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const href = a.getAttribute('href');
  if (!href || !href.startsWith('/') || href.startsWith('//') || a.target || a.hasAttribute('download') || href.startsWith('/api/')) return;
  event.preventDefault();
  if (href !== here()) go(href);
});
window.addEventListener('popstate', render);

// The SSO landing: the callback sends the browser back with the token in the fragment
// (never sent to any server); take it and clear it from the address bar.
(function ssoLanding() {
  if (!location.hash || location.hash.length < 2) return;
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get('session_token')) {
    session.set(fragment.get('session_token'), fragment.get('expires_at'));
    history.replaceState(null, '', '/');
  } else if (fragment.get('error')) {
    const message = fragment.get('error_description') || fragment.get('error');
    history.replaceState(null, '', `/sign-in?sso_error=${encodeURIComponent(message)}`);
  }
}());

render();
