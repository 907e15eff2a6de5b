// An OpenID provider for the suite (the certified `oidc-provider` from npm, installed by
// `scripts/services oidc`): issues JWT access tokens for the hub's API with the client
// credentials grant, each client standing for a person with roles; and signs people in to the
// console with the authorization code flow (its development login page: any password), their
// ID tokens carrying their roles.
//
//   MODULES=<cache>/oidc/node_modules ISSUER=http://127.0.0.1:PORT PORT=PORT AUDIENCE=streaming-hub \
//   CLIENTS='[{"client_id":"ana","client_secret":"…","roles":["acme:admin"]}]' \
//   WEB_CLIENTS='[{"client_id":"console","client_secret":"…","redirect_uris":["http://…/console/sso/callback"]}]' \
//   PEOPLE='{"ana":["acme:admin"],"vera":["acme:viewer"]}' node provider.mjs
//
// Prints "ready" once it listens. Keys are made at start (ES256); POST /rotate adds a new key,
// signs with it, and keeps the old one published until POST /retire.
import http from 'node:http';
import { createRequire } from 'node:module';
import path from 'node:path';

// The packages are in the cache `scripts/services oidc` installed them into (MODULES: its
// node_modules), not beside this file.
const require = createRequire(path.join(process.env.MODULES, 'noop.js'));
const { default: Provider } = await import(require.resolve('oidc-provider'));
const { generateKeyPair, exportJWK } = await import(require.resolve('jose'));

const { ISSUER, PORT, AUDIENCE } = process.env;
const clients = JSON.parse(process.env.CLIENTS || '[]');
const webClients = JSON.parse(process.env.WEB_CLIENTS || '[]');
const people = JSON.parse(process.env.PEOPLE || '{}');

async function key(kid) {
  const { privateKey } = await generateKeyPair('ES256', { extractable: true });
  return { ...(await exportJWK(privateKey)), kid, alg: 'ES256', use: 'sig' };
}

let keys = [await key('k1')];

function provider() {
  const p = new Provider(ISSUER, {
    clients: clients.map((c) => ({
      client_id: c.client_id,
      client_secret: c.client_secret,
      grant_types: ['client_credentials'],
      redirect_uris: [],
      response_types: [],
      id_token_signed_response_alg: 'ES256',
    })).concat(webClients.map((c) => ({
      client_id: c.client_id,
      client_secret: c.client_secret,
      grant_types: ['authorization_code'],
      response_types: ['code'],
      redirect_uris: c.redirect_uris,
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: 'ES256',
    }))),
    // A person signed in on the development login page is one of PEOPLE, with their roles.
    findAccount: (ctx, id) => (people[id] ? {
      accountId: id,
      claims: () => ({ sub: id, roles: people[id], preferred_username: id }),
    } : undefined),
    claims: { openid: ['sub', 'roles'], profile: ['preferred_username'] },
    // Every claim in the ID token (the hub reads the roles there).
    conformIdTokenClaims: false,
    // No consent page: the console's client is the organization's own.
    loadExistingGrant: async (ctx) => {
      const id = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
      if (id) return ctx.oidc.provider.Grant.find(id);
      const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
      grant.addOIDCScope('openid profile');
      grant.addOIDCClaims(['sub', 'roles', 'preferred_username']);
      grant.addResourceScope(AUDIENCE, 'api');
      await grant.save();
      return grant;
    },
    features: {
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => AUDIENCE,
        useGrantedResource: () => true,
        getResourceServerInfo: () => ({
          scope: 'api',
          audience: AUDIENCE,
          accessTokenTTL: 600,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'ES256' } },
        }),
      },
    },
    // The newest key signs (the provider signs with the first of its kind).
    jwks: { keys: [...keys].reverse() },
    extraTokenClaims: (ctx, token) => {
      const c = clients.find((x) => x.client_id === token.clientId);
      return c ? { roles: c.roles, preferred_username: c.client_id } : {};
    },
  });
  p.proxy = false;
  return p;
}

let current = provider();

const server = http.createServer(async (req, res) => {
  if (req.method === 'POST' && req.url === '/rotate') {
    keys.push(await key(`k${keys.length + 1}`));
    current = provider();
    res.end('rotated');
    return;
  }
  if (req.method === 'POST' && req.url === '/retire') {
    keys = keys.slice(-1);
    current = provider();
    res.end('retired');
    return;
  }
  current.callback()(req, res);
});
server.listen(Number(PORT), '127.0.0.1', () => console.log('ready'));
