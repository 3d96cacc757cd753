// A list of name/value pairs a person can add to and remove from: a webhook's custom
// headers. Used as a form() field of type 'custom' (ui.js): {el, value(), focus()}.
//
// Stored values can be secret: the API shows them as a mask (`masked`), and sending the mask
// back keeps the stored value. A known pair's value box is therefore left empty ("unchanged");
// typing into it replaces the value. A renamed pair needs its value again (the mask only
// keeps the value under its old name).
import { ApiError } from './api.js';
import { h } from './ui.js';

export function pairsEditor({ name, label, pairs = {}, masked = null, max = 20,
  nameLabel = 'Name', valueLabel = 'Value', addLabel = 'Add', help } = {}) {
  const rows = [];
  const list = h('div', { class: 'pairs-rows' });
  const add = h('button', { type: 'button', class: 'pairs-add' }, addLabel);
  const el = h('fieldset', { class: 'pairs', tabindex: '-1' },
    h('legend', {}, label), help ? h('p', { class: 'help' }, help) : null, list, add);

  const refresh = () => {
    add.disabled = rows.length >= max;
    rows.forEach((row, i) => {
      row.nameInput.setAttribute('aria-label', `${nameLabel} ${i + 1}`);
      row.valueInput.setAttribute('aria-label', `${valueLabel} ${i + 1}`);
      row.remove.setAttribute('aria-label', `Remove row ${i + 1}${row.nameInput.value ? ` (${row.nameInput.value})` : ''}`);
    });
  };

  const addRow = (key = '', value = '') => {
    const known = masked !== null && key !== '';
    const row = {
      original: known ? key : null,
      nameInput: h('input', { type: 'text', name: `${name}-name`, value: key, maxlength: '128',
        autocomplete: 'off', spellcheck: 'false', placeholder: 'X-Shared-Secret' }),
      valueInput: h('input', { type: 'text', name: `${name}-value`, value: known ? '' : value,
        maxlength: '4096', autocomplete: 'off', spellcheck: 'false',
        placeholder: known ? 'unchanged (hidden)' : 'value' }),
      remove: h('button', { type: 'button', class: 'link danger' }, 'Remove'),
    };
    row.node = h('div', { class: 'pairs-row' }, row.nameInput, row.valueInput, row.remove);
    row.remove.addEventListener('click', () => {
      rows.splice(rows.indexOf(row), 1);
      row.node.remove();
      refresh();
      (rows.length ? rows[rows.length - 1].nameInput : add).focus();
    });
    row.nameInput.addEventListener('input', refresh);
    rows.push(row);
    list.append(row.node);
    refresh();
    return row;
  };

  add.addEventListener('click', () => addRow().nameInput.focus());
  for (const [key, value] of Object.entries(pairs || {})) addRow(key, value);
  refresh();

  const fail = (message, input) => {
    input.focus();
    throw new ApiError(422, 'ValidationError', message, name);
  };

  return {
    el,
    label,
    focus() { (rows[0] ? rows[0].nameInput : add).focus(); },
    /** The pairs as an object; throws an ApiError naming this field when a row is incomplete. */
    value() {
      const out = {};
      const seen = new Set();
      for (const row of rows) {
        const key = row.nameInput.value.trim();
        const value = row.valueInput.value;
        if (!key && !value && row.original === null) continue; // an empty row added by mistake
        if (!key) fail(`${nameLabel} ${rows.indexOf(row) + 1}: enter a name or remove the row.`, row.nameInput);
        if (seen.has(key.toLowerCase())) fail(`${key} is listed twice.`, row.nameInput);
        seen.add(key.toLowerCase());
        if (value) out[key] = value;
        else if (row.original !== null && row.original === key) out[key] = masked;
        else if (row.original !== null) fail(`${key}: enter the value again (the header was renamed from ${row.original}).`, row.valueInput);
        else fail(`${key}: enter a value.`, row.valueInput);
      }
      return out;
    },
  };
}
