// terminal.js: the thread's live terminal. The side panel lists the
// thread's exec_command sessions; opening one shows it in a terminal
// emulator (xterm.js, vendored), replaying what the session's buffer holds
// and then following its output. The thread's owner types into it (each
// input is recorded in the audit log by the server); an admin watching
// another user's thread only reads.

import { h, replace } from './dom.js';
import { api, stream, explain, APP } from './api.js';

/** terminalsSection is the side panel's list of the thread's sessions. */
export function terminalsSection(view) {
  view.terminals = h('ul', { class: 'file-list terminal-list', 'aria-label': 'Terminal sessions' });
  return h('section', { 'aria-labelledby': 'terminals-h' },
    h('div', { class: 'side-head' }, h('h2', { id: 'terminals-h' }, 'Terminal'),
      h('button', { type: 'button', onclick: () => loadTerminals(view) }, 'Refresh')),
    view.terminals);
}

/** loadTerminals lists the thread's sessions in the side panel. */
export async function loadTerminals(view) {
  if (!view.terminals) return;
  try {
    const res = await api('GET', `/thread/${encodeURIComponent(view.th.id)}/terminals`);
    replace(view.terminals, res.data.length ? null
      : h('li', { class: 'empty' }, 'No terminal sessions. Commands the model starts with exec_command show here while they run.'));
    for (const s of res.data) view.terminals.append(sessionItem(view, s, res.can_type));
  } catch (err) {
    replace(view.terminals, h('li', { class: 'inline-error' }, explain(err)));
  }
}

function statusText(s) {
  if (s.status === 'running') return 'running';
  if (s.status === 'lost') return 'lost (the sandbox went away)';
  return s.exit_code === null ? 'exited' : `exited with code ${s.exit_code}`;
}

function sessionItem(view, s, canType) {
  const command = s.command || '(a session taken over after a restart)';
  const open = h('button', { type: 'button', class: 'small open-terminal', 'aria-label': `${canType ? 'Open' : 'Watch'} the terminal of ${command}` }, canType ? 'Open' : 'Watch');
  open.addEventListener('click', () => openTerminal(view, s, canType));
  return h('li', { 'data-session-id': s.id, 'data-status': s.status },
    h('code', { class: 'terminal-command' }, command),
    h('span', { class: 'meta' }, `${statusText(s)} · pid ${s.pid} · ${s.cols}×${s.rows}`),
    h('span', { class: 'file-actions' }, open));
}

/** bytesOf decodes an output event's base64 data. */
function bytesOf(b64) {
  const bin = atob(b64 || '');
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/**
 * sheetElement stands in for a <style> element the terminal emulator
 * makes: the page's Content-Security-Policy admits no inline style
 * elements, so its rules go to a constructed style sheet instead, which
 * the policy allows. Its text is set (textContent) and it is removed as a
 * <style> would be.
 */
function sheetElement() {
  const el = Document.prototype.createElement.call(document, 'span');
  el.hidden = true;
  const sheet = new CSSStyleSheet();
  document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
  let text = '';
  Object.defineProperty(el, 'textContent', {
    get: () => text,
    set: (v) => { text = String(v); sheet.replaceSync(text); },
  });
  const remove = el.remove.bind(el);
  el.remove = () => {
    document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => s !== sheet);
    remove();
  };
  return el;
}

/** openStyled runs term.open(el) with its style elements as sheets. */
function openStyled(term, el) {
  const create = document.createElement;
  document.createElement = function (tag, options) {
    return String(tag).toLowerCase() === 'style' ? sheetElement() : create.call(document, tag, options);
  };
  try { term.open(el); } finally { delete document.createElement; }
}

let cssLoaded = null;
/** loadCSS adds the emulator's own style sheet to the page, once. */
function loadCSS() {
  cssLoaded ||= new Promise((resolve) => {
    const link = h('link', { rel: 'stylesheet', href: '/ui/vendor/xterm.css' });
    link.addEventListener('load', resolve);
    link.addEventListener('error', resolve);
    document.head.append(link);
  });
  return cssLoaded;
}

/** theme is the emulator's colours for the page's theme. */
function theme() {
  const css = getComputedStyle(document.documentElement);
  const v = (name) => css.getPropertyValue(name).trim();
  const dark = document.documentElement.getAttribute('data-theme') === 'dark';
  return {
    background: v('--code-bg'), foreground: v('--text'), cursor: v('--text'), cursorAccent: v('--code-bg'),
    selectionBackground: dark ? '#3a4a6b' : '#b6c9f5',
  };
}

