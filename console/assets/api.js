// The one way the console talks to the service: the public /api/v2 endpoints with the
// session's Bearer token, answers unwrapped from the envelope, errors as ApiError.
//
// The token lives in sessionStorage: it survives reloads of this tab but not closing it,
// and is never sent anywhere the page does not send it itself (no cookie, so no CSRF).
// What protects it from other scripts is the Content-Security-Policy (script-src 'self',
// no inline script, no third-party origin).

const KEY = 'email-service.session';

export const session = {
  get() {
    try { return JSON.parse(sessionStorage.getItem(KEY) || 'null'); } catch { return null; }
  },
  get token() { const s = this.get(); return s && s.token; },
  set(token, expiresAt) {
    sessionStorage.setItem(KEY, JSON.stringify({ token, expires_at: expiresAt }));
  },
  clear() { sessionStorage.removeItem(KEY); },
};

export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field || null;
  }
}

let unauthorizedHandler = null;
// app.js: where a 401 goes (sign-in, then back here).
export function onUnauthorized(fn) { unauthorizedHandler = fn; }

function query(params) {
  if (!params) return '';
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

/**
 * call('GET', '/admin/organizations', {params}) -> data
 * server: 'org/server' to call the messaging surface (/api/v2/server...) as this user.
 * auth: false for the public account endpoints; adminKey: the operator's key (first run).
 * file: true for an answer outside the envelope (a CSV export): resolves to a Blob.
 */
export async function call(method, path, opts = {}) {
  const headers = { Accept: 'application/json' };
  const token = session.token;
  if (opts.adminKey) headers['X-Admin-API-Key'] = opts.adminKey;
  else if (token && opts.auth !== false) headers.Authorization = `Bearer ${token}`;
  let url = `/api/v2${path}`;
  if (opts.server) {
    headers['X-Server'] = opts.server;
    url = `/api/v2/server${path}`;
  }
  url += query(opts.params);
  if (opts.file) headers.Accept = '*/*';
  const init = { method, headers };
  if (opts.body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(opts.body);
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (err) {
    throw new ApiError(0, 'NetworkError', 'The service could not be reached. Check your connection and try again.');
  }
  if (opts.file && response.ok) return response.blob();
  let payload = null;
  try { payload = await response.json(); } catch { payload = null; }
  if (payload && payload.status === 'success') return payload.data;
  const error = (payload && payload.error) || {};
  const failure = new ApiError(response.status, error.code || 'HTTPError',
    error.message || `The service answered ${response.status}.`, error.field);
  if (response.status === 401 && failure.code === 'Unauthorized' && headers.Authorization) {
    session.clear();
    if (unauthorizedHandler) unauthorizedHandler();
  }
  throw failure;
}

export const get = (path, opts) => call('GET', path, opts);
export const post = (path, body, opts = {}) => call('POST', path, { ...opts, body: body || {} });
export const patch = (path, body, opts = {}) => call('PATCH', path, { ...opts, body });
export const del = (path, opts) => call('DELETE', path, opts);

// Path pieces: permalinks and addresses go into URLs encoded.
export const enc = encodeURIComponent;
