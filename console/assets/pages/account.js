// The signed-in user's own account: profile, password, two-factor authentication (with a
// QR code), passkeys, and the sessions signed in elsewhere.
import { del, get, patch, post, session } from '../api.js';
import { actionButton, copyable, form, h, notice, section, table, when } from '../ui.js';
import * as passkeys from '../passkeys.js';

async function qrCode(text) {
  // The only third-party code of the console (npm qrcode-generator, copied by make install),
  // loaded only here. Without it (no npm at install time) the secret below still works.
  let qrcode;
  try {
    ({ default: qrcode } = await import('../vendor/qrcode.mjs'));
  } catch {
    return notice('The QR code is not available on this installation: type the secret into your app.', 'warn');
  }
  const qr = qrcode(0, 'M');
  qr.addData(text);
  qr.make();
  const doc = new DOMParser().parseFromString(qr.createSvgTag({ cellSize: 4, margin: 4, scalable: true }), 'image/svg+xml');
  const svg = document.importNode(doc.documentElement, true);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', 'QR code for your authenticator app');
  return h('div', { class: 'qr' }, svg);
}

function twoFactor(ctx, user) {
  const box = h('div', {});
  if (user.totp_enabled) {
    box.append(notice('Two-factor authentication is on: signing in asks for a code from your authenticator app.', 'success'),
      form({
        className: 'inline',
        fields: [{ name: 'password', label: 'Your password', type: 'password', required: true, autocomplete: 'current-password' }],
        submit: 'Turn off two-factor authentication',
        onSubmit: async (v) => { await post('/auth/totp/disable', v); await ctx.refreshMe(); ctx.render(); },
      }));
    return box;
  }
  box.append(h('p', {}, 'Protect your account with a code from an authenticator app (any TOTP app) as well as your password.'),
    actionButton('Set up two-factor authentication', async () => {
      const enrolment = await post('/auth/totp/enroll');
      box.replaceChildren(
        h('p', {}, 'Scan this code with your authenticator app, or type the secret into it. Then enter the six-digit code it shows.'),
        await qrCode(enrolment.otpauth_url),
        h('p', {}, 'Secret: ', copyable(enrolment.secret, 'Copy the secret')),
        form({
          className: 'inline',
          fields: [{ name: 'code', label: 'Code from the app', required: true, autocomplete: 'one-time-code', inputmode: 'numeric' }],
          submit: 'Turn on',
          onSubmit: async (v) => { await post('/auth/totp/activate', { code: v.code.trim() }); await ctx.refreshMe(); ctx.render(); },
        }));
    }, { kind: 'primary' }));
  return box;
}

// Passkeys: each one signs in alone (with the device's PIN or biometrics) and is a second
// factor after the password. Adding or removing one asks for the password, when there is one.
function passkeyList(ctx, user, keys) {
  const box = h('div', {});
  const password = user.has_password
    ? [{ name: 'password', label: 'Password, to confirm', type: 'password', required: true, autocomplete: 'current-password' }] : [];
  const removeForm = (p) => form({
    className: 'inline', fields: password, submit: `Remove “${p.name}”`,
    onSubmit: async (v) => { await post(`/auth/passkeys/${p.id}/remove`, v); await ctx.render(); },
  });
  const renameForm = (p) => form({
    className: 'inline', fields: [{ name: 'name', label: 'New name', required: true, value: p.name }], submit: 'Rename',
    onSubmit: async (v) => { await patch(`/auth/passkeys/${p.id}`, v); await ctx.render(); },
  });
  box.append(
    h('p', {}, 'A passkey signs you in with this device’s screen lock or a security key instead of your password and code. Once you have one, it is also asked for after your password.'),
    table([
      { label: 'Name', render: (p) => p.name },
      { label: 'Synced', render: (p) => (p.backed_up ? 'yes' : 'this device only') },
      { label: 'Added', render: (p) => when(p.created_at) },
      { label: 'Last used', render: (p) => (p.last_used_at ? when(p.last_used_at) : 'never') },
      { label: 'Actions', render: (p) => [
        actionButton('Rename', async (b) => { b.closest('td').replaceChildren(renameForm(p)); }),
        actionButton('Remove', async (b) => { b.closest('td').replaceChildren(removeForm(p)); }, { kind: 'danger' })] },
    ], keys, { caption: 'Passkeys', empty: 'No passkeys yet.' }));
  if (!passkeys.supported()) {
    box.append(notice('This browser cannot make passkeys. Use a current browser to add one.', 'warn'));
    return box;
  }
  box.append(form({
    className: 'inline',
    fields: [{ name: 'name', label: 'Name for the new passkey', placeholder: 'e.g. Work laptop' }, ...password],
    submit: 'Add a passkey',
    onSubmit: async (v) => { await passkeys.register(v.password, v.name.trim()); await ctx.render(); },
  }));
  return box;
}

