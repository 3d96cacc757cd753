// A mail as its recipient reads it, beside its raw source: the HTML part in the sandboxed
// mail frame (mailframe.js: kind message or captured), the text part, the headers, and the
// attachments to download; the raw source loaded on request. Used by the message page and
// the captured-mail inbox.
//
//   await mailView(ctx, { kind: 'message', id, base: `/messages/${id}` })
//
// base: the messaging-surface path with /content (or the detail answer, given as content),
// /attachments/{index} and /raw under it.
import { get } from './api.js';
import { mailFrame } from './mailframe.js';
import { h, notice, section, table } from './ui.js';

function size(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

function download(ctx, base, a) {
  const button = h('button', { type: 'button', class: 'link' }, a.filename || `part ${a.index + 1}`);
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      const got = (await get(`${base}/attachments/${a.index}`, { server: ctx.server })).attachment;
      const bytes = Uint8Array.from(atob(got.content_base64), (c) => c.charCodeAt(0));
      const url = URL.createObjectURL(new Blob([bytes], { type: got.content_type }));
      const save = h('a', { href: url, download: got.filename || `attachment-${a.index + 1}` });
      document.body.append(save);
      save.click();
      save.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (err) {
      button.after(notice(err.message, 'error'));
    } finally { button.disabled = false; }
  });
  return button;
}

// What stands in for the content once it was erased (the server's content retention or a
// data removal): the record stays, the bytes are gone (the API answers ContentExpired).
export function contentExpired(at) {
  return section('Content', null, notice(`Content expired${at ? ` on ${new Date(at).toLocaleString()}` : ''}: this message's content was erased by the server's content retention or a data removal. Its record, events and delivery attempts are kept.`, 'info'));
}

export async function mailView(ctx, { kind, id, base, content }) {
  let c = content;
  if (!c) {
    try {
      c = (await get(`${base}/content`, { server: ctx.server })).content;
    } catch (err) {
      if (err.code === 'ContentExpired') return contentExpired(null);
      throw err;
    }
  }
  const frame = mailFrame({ server: ctx.server, title: 'The message as its recipient sees it', empty: 'This message has no HTML part.' });
  const problem = h('div', {});
  if (c.html_body !== null) {
    frame.show({ kind, id: String(id) }).catch((err) => { frame.clear('The HTML part could not be shown.'); problem.replaceChildren(notice(err.message, 'error')); });
  }
  const raw = h('div', {});
  const showRaw = h('button', { type: 'button' }, 'Show raw source');
  showRaw.addEventListener('click', async () => {
    showRaw.disabled = true;
    try {
      const r = await get(`${base}/raw`, { server: ctx.server });
      raw.replaceChildren(h('p', { class: 'help' }, `${r.size} bytes${r.signed ? ', exactly as signed for delivery (DKIM-signed)' : ', as submitted (not signed: it was not sent)'}.`), h('pre', { class: 'raw-source' }, r.raw));
    } catch (err) { raw.replaceChildren(notice(err.message, 'error')); showRaw.disabled = false; }
  });
  const headers = h('details', {}, h('summary', {}, `Headers (${c.headers.length})`),
    table([{ label: 'Name', render: (x) => x.name }, { label: 'Value', class: 'wrap', render: (x) => x.value }], c.headers, { caption: 'Headers' }));
  return h('div', { class: 'grid2 mail-view' },
    section('As the recipient sees it', null, problem, frame.el,
      h('h3', {}, 'Text part'), c.text_body !== null ? h('pre', { class: 'text-part' }, c.text_body) : h('p', { class: 'empty' }, 'No text part.'),
      h('h3', {}, `Attachments (${c.attachments.length})`),
      table([
        { label: 'File', render: (a) => download(ctx, base, a) },
        { label: 'Type', render: (a) => a.content_type },
        { label: 'Size', class: 'num', render: (a) => size(a.size) },
        { label: 'Inline', render: (a) => (a.inline ? (a.content_id ? `yes (cid:${a.content_id})` : 'yes') : 'no') },
      ], c.attachments, { caption: 'Attachments', empty: 'No attachments.' }),
      h('p', { class: 'help' }, 'Shown from the source as submitted: the open pixel and tracked links the service adds are left out, so looking at it here is not an open.')),
    section('Raw source', showRaw, headers, raw));
}
