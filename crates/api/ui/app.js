// The dashboard shell: routing by the URL's hash (so a link shows the same view), the
// sign-in gate, and the refresh loop. Views live in their own modules.
import { loadConfig, settings, token, setToken, setSession, setRenewer, ApiError } from './api.js';
import { el, clear } from './charts.js';
import { startSignIn, finishSignIn, renewSession } from './oidc.js';
import * as fleet from './fleet.js';
import * as device from './device.js';
import * as alerts from './alerts.js';
import * as quarantine from './quarantine.js';

const views = { fleet, device, alerts, quarantine };
const main = document.getElementById('view');
const refreshed = document.getElementById('refreshed');

/** What tests and benchmarks read: the last drawn view and when. */
window.tidemark = { renders: 0, view: null, drawnAt: null, error: null };

export function route() {
  const h = location.hash.replace(/^#\/?/, '');
  const [path, q] = h.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  const name = views[parts[0]] ? parts[0] : 'fleet';
  return { name, args: parts.slice(1), params: new URLSearchParams(q || '') };
}

/**
 * Replaces the hash's query (the view's state), re-rendering through `hashchange`. An array
 * value repeats the parameter.
 */
export function navigate(name, args = [], params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    for (const x of Array.isArray(v) ? v : [v]) if (x !== undefined && x !== null && x !== '') q.append(k, x);
  }
  const path = [name, ...args.map(encodeURIComponent)].join('/');
  const hash = `#/${path}${q.toString() ? '?' + q : ''}`;
  if (location.hash === hash) render(); else location.hash = hash;
}

let inFlight = null;
let queued = false;

async function render({ quiet = false } = {}) {
  if (inFlight) { queued = true; return inFlight; }
  const r = route();
  for (const a of document.querySelectorAll('[data-nav]')) {
    a.classList.toggle('active', a.dataset.nav === (r.name === 'device' ? 'fleet' : r.name));
  }
  document.body.dataset.state = 'loading';
  inFlight = (async () => {
    try {
      const out = document.createElement('div');
      const after = await views[r.name].render(out, r, { navigate, refresh: () => render() });
      clear(main);
      main.append(...out.childNodes);
      if (after) after();
      window.tidemark.error = null;
      refreshed.textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (e) {
      window.tidemark.error = String(e.message || e);
      if (e instanceof ApiError && e.status === 401 && settings().auth === 'jwt') {
        // Expired, or not a token the API accepts: sign in again; the sign-in brings the
        // user back to this view.
        setToken(null);
        signIn(`Your sign-in has expired or the API refused the token (401): ${e.message}`);
      } else if (e instanceof ApiError && e.status === 403) {
        // Signed in, without this view's scope: say which; the other views still work.
        clear(main);
        main.append(el('div', { class: 'error', dataset: { missingScope: e.scope || '' } },
          `This view is not available to you: ${e.message}.`));
      } else if (!quiet || !main.childElementCount) {
        clear(main);
        main.append(el('div', { class: 'error' }, `Could not load this view: ${e.message}`));
      } else {
        refreshed.textContent = `refresh failed: ${e.message}`;
      }
    } finally {
      window.tidemark.view = r.name;
      window.tidemark.renders += 1;
      window.tidemark.drawnAt = performance.now();
      document.body.dataset.view = r.name;
      document.body.dataset.state = 'ready';
      inFlight = null;
      if (queued) { queued = false; render(); }
    }
  })();
  return inFlight;
}

function signIn(problem) {
  clear(main);
  const cfg = settings();
  const box = el('textarea', { id: 'token', placeholder: 'eyJhbGciOi…', autocomplete: 'off' });
  const form = el('form', { class: 'panel signin' },
    el('h1', {}, 'Sign in'),
    el('p', {}, 'This API is protected by a JWT authorizer',
      cfg.issuer ? [' (issuer ', el('code', {}, cfg.issuer), ')'] : '',
      '. Sign in, or paste an access token for it (not an ID token); it is kept in this tab only and sent with every data call.'),
    problem ? el('div', { class: 'error' }, problem) : '',
    cfg.clientId && cfg.issuer ? el('p', {}, el('button', {
      type: 'button', class: 'primary', id: 'oidc',
      onclick: (ev) => {
        ev.target.disabled = true;
        startSignIn(cfg).catch((e) => signIn(`Could not start the sign-in: ${e.message}`));
      },
    }, 'Sign in with the issuer'), el('span', { class: 'muted' }, ' or paste a token:')) : '',
    box,
    el('p', {}, el('button', { class: cfg.clientId ? '' : 'primary', type: 'submit' }, 'Use token')));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    setToken(box.value);
    if (token()) render();
  });
  main.append(form);
  document.body.dataset.state = 'ready';
}

function iamOnly() {
  clear(main);
  main.append(el('div', { class: 'panel signin' },
    el('h1', {}, 'This API uses IAM auth'),
    el('p', {}, 'A browser cannot sign requests with AWS SigV4, so the dashboard cannot read this stack\'s API. '
      + 'Deploy with the JwtIssuer and JwtAudience parameters (a JWT authorizer; the page then asks for a token), '
      + 'or run the stack locally with ', el('code', {}, 'make run'), ' and open ', el('code', {}, 'http://127.0.0.1:3000/'), '.'),
    el('p', { class: 'muted' }, 'The API itself is unchanged: sign calls with SigV4 as the repository\'s docs/deploy.md shows.')));
  document.body.dataset.state = 'ready';
}

async function start() {
  const cfg = await loadConfig();
  if (cfg.auth === 'iam') return iamOnly();
  window.addEventListener('hashchange', () => render());
  let problem;
  if (cfg.auth === 'jwt' && cfg.clientId) {
    setRenewer((current) => renewSession(cfg, current));
    try {
      const s = await finishSignIn(cfg);
      if (s) setSession(s);
    } catch (e) {
      problem = e.message;
    }
  }
  if (cfg.auth === 'jwt') {
    const out = el('button', { id: 'signout', type: 'button', style: 'margin-left:.5rem' }, 'Sign out');
    out.addEventListener('click', () => { setToken(null); signIn(); });
    refreshed.after(out);
  }
  if (cfg.auth === 'jwt' && !token()) signIn(problem);
  else await render();
  const every = Math.max(2, Number(cfg.refreshSeconds) || 5) * 1000;
  setInterval(() => {
    const typing = document.activeElement && ['INPUT', 'TEXTAREA', 'SELECT'].includes(document.activeElement.tagName);
    // Not while the tab is hidden, the user types, or reads a chart (a redraw would reset
    // its cursor and zoom).
    const reading = document.querySelector('.chart:hover');
    if (document.hidden || typing || reading || (cfg.auth === 'jwt' && !token())) return;
    if (views[route().name].autoRefresh === false) return;
    render({ quiet: true });
  }, every);
}

start().catch((e) => {
  main.textContent = `The dashboard could not start: ${e.message}`;
  document.body.dataset.state = 'ready';
});
