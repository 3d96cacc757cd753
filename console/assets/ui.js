// Small DOM helpers: an element builder, labelled forms with per-field errors, tables,
// server-side pagination, copy buttons and SVG charts. No innerHTML with data: text only.

let uid = 0;
const nextId = (prefix) => `${prefix}-${++uid}`;

/** h('button', {class: 'primary', onclick: fn}, 'Save') */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key === 'class') el.className = value;
    else if (key === 'text') el.textContent = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (value === true) el.setAttribute(key, '');
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) { while (el.firstChild) el.firstChild.remove(); return el; }

export function link(href, text, attrs = {}) { return h('a', { href, ...attrs }, text); }

// The time zone dates are shown in: the organization's (its record's time_zone) on its pages,
// set by app.js before a page is drawn; null on account-level pages: the browser's.
let zone = null;

/** Use this IANA zone for when() and the charts; null or an unknown name: the browser's. */
export function setTimeZone(name) {
  zone = null;
  if (!name) return;
  try {
    new Intl.DateTimeFormat(undefined, { timeZone: name });
    zone = name;
  } catch { /* not a zone this browser knows: keep its own */ }
}

export function timeZone() { return zone; }

/** Intl options with the current zone (if any) added. */
export function zoned(options = {}) { return zone ? { ...options, timeZone: zone } : options; }

const WHEN = { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' };

/** A date as every page writes it: `Nov 23, 2026, 06:37:05 PM GMT+5:30`, in the
 * organization's zone on its pages and the browser's elsewhere, the zone always named. */
export function when(value) {
  if (!value) return '—';
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) return String(value);
  return new Intl.DateTimeFormat(undefined, zoned({ ...WHEN, timeZoneName: 'short' })).format(d);
}

// What the API's validation says, as a form says it. API messages name the field as the
// request spells it and use the validator's words ("name: String should have at least 1
// character"); beside a field its label says which, in words a person uses.
const PHRASES = [
  [/^(?:String should have at least 1 character|Field required|.* is required)$/i, (label) => `${label} is required.`],
  [/^String should have at least (\d+) characters?$/i, (label, n) => `${label} needs at least ${n} characters.`],
  [/^String should have at most (\d+) characters?$/i, (label, n) => `${label} can be at most ${n} characters.`],
  [/^Input should be a valid integer.*$/i, (label) => `${label} must be a whole number.`],
  [/^Input should be greater than or equal to (\S+)$/i, (label, n) => `${label} must be at least ${n}.`],
  [/^Input should be less than or equal to (\S+)$/i, (label, n) => `${label} must be at most ${n}.`],
  [/^Input should be a valid (?:URL|url).*$/i, (label) => `${label} must be a full address such as https://example.com/path.`],
  [/^Input should be a valid (\w+).*$/i, (label, kind) => `${label} must be a ${kind}.`],
];

/** err's message in plain words; ``label``: the form's name for the field it is about. */
export function plainMessage(err, label) {
  let text = String((err && err.message) || err || '').trim();
  const field = err && err.field ? String(err.field).replace(/^body\./, '') : null;
  // "name: …", "body.name: …" or "parts.html_body: …": the field is named by the label.
  if (field && text.toLowerCase().startsWith(`${field.toLowerCase()}: `)) text = text.slice(field.length + 2);
  else if (field && text.toLowerCase().startsWith(`body.${field.toLowerCase()}: `)) text = text.slice(field.length + 7);
  const name = label || (field ? humanize(field) : null);
  if (name) {
    for (const [pattern, say] of PHRASES) {
      const m = pattern.exec(text);
      if (m) return say(name, ...m.slice(1));
    }
  }
  if (text && !/[.!?)]$/.test(text)) text += '.';
  // A field no input of the form shows (or none at all): say which.
  if (!label && name) return `${name}: ${text}`;
  // "must be at least 12 characters long" reads as a sentence with its subject: the label.
  if (label && /^(must|is|are|should|needs?|can|cannot|may)\b/.test(text)) return `${label} ${text}`;
  return text.charAt(0).toUpperCase() + text.slice(1);
}

