// Data calls to the Tidemark API, from whatever origin and stage served this page: the page
// lives at <base>/ui/, the API at <base>/. With a JWT authorizer every call carries the
// user's bearer token; the static files need none, the data always does.

export const base = location.pathname.replace(/\/ui(\/.*)?$/, '');
const TOKEN_KEY = 'tidemark.token';
let config = { auth: 'none', refreshSeconds: 5 };

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** What the deployment says about auth (`/ui/config.json`, no secret in it). */
export async function loadConfig() {
  const r = await fetch('config.json', { cache: 'no-cache' });
  if (r.ok) config = await r.json();
  return config;
}

export const settings = () => config;
export const token = () => sessionStorage.getItem(TOKEN_KEY);
export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t.trim().replace(/^Bearer\s+/i, ''));
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** One call (`body`, if any, sent as JSON); rejects with ApiError carrying the API's own error message. */
export async function api(path, { method = 'GET', query = {}, body } = {}) {
  const url = new URL(base + path, location.origin);
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, v);
  }
  const headers = { accept: 'application/json' };
  if (config.auth === 'jwt' && token()) headers.authorization = `Bearer ${token()}`;
  const init = { method, headers, cache: 'no-store' };
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(url, init);
  let answer = null;
  try { answer = await r.json(); } catch { /* API Gateway's own 401 may be empty */ }
  if (!r.ok) {
    const e = answer && answer.error;
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
