// Pages before signing in: sign-in (password, then the TOTP code or a passkey; or a passkey
// alone), registration, the first run (the first instance admin, made with the operator's
// admin API key), forgotten passwords, the password-reset and invitation links.
import { ApiError, enc, get, post, session } from '../api.js';
import { actionButton, form, h, link, notice, when } from '../ui.js';
import * as passkeys from '../passkeys.js';

async function options() {
  return (await get('/auth/options', { auth: false })).options;
}

function page(title, ...body) {
  return h('div', { class: 'narrow' }, h('h1', {}, title), ...body);
}

export async function signIn(ctx) {
  if (session.token && ctx.me) { ctx.go(ctx.query.get('next') || '/', { replace: true }); return null; }
  const next = ctx.query.get('next');
  const box = h('div', {});
  const ssoError = ctx.query.get('sso_error');
  // The form shows at once; what the installation offers (first run, SSO, registration)
  // is filled in when /auth/options answers.
  const before = h('div', {});
  const after = h('div', {});
  const links = h('p', { class: 'links' }, link('/forgot-password', 'Forgot your password?'));

  // The second factor as a passkey: the password is checked again with the options.
  const passkeyButton = (credentials, label) => actionButton(label,
    async () => ctx.signedIn(await passkeys.signIn(credentials), next), { kind: 'wide' });

  // Signing in with a passkey alone (its own user verification stands for both factors).
  const passkeyAlone = passkeys.supported() ? passkeyButton({}, 'Use a passkey') : null;

  const passkeyStep = (credentials) => {
    if (passkeyAlone) passkeyAlone.remove();
    box.replaceChildren(h('h2', {}, 'Two-factor authentication'),
      h('p', {}, 'This account uses a passkey as its second factor. Confirm with it to finish signing in.'),
      passkeyButton(credentials, 'Use your passkey'));
    box.querySelector('button').focus();
  };

  const totpStep = (credentials) => {
    const f = form({
      fields: [{ name: 'totp_code', label: 'Authentication code', required: true, autocomplete: 'one-time-code', inputmode: 'numeric',
        help: 'The six-digit code from your authenticator app.' }],
      submit: 'Verify',
      onSubmit: async (v) => {
        const data = await post('/auth/login', { ...credentials, totp_code: v.totp_code.trim() }, { auth: false });
        ctx.signedIn(data, next);
      },
    });
    if (passkeyAlone) passkeyAlone.remove();
    box.replaceChildren(h('h2', {}, 'Two-factor authentication'), f,
      passkeys.supported() ? h('p', { class: 'links' }, 'Or, if you added one: ', passkeyButton(credentials, 'Use a passkey instead')) : null);
    f.inputs.totp_code.focus();
  };

  const passwordForm = form({
    fields: [
      { name: 'email_address', label: 'Email address', type: 'email', required: true, autocomplete: 'username' },
      { name: 'password', label: 'Password', type: 'password', required: true, autocomplete: 'current-password' },
    ],
    submit: 'Sign in',
    onSubmit: async (v) => {
      try {
        const data = await post('/auth/login', v, { auth: false });
        ctx.signedIn(data, next);
      } catch (err) {
        if (err instanceof ApiError && err.code === 'TOTPRequired') { totpStep(v); return; }
        if (err instanceof ApiError && err.code === 'PasskeyRequired') { passkeyStep(v); return; }
        if (err instanceof ApiError && err.code === 'InvalidCredentials') err.field = 'password';
        throw err;
      }
    },
  });
  box.append(passwordForm);
  if (passkeyAlone) after.append(passkeyAlone);

  options().then((opts) => {
    if (opts.first_run) {
      // No user exists, so no one can sign in: the first visit is the set-up.
      if (location.pathname === '/sign-in') ctx.go('/first-run', { replace: true });
      return;
    }
    if (opts.sso) {
      after.append(h('button', { type: 'button', class: 'wide', onclick: async (e) => {
        e.target.disabled = true;
        try {
          const data = await get('/auth/oidc/start', { auth: false });
          location.assign(data.authorization_url);
        } catch (err) { e.target.disabled = false; box.prepend(notice(err.message, 'error')); }
      } }, 'Sign in with single sign-on'));
    }
    if (opts.registration) links.append(' · ', link('/register', 'Create an account'));
  }).catch((err) => before.append(notice(err.message, 'error')));

  return page('Sign in', before,
    ssoError ? notice(`Single sign-on failed: ${ssoError}`, 'error') : null,
    next ? notice('Sign in to continue to the page you asked for.', 'info') : null,
    box, after, links);
}

export async function register(ctx) {
  const opts = await options();
  if (!opts.registration) {
    return page('Create an account', notice('Self-registration is turned off on this installation. Ask an administrator of your organization for an invitation.', 'info'),
      h('p', {}, link('/sign-in', 'Sign in')));
  }
  return page('Create an account', form({
    fields: [
      { name: 'email_address', label: 'Email address', type: 'email', required: true, autocomplete: 'email' },
      { name: 'first_name', label: 'First name', autocomplete: 'given-name' },
      { name: 'last_name', label: 'Last name', autocomplete: 'family-name' },
      { name: 'password', label: 'Password', type: 'password', required: true, autocomplete: 'new-password',
        help: `At least ${opts.minimum_password_length} characters.` },
    ],
    submit: 'Create account',
    onSubmit: async (v) => ctx.signedIn(await post('/auth/register', v, { auth: false }), '/'),
  }), h('p', { class: 'links' }, 'Have an account? ', link('/sign-in', 'Sign in')));
}

