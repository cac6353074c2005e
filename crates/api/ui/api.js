// Data calls to the Tidemark API, from whatever origin and stage served this page: the page
// lives at <base>/ui/, the API at <base>/. With a JWT authorizer every call carries the
// user's access token; the static files need none, the data always does. The token lives in
// this tab's sessionStorage only (never localStorage), with its refresh token when the
// issuer gave one: it is renewed 30 s before it expires (after three quarters of its life if
// that is later), or once when the API says 401.

export const base = location.pathname.replace(/\/ui(\/.*)?$/, '');
const SESSION_KEY = 'tidemark.session';
let config = { auth: 'none', refreshSeconds: 5 };
let renewer = null;

export class ApiError extends Error {
  constructor(status, code, message, scope) {
    super(message);
    this.status = status;
    this.code = code;
    this.scope = scope;
  }
}

/** What the deployment says about auth (`/ui/config.json`, no secret in it). */
export async function loadConfig() {
  const r = await fetch('config.json', { cache: 'no-cache' });
  if (r.ok) config = await r.json();
  return config;
}

export const settings = () => config;

/** The signed-in session: { access, refresh?, expiresAt? (ms) }, or null. */
export const session = () => JSON.parse(sessionStorage.getItem(SESSION_KEY) || 'null');
export const token = () => session()?.access || null;
export function setSession(s) {
  if (s && s.access) sessionStorage.setItem(SESSION_KEY, JSON.stringify(s));
  else sessionStorage.removeItem(SESSION_KEY);
}
/** A pasted token: no refresh, no known expiry. */
export const setToken = (t) => setSession(t ? { access: t.trim().replace(/^Bearer\s+/i, '') } : null);
/** How to renew a session that has a refresh token (the OpenID sign-in sets it). */
export const setRenewer = (f) => { renewer = f; };

/** The scope a call needs, by the deployment's names (the same map as the API's routes). */
export function scopeFor(path, method) {
  const s = config.scopes || {};
  if (method !== 'GET') return s.write;
  return path.startsWith('/quarantine') ? s.admin : s.read;
}

let renewing = null;
/** Renews the session by its refresh token; false when it cannot (sign in again). */
async function renew() {
  const s = session();
  if (!s?.refresh || !renewer) return false;
  renewing ||= renewer(s).then((fresh) => { setSession(fresh); return true; })
    .catch(() => { setSession(null); return false; })
    .finally(() => { renewing = null; });
  return renewing;
}

/** One call (`body`, if any, sent as JSON); rejects with ApiError carrying the API's own error message. */
export async function api(path, { method = 'GET', query = {}, body } = {}) {
  const url = new URL(base + path, location.origin);
  for (const [k, v] of Object.entries(query)) {
    // An array repeats the parameter (`tag=site:A&tag=line:3`).
    for (const x of Array.isArray(v) ? v : [v]) {
      if (x !== undefined && x !== null && x !== '') url.searchParams.append(k, x);
    }
  }
  const jwt = config.auth === 'jwt';
  const s = jwt ? session() : null;
  if (s?.refresh && s.renewAt && Date.now() >= s.renewAt) await renew();
  const send = () => {
    const headers = { accept: 'application/json' };
    if (jwt && token()) headers.authorization = `Bearer ${token()}`;
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) {
      headers['content-type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    return fetch(url, init);
  };
  let r = await send();
  if (r.status === 401 && jwt && await renew()) r = await send();
  let answer = null;
  try { answer = await r.json(); } catch { /* API Gateway's own 401 may be empty */ }
  if (!r.ok) {
    const e = answer && answer.error;
    if (r.status === 403 && jwt) {
      // API Gateway says only "Forbidden": name what is missing ourselves.
      const scope = scopeFor(path, method);
      throw new ApiError(403, 'forbidden', `you are signed in without the ${scope} scope this needs; `
        + 'ask your administrator for it, or sign in as a user who has it', scope);
    }
    throw new ApiError(r.status, e ? e.code : 'http_' + r.status,
      e ? e.message : (answer && answer.message) || r.statusText || `HTTP ${r.status}`);
  }
  return answer;
}

/** Every item of a list, following cursors, up to `maxItems`. */
export async function all(path, query = {}, maxItems = 5000) {
  const items = [];
  let cursor = null;
  do {
    const page = await api(path, { query: { ...query, cursor } });
    items.push(...page.items);
    cursor = page.cursor;
  } while (cursor && items.length < maxItems);
  return { items, complete: !cursor };
}

export const enc = encodeURIComponent;
