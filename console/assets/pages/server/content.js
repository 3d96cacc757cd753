// Streams (traffic classes) and templates (a Mustache editor with a preview rendered by the
// service's render endpoint, its HTML shown as a mail client shows it: mailframe.js).
import { enc, get, patch, post } from '../../api.js';
import { actionButton, badge, form, h, link, notice, section, table, when } from '../../ui.js';
import { mailFrame } from '../../mailframe.js';
import { serverBase } from './base.js';
import { testSend } from './test_send.js';

export async function streams(ctx) {
  const list = (await get('/streams', { server: ctx.server, params: { per_page: 100, include_archived: true } })).streams;
  const manage = ctx.can('messages.manage');
  return h('div', {}, h('h1', {}, 'Streams'),
    h('p', { class: 'sub' }, 'Streams keep kinds of traffic apart (transactional, broadcast): a send names one with "stream"; lists and statistics keep them apart.'),
    section('Streams', null, table([
      { label: 'Name', render: (s) => [s.name, s.default ? [' ', badge('default', 'role')] : null] },
      { label: 'Permalink', render: (s) => h('code', {}, s.permalink) },
      { label: 'Type', render: (s) => s.stream_type },
      { label: 'Description', render: (s) => s.description || '' },
      { label: 'State', render: (s) => (s.archived ? badge('Archived', 'disabled') : badge('Active', 'active')) },
      { label: 'Messages', render: (s) => link(`${serverBase(ctx)}/messages?stream=${enc(s.permalink)}`, 'View') },
      { label: 'Actions', render: (s) => (manage && !s.default ? actionButton(s.archived ? 'Unarchive' : 'Archive', async () => {
        await post(`/streams/${enc(s.permalink)}/${s.archived ? 'unarchive' : 'archive'}`, {}, { server: ctx.server }); ctx.render();
      }) : '') },
    ], list, { caption: 'Streams' })),
    manage ? section('New stream', null, form({
      className: 'inline',
      fields: [
        { name: 'name', label: 'Name', required: true, placeholder: 'Newsletters' },
        { name: 'stream_type', label: 'Type', type: 'select', options: [['transactional', 'Transactional'], ['broadcast', 'Broadcast']], value: 'transactional' },
        { name: 'description', label: 'Description' },
      ],
      submit: 'Create stream',
      onSubmit: async (v) => {
        const body = { name: v.name, stream_type: v.stream_type };
        if (v.description) body.description = v.description;
        await post('/streams', body, { server: ctx.server }); ctx.render();
      },
    })) : null);
}

export async function templates(ctx) {
  const list = (await get('/templates', { server: ctx.server, params: { per_page: 100, include_archived: true } })).templates;
  const manage = ctx.can('messages.manage');
  const base = serverBase(ctx);
  return h('div', {}, h('h1', {}, 'Templates'),
    h('p', { class: 'sub' }, 'Stored messages with {{ variables }} (a safe Mustache subset), sent with POST /messages/with_template.'),
    section('Templates', null, table([
      { label: 'Name', render: (t) => link(`${base}/templates/${enc(t.permalink)}`, t.name) },
      { label: 'Permalink', render: (t) => h('code', {}, t.permalink) },
      { label: 'State', render: (t) => (t.archived ? badge('Archived', 'disabled') : badge('Active', 'active')) },
      { label: 'Updated', render: (t) => when(t.updated_at) },
    ], list, { caption: 'Templates', empty: 'No template yet.' })),
    manage ? section('New template', null, form({
      className: 'inline',
      fields: [{ name: 'name', label: 'Name', required: true, placeholder: 'Welcome' }],
      submit: 'Create template',
      onSubmit: async (v) => {
        const t = (await post('/templates', { name: v.name, subject: 'Hello {{ name }}', text_body: 'Hello {{ name }}!', html_body: '<p>Hello {{ name }}!</p>' }, { server: ctx.server })).template;
        ctx.go(`${base}/templates/${enc(t.permalink)}`);
      },
    })) : null);
}

