// An OpenID provider for the suite (the certified `oidc-provider` from npm, installed by
// `scripts/services oidc`): issues JWT access tokens for the hub's API with the client
// credentials grant, each client standing for a person with roles.
//
//   MODULES=<cache>/oidc/node_modules ISSUER=http://127.0.0.1:PORT PORT=PORT AUDIENCE=streaming-hub \
//   CLIENTS='[{"client_id":"ana","client_secret":"…","roles":["acme:admin"]}]' node provider.mjs
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
    })),
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
