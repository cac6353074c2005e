// Sign-in by OpenID Connect redirect (authorization code with PKCE, a public client, no
// secret), offered when the deployment names a client ID registered at the JWT issuer with
// the redirect URI <ApiUrl>/ui/. The token it returns is what the data calls then carry.

const VERIFIER = 'tidemark.oidc.verifier';
const STATE = 'tidemark.oidc.state';

const b64url = (bytes) => btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
const random = (n) => b64url(crypto.getRandomValues(new Uint8Array(n)));
const redirectUri = () => location.origin + location.pathname;

async function discover(issuer) {
  const r = await fetch(`${issuer.replace(/\/$/, '')}/.well-known/openid-configuration`);
  if (!r.ok) throw new Error(`the issuer has no OpenID configuration (${r.status})`);
  return r.json();
}

/** Leaves for the issuer's sign-in page; comes back to this page with a code. */
export async function startSignIn(cfg) {
  const d = await discover(cfg.issuer);
  const verifier = random(32);
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier));
  const state = random(16);
  sessionStorage.setItem(VERIFIER, verifier);
  sessionStorage.setItem(STATE, JSON.stringify({ state, hash: location.hash }));
  const url = new URL(d.authorization_endpoint);
  for (const [k, v] of Object.entries({
    response_type: 'code', client_id: cfg.clientId, redirect_uri: redirectUri(), scope: 'openid',
    state, code_challenge: b64url(new Uint8Array(digest)), code_challenge_method: 'S256',
  })) url.searchParams.set(k, v);
  location.assign(url.toString());
}

/** On the way back: the token for the code in the URL, or null when there is none. */
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
  const d = await discover(cfg.issuer);
  const r = await fetch(d.token_endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'authorization_code', code: q.get('code'), redirect_uri: redirectUri(), client_id: cfg.clientId, code_verifier: verifier }),
  });
  const body = await r.json().catch(() => ({}));
  const token = body.access_token || body.id_token;
  if (!r.ok || !token) throw new Error(`the issuer refused the sign-in: ${body.error_description || body.error || r.status}`);
  return token;
}
