// A real OpenID Connect provider (the `oidc-provider` package, certified by the OpenID
// Foundation) for the dashboard's sign-in tests: authorization code + PKCE for the dashboard's
// public client, JWT access tokens for the Tidemark API (a resource server whose scopes are
// the API's), refresh tokens, its own login page, and per-user scopes: a user may be granted
// fewer scopes than the page asks for, as a Cognito pre-token trigger or an IdP group would.
//
// Configured by the environment, all optional:
//   OIDC_PORT           port on 127.0.0.1 (0: any free one)               default 0
//   OIDC_CLIENT_ID      the dashboard's public client                      default dashboard
//   OIDC_REDIRECT_URIS  its redirect URIs, comma-separated                 default http://127.0.0.1:3000/ui/
//   OIDC_AUDIENCE       the API (resource indicator; the tokens' `aud`)    default urn:tidemark:api
//   OIDC_SCOPES         the API's scopes                                   default tidemark/read tidemark/write tidemark/admin
//   OIDC_USERS          JSON {login: "granted scopes"}; other logins are refused
//   OIDC_ACCESS_TTL     access token lifetime, seconds                     default 300
//   OIDC_MACHINE_SECRET enables confidential clients `machine` (tokens for any resource
//                       named `urn:...`) and `machine-short` (1 s tokens), for authorizer tests
//   OIDC_MACHINES       more such confidential clients, comma-separated (names starting `machine`)
//   OIDC_CLAIMS         JSON {login or client id: {claim: value}}: extra claims in the access
//                       tokens issued to that user or client (a caller's sites, say)
//
// Prints one JSON line `{"issuer": …}` when it listens, then one line per issued grant
// (`{"event": "grant", "grantType": …}`), so a test can see refreshes happen.
import { createServer } from 'node:http';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import Provider, { interactionPolicy } from 'oidc-provider';

const env = (k, d) => process.env[k] || d;
const audience = env('OIDC_AUDIENCE', 'urn:tidemark:api');
const apiScopes = env('OIDC_SCOPES', 'tidemark/read tidemark/write tidemark/admin');
const users = JSON.parse(env('OIDC_USERS', JSON.stringify({
  operator: 'tidemark/read tidemark/write tidemark/admin',
  viewer: 'tidemark/read',
})));
const accessTtl = Number(env('OIDC_ACCESS_TTL', '300'));
const machineSecret = process.env.OIDC_MACHINE_SECRET;
const extraClaims = JSON.parse(env('OIDC_CLAIMS', '{}'));
const machines = ['machine', 'machine-short', ...env('OIDC_MACHINES', '').split(',').filter(Boolean)];

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), use: 'sig', alg: 'RS256' };

const server = createServer();
await new Promise((ok) => server.listen(Number(env('OIDC_PORT', '0')), '127.0.0.1', ok));
const issuer = `http://127.0.0.1:${server.address().port}`;

const clients = [{
  client_id: env('OIDC_CLIENT_ID', 'dashboard'),
  token_endpoint_auth_method: 'none',
  application_type: 'web',
  grant_types: ['authorization_code', 'refresh_token'],
  response_types: ['code'],
  redirect_uris: env('OIDC_REDIRECT_URIS', 'http://127.0.0.1:3000/ui/').split(','),
}];
if (machineSecret) {
  for (const id of machines) {
    clients.push({
      client_id: id, client_secret: machineSecret, grant_types: ['client_credentials'],
      response_types: [], redirect_uris: [],
    });
  }
}

// No consent screen: what a user may do is decided here, per user, not by clicking.
const policy = interactionPolicy.base();
policy.remove('consent');

const provider = new Provider(issuer, {
  clients,
  jwks: { keys: [jwk] },
  interactions: { policy },
  pkce: { required: () => true },
  scopes: ['openid', 'offline_access'],
  extraTokenClaims: async (_ctx, token) => extraClaims[token.accountId ?? token.clientId],
  findAccount: (_ctx, sub) => (users[sub] ? { accountId: sub, claims: () => ({ sub }) } : undefined),
  // The grant a sign-in gets: openid, and the API scopes this user holds.
  loadExistingGrant: async (ctx) => {
    const { client, session } = ctx.oidc;
    const existing = session.grantIdFor(client.clientId);
    if (existing) return ctx.oidc.provider.Grant.find(existing);
    const granted = users[session.accountId];
    if (granted === undefined) return undefined;
    const grant = new ctx.oidc.provider.Grant({ clientId: client.clientId, accountId: session.accountId });
    grant.addOIDCScope('openid offline_access');
    grant.addResourceScope(audience, granted);
    await grant.save();
    return grant;
  },
  features: {
    devInteractions: { enabled: true },
    clientCredentials: { enabled: Boolean(machineSecret) },
    resourceIndicators: {
      enabled: true,
      defaultResource: (_ctx, _client, oneOf) => oneOf || audience,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, resource, client) => {
        if (resource !== audience && !(client.clientId.startsWith('machine') && resource.startsWith('urn:'))) {
          throw new Provider.errors.InvalidTarget();
        }
        return {
          audience: resource,
          scope: apiScopes,
          accessTokenFormat: 'jwt',
          accessTokenTTL: client.clientId === 'machine-short' ? 1 : accessTtl,
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
  // The dashboard is a public browser client: a refresh token lets it renew its access
  // token without a redirect (rotated on every use).
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  clientBasedCORS: (_ctx, origin, client) => client.redirectUris.some((u) => new URL(u).origin === origin),
  ttl: {
    AccessToken: accessTtl, AuthorizationCode: 60, Grant: 3600, IdToken: 3600,
    Interaction: 600, RefreshToken: 3600, Session: 3600,
    ClientCredentials: (_ctx, _token, client) => (client.clientId === 'machine-short' ? 1 : accessTtl),
  },
});
provider.on('grant.success', (ctx) => {
  console.log(JSON.stringify({ event: 'grant', grantType: ctx.oidc.params.grant_type }));
});
server.on('request', provider.callback());
console.log(JSON.stringify({ issuer }));