export async function firstRun(ctx) {
  const opts = await options();
  if (!opts.first_run) {
    return page('Set up this installation', notice('This installation already has users. Sign in, or ask an instance administrator for an account.', 'info'),
      h('p', {}, link('/sign-in', 'Sign in')));
  }
  return page('Set up this installation',
    h('p', {}, 'Create the first instance administrator. Type the admin API key the service was started with (ADMIN_API_KEY): it is used for this one request and never stored by the console.'),
    form({
      fields: [
        { name: 'admin_key', label: 'Admin API key', type: 'password', required: true, autocomplete: 'off' },
        { name: 'email_address', label: 'Your email address', type: 'email', required: true, autocomplete: 'username' },
        { name: 'first_name', label: 'First name', autocomplete: 'given-name' },
        { name: 'last_name', label: 'Last name', autocomplete: 'family-name' },
        { name: 'password', label: 'Password', type: 'password', required: true, autocomplete: 'new-password',
          help: `At least ${opts.minimum_password_length} characters.` },
      ],
      submit: 'Create administrator',
      onSubmit: async (v) => {
        const { admin_key: adminKey, ...user } = v;
        try {
          await post('/admin/users', { ...user, admin: true }, { adminKey });
        } catch (err) {
          if (err instanceof ApiError && err.code === 'Unauthorized') err.field = 'admin_key';
          throw err;
        }
        const data = await post('/auth/login', { email_address: user.email_address, password: user.password }, { auth: false });
        ctx.signedIn(data, '/');
      },
    }));
}

export async function forgotPassword() {
  const done = h('div', {});
  return page('Forgot your password?',
    h('p', {}, 'This service does not send email to people itself: an operator or your organization’s tooling hands out reset links. Ask an instance administrator for one; the link opens a page here where you choose a new password.'),
    done,
    form({
      fields: [{ name: 'email_address', label: 'Email address', type: 'email', required: true, autocomplete: 'username' }],
      submit: 'Request a reset',
      onSubmit: async (v) => {
        const data = await post('/auth/password-reset', v, { auth: false });
        done.replaceChildren(notice(data.message || 'Request recorded.', 'success'));
      },
    }),
    h('p', { class: 'links' }, link('/sign-in', 'Back to sign in')));
}

export async function passwordReset(ctx) {
  const opts = await options();
  const box = h('div', {});
  box.append(form({
    fields: [
      { name: 'password', label: 'New password', type: 'password', required: true, autocomplete: 'new-password',
        help: `At least ${opts.minimum_password_length} characters.` },
    ],
    submit: 'Set password',
    onSubmit: async (v) => {
      try {
        await post('/auth/password-reset/complete', { token: ctx.params.token, password: v.password }, { auth: false });
      } catch (err) {
        if (err instanceof ApiError && err.field === 'token') err.field = null;
        throw err;
      }
      session.clear();
      box.replaceChildren(notice('Your password is changed and every session was signed out. Sign in with the new password.', 'success'),
        h('p', {}, link('/sign-in', 'Sign in')));
    },
  }));
  return page('Choose a new password', box);
}

export async function invitation(ctx) {
  const token = ctx.params.token;
  let inv;
  try {
    inv = (await get(`/auth/invitations/${enc(token)}`, { auth: false })).invitation;
  } catch (err) {
    return page('Invitation', notice(`${err.message} Ask the person who invited you for a new link.`, 'error'));
  }
  const intro = h('p', {}, `You are invited to join `, h('strong', {}, inv.organization.name),
    ` as ${inv.role} (${inv.email_address}). The invitation expires ${when(inv.expires_at)}.`);
  const joined = (data) => ctx.go(`/orgs/${enc(inv.organization.permalink)}`, { replace: true });
  if (inv.account_exists) {
    if (!ctx.me) {
      return page('Invitation', intro, notice('You already have an account: sign in to accept.', 'info'),
        h('p', {}, link(`/sign-in?next=${enc(`/invitations/${token}`)}`, 'Sign in to accept', { class: 'button primary' })));
    }
    const accept = form({
      fields: [], submit: 'Accept invitation',
      onSubmit: async () => { await post('/auth/invitations/accept', { token }); await ctx.refreshMe(); joined(); },
    });
    return page('Invitation', intro, accept);
  }
  const opts = await options();
  return page('Invitation', intro, h('p', {}, 'Create your account to join.'), form({
    fields: [
      { name: 'first_name', label: 'First name', autocomplete: 'given-name' },
      { name: 'last_name', label: 'Last name', autocomplete: 'family-name' },
      { name: 'password', label: 'Password', type: 'password', required: true, autocomplete: 'new-password',
        help: `At least ${opts.minimum_password_length} characters.` },
    ],
    submit: 'Create account and join',
    onSubmit: async (v) => {
      const data = await post('/auth/invitations/accept', { token, ...v }, { auth: false });
      ctx.signedIn(data, `/orgs/${enc(inv.organization.permalink)}`);
    },
  }));
}
