// A real OpenID Connect provider for the SSO tests: panva's certified
// `oidc-provider` (pinned in package.json), configured with one confidential
// client and a few in-memory accounts, listening on 127.0.0.1 only.
//
// It is test infrastructure, never production: it uses oidc-provider's
// development interactions (a login form that accepts any password, then a
// consent form), the in-memory adapter, and throwaway cookie keys.
//
// Configuration (environment variables; the port may also be argv[2]):
//   OIDC_PORT                 port to listen on; 0 or unset = pick a free one
//   OIDC_CLIENT_ID            client_id                        (required)
//   OIDC_CLIENT_SECRET        client_secret                    (required)
//   OIDC_REDIRECT_URI         the client's only redirect_uri   (required)
//   OIDC_ACCOUNTS             JSON object {accountId: {claims...}}; an unknown
//                             login is refused, and so is a wrong password if
//                             the account has a "password" member (it is never
//                             a claim). Default: one verified "alice".
//   OIDC_JWKS                 JSON JWK Set with the PRIVATE signing keys; unset =
//                             generate an RSA 2048 key at start-up
//   OIDC_ID_TOKEN_ALG         client's id_token_signed_response_alg (RS256)
//   OIDC_TOKEN_AUTH_METHOD    client's token_endpoint_auth_method
//                             (client_secret_basic)
//   OIDC_CONFORM_ID_TOKEN_CLAIMS  "false" puts scope claims (email, name...) in
//                             the ID token too; default "true" (the spec's
//                             behaviour: they are only served by userinfo)
//   OIDC_ID_TOKEN_TTL         ID token lifetime in seconds (3600)
//
// Once it listens it prints one line to stdout:
//   OIDC_PROVIDER_READY http://127.0.0.1:<port>
// The issuer is exactly that URL.

import { createServer } from 'node:http';
import { generateKeyPairSync, randomBytes } from 'node:crypto';

import Provider from 'oidc-provider';

function required(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`oidc test provider: ${name} must be set`);
    process.exit(2);
  }
  return value;
}

function json(name, fallback) {
  const raw = process.env[name];
  if (!raw) return fallback;
  try {
    return JSON.parse(raw);
  } catch (err) {
    console.error(`oidc test provider: ${name} is not valid JSON: ${err.message}`);
    process.exit(2);
  }
  return undefined;
}

const port = Number(process.argv[2] ?? process.env.OIDC_PORT ?? 0);
const clientId = required('OIDC_CLIENT_ID');
const clientSecret = required('OIDC_CLIENT_SECRET');
const redirectUri = required('OIDC_REDIRECT_URI');
const idTokenAlg = process.env.OIDC_ID_TOKEN_ALG || 'RS256';
const tokenAuthMethod = process.env.OIDC_TOKEN_AUTH_METHOD || 'client_secret_basic';
const conformIdTokenClaims = (process.env.OIDC_CONFORM_ID_TOKEN_CLAIMS ?? 'true') !== 'false';
const idTokenTtl = Number(process.env.OIDC_ID_TOKEN_TTL || 3600);

const accounts = json('OIDC_ACCOUNTS', {
  alice: {
    email: 'alice@example.com',
    email_verified: true,
    name: 'Alice Example',
    given_name: 'Alice',
    family_name: 'Example',
  },
});

let jwks = json('OIDC_JWKS', undefined);
if (!jwks) {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  jwks = {
    keys: [{ ...privateKey.export({ format: 'jwk' }), kid: randomBytes(8).toString('hex'), use: 'sig', alg: 'RS256' }],
  };
}

const server = createServer();

server.listen(port, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;

  const provider = new Provider(issuer, {
    clients: [{
      client_id: clientId,
      client_secret: clientSecret,
      redirect_uris: [redirectUri],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: tokenAuthMethod,
      id_token_signed_response_alg: idTokenAlg,
    }],
    jwks,
    responseTypes: ['code'],
    pkce: { required: () => true },
    conformIdTokenClaims,
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name', 'given_name', 'family_name', 'preferred_username'],
    },
    features: {
      devInteractions: { enabled: true },
    },
    cookies: { keys: [randomBytes(32).toString('hex')] },
    ttl: { IdToken: idTokenTtl },
    async findAccount(ctx, id) {
      if (!Object.prototype.hasOwnProperty.call(accounts, id)) return undefined;
      const claims = accounts[id];
      return {
        accountId: id,
        async claims() {
          const { password, ...rest } = claims;
          return { ...rest, sub: rest.sub ?? id };
        },
      };
    },
  });

  // The dev login form accepts any login; refuse unknown accounts (and a wrong
  // password when the account has a "password" member) the way a real login
  // page would: the user does not get in, the client gets error=access_denied.
  provider.use(async (ctx, next) => {
    if (ctx.method !== 'POST' || !/^\/interaction\/[^/]+$/.test(ctx.path)
        || !ctx.is('application/x-www-form-urlencoded')) {
      return next();
    }
    const chunks = [];
    for await (const chunk of ctx.req) chunks.push(chunk);
    const body = Object.fromEntries(new URLSearchParams(Buffer.concat(chunks).toString()));
    ctx.request.body = body; // oidc-provider's own parser falls back to it
    if (body.prompt === 'login') {
      const account = Object.prototype.hasOwnProperty.call(accounts, body.login)
        ? accounts[body.login] : undefined;
      if (!account || (account.password !== undefined && account.password !== body.password)) {
        await provider.interactionFinished(ctx.req, ctx.res, {
          error: 'access_denied',
          error_description: account ? 'wrong password' : 'unknown account',
        }, { mergeWithLastSubmission: false });
        return undefined;
      }
    }
    return next();
  });

  // Make failures visible in the test log (stderr).
  provider.on('server_error', (ctx, err) => console.error('server_error', err));
  provider.on('grant.error', (ctx, err) => console.error('grant.error', err.message));
  provider.on('authorization.error', (ctx, err) => console.error('authorization.error', err.message));

  server.on('request', provider.callback());
  process.stdout.write(`OIDC_PROVIDER_READY ${issuer}\n`);
});

server.on('error', (err) => {
  console.error(`oidc test provider: cannot listen: ${err.message}`);
  process.exit(1);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    server.close();
    process.exit(0);
  });
}
