// A mail's HTML shown as a mail client shows it (inline styles, <style> blocks, images) and
// kept away from the console: the service holds the HTML for a few minutes behind a signed
// URL of its own (POST /server/mail_frames, docs/api.md#mail-frames) and serves it with a
// policy that allows styles and images and nothing else. The frame is sandboxed (no
// scripts, an opaque origin: it cannot read this page or its token). A srcdoc or blob:
// frame would inherit the console's own policy (no inline styles): hence the URL.
//
//   const preview = mailFrame({ server: ctx.server, title: 'HTML preview' });
//   page.append(preview.el);
//   await preview.show({ kind: 'template', id: permalink, parts: { template_model } });
//
// A kind is whatever the service knows (services/mailframes/kinds.py); nothing here changes
// when it learns another.
import { post } from './api.js';
import { h } from './ui.js';

export function mailFrame({ server, title = 'HTML preview', empty = 'Nothing to show yet.' }) {
  const el = h('div', { class: 'mail-frame' });
  const note = (text) => h('p', { class: 'mail-frame-note' }, text);
  el.append(note(empty));
  let ticket = 0;

  return {
    el,
    /** Ask for a frame of {kind, id, parts} and show it; an ApiError is thrown to the caller. */
    async show({ kind, id, parts }) {
      const mine = ++ticket;
      const frame = (await post('/mail_frames', { kind, id, parts }, { server })).mail_frame;
      if (mine !== ticket) return; // a later show() was asked for meanwhile: it wins
      // A new element per document rather than a new src: changing an iframe's src adds an
      // entry to the tab's history (Back would step through previews). The old one stays
      // until the new one has loaded, so typing does not flicker.
      const next = h('iframe', { sandbox: '', referrerpolicy: 'no-referrer', title, src: frame.path, hidden: true });
      next.addEventListener('load', () => {
        if (mine !== ticket) { next.remove(); return; }
        for (const old of [...el.children]) if (old !== next) old.remove();
        next.hidden = false;
      }, { once: true });
      el.append(next);
    },
    /** Show a line of text instead of a frame (no HTML part, an error shown elsewhere). */
    clear(text = empty) {
      ++ticket;
      el.replaceChildren(note(text));
    },
  };
}