/**
 * openTerminal shows session s in a modal dialog: the output its buffer
 * holds, then the live output; with canType, keys typed go to the session.
 */
async function openTerminal(view, s, canType) {
  const [{ Terminal }] = await Promise.all([import('./vendor/xterm.js'), loadCSS()]);
  const base = `/thread/${encodeURIComponent(view.th.id)}/terminals/${encodeURIComponent(s.id)}`;
  const status = h('p', { class: 'terminal-status', role: 'status' }, 'Connecting…');
  const screen = h('div', { class: 'terminal-screen' });
  const close = h('button', { type: 'button', class: 'terminal-close' }, 'Close');
  const dlg = h('dialog', { class: 'terminal-dialog', 'aria-labelledby': 'terminal-title', 'data-session-id': s.id, 'data-cursor': '0' },
    h('div', { class: 'terminal-head' },
      h('h2', { id: 'terminal-title' }, 'Terminal: ', h('code', {}, s.command || s.id)),
      close),
    h('p', { class: 'terminal-note' }, canType
      ? 'You are typing into the session the model started; every input is recorded in the audit log.'
      : 'Watching: only the thread\'s owner can type here.'),
    screen, status);
  document.body.append(dlg);
  dlg.showModal();

  // The emulator keeps the session's own size (what its programs format
  // for); the font shrinks to fit a narrow screen, down to a legible size,
  // and the screen scrolls sideways past that.
  const cols = s.cols || 80;
  const rows = s.rows || 24;
  const room = Math.max(screen.clientWidth - 16, 200);
  const fontSize = Math.max(8, Math.min(14, Math.floor(room / (cols * 0.61))));
  const term = new Terminal({
    cols, rows, fontSize, convertEol: false, cursorBlink: canType, disableStdin: !canType, scrollback: 5000,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace', theme: theme(),
  });
  openStyled(term, screen);
  const ac = new AbortController();
  dlg.addEventListener('close', () => { ac.abort(); term.dispose(); dlg.remove(); loadTerminals(view); }, { once: true });
  close.addEventListener('click', () => dlg.close());
  // Escape belongs to the program in the terminal (an editor, a pager);
  // Close and the button's Escape end the view.
  dlg.addEventListener('cancel', (e) => { if (canType && screen.contains(document.activeElement)) e.preventDefault(); });
  if (canType) {
    let pending = '';
    let sending = false;
    // Keys typed while one input is on its way go together in the next.
    const flush = async () => {
      if (sending || !pending) return;
      sending = true;
      const data = pending;
      pending = '';
      try {
        await api('POST', base + '/input', { data });
      } catch (err) {
        status.textContent = 'Not sent: ' + explain(err);
      } finally {
        sending = false;
        flush();
      }
    };
    term.onData((d) => { pending += d; flush(); });
    term.focus();
  } else {
    close.focus();
  }

  let cursor = 0;
  let failures = 0;
  while (!ac.signal.aborted) {
    try {
      for await (const ev of stream(`${APP}${base}/output?after=${cursor}`, null, ac.signal)) {
        if (ev.event === 'output') {
          failures = 0;
          if (ev.data.dropped_bytes) status.textContent = `The first ${ev.data.dropped_bytes} bytes of output are no longer kept.`;
          else if (status.textContent === 'Connecting…') status.textContent = 'Live.';
          term.write(bytesOf(ev.data.data));
          cursor = ev.data.cursor;
          dlg.dataset.cursor = String(cursor);
        } else if (ev.event === 'exit') {
          status.textContent = `The session ${statusText(ev.data)}.`;
          dlg.dataset.status = ev.data.status;
          term.options.disableStdin = true;
          return;
        } else if (ev.event === 'ping' && status.textContent === 'Connecting…') {
          status.textContent = 'Live.';
        }
      }
    } catch (err) {
      if (ac.signal.aborted) return;
      if (err.status === 404 || err.status === 403) { status.textContent = explain(err); return; }
    }
    if (++failures > 5) { status.textContent = 'The connection to the session was lost. Close and open it again.'; return; }
    status.textContent = 'Reconnecting…';
    await new Promise((r) => setTimeout(r, 500 * failures));
  }
}
