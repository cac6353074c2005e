// Sign-in by OpenID Connect redirect (authorization code with PKCE, a public client, no
// secret), offered when the deployment names a client ID registered at the JWT issuer with
// the redirect URI <ApiUrl>/ui/. It asks for the API's scopes by the deployment's names
// (config.json's requestScopes) and keeps the ACCESS token only: an ID token carries no API
// scope and is never sent to the API. A refresh token, when the issuer gives one, renews it.

const VERIFIER = 'tidemark.oidc.verifier';
const STATE = 'tidemark.oidc.state';

const b64url = (bytes) => btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
const random = (n) => b64url(crypto.getRandomValues(new Uint8Array(n)));
const redirectUri = () => location.origin + location.pathname;

/** fetch, with a failure that says which origin the page could not reach (CSP, CORS, network). */
async function reach(url, init, what) {
  try {
    return await fetch(url, init);
  } catch (e) {
    throw new Error(`could not reach the issuer's ${what} (${new URL(url).origin}): the page may only connect `
      + 'to the API, the issuer and the token origin the deployment names (DashboardTokenOrigin), '
      + 'and the issuer must allow this page by CORS');
  }
}

async function discover(issuer) {
  const r = await reach(`${issuer.replace(/\/$/, '')}/.well-known/openid-configuration`, {}, 'discovery document');
  if (!r.ok) throw new Error(`the issuer has no OpenID configuration (${r.status})`);
  return r.json();
}

/** Leaves for the issuer's sign-in page; comes back to this page, and this view, with a code. */
export async function startSignIn(cfg) {
  const d = await discover(cfg.issuer);
  const verifier = random(32);
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier));
  const state = random(16);
  sessionStorage.setItem(VERIFIER, verifier);
  sessionStorage.setItem(STATE, JSON.stringify({ state, hash: location.hash }));
  const url = new URL(d.authorization_endpoint);
  const params = {
    response_type: 'code', client_id: cfg.clientId, redirect_uri: redirectUri(), scope: cfg.requestScopes,
    state, code_challenge: b64url(new Uint8Array(digest)), code_challenge_method: 'S256',
  };
  // Auth0 issues a JWT access token only for a named audience; other issuers ignore it.
  if (cfg.audience) params.audience = cfg.audience;
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
  location.assign(url.toString());
}

/** The session a token response describes; an ID token alone is refused. */
function sessionOf(body, previous) {
  if (!body.access_token) throw new Error('the issuer returned no access token');
  const life = Number(body.expires_in) * 1000;
  return {
    access: body.access_token,
    refresh: body.refresh_token || previous?.refresh || null,
    expiresAt: life ? Date.now() + life : null,
    // Renewed 30 s before it expires, or after three quarters of its life if that is later
    // (a short-lived token is not renewed on every call).
    renewAt: life ? Date.now() + Math.max(life * 0.75, life - 30e3) : null,
  };
}

async function tokenCall(cfg, form) {
  const d = await discover(cfg.issuer);
  const r = await reach(d.token_endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ client_id: cfg.clientId, ...form }),
  }, 'token endpoint');
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(`the issuer refused: ${body.error_description || body.error || r.status}`);
  return body;
}

/** On the way back: the session for the code in the URL, or null when there is none. */
export async function finishSignIn(cfg) {
  const q = new URLSearchParams(location.search);
  if (!q.has('code') && !q.has('error')) return null;
  const saved = JSON.parse(sessionStorage.getItem(STATE) || 'null');
  const verifier = sessionStorage.getItem(VERIFIER);
  sessionStorage.removeItem(STATE);
  sessionStorage.removeItem(VERIFIER);
  history.replaceState(null, '', location.pathname + ((saved && saved.hash) || ''));
  if (q.has('error')) throw new Error(`sign-in failed: ${q.get('error_description') || q.get('error')}`);
  if (!saved || saved.state !== q.get('state') || !verifier) throw new Error('the sign-in answer does not belong to this tab; sign in again');
  const body = await tokenCall(cfg, {
    grant_type: 'authorization_code', code: q.get('code'), redirect_uri: redirectUri(), code_verifier: verifier,
  });
  return sessionOf(body, null);
}

/** A fresh session from the refresh token (rotated when the issuer rotates it). */
export async function renewSession(cfg, current) {
  const body = await tokenCall(cfg, { grant_type: 'refresh_token', refresh_token: current.refresh });
  return sessionOf(body, current);
}
