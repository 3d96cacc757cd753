// "Send a test" of the template editor: the preview as it is now (the editor's text, saved
// or not, rendered with the model by POST /templates/{permalink}/render) goes out as one
// message to an address the person chooses, tagged template-test, through the same
// pipeline as any other mail (so a capture relay or Development mode keeps it).
import { get, post } from '../../api.js';
import { form, h, link, notice } from '../../ui.js';
import { adminBase, serverBase } from './base.js';

/** The form; render() resolves to {subject, html_body, text_body} of the preview now. */
export async function testSend(ctx, render) {
  const domains = await get(`${adminBase(ctx)}/domains`, { params: { per_page: 100 } })
    .then((d) => d.domains.filter((x) => x.verified)).catch(() => []);
  const done = h('div', { 'aria-live': 'polite' });
  if (!domains.length) {
    return h('div', {}, notice('Verify a sending domain of this server to send a test.', 'info'));
  }
  return h('div', {}, done, form({
    className: 'inline',
    fields: [
      { name: 'to', label: 'Send a test to', type: 'email', required: true, value: ctx.me.user.email_address, autocomplete: 'email' },
      { name: 'from', label: 'From', required: true, value: `test@${domains[0].name}`,
        help: `An address at a verified domain of this server (${domains.map((d) => d.name).join(', ')}).` },
    ],
    submit: 'Send test',
    onSubmit: async (v) => {
      done.replaceChildren();
      const parts = await render();
      const result = await post('/messages', {
        from: v.from.trim(), to: [v.to.trim()], subject: parts.subject, html_body: parts.html_body,
        text_body: parts.text_body, tag: 'template-test',
      }, { server: ctx.server });
      const [r] = result.recipients;
      done.replaceChildren(notice(h('span', {}, `Test sent to ${r.rcpt_to}: `,
        link(`${serverBase(ctx)}/messages/${r.id}`, `message ${r.id}`), ` (${r.status}).`), 'success'));
    },
  }));
}