export async function template(ctx) {
  const path = `/templates/${enc(ctx.params.permalink)}`;
  const t = (await get(path, { server: ctx.server })).template;
  const manage = ctx.can('messages.manage') && !t.archived;
  const frame = mailFrame({ server: ctx.server, title: 'HTML preview' });
  const subject = h('p', {}, '');
  const text = h('pre', {}, '');
  const problem = h('div', { role: 'alert' });
  const modelInput = h('textarea', { id: 'tpl-model', rows: 6, spellcheck: 'false' });
  modelInput.value = '{\n  "name": "Ada"\n}';

  let editor = null;
  // The editor's text as it is now, saved or not (the render endpoint takes unsaved parts).
  function renderBody() {
    let model;
    try { model = JSON.parse(modelInput.value || '{}'); } catch (err) {
      throw new Error(`The model is not valid JSON: ${err.message}`);
    }
    const body = { template_model: model };
    if (editor) for (const part of ['subject', 'html_body', 'text_body']) body[part] = editor.inputs[part].value;
    return body;
  }
  async function preview() {
    problem.replaceChildren();
    let body;
    try { body = renderBody(); } catch (err) { problem.replaceChildren(notice(err.message, 'error')); return; }
    try {
      const r = await post(`${path}/render`, body, { server: ctx.server });
      subject.replaceChildren(h('strong', {}, 'Subject: '), r.subject || '(none)');
      text.textContent = r.text_body || '(no text part)';
      // The same parts again, for the frame: the service renders and holds them (mailframe.js).
      if (r.html_body) await frame.show({ kind: 'template', id: t.permalink, parts: body });
      else frame.clear('(no HTML part)');
    } catch (err) { problem.replaceChildren(notice(err.message, 'error')); }
  }
  let timer = null;
  const later = () => { clearTimeout(timer); timer = setTimeout(preview, 400); };
  modelInput.addEventListener('input', later);

  editor = manage ? form({
    fields: [
      { name: 'name', label: 'Name', value: t.name, required: true },
      { name: 'subject', label: 'Subject', value: t.subject || '' },
      { name: 'html_body', label: 'HTML body', type: 'textarea', rows: 10, value: t.html_body || '' },
      { name: 'text_body', label: 'Text body', type: 'textarea', rows: 6, value: t.text_body || '' },
    ],
    submit: 'Save template',
    onSubmit: async (v) => {
      await patch(path, v, { server: ctx.server });
      saved.replaceChildren(notice('Saved.', 'success'));
      await preview();
    },
  }) : h('div', {}, h('h3', {}, 'Subject'), h('pre', {}, t.subject || ''), h('h3', {}, 'HTML body'), h('pre', {}, t.html_body || ''), h('h3', {}, 'Text body'), h('pre', {}, t.text_body || ''));

  const saved = h('div', { 'aria-live': 'polite' });
  if (editor) {
    for (const part of ['subject', 'html_body', 'text_body']) editor.inputs[part].addEventListener('input', () => { saved.replaceChildren(); later(); });
  }

  const node = h('div', {},
    h('p', {}, link(`${serverBase(ctx)}/templates`, '← All templates')),
    h('h1', {}, t.name),
    h('p', { class: 'sub' }, 'Permalink ', h('code', {}, t.permalink), t.archived ? [' · ', badge('Archived', 'disabled')] : null),
    ctx.can('messages.manage') ? h('p', {}, actionButton(t.archived ? 'Unarchive' : 'Archive', async () => {
      await post(`${path}/${t.archived ? 'unarchive' : 'archive'}`, {}, { server: ctx.server }); ctx.render();
    })) : null,
    h('div', { class: 'editor' },
      section('Template', null, saved, editor),
      section('Preview', null,
        h('label', { for: 'tpl-model' }, 'Model (JSON): the preview follows as you type'), modelInput,
        problem, subject, frame.el, h('h3', {}, 'Text part'), text,
        h('p', { class: 'help' }, `Rendered by the service from ${editor ? 'the text in the editor, saved or not' : 'the saved template'}, and shown as a mail client shows it: styles and images apply; scripts do not run and links do not open.`)),
      ctx.can('messages.manage') ? section('Send a test', null,
        await testSend(ctx, () => post(`${path}/render`, renderBody(), { server: ctx.server }))) : null));
  setTimeout(preview, 0);
  return node;
}
