// Passkeys in the browser (WebAuthn): the service's options go to navigator.credentials and
// the answer goes back as JSON. The browser's own JSON helpers do the base64url work
// (PublicKeyCredential.parse*OptionsFromJSON, credential.toJSON()); a browser without them
// is told so instead of failing half-way.
import { ApiError, post } from './api.js';

export function supported() {
  const PKC = window.PublicKeyCredential;
  return !!(PKC && typeof PKC.parseCreationOptionsFromJSON === 'function'
    && typeof PKC.parseRequestOptionsFromJSON === 'function' && navigator.credentials);
}

function browserError(err, rpId) {
  // NotAllowedError: the person closed the prompt, it timed out, or no passkey was chosen.
  if (err && err.name === 'NotAllowedError') return new ApiError(0, 'PasskeyCancelled', 'No passkey was used: the prompt was closed or timed out.');
  if (err && err.name === 'InvalidStateError') return new ApiError(0, 'PasskeyExists', 'This authenticator already holds a passkey for your account.');
  if (err && err.name === 'SecurityError') {
    const here = window.location.hostname;
    // The relying party names another host (localhost, the page at 127.0.0.1): say where to go.
    if (rpId && here !== rpId && !here.endsWith(`.${rpId}`)) {
      const there = `${window.location.protocol}//${rpId}${window.location.port ? `:${window.location.port}` : ''}/`;
      return new ApiError(0, 'PasskeyOrigin', `Passkeys on this installation belong to ${rpId}, not ${here}: open the console at ${there} (WEBAUTHN_RP_ID, WEBAUTHN_ORIGINS).`);
    }
    return new ApiError(0, 'PasskeyOrigin', 'This page’s address is not the one passkeys are set up for on this installation (WEBAUTHN_RP_ID, WEBAUTHN_ORIGINS).');
  }
  return err;
}

function unsupported() {
  return new ApiError(0, 'PasskeyUnsupported', 'This browser cannot use passkeys here. Use a current browser, or sign in with your password.');
}

/** Make a passkey for the signed-in user; password: theirs, when they have one. */
export async function register(password, name) {
  if (!supported()) throw unsupported();
  const begun = await post('/auth/passkeys/registration/options', { password: password || null });
  let credential;
  try {
    credential = await navigator.credentials.create({ publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(begun.options) });
  } catch (err) { throw browserError(err, begun.options.rp && begun.options.rp.id); }
  return (await post('/auth/passkeys', { ceremony: begun.ceremony, credential: credential.toJSON(), name: name || null })).passkey;
}

/** Sign in: with a passkey alone ({}), or as the second factor ({email_address, password}).
 * Resolves to the session result, as /auth/login's. */
export async function signIn(credentials = {}) {
  if (!supported()) throw unsupported();
  const begun = await post('/auth/passkeys/login/options', credentials, { auth: false });
  let credential;
  try {
    credential = await navigator.credentials.get({ publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(begun.options) });
  } catch (err) { throw browserError(err, begun.options.rpId); }
  return post('/auth/passkeys/login', { ceremony: begun.ceremony, credential: credential.toJSON() }, { auth: false });
}