const ACRONYMS = new Set(['ip', 'url', 'smtp', 'api', 'dns', 'totp', 'html', 'id']);

function humanize(field) {
  const words = field.split(/[._[\]]+/).filter(Boolean)
    .map((w) => (ACRONYMS.has(w.toLowerCase()) ? w.toUpperCase() : w.toLowerCase()));
  const text = words.join(' ');
  return text.charAt(0).toUpperCase() + text.slice(1);
}

export function notice(text, kind = 'info') {
  return h('p', { class: `notice ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
}

export function badge(text, kind) {
  return h('span', { class: `badge ${kind || String(text).toLowerCase()}` }, text);
}

/** A heading section: h2 plus optional actions on the right. */
export function section(title, actions, ...body) {
  return h('section', { class: 'card' },
    h('div', { class: 'card-head' }, h('h2', {}, title), actions ? h('div', { class: 'actions' }, actions) : null),
    ...body);
}

export function dl(pairs) {
  return h('dl', { class: 'facts' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '—')]));
}

// Inputs whose value is a name, an address or a number: surrounding spaces are never meant.
const TRIMMED = new Set(['text', 'email', 'url', 'search', 'number', 'tel']);

/**
 * A form whose fields each have a label and an error line. fields: [{name, label, type,
 * required, value, options:[[value,label]], help, autocomplete, rows}]. Text values are
 * trimmed; a required field left empty (or only spaces) is refused here, by its label.
 * onSubmit(values) may throw an ApiError: its message shows next to the field it names (or
 * on top), in plain words (plainMessage).
 */
export function form({ fields, submit = 'Save', onSubmit, className = '', secondary }) {
  const errors = {};
  const inputs = {};
  const general = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const el = h('form', { class: `form ${className}`, novalidate: true });
  el.append(general);
  for (const f of fields) {
    const id = nextId(f.name);
    const errId = `${id}-error`;
    let input;
    const common = { id, name: f.name, required: f.required, 'aria-describedby': errId,
      autocomplete: f.autocomplete, placeholder: f.placeholder, inputmode: f.inputmode };
    if (f.type === 'custom') {
      // A control of its own (pairs.js): {el, value(), focus()}; errors naming it show below it.
      input = f.control.el;
      input.setAttribute('aria-describedby', errId);
    } else if (f.type === 'select') {
      input = h('select', common, (f.options || []).map(([v, label]) =>
        h('option', { value: v, selected: String(f.value ?? '') === String(v) }, label)));
    } else if (f.type === 'textarea') {
      input = h('textarea', { ...common, rows: f.rows || 6, spellcheck: 'false' });
      input.value = f.value ?? '';
    } else if (f.type === 'checkbox') {
      input = h('input', { ...common, type: 'checkbox', checked: !!f.value });
    } else {
      input = h('input', { ...common, type: f.type || 'text', value: f.value ?? '' });
    }
    inputs[f.name] = input;
    errors[f.name] = h('p', { class: 'field-error', id: errId, hidden: true });
    const label = f.type === 'custom' ? null
      : h('label', { for: id }, f.label, f.required ? h('span', { class: 'req', 'aria-hidden': 'true' }, ' *') : null);
    el.append(h('div', { class: `field ${f.type === 'checkbox' ? 'check' : ''}` },
      f.type === 'checkbox' ? [input, label] : [label, input],
      f.help ? h('p', { class: 'help' }, f.help) : null, errors[f.name]));
  }
  const button = h('button', { type: 'submit', class: 'primary' }, submit);
  el.append(h('div', { class: 'form-actions' }, button, secondary || null));

  const reset = () => {
    general.hidden = true;
    for (const [name, e] of Object.entries(errors)) {
      e.hidden = true; e.textContent = '';
      inputs[name].removeAttribute('aria-invalid');
    }
  };
  const labels = Object.fromEntries(fields.map((f) => [f.name, f.label || (f.control && f.control.label)]));
  el.showError = (err) => {
    const field = err && err.field ? String(err.field).replace(/^body\./, '').split(/[.[]/)[0] : null;
    if (field && errors[field]) {
      errors[field].textContent = plainMessage(err, labels[field]);
      errors[field].hidden = false;
      inputs[field].setAttribute('aria-invalid', 'true');
      if (!inputs[field].contains(document.activeElement)) inputs[field].focus();
    } else {
      general.textContent = plainMessage(err);
      general.hidden = false;
    }
  };
  el.inputs = inputs;
  el.addEventListener('submit', async (event) => {
    event.preventDefault();
    reset();
    button.disabled = true;
    try {
      const values = {};
      for (const f of fields) {
        const input = inputs[f.name];
        if (f.type === 'custom') values[f.name] = f.control.value();
        else if (f.type === 'checkbox') values[f.name] = input.checked;
        else values[f.name] = TRIMMED.has(f.type || 'text') ? input.value.trim() : input.value;
        const shown = input.closest('.field');
        if (f.required && values[f.name] === '' && !(shown && shown.hidden)) {
          throw Object.assign(new Error(`${f.label} is required.`), { field: f.name });
        }
      }
      await onSubmit(values, el);
    } catch (err) {
      el.showError(err);
    } finally {
      button.disabled = false;
    }
  });
  return el;
}

/** A button that runs an async action, showing its error beside it. */
export function actionButton(label, action, { kind = '', confirm: question } = {}) {
  const out = h('span', { class: 'inline-error', role: 'alert' });
  const button = h('button', { type: 'button', class: kind }, label);
  button.addEventListener('click', async () => {
    if (question && !window.confirm(question)) return;
    out.textContent = '';
    button.disabled = true;
    try { await action(button); } catch (err) { out.textContent = plainMessage(err); }
    finally { button.disabled = false; }
  });
  return h('span', { class: 'action' }, button, out);
}

/** columns: [{label, render: row => node|text, class}]; rowClass(row): a class for its <tr> */
export function table(columns, rows, { caption, empty = 'Nothing here yet.', rowClass } = {}) {
  if (!rows || !rows.length) return h('p', { class: 'empty' }, empty);
  return h('div', { class: 'table-wrap' }, h('table', {},
    caption ? h('caption', { class: 'sr-only' }, caption) : null,
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col', class: c.class }, c.label)))),
    h('tbody', {}, rows.map((row) => h('tr', { class: rowClass ? rowClass(row) : null },
      columns.map((c) => h('td', { class: c.class }, c.render(row))))))));
}

/** Server-side paging: pagination = {page, total_pages, total}; go(page). */
export function pager(pagination, go) {
  if (!pagination || pagination.total_pages <= 1) {
    return pagination ? h('p', { class: 'pager-total' }, `${pagination.total} in all`) : null;
  }
  const { page, total_pages: pages, total } = pagination;
  return h('nav', { class: 'pager', 'aria-label': 'Pages' },
    h('button', { type: 'button', disabled: page <= 1, onclick: () => go(page - 1) }, '← Previous'),
    h('span', {}, `Page ${page} of ${pages} (${total} in all)`),
    h('button', { type: 'button', disabled: page >= pages, onclick: () => go(page + 1) }, 'Next →'));
}

export function copyButton(text, label = 'Copy') {
  const button = h('button', { type: 'button', class: 'copy', 'aria-label': `${label}` }, 'Copy');
  button.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = 'Copied';
    } catch {
      // No clipboard permission (plain http on another host): select the text instead.
      const code = button.previousElementSibling;
      if (code) window.getSelection().selectAllChildren(code);
      button.textContent = 'Selected: press Ctrl+C';
    }
    setTimeout(() => { button.textContent = 'Copy'; }, 2000);
  });
  return button;
}

export function copyable(text, label) {
  return h('span', { class: 'copyable' }, h('code', {}, text), copyButton(text, label));
}

/** A secret shown once, with a copy button and the warning that it will not be shown again. */
export function shownOnce(title, secret) {
  return h('div', { class: 'notice success once', role: 'status' },
    h('p', {}, h('strong', {}, title), ' — copy it now: it is shown only once.'),
    copyable(secret, `Copy ${title}`));
}

const SVG = 'http://www.w3.org/2000/svg';
function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children.flat()) if (c) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

/**
 * A stacked bar chart (grouped: the series side by side, for counts that do not add up,
 * such as opens and clicks). buckets: [{start, ...counts}], series: [{key, label, class}].
 * Drawn as SVG with a text summary for screen readers.
 */
export function barChart(buckets, series, { title, height = 180, labelEvery, grouped = false } = {}) {
  const width = 720;
  const pad = { l: 36, r: 8, t: 10, b: 28 };
  const totals = buckets.map((b) => (grouped ? Math.max(0, ...series.map((x) => b[x.key] || 0))
    : series.reduce((n, x) => n + (b[x.key] || 0), 0)));
  // An axis top whose half is a whole number: counts are integers.
  const peak = Math.max(0, ...totals);
  const max = peak <= 2 ? 2 : Math.ceil(peak / 4) * 4;
  const innerW = width - pad.l - pad.r;
  const innerH = height - pad.t - pad.b;
  const step = innerW / Math.max(1, buckets.length);
  const barW = Math.max(1, step * 0.75);
  const svg = s('svg', { viewBox: `0 0 ${width} ${height}`, class: 'chart', role: 'img',
    'aria-label': title || 'chart' });
  if (title) svg.append(s('title', {}, title));
  for (const frac of [0, 0.5, 1]) {
    const y = pad.t + innerH - innerH * frac;
    svg.append(s('line', { x1: pad.l, x2: width - pad.r, y1: y, y2: y, class: 'grid' }));
    svg.append(s('text', { x: pad.l - 4, y: y + 4, class: 'axis', 'text-anchor': 'end' }, String(Math.round(max * frac))));
  }
  const every = labelEvery || Math.max(1, Math.ceil(buckets.length / 8));
  // Day buckets are UTC days (/stats/deliveries): labelled as such, not shifted into a zone.
  const days = buckets.length > 1 && new Date(buckets[1].start) - new Date(buckets[0].start) >= 86400000;
  buckets.forEach((b, i) => {
    const x = pad.l + i * step + (step - barW) / 2;
    let y = pad.t + innerH;
    series.forEach((x2, k) => {
      const n = b[x2.key] || 0;
      if (!n) return;
      const hgt = (n / max) * innerH;
      y = grouped ? pad.t + innerH - hgt : y - hgt;
      const w = grouped ? barW / series.length : barW;
      svg.append(s('rect', { x: grouped ? x + k * w : x, y, width: w, height: hgt, class: `bar ${x2.class || x2.key}` },
        s('title', {}, `${days ? `${new Date(b.start).toLocaleDateString(undefined, { dateStyle: 'medium', timeZone: 'UTC' })} (UTC)` : when(b.start)}: ${n} ${x2.label}`)));
    });
    if (i % every === 0) {
      const d = new Date(b.start);
      let text;
      if (days) text = d.toLocaleDateString(undefined, { month: 'short', day: 'numeric', timeZone: 'UTC' });
      else if (buckets.length > 48) text = d.toLocaleDateString(undefined, zoned({ month: 'short', day: 'numeric' }));
      else text = d.toLocaleTimeString(undefined, zoned({ hour: '2-digit', minute: '2-digit' }));
      svg.append(s('text', { x: x + barW / 2, y: height - 8, class: 'axis', 'text-anchor': 'middle' }, text));
    }
  });
  const legend = h('ul', { class: 'legend' }, series.map((x) =>
    h('li', {}, h('span', { class: `swatch ${x.class || x.key}`, 'aria-hidden': 'true' }), x.label)),
    days ? h('li', { class: 'note' }, 'One bar per UTC day.') : null);
  return h('figure', { class: 'chart-figure' }, svg, legend);
}

/** Tabs made of links (each tab is its own URL). */
export function tabs(items, current) {
  return h('nav', { class: 'tabs', 'aria-label': 'Sections' }, items.map(([href, label]) =>
    h('a', { href, 'aria-current': href === current ? 'page' : null }, label)));
}