export async function account(ctx) {
  const [me, sessions, keys] = await Promise.all([get('/auth/me'), get('/auth/sessions', { params: { per_page: 100 } }),
    get('/auth/passkeys')]);
  const user = me.user;
  const others = sessions.sessions.filter((s) => !s.current);
  const saved = h('div', { 'aria-live': 'polite' });
  return h('div', {}, h('h1', {}, 'Your account'),
    h('p', { class: 'sub' }, user.email_address, user.admin ? ' · instance administrator' : ''),
    h('div', { class: 'grid2' },
      section('Profile', null, saved, form({
        fields: [
          { name: 'first_name', label: 'First name', value: user.first_name, autocomplete: 'given-name' },
          { name: 'last_name', label: 'Last name', value: user.last_name, autocomplete: 'family-name' },
        ],
        submit: 'Save profile',
        onSubmit: async (v) => { await patch('/auth/me', v); await ctx.refreshMe(); saved.replaceChildren(notice('Saved.', 'success')); },
      })),
      user.has_password ? section('Email address', null, form({
        fields: [
          { name: 'email_address', label: 'New email address', type: 'email', required: true, value: user.email_address, autocomplete: 'email' },
          { name: 'current_password', label: 'Your password', type: 'password', required: true, autocomplete: 'current-password', help: 'Needed to move your account to another address; you sign in with the new one afterwards.' },
        ],
        submit: 'Change email address',
        onSubmit: async (v) => { await patch('/auth/me', v); await ctx.refreshMe(); await ctx.render(); },
      })) : null,
      user.has_password ? section('Password', null, form({
        fields: [
          { name: 'current_password', label: 'Current password', type: 'password', required: true, autocomplete: 'current-password' },
          { name: 'new_password', label: 'New password', type: 'password', required: true, autocomplete: 'new-password' },
        ],
        submit: 'Change password',
        onSubmit: async (v, f) => {
          // Every session is revoked; the answer carries this tab's fresh one.
          const data = await post('/auth/password', v);
          session.set(data.session_token, data.expires_at);
          f.reset();
          await ctx.render();
          document.querySelector('#main [aria-live]').replaceChildren(notice('Password changed. Every other session was signed out.', 'success'));
        },
      })) : null),
    section('Two-factor authentication', null, twoFactor(ctx, user)),
    section('Passkeys', null, passkeyList(ctx, user, keys.passkeys)),
    section('Sessions', others.length ? actionButton('Sign out all other sessions', async () => {
      await post('/auth/sessions/revoke_others'); ctx.render();
    }, { kind: 'danger' }) : null, table([
      { label: 'Where', render: (s) => [s.current ? h('strong', {}, 'This browser') : '', s.current ? ' · ' : '', s.user_agent || 'unknown client'] },
      { label: 'IP address', render: (s) => s.ip_address || '—' },
      { label: 'Signed in', render: (s) => when(s.created_at) },
      { label: 'Last used', render: (s) => when(s.last_used_at) },
      { label: 'Expires', render: (s) => when(s.expires_at) },
      { label: 'Actions', render: (s) => (s.current ? '' : actionButton('Sign out', async () => { await del(`/auth/sessions/${s.id}`); ctx.render(); })) },
    ], sessions.sessions, { caption: 'Sessions' })));
}
