// dom.js: building elements without innerHTML, so text from the server is
// never parsed as markup.

/**
 * h builds an element. attrs: "class", "text", "on<event>" handlers,
 * boolean attributes as true/false, anything else as an attribute.
 * Children may be nodes, strings, numbers, arrays or null.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'value') el.value = v;
    else if (k === 'checked') el.checked = !!v;
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

/** append adds children (nodes, strings, arrays, null) to el. */
export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** clear empties el and fills it with children. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** humanSize renders a byte count. */
export function humanSize(n) {
  if (n === null || n === undefined || isNaN(n)) return '';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 1 : 0)) + ' ' + units[i];
}

/** formatTime renders an RFC 3339 timestamp in the user's locale. */
export function formatTime(s) {
  const d = new Date(s);
  return isNaN(d) ? '' : d.toLocaleString();
}

let dialogBusy = Promise.resolve();

/**
 * ask opens the page's modal dialog. With a label it asks for a value and
 * resolves to it (trimmed) or null; without one it asks for a yes/no
 * confirmation and resolves to true or false.
 */
export function ask({ title, text = '', label = '', value = '', ok = 'OK', type = 'text' }) {
  const run = () => new Promise((resolve) => {
    const dlg = document.getElementById('dialog');
    const input = document.getElementById('dialog-input');
    document.getElementById('dialog-title').textContent = title;
    document.getElementById('dialog-text').textContent = text;
    document.getElementById('dialog-text').hidden = !text;
    document.getElementById('dialog-label').textContent = label;
    document.getElementById('dialog-field').hidden = !label;
    input.required = !!label;
    input.type = type; // 'password' hides what is typed
    input.autocomplete = type === 'password' ? 'new-password' : 'off';
    input.value = value;
    document.getElementById('dialog-ok').textContent = ok;
    const opener = document.activeElement;
    dlg.returnValue = '';
    // Cancel is not a submit button, so Enter in the field means OK.
    const cancel = document.getElementById('dialog-cancel');
    const onCancel = () => dlg.close('');
    cancel.addEventListener('click', onCancel);
    dlg.addEventListener('close', () => {
      cancel.removeEventListener('click', onCancel);
      const yes = dlg.returnValue === 'ok';
      if (opener && opener.isConnected) opener.focus();
      if (label) resolve(yes && input.value.trim() ? input.value.trim() : null);
      else resolve(yes);
    }, { once: true });
    dlg.showModal();
    if (label) { input.focus(); input.select(); } else document.getElementById('dialog-ok').focus();
  });
  dialogBusy = dialogBusy.then(run, run);
  return dialogBusy;
}

