// chat.js: the thread view: history, the live assistant turn (text, code
// execution cards, artifacts), uploads, and the thread's files.

import { h, append, replace, humanSize, ask, formatTime } from './dom.js';
import { api, stream, upload, explain, sentence, decodeFileID, ApiError, APP } from './api.js';
import { resourceCard, downloadButton, previewInto } from './artifacts.js';
import { renderMarkdown, withCopy, copyButton, highlightCode } from './markdown.js';
import { notify } from './notice.js';
import { terminalsSection, loadTerminals } from './terminal.js';

const LONG_LINES = 20;
const LONG_CHARS = 4000;
const UPLOADS = '/mnt/user-data/uploads/';

// The thread view on the page: its document listeners (drop and paste
// anywhere, shortcuts) and its log's observer end when another replaces it.
let shown = null;

/**
 * renderThread shows thread threadID in main and returns the thread.
 * ctx: {me, navigate(hash), refresh() (the sidebar), features() (the org
 * policy), current() (false once a later route began: the thread is not
 * shown, and null is returned)}.
 */
export async function renderThread(main, threadID, ctx) {
  const focusedAtOpen = document.activeElement;
  const th = await api('GET', '/thread/' + encodeURIComponent(threadID));
  // A later route began while the thread loaded: its page stands.
  if (ctx.current && !ctx.current()) return null;
  if (shown) shown.abort();
  shown = new AbortController();
  const title = h('h1', { id: 'thread-title' }, th.title || 'Untitled thread');
  // The live region wraps the list, so the list keeps its list semantics.
  // It is the part of the page that scrolls (focusable, so a keyboard
  // scrolls it too).
  const log = h('ol', { class: 'messages' });
  const logRegion = h('div', { class: 'log-region', role: 'log', tabindex: '0', 'aria-live': 'polite', 'aria-label': 'Messages', 'aria-relevant': 'additions text' }, log);
  const jump = h('button', { type: 'button', class: 'small jump-latest', hidden: true }, '↓ Jump to the latest message');
  const policyNote = h('p', { class: 'policy-note', role: 'status', hidden: true });
  const files = h('ul', { class: 'file-list', 'aria-label': 'Thread files' });
  const artifacts = h('ul', { class: 'file-list', 'aria-label': 'Project artifacts' });
  const view = { th, log, files, artifacts, policyNote, ctx, title, signal: shown.signal };
  view.follow = follower(logRegion, log, jump, shown.signal);
  jump.addEventListener('click', () => view.follow.end());

  const exportMenu = h('details', { class: 'menu export' },
    h('summary', {}, 'Export'),
    h('div', { class: 'menu-items' },
      h('button', { type: 'button', class: 'small', id: 'export-md', onclick: () => exportThread(view, 'md') }, 'Markdown (.md)'),
      h('button', { type: 'button', class: 'small', id: 'export-json', onclick: () => exportThread(view, 'json') }, 'JSON (.json)')));
  // It closes as menus do: Escape (the focus back on Export), or a click
  // elsewhere.
  exportMenu.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape' || !exportMenu.open) return;
    e.preventDefault();
    exportMenu.open = false;
    exportMenu.querySelector('summary').focus();
  });
  document.addEventListener('click', (e) => { if (exportMenu.open && !exportMenu.contains(e.target)) exportMenu.open = false; }, { signal: shown.signal });
  const actions = h('div', { class: 'actions' },
    // On narrow screens the files come after the conversation: one press
    // brings them into view.
    h('button', { type: 'button', class: 'files-jump', 'aria-label': 'Go to the thread files', onclick: () => {
      const hd = document.getElementById('files-h');
      if (!hd) return;
      hd.setAttribute('tabindex', '-1');
      hd.scrollIntoView({ block: 'start' });
      hd.focus({ preventScroll: true });
    } }, 'Files'),
    h('button', { type: 'button', class: 'rename', onclick: () => renameThread(view, title) }, 'Rename'),
    h('button', { type: 'button', class: 'fork', onclick: () => forkThread(view) }, 'Fork'),
    exportMenu,
    h('button', { type: 'button', class: 'danger', onclick: () => deleteThread(view) }, 'Delete'));

  replace(main,
    h('div', { class: 'thread-view', 'data-thread-id': th.id },
      h('section', { class: 'conversation', 'aria-labelledby': 'thread-title' },
        h('header', { class: 'thread-head' }, title, actions),
        logRegion,
        jump,
        policyNote, // beside the composer, where it matters, however long the thread
        composer(view)),
      h('aside', { class: 'side', 'aria-label': 'Files and artifacts' },
        h('section', { 'aria-labelledby': 'files-h' },
          h('div', { class: 'side-head' }, h('h2', { id: 'files-h' }, 'Thread files'),
            h('button', { type: 'button', onclick: () => loadFiles(view) }, 'Refresh')),
          files),
        terminalsSection(view),
        h('section', { 'aria-labelledby': 'artifacts-h' },
          h('div', { class: 'side-head' }, h('h2', { id: 'artifacts-h' }, 'Project artifacts'),
            h('button', { type: 'button', onclick: () => loadArtifacts(view) }, 'Refresh')),
          artifacts))));

  await Promise.all([loadHistory(view), loadFiles(view), loadArtifacts(view), showPolicy(view), loadTerminals(view)]);
  // The thread opens at its end with the composer focused, as chat apps
  // do: the next thing a user does is read the last answer or write.
  // Unless the user put the focus elsewhere while it loaded (the search
  // field, say): what they type stays where they type it, and an Enter
  // meant for a search does not send a message.
  view.follow.end();
  const message = document.getElementById('message');
  const active = document.activeElement;
  if (message && (!active || active === document.body || active === focusedAtOpen)) message.focus({ preventScroll: true });
  return th;
}

/**
 * follower keeps the log scrolled to its end while the reader is there:
 * new messages and streamed text stay in view. A reader who scrolled up
 * stays where they are and gets a button back to the end.
 */
function follower(region, list, jump, signal) {
  let pinned = true;
  let last = 0;
  const toEnd = () => { region.scrollTop = region.scrollHeight; last = region.scrollTop; };
  // Only the reader's scroll up lets go of the end (a scroll event may
  // arrive after new content grew the log, before it is followed).
  region.addEventListener('scroll', () => {
    if (region.scrollHeight - region.scrollTop - region.clientHeight < 48) pinned = true;
    else if (region.scrollTop < last) pinned = false;
    last = region.scrollTop;
    jump.hidden = pinned;
  }, { passive: true, signal });
  const grows = new ResizeObserver(() => { if (pinned) toEnd(); });
  grows.observe(list);
  signal.addEventListener('abort', () => grows.disconnect());
  return {
    /** end scrolls to the end and follows again. */
    end() { pinned = true; jump.hidden = true; toEnd(); },
  };
}

/**
 * exportThread saves the thread as Markdown (what was said, with the
 * commands that ran and their output) or as JSON (the stored messages as
 * the API gives them), built from the thread's stored messages.
 */
async function exportThread(view, kind) {
  const menu = view.title.parentElement.querySelector('details.export');
  if (menu) menu.open = false;
  try {
    const res = await api('GET', '/thread/' + encodeURIComponent(view.th.id) + '/messages');
    const base = (view.th.title || 'thread').replace(/[^\p{L}\p{N}._ -]+/gu, '').trim().replace(/\s+/g, '-').slice(0, 80) || 'thread';
    const body = kind === 'json'
      ? JSON.stringify({ thread: view.th, messages: res.data }, null, 2) + '\n'
      : threadMarkdown(view.th, res.data);
    const blob = new Blob([body], { type: kind === 'json' ? 'application/json' : 'text/markdown' });
    const a = h('a', { href: URL.createObjectURL(blob), download: `${base}.${kind}`, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 60e3);
  } catch (err) { notify(explain(err)); }
}

/** fence returns a fenced code block for text (longer fences when it holds some). */
function fence(text, lang = '') {
  const longest = Math.max(2, ...(text.match(/`+/g) || []).map((m) => m.length));
  const f = '`'.repeat(longest + 1);
  return `${f}${lang}\n${text.replace(/\n$/, '')}\n${f}`;
}

/**
 * verbatim returns text as a code span, which Markdown shows as it is
 * (no heading, link or HTML in it): its fence is one backtick longer than
 * any run in text, and a space pads a text that starts or ends with one.
 * Text of several lines is a fenced block instead, as tool output is.
 */
function verbatim(text) {
  const s = String(text);
  if (!s) return '';
  if (/[\r\n]/.test(s)) return '\n\n' + fence(s) + '\n\n';
  const longest = Math.max(0, ...(s.match(/`+/g) || []).map((m) => m.length));
  const f = '`'.repeat(longest + 1);
  const pad = /^`|`$/.test(s) ? ' ' : '';
  return `${f}${pad}${s}${pad}${f}`;
}

/**
 * headingText returns text as one line of a Markdown heading that shows it
 * as it is: white space folded to single spaces and every ASCII
 * punctuation character backslash-escaped, so that no Markdown or HTML in
 * a thread's title takes effect.
 */
function headingText(text) {
  return String(text).replace(/\s+/g, ' ').trim().replace(/[!-/:-@[-`{-~]/g, '\\$&');
}

/** threadMarkdown renders stored messages as one Markdown document. */
export function threadMarkdown(th, messages) {
  const out = [`# ${headingText(th.title || 'Untitled thread')}`, ''];
  for (const m of messages) {
    const who = m.role === 'user' ? 'You' : 'Assistant';
    out.push(`## ${who} · ${m.created_at}${m.replaced ? ' (earlier version)' : ''}`, '');
    const blocks = typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : (m.content || []);
    for (const b of blocks) {
      if (b.type === 'text') out.push(b.text, '');
      else if (b.type === 'container_upload') out.push(`Attached file: ${verbatim(decodeFileID(b.file_id))}`, '');
      else if (b.type === 'server_tool_use' || b.type === 'tool_use') {
        const inp = b.input || {};
        const py = pythonHeredoc.exec(inp.command || '');
        out.push(py ? fence(py[1], 'python') : inp.command ? fence(inp.command, 'bash') : inp.code ? fence(inp.code, 'python') : fence(JSON.stringify(inp, null, 2), 'json'), '');
      } else if (/_tool_result(_error)?$/.test(b.type)) {
        const c = b.content || {};
        if (c.stdout) out.push('Output:', '', fence(c.stdout), '');
        if (c.stderr) out.push('Errors:', '', fence(c.stderr), '');
        if (typeof c.return_code === 'number') out.push(`Exit code: ${c.return_code}`, '');
        if (c.error_code) out.push(`Could not run: ${verbatim(c.error_code)}`, '');
      } else if (b.type === 'zylon-resource' && b.resource) {
        out.push(`File: ${verbatim(b.resource.name || '')}${b.resource.path ? ` (${verbatim(b.resource.path)})` : ''}`, '');
      }
    }
    if (m.status === 'stopped') out.push('_Stopped._', '');
    else if (m.status === 'failed') out.push(m.end_detail ? `_This turn did not finish:_ ${verbatim(m.end_detail)}` : '_This turn did not finish._', '');
  }
  return out.join('\n').replace(/\n{3,}/g, '\n\n').trimEnd() + '\n';
}

async function renameThread(view, title) {
  const name = await ask({ title: 'Rename thread', label: 'Thread title', value: view.th.title, ok: 'Rename' });
  if (!name) return;
  try {
    view.th = await api('PATCH', '/thread/' + view.th.id, { title: name });
    title.textContent = view.th.title;
    document.title = `${view.th.title} — threadbox`;
    view.ctx.refresh();
  } catch (err) { notify(explain(err)); }
}

async function forkThread(view) {
  try {
    const t = await api('POST', '/thread/' + view.th.id + '/fork');
    await view.ctx.refresh();
    view.ctx.navigate('#/thread/' + t.id);
  } catch (err) { notify(explain(err)); }
}

async function deleteThread(view) {
  const yes = await ask({ title: 'Delete thread?', text: `"${view.th.title}" and its files will be deleted. Artifacts stay in the project.`, ok: 'Delete' });
  if (!yes) return;
  try {
    await api('DELETE', '/thread/' + view.th.id);
    await view.ctx.refresh();
    view.ctx.navigate('#/', { focus: true });
  } catch (err) { notify(explain(err)); }
}

/** showPolicy tells the user when code execution is switched off. */
async function showPolicy(view) {
  const f = await view.ctx.features();
  if (f && f.codeExecution && f.codeExecution.enabled === false) {
    view.policyNote.textContent = "Code execution is switched off by your organization's admin (codeExecution): code blocks will not run.";
    view.policyNote.hidden = false;
    if (view.runCode) { view.runCode.checked = false; view.runCode.disabled = true; view.runCode.title = 'Code execution is switched off by your organization\'s admin.'; }
  } else {
    view.policyNote.hidden = true;
    if (view.runCode && view.runCode.disabled) { view.runCode.disabled = false; view.runCode.checked = true; view.runCode.title = ''; }
  }
  // Uploads: the picker is off while the org has uploads off.
  if (view.picker && f && f.uploads) {
    view.picker.disabled = f.uploads.enabled === false;
    view.picker.title = view.picker.disabled ? "Uploads are switched off by your organization's admin (uploads)." : '';
  }
  return f;
}

async function loadHistory(view) {
  try {
    const res = await api('GET', '/thread/' + view.th.id + '/messages');
    replace(view.log);
    // A turn that still runs is reattached: its answer is replayed from
    // the turn's log and followed live instead of shown as stored.
    const running = res.running_turn_id;
    const last = res.data[res.data.length - 1];
    const live = running && last && last.status === 'running' ? last : null;
    const stored = live ? res.data.slice(0, -1) : res.data;
    let group = null; // the earlier versions being listed
    for (const m of stored) {
      const blocks = typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : (m.content || []);
      // Replaced messages (edited or regenerated) are kept where they were,
      // consecutive ones in one group of earlier versions.
      if (m.replaced && !group) group = replacedGroup(view.log);
      if (!m.replaced) group = null;
      const item = messageItem(group || view.log, m.role, m.created_at);
      item.blocks = blocks;
      item.dataset.messageId = m.id;
      if (m.role === 'assistant' && m.complete && !m.replaced) item.classList.add('turn-end');
      const t = new TurnView(item);
      for (const b of blocks) { t.start(b); t.stop(); }
      if (m.role === 'assistant' && m.status === 'running') t.error('This turn is still running; reload to see its end.');
      else if (m.role === 'assistant' && m.status === 'stopped') t.stopped();
      else if (m.role === 'assistant' && !m.complete) {
        t.endCards('interrupted');
        t.error(m.end_detail ? `This turn failed: ${sentence(m.end_detail)}` : 'This turn did not finish.');
      }
      t.done();
    }
    if (res.data.length === 0) view.log.append(emptyLog());
    showLatest(view);
    turnActions(view);
    timeTravel(view);
    loadChanges(view);
    // The reattached answer keeps the time its turn started.
    if (running && view.reattach) view.reattach(running, live ? live.created_at : undefined);
  } catch (err) {
    replace(view.log, h('li', { class: 'inline-error' }, explain(err)));
  }
}

async function loadFiles(view) {
  try {
    const res = await api('GET', `/api/gpt/v1/files?scope_id=${encodeURIComponent(view.th.id)}&limit=1000`);
    replace(view.files, res.data.length ? null : h('li', { class: 'empty' }, 'No files yet.'));
    for (const f of res.data) {
      const path = decodeFileID(f.id);
      const kind = path.startsWith('/mnt/user-data/outputs/') ? 'output' : path.startsWith('/mnt/user-data/uploads/') ? 'upload' : 'workspace';
      const url = `${APP}/thread/${encodeURIComponent(view.th.id)}/download-file?path=${encodeURIComponent(path)}`;
      view.files.append(fileItem(view, f, path, kind, url));
    }
  } catch (err) {
    replace(view.files, h('li', { class: 'inline-error' }, explain(err)));
  }
}

/** previewable reports whether a thread file can be shown in the page. */
function previewable(mime, name) {
  mime = (mime || '').split(';')[0].trim().toLowerCase();
  return mime.startsWith('image/') || mime === 'application/pdf' || mime.startsWith('text/') || mime === 'application/json' || /\.(csv|txt|md|json)$/i.test(name);
}

/**
 * fileItem is one thread file in the side panel: Preview (images, CSV as
 * a table, text) unfolds below it; Download saves it to disk; Delete
 * removes it from the thread after a confirmation.
 */
function fileItem(view, f, path, kind, url) {
  const preview = h('div', { class: 'preview file-preview', id: 'preview-' + f.id, hidden: true });
  const actions = h('span', { class: 'file-actions' });
  if (previewable(f.mime_type, f.filename)) {
    const show = h('button', { type: 'button', class: 'small preview-toggle', 'aria-expanded': 'false', 'aria-controls': preview.id, 'aria-label': `Preview ${f.filename}` }, 'Preview');
    show.addEventListener('click', () => {
      const open = show.getAttribute('aria-expanded') !== 'true';
      show.setAttribute('aria-expanded', String(open));
      preview.hidden = !open;
      if (open && !preview.dataset.loaded) {
        preview.dataset.loaded = '1';
        previewInto(preview, { mime_type: f.mime_type, download_url: url }, f.filename);
      }
    });
    actions.append(show);
  }
  const del = h('button', { type: 'button', class: 'small danger delete-file', 'aria-label': `Delete ${f.filename}` }, 'Delete');
  del.addEventListener('click', async () => {
    const yes = await ask({ title: 'Delete file?', text: `${path} will be deleted from this thread's sandbox.`, ok: 'Delete' });
    if (!yes) return;
    try {
      await api('DELETE', `/api/gpt/v1/files/${encodeURIComponent(f.id)}?scope_id=${encodeURIComponent(view.th.id)}`);
      // A deleted file cannot go with the message being written either.
      for (const a of view.attached) if (a.id === f.id) a.removed = true;
      view.showAttached();
      await loadFiles(view);
      const h2 = document.getElementById('files-h');
      if (h2) { h2.setAttribute('tabindex', '-1'); h2.focus(); }
      notify(`Deleted ${f.filename}.`, 'info');
    } catch (err) { notify(explain(err)); }
  });
  actions.append(downloadButton(url, f.filename), del);
  return h('li', { 'data-path': path, 'data-file-id': f.id },
    h('span', { class: 'file-name' }, f.filename),
    h('span', { class: 'meta' }, `${kind} · ${f.mime_type} · ${humanSize(f.size_bytes)}`),
    actions, preview);
}

const ARTIFACT_PAGE = 100;

/** loadArtifacts lists the project's artifacts newest first, a page at a
 * time: more appends the next (older) page after the last one shown. */
async function loadArtifacts(view, more = false) {
  try {
    let q = '/project/' + view.th.project_id + '/artifacts?order=desc&limit=' + ARTIFACT_PAGE;
    if (more && view.artifactsLast) q += '&after=' + encodeURIComponent(view.artifactsLast);
    const res = await api('GET', q);
    if (!more) replace(view.artifacts, res.data.length ? null : h('li', { class: 'empty' }, 'No artifacts yet.'));
    const older = view.artifacts.querySelector('li.more');
    if (older) older.remove();
    for (const a of res.data) {
      // Artifacts of one name from different threads are told apart by
      // where they come from and who made them.
      const mine = a.thread_id === view.th.id;
      const by = a.created_by && a.created_by.email ? ` by ${a.created_by.email}` : '';
      view.artifacts.append(h('li', { 'data-artifact-id': a.id, 'data-thread-id': a.thread_id || '' },
        h('span', { class: 'file-name' }, a.name),
        h('span', { class: 'meta origin' }, (mine ? 'from this thread' : 'from another thread') + by),
        h('span', { class: 'meta' }, `v${a.version} · ${a.mime_type} · ${humanSize(a.size_bytes)} · ${formatTime(a.created_at)}`),
        downloadButton(a.download_url, a.name)));
    }
    if (res.data.length) view.artifactsLast = res.last_id;
    if (res.has_more) {
      view.artifacts.append(h('li', { class: 'more' },
        h('button', { type: 'button', class: 'small', onclick: () => loadArtifacts(view, true) }, 'Show older artifacts')));
    }
  } catch (err) {
    if (more) notify(explain(err));
    else replace(view.artifacts, h('li', { class: 'inline-error' }, explain(err)));
  }
}

/**
 * replacedGroup adds to the log the earlier versions of a turn (a message
 * edited and sent again, an answer regenerated) and returns the list to
 * put them in. The group shows a ‹ k / n › switcher: the latest version
 * (the messages after the group) is shown, and the buttons show an
 * earlier one in its place.
 */
function replacedGroup(log) {
  const list = h('ol', { class: 'messages replaced-list', hidden: true });
  const count = h('span', { class: 'version-count', 'aria-live': 'polite' });
  const prev = h('button', { type: 'button', class: 'small version-prev', 'aria-label': 'Previous version' }, '‹');
  const next = h('button', { type: 'button', class: 'small version-next', 'aria-label': 'Next version' }, '›');
  const group = h('li', { class: 'replaced-group' },
    h('div', { class: 'versions', role: 'group', 'aria-label': 'Versions of this turn' }, prev, count, next), list);
  let at = 0;
  // showVersion shows version i (0 the first; -1 or past the end the latest).
  group.showVersion = (i) => {
    const versions = versionsOf(list);
    const all = [...versions, latestVersion(group, versions)];
    at = i < 0 || i >= all.length ? all.length - 1 : i;
    all.forEach((v, j) => v.forEach((li) => { li.hidden = j !== at; }));
    list.hidden = at === all.length - 1;
    count.textContent = `${at + 1} / ${all.length}`;
    count.setAttribute('aria-label', `Version ${at + 1} of ${all.length}`);
    prev.disabled = at === 0;
    next.disabled = at === all.length - 1;
  };
  prev.addEventListener('click', () => group.showVersion(at - 1));
  next.addEventListener('click', () => group.showVersion(at + 1));
  log.append(group);
  return list;
}

/**
 * versionsOf splits a group's earlier messages into versions: one starts
 * at each message the user wrote, and at an answer that follows an answer
 * (a regenerated one).
 */
function versionsOf(list) {
  const out = [];
  let prev = null;
  for (const li of list.children) {
    if (!li.classList.contains('msg')) continue;
    const user = li.classList.contains('user');
    if (!out.length || user || (prev && !prev.classList.contains('user'))) out.push([]);
    out[out.length - 1].push(li);
    prev = li;
  }
  return out;
}

/**
 * latestVersion returns the messages after a group that replaced its
 * versions: a message and its answer (when the versions start with a
 * message), or the answer alone (a regenerated one).
 */
function latestVersion(group, versions) {
  const withMessage = versions.length > 0 && versions[0][0].classList.contains('user');
  const out = [];
  for (let li = group.nextElementSibling; li && li.classList.contains('msg'); li = li.nextElementSibling) {
    if (li.classList.contains('user') && (out.length || !withMessage)) break;
    out.push(li);
  }
  return out;
}

/** showLatest shows the latest version of every turn. */
function showLatest(view) {
  view.log.querySelectorAll(':scope > .replaced-group').forEach((g) => g.showVersion(-1));
}

/** topMessages are the log's messages that are not earlier versions. */
function topMessages(view) {
  return [...view.log.children].filter((li) => li.classList.contains('msg'));
}

/**
 * turnActions offers Edit on the last message the user wrote and
 * Regenerate on the last answer, while no turn runs: both start a new turn
 * that replaces the last one, which stays visible, folded, as an earlier
 * version (docs/frontend.md).
 */
function turnActions(view) {
  view.log.querySelectorAll('.turn-actions').forEach((el) => el.remove());
  if (view.busy) return;
  const top = topMessages(view);
  const lastUser = top.filter((li) => li.classList.contains('user')).pop();
  if (!lastUser || !lastUser.blocks) return;
  const last = top[top.length - 1];
  lastUser.append(h('div', { class: 'turn-actions' },
    h('button', { type: 'button', class: 'small edit', 'aria-label': 'Edit your last message and send it again', onclick: () => editLast(view, lastUser) }, 'Edit')));
  if (last !== lastUser && last.classList.contains('assistant')) {
    last.append(h('div', { class: 'turn-actions' },
      h('button', { type: 'button', class: 'small regenerate', 'aria-label': 'Regenerate the last answer', onclick: () => view.resend(null, 'last_answer', textOf(lastUser.blocks)) }, 'Regenerate')));
  }
}

/**
 * timeTravel offers, on every answer of the thread's history (not an
 * earlier version), Rewind (the thread back to that turn, its files and
 * history) and Fork (a new thread as that turn left it), while no turn
 * runs.
 */
function timeTravel(view) {
  view.log.querySelectorAll('.time-travel').forEach((el) => el.remove());
  if (view.busy) return;
  for (const li of topMessages(view)) {
    if (!li.classList.contains('turn-end') || !li.dataset.messageId) continue;
    const at = formatTime(li.querySelector('time') ? li.querySelector('time').getAttribute('datetime') : '');
    li.append(h('div', { class: 'time-travel' },
      h('button', { type: 'button', class: 'small rewind', 'aria-label': `Rewind the thread to this answer (${at}): its files and history`, onclick: () => rewindTo(view, li.dataset.messageId) }, 'Rewind here'),
      h('button', { type: 'button', class: 'small fork-here', 'aria-label': `Fork a new thread at this answer (${at})`, onclick: () => forkAt(view, li.dataset.messageId) }, 'Fork here')));
  }
}

/** markLastAnswer gives the answer that just ended its id and its buttons. */
async function markLastAnswer(view) {
  try {
    const res = await api('GET', '/thread/' + encodeURIComponent(view.th.id) + '/messages');
    const stored = res.data.filter((m) => !m.replaced);
    const last = stored[stored.length - 1];
    const li = topMessages(view).pop();
    if (!last || !li || last.role !== 'assistant' || !li.classList.contains('assistant')) return;
    li.dataset.messageId = last.id;
    if (last.complete) li.classList.add('turn-end');
    timeTravel(view);
    await loadChanges(view);
  } catch { /* the buttons come with the next reload */ }
}

async function rewindTo(view, messageID) {
  const yes = await ask({ title: 'Rewind the thread?', text: 'The thread\'s files go back to what this answer left, and the messages after it become an earlier version.', ok: 'Rewind' });
  if (!yes) return;
  try {
    const r = await api('POST', '/thread/' + encodeURIComponent(view.th.id) + '/rewind', { message_id: messageID });
    await Promise.all([loadHistory(view), loadFiles(view)]);
    if (r.note) notify(r.note, 'info');
  } catch (err) { notify(explain(err)); }
}

async function forkAt(view, messageID) {
  try {
    const t = await api('POST', '/thread/' + encodeURIComponent(view.th.id) + '/fork', { message_id: messageID });
    await view.ctx.refresh();
    view.ctx.navigate('#/thread/' + t.id);
  } catch (err) { notify(explain(err)); }
}

/** sizeOf says a change's sizes: "12 B", "12 B → 20 B". */
function sizeOf(c) {
  if (c.size_before == null) return humanSize(c.size_after);
  if (c.size_after == null) return humanSize(c.size_before);
  return `${humanSize(c.size_before)} → ${humanSize(c.size_after)}`;
}

/**
 * loadChanges shows under each code card the files its call created,
 * changed and deleted, with Diff (the call's text diffs) and Revert.
 */
async function loadChanges(view) {
  let res;
  try {
    res = await api('GET', '/thread/' + encodeURIComponent(view.th.id) + '/changes');
  } catch { return; } // the cards stay as they are
  for (const cc of res.data) {
    const card = view.log.querySelector(`article.exec[data-tool-use-id="${CSS.escape(cc.call_id)}"]`);
    if (!card) continue;
    const old = card.querySelector('.call-changes');
    if (old) old.remove();
    if (cc.changes.length === 0) {
      card.append(h('div', { class: 'call-changes none meta' }, 'No files changed'));
      continue;
    }
    const diff = h('div', { class: 'call-diff', hidden: true });
    const list = h('ul', { class: 'change-list' }, cc.changes.map((c) =>
      h('li', { class: 'change ' + c.op }, h('span', { class: 'op' }, c.op), ' ', h('code', {}, c.path), ' ', h('span', { class: 'meta' }, sizeOf(c)))));
    const box = h('details', { class: 'call-changes' },
      h('summary', {}, `Files changed (${cc.changes.length})`),
      list,
      h('div', { class: 'row' },
        h('button', { type: 'button', class: 'small show-diff', onclick: () => showDiff(view, cc.call_id, diff) }, 'Diff'),
        h('button', { type: 'button', class: 'small revert', onclick: () => revertCall(view, cc.call_id) }, 'Revert these changes')),
      diff);
    card.append(box);
  }
}

/** showDiff shows (or hides) a call's diffs in el. */
async function showDiff(view, callID, el) {
  if (!el.hidden) { el.hidden = true; return; }
  try {
    const cc = await api('GET', `/thread/${encodeURIComponent(view.th.id)}/calls/${encodeURIComponent(callID)}/changes`);
    replace(el, cc.changes.map((c) => h('section', { class: 'file-diff' },
      h('h3', {}, h('code', {}, c.path), ' ', h('span', { class: 'meta' }, `${c.op} · ${sizeOf(c)}`)),
      c.diff ? h('pre', { class: 'diff', tabindex: '0' }, c.diff.split('\n').map((line) =>
        h('span', { class: line.startsWith('+') && !line.startsWith('+++') ? 'add' : line.startsWith('-') && !line.startsWith('---') ? 'del' : '' }, line)))
        : h('p', { class: 'meta' }, c.diff_omitted ? `No diff: ${c.diff_omitted}.` : 'No diff.'))));
    el.hidden = false;
  } catch (err) { notify(explain(err)); }
}

/**
 * revertCall gives the call's files back as they were before it; when a
 * later change would be lost the server says which, and the user may
 * confirm.
 */
async function revertCall(view, callID) {
  const url = `/thread/${encodeURIComponent(view.th.id)}/calls/${encodeURIComponent(callID)}/revert`;
  try {
    await api('POST', url, {});
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 409 || /turn is running/.test(explain(err))) { notify(explain(err)); return; }
    const yes = await ask({ title: 'Revert anyway?', text: explain(err), ok: 'Revert anyway' });
    if (!yes) return;
    try {
      await api('POST', url, { force: true });
    } catch (err2) { notify(explain(err2)); return; }
  }
  await Promise.all([loadFiles(view), loadChanges(view)]);
}

/** textOf joins the text blocks of a message's content. */
function textOf(blocks) {
  return (blocks || []).filter((b) => b.type === 'text').map((b) => b.text).join('\n');
}

/**
 * editLast turns the last user message into a form: Send sends the edited
 * text as a new turn replacing the last one (attachments of the message
 * are kept); Cancel or Escape puts the message back.
 */
function editLast(view, li) {
  const blocks = li.querySelector('.blocks');
  const area = h('textarea', { id: 'edit-message', rows: '4' });
  area.value = textOf(li.blocks);
  const cancel = h('button', { type: 'button' }, 'Cancel');
  // The message's attachments come along and each can be taken off.
  let kept = (li.blocks || []).filter((b) => b.type !== 'text');
  const chips = h('ul', { class: 'attachments', 'aria-label': 'Attached to the edited message' });
  const showKept = () => {
    chips.hidden = kept.length === 0;
    replace(chips, kept.map((b) => {
      const name = b.type === 'container_upload' ? decodeFileID(b.file_id).split('/').pop() : b.type;
      return h('li', { class: 'attachment' }, h('span', { class: 'file-name' }, name),
        h('button', { type: 'button', class: 'small remove', 'aria-label': `Remove ${name} from the message`, onclick: () => {
          kept = kept.filter((x) => x !== b);
          showKept();
          area.focus();
        } }, '×'));
    }));
  };
  showKept();
  const form = h('form', { class: 'edit-form', 'aria-label': 'Edit your message' },
    h('label', { for: 'edit-message' }, 'Edit your message'), chips, area,
    h('div', { class: 'row end' }, cancel, h('button', { type: 'submit', class: 'primary' }, 'Send edited')));
  const close = () => {
    form.remove();
    blocks.hidden = false;
    turnActions(view);
  };
  cancel.addEventListener('click', () => { close(); const b = li.querySelector('button.edit'); if (b) b.focus(); });
  form.addEventListener('keydown', (e) => { if (e.key === 'Escape') { e.preventDefault(); cancel.click(); } });
  area.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
  });
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const text = area.value;
    if (!text.trim()) return;
    close();
    view.resend(kept.length ? [...kept, { type: 'text', text }] : text, 'last_turn', text);
  });
  blocks.hidden = true;
  li.querySelectorAll('.turn-actions').forEach((el) => el.remove());
  li.append(form);
  area.focus();
}

/**
 * supersede folds the last turn into an earlier-version group as a turn
 * that replaces it starts: the last user message and its answer for an
 * edit (last_turn), the answer alone for a regenerate (last_answer).
 */
function supersede(view, mode) {
  const top = topMessages(view);
  let from = top.map((li) => li.classList.contains('user')).lastIndexOf(true);
  if (from < 0) return;
  if (mode === 'last_answer') from++;
  if (from >= top.length) return;
  // Everything from there on, earlier versions in between and just before
  // too, goes into one group: as the thread shows after a reload.
  const all = [...view.log.children];
  let begin = all.indexOf(top[from]);
  if (begin > 0 && all[begin - 1].classList.contains('replaced-group')) begin--;
  const moved = all.slice(begin)
    .flatMap((li) => (li.classList.contains('replaced-group') ? [...li.querySelector('.replaced-list').children] : [li]));
  all.slice(begin).filter((li) => li.classList.contains('replaced-group')).forEach((g) => g.remove());
  const list = replacedGroup(view.log);
  list.append(...moved);
  list.parentElement.showVersion(-1);
}

/** emptyLog is the conversation's placeholder while it has no message. */
function emptyLog() {
  return h('li', { class: 'empty' }, 'No messages yet. Write one below; fenced ```python or ```bash blocks run in this thread\'s sandbox.');
}

/** messageItem adds a message to the log, headed by who said it and when
 * (at: the stored time; now for a message being written). */
function messageItem(log, role, at = new Date().toISOString()) {
  const empty = log.querySelector('.empty');
  if (empty) empty.remove();
  const li = h('li', { class: 'msg ' + role },
    h('h2', { class: 'who-said' }, role === 'user' ? 'You' : 'Assistant',
      h('time', { class: 'sent-at', datetime: at }, ' · ' + formatTime(at))));
  log.append(li);
  return li;
}

/** uniqueName returns name, or name-2, name-3… (before its extension),
 * whichever taken does not hold. */
function uniqueName(name, taken) {
  if (!taken.has(name)) return name;
  const dot = name.lastIndexOf('.');
  const [base, ext] = dot > 0 ? [name.slice(0, dot), name.slice(dot)] : [name, ''];
  for (let n = 2; ; n++) {
    const next = `${base}-${n}${ext}`;
    if (!taken.has(next)) return next;
  }
}

/** hasFiles reports whether a drag carries files. */
function hasFiles(e) {
  return !!e.dataTransfer && [...(e.dataTransfer.types || [])].includes('Files');
}

/**
 * composer is the message form. Files picked, pasted into the message or
 * dropped anywhere on the thread page are uploaded at once and shown as
 * chips (a thumbnail for images, progress while on their way), each
 * removable: the message sent names them (container_upload blocks before
 * its text).
 */
function composer(view) {
  const text = h('textarea', { id: 'message', name: 'message', rows: '3', 'aria-keyshortcuts': 'Shift+Escape',
    placeholder: 'Write a message. Enter sends, Shift+Enter starts a new line.' });
  const runCode = h('input', { type: 'checkbox', id: 'run-code', checked: true });
  view.runCode = runCode; // showPolicy unticks and disables it while code execution is off
  const send = h('button', { type: 'submit', class: 'primary', id: 'send' }, 'Send');
  const stop = h('button', { type: 'button', id: 'stop', hidden: true }, 'Stop');
  const picker = h('input', { type: 'file', id: 'file-input', class: 'file-picker', multiple: true });
  view.picker = picker; // showPolicy disables it while uploads are off
  const chips = h('ul', { class: 'attachments uploads', 'aria-label': 'Attached to your message', hidden: true });
  const waiting = h('p', { class: 'meta', role: 'status' });
  view.attached = []; // chips: {name, file, id, state, li, bar, status, done (a promise)}
  view.showAttached = () => {
    view.attached = view.attached.filter((a) => !a.removed);
    chips.hidden = view.attached.length === 0;
    chips.replaceChildren(...view.attached.map((a) => a.li));
  };
  const form = h('form', { class: 'composer', 'aria-label': 'Send a message' },
    h('label', { for: 'message', class: 'sr-only' }, 'Message'),
    chips,
    text,
    h('div', { class: 'composer-bar' },
      h('span', { class: 'check' }, runCode, h('label', { for: 'run-code' }, 'Run code blocks')),
      h('span', { class: 'attach' }, picker, h('label', { for: 'file-input', class: 'button-like' }, 'Attach files')),
      h('span', { class: 'hint drop-hint', id: 'drop-hint' }, 'or paste or drop files anywhere'),
      waiting,
      h('span', { class: 'send-buttons' }, stop, send)));

  let controller = null;
  const running = (on) => {
    send.disabled = on; stop.hidden = !on;
    send.title = on ? 'A turn is running in this thread; stop it or wait for its end.' : '';
    view.busy = on;
    turnActions(view);
    timeTravel(view);
  };
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const typed = text.value;
    // An empty message is not sent (and the browser is not asked to say so).
    if (!typed.trim() || controller) return;
    controller = new AbortController();
    running(true);
    // Files still on their way are waited for: the message names them.
    if (view.attached.some((a) => a.state === 'uploading')) {
      waiting.textContent = 'Waiting for the uploads to finish…';
      await Promise.all(view.attached.map((a) => a.done));
      waiting.textContent = '';
    }
    const attached = view.attached.filter((a) => a.state === 'done');
    const content = attached.length
      ? [...attached.map((a) => ({ type: 'container_upload', file_id: a.id })), { type: 'text', text: typed }]
      : typed;
    text.value = ''; // the message shows in the conversation from now on
    const before = view.attached;
    view.attached = [];
    view.showAttached();
    view.follow.end();
    try {
      if (!await runTurn(view, content, runCode.checked, controller.signal) && !text.value) {
        text.value = typed; // refused: the text and its attachments come back
        view.attached = before.filter((a) => a.state === 'done');
        view.showAttached();
      }
    } finally {
      controller = null; view.turnID = null;
      running(false);
      text.focus({ preventScroll: true });
    }
  });
  // resend starts a turn that replaces the last one: an edited message
  // (mode last_turn, content the new message) or a regenerated answer
  // (last_answer, no content); asked is the text the user asked.
  view.resend = async (content, mode, asked) => {
    if (controller) return;
    controller = new AbortController();
    running(true);
    view.follow.end();
    try {
      await runTurn(view, content, runCode.checked, controller.signal, mode, asked);
    } finally {
      controller = null; view.turnID = null;
      running(false);
      text.focus({ preventScroll: true });
    }
  };
  // A turn runs in the server, not in this page: Stop asks the server to
  // stop it (its stream then ends with a stopped event); leaving the page
  // leaves it running, and coming back reattaches to it.
  stop.addEventListener('click', async () => {
    if (view.turnID) {
      try {
        await api('POST', `/thread/${encodeURIComponent(view.th.id)}/turns/${encodeURIComponent(view.turnID)}/stop`);
        return;
      } catch (err) {
        notify(explain(err));
      }
    }
    if (controller) controller.abort();
  });
  view.reattach = async (turnID, at) => {
    if (controller) return;
    controller = new AbortController();
    view.turnID = turnID;
    running(true);
    try {
      await followTurn(view, turnID, controller.signal, at);
    } finally {
      controller = null; view.turnID = null;
      running(false);
    }
  };
  // Enter sends, Shift+Enter starts a new line (as in Claude.ai and
  // ChatGPT); Ctrl+Enter sends too. An IME composing text keeps its Enter.
  let sentByEnter = false;
  text.addEventListener('keydown', (e) => {
    sentByEnter = e.key === 'Enter' && !e.shiftKey && !e.isComposing;
    if (sentByEnter) { e.preventDefault(); form.requestSubmit(); }
  });
  // The line break of the Enter that sent the message is not typed into
  // the emptied composer (some input paths deliver it after keydown).
  text.addEventListener('beforeinput', (e) => {
    if (sentByEnter && (e.inputType === 'insertLineBreak' || e.inputType === 'insertParagraph' || e.data === '\n')) e.preventDefault();
    sentByEnter = false;
  });
  // Files pasted into the message (a screenshot, files copied in a file
  // manager) are attached; pasted text stays text.
  text.addEventListener('paste', (e) => {
    const files = e.clipboardData ? [...e.clipboardData.files] : [];
    if (files.length) { e.preventDefault(); uploadAll(view, files); }
  });
  picker.addEventListener('change', () => { uploadAll(view, [...picker.files]); picker.value = ''; });
  // Files dropped anywhere on the page while the thread is open.
  const signal = view.signal;
  let depth = 0;
  document.addEventListener('dragenter', (e) => { if (hasFiles(e)) { depth++; form.classList.add('dragging'); } }, { signal });
  document.addEventListener('dragleave', (e) => { if (hasFiles(e) && --depth <= 0) { depth = 0; form.classList.remove('dragging'); } }, { signal });
  document.addEventListener('dragover', (e) => { if (hasFiles(e)) { e.preventDefault(); form.classList.add('dragging'); } }, { signal });
  document.addEventListener('drop', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    depth = 0;
    form.classList.remove('dragging');
    if (e.dataTransfer.files.length) uploadAll(view, [...e.dataTransfer.files]);
  }, { signal });
  return form;
}

/**
 * uploadAll uploads files to the thread's uploads folder, each as a chip
 * of the message being written. A name already in the folder gets a
 * number (sales-2.csv), so an upload never replaces a file silently.
 */
async function uploadAll(view, list) {
  const url = `${APP}/thread/${encodeURIComponent(view.th.id)}/upload-file`;
  const policy = await view.ctx.features();
  const max = policy && policy.uploads ? policy.uploads.maxBytes : 0;
  const taken = new Set(view.attached.map((a) => a.name));
  try {
    const res = await api('GET', `/api/gpt/v1/files?scope_id=${encodeURIComponent(view.th.id)}&limit=1000`);
    for (const f of res.data) {
      const path = decodeFileID(f.id);
      if (path.startsWith(UPLOADS)) taken.add(path.slice(UPLOADS.length));
    }
  } catch { /* the upload says what is wrong */ }
  const entries = list.map((file) => {
    const name = uniqueName(file.name, taken);
    taken.add(name);
    return attachment(view, file, name);
  });
  view.attached.push(...entries);
  view.showAttached();
  await Promise.all(entries.map(async (a) => {
    // Refused before a byte is sent: the org's policy is known here.
    const refusal = policy && policy.uploads && policy.uploads.enabled === false
      ? "Refused: your organization's admin has switched off file uploads (uploads)."
      : max > 0 && a.file.size > max ? `Refused: ${humanSize(a.file.size)} is more than the upload limit of ${humanSize(max)}.` : '';
    if (refusal) { a.fail(refusal); return; }
    try {
      const f = await upload(url, a.file, (loaded, total) => a.progress(loaded, total), a.name);
      a.finish(f);
    } catch (err) {
      a.fail(explain(err));
    }
  }));
  loadFiles(view);
}

/**
 * attachment is one file's chip in the composer: its thumbnail (images),
 * name, progress, then where it went or why it did not; × takes it off the
 * message (an uploaded file stays in the thread's files).
 */
function attachment(view, file, name) {
  const a = { name, file, id: '', state: 'uploading', removed: false };
  const renamed = name !== file.name;
  let thumbURL = '';
  const thumb = /^image\/(png|jpeg|gif|webp)$/.test(file.type) ? h('img', { class: 'thumb', alt: '', src: (thumbURL = URL.createObjectURL(file)) }) : null;
  a.bar = h('progress', { max: String(file.size || 1), value: '0', 'aria-label': `Uploading ${name}` });
  a.status = h('span', { class: 'meta' }, `0% of ${humanSize(file.size)}`);
  const remove = h('button', { type: 'button', class: 'small remove', 'aria-label': `Remove ${name} from the message` }, '×');
  a.li = h('li', { class: 'attachment upload', 'data-name': name }, thumb, h('span', { class: 'file-name' }, name), a.bar, a.status, remove);
  let settle;
  a.done = new Promise((r) => { settle = r; });
  remove.addEventListener('click', () => {
    a.removed = true;
    if (thumbURL) URL.revokeObjectURL(thumbURL);
    view.showAttached();
    const box = document.getElementById('message');
    if (box) box.focus();
  });
  a.progress = (loaded, total) => {
    a.bar.max = total; a.bar.value = loaded;
    a.status.textContent = `${Math.floor((100 * loaded) / total)}% of ${humanSize(total)}`;
  };
  a.finish = (f) => {
    a.state = 'done';
    a.id = f.id;
    a.bar.remove();
    a.li.classList.add('done');
    a.li.dataset.fileId = f.id;
    const path = decodeFileID(f.id) || UPLOADS + name;
    a.status.className = renamed ? 'meta renamed' : 'sr-only';
    a.status.textContent = renamed
      ? `Uploaded to ${path}: a file named ${file.name} is already in this thread.`
      : `Uploaded to ${path}, attached to your message.`;
    settle();
  };
  a.fail = (message) => {
    a.state = 'failed';
    a.bar.remove();
    a.li.classList.add('failed');
    a.status.textContent = message;
    a.status.setAttribute('role', 'alert');
    remove.setAttribute('aria-label', `Dismiss ${name}`);
    settle();
  };
  return a;
}

/**
 * runTurn sends one message and renders the streamed answer. It returns
 * false when the server refused the turn before running it, so the
 * composer can give the text back.
 */
async function runTurn(view, content, runCode, signal, mode = '', asked = typeof content === 'string' ? content : textOf(content)) {
  if (mode) supersede(view, mode);
  let item = null;
  if (mode !== 'last_answer') {
    const blocks = typeof content === 'string' ? [{ type: 'text', text: content }] : content;
    item = messageItem(view.log, 'user');
    item.blocks = blocks;
    const mine = new TurnView(item);
    for (const b of blocks) { mine.start(b); mine.stop(); }
    mine.done();
  }
  const turn = new TurnView(messageItem(view.log, 'assistant'), { live: true });
  turn.busy();
  const body = { stream: true };
  if (mode !== 'last_answer') body.content = content;
  if (mode) body.replace = mode;
  if (runCode) body.pgpt = { tools: ['code_execution'] };
  try {
    const opened = (resp) => { view.turnID = resp.headers.get('Threadbox-Turn-Id'); };
    for await (const { data } of stream(`${APP}/thread/${encodeURIComponent(view.th.id)}/messages`, body, signal, opened)) {
      turn.event(data);
    }
    if (!turn.ended()) turn.error('The answer stopped before it was complete.');
  } catch (err) {
    if (err instanceof ApiError && err.status >= 400) {
      // Refused before it ran: nothing was stored or replaced, so the
      // conversation shows nothing of it (the composer gives the text
      // back, and a second send must not show the message twice); the
      // refusal shows once, in the page's notice.
      turn.li.remove();
      if (item) item.remove();
      if (!view.log.querySelector('.msg')) view.log.append(emptyLog());
      notify(explain(err));
      if (mode) await loadHistory(view);
      return false;
    }
    if (err.name === 'AbortError') turn.stopped();
    else turn.error(explain(err));
  }
  turn.done();
  if (turn.truncated) {
    await Promise.all([loadHistory(view), loadFiles(view), loadArtifacts(view)]);
    return true;
  }
  const codeOff = view.runCode && view.runCode.disabled;
  if ((runCode || codeOff) && /```/.test(asked) && turn.codeRuns === 0 && !turn.failed) {
    turn.note(noCodeNote(await showPolicy(view)));
  }
  if (turn.codeRuns > 0 || turn.resources > 0) await Promise.all([loadFiles(view), loadArtifacts(view)]);
  loadTerminals(view); // a turn may have started or ended a terminal session
  await markLastAnswer(view);
  // A thread without a title of its own takes one from its first message.
  if (view.th.title === 'New thread') {
    try {
      view.th = await api('GET', '/thread/' + encodeURIComponent(view.th.id));
      view.title.textContent = view.th.title;
      document.title = `${view.th.title} — threadbox`;
      if (view.ctx.refresh) view.ctx.refresh();
    } catch { /* the old title stays */ }
  }
  return true;
}

/**
 * followTurn replays a running turn's answer from its log and follows it
 * live until it ends (a reload, or coming back to the thread); at is when
 * the turn started.
 */
async function followTurn(view, turnID, signal, at) {
  const turn = new TurnView(messageItem(view.log, 'assistant', at), { live: true, replay: true });
  turn.busy();
  try {
    const url = `${APP}/thread/${encodeURIComponent(view.th.id)}/turns/${encodeURIComponent(turnID)}/events`;
    for await (const { data } of stream(url, null, signal)) turn.event(data);
    if (!turn.ended()) turn.error('The answer stopped before it was complete.');
  } catch (err) {
    if (err.name !== 'AbortError') turn.error(explain(err));
  }
  turn.done();
  if (turn.truncated) await Promise.all([loadHistory(view), loadFiles(view), loadArtifacts(view)]);
  else if (turn.codeRuns > 0 || turn.resources > 0) await Promise.all([loadFiles(view), loadArtifacts(view)]);
  loadTerminals(view);
  await markLastAnswer(view);
}

/**
 * noCodeNote explains a turn whose code blocks did not run, from the org
 * policy (f; null when it could not be read).
 */
function noCodeNote(f) {
  if (!f) return "No code ran in this turn. If you expected it to, your organization's admin may have switched off code execution (codeExecution).";
  if (f.codeExecution && f.codeExecution.enabled === false) return "Code was not run: your organization's admin has switched off code execution (codeExecution).";
  return 'No code ran in this turn.';
}

/**
 * TurnView renders one message's content blocks, from history (start and
 * stop per block) or live from stream events (event per event). Text is
 * rendered as Markdown as it streams. opts.live: the turn runs now (its
 * commands' clocks tick); opts.replay: its start is replayed from the
 * turn's log, so only the commands' own output times say when they began.
 */
class TurnView {
  constructor(li, opts = {}) {
    this.li = li;
    this.opts = opts;
    this.body = h('div', { class: 'blocks' });
    li.append(this.body);
    this.blocks = new Map(); // index -> {block, el, text, json}
    this.cards = new Map(); // tool_use_id -> card
    this.current = null;
    this.codeRuns = 0;
    this.resources = 0;
    this.finished = false;
    this.failed = false;
    this.halted = false;
  }

  /** ended reports whether the turn came to an end the page has shown. */
  ended() { return this.finished || this.failed || this.halted; }

  busy() {
    this.li.setAttribute('aria-busy', 'true');
    this.spinner = h('p', { class: 'working', role: 'status' }, 'Working…');
    this.li.append(this.spinner);
  }

  done() {
    this.li.removeAttribute('aria-busy');
    if (this.spinner) { this.spinner.remove(); this.spinner = null; }
    // Copy takes the message's text as written (Markdown).
    const text = () => [...this.blocks.values()].filter((st) => st.block.type === 'text').map((st) => st.text).join('\n\n');
    if (text().trim() && !this.li.querySelector(':scope > .msg-tools')) {
      this.li.append(h('div', { class: 'msg-tools' }, copyButton(text, 'message')));
    }
  }

  event(ev) {
    switch (ev.type) {
      case 'content_block_start': this.start(ev.content_block, ev.index); break;
      case 'content_block_delta': this.delta(ev.index, ev.delta); break;
      case 'content_block_stop': this.stop(ev.index); break;
      case 'message_delta':
        if (ev.delta && ev.delta.stop_reason === 'pause_turn') this.note('The turn paused (it ran long); send another message to continue.');
        if (ev.delta && ev.delta.stop_reason === 'max_tokens') this.note('The answer reached its length limit.');
        break;
      case 'message_stop': this.finished = true; break;
      case 'stopped': this.stopped(); break;
      case 'threadbox_log_truncated':
        // The turn's log reached its cap: the rest shows from the stored
        // message once the turn ends.
        this.truncated = true;
        this.note('This answer is long: its live view stops here, and the whole answer shows when the turn ends.');
        break;
      case 'threadbox_tool_output': {
        const card = this.cards.get(ev.tool_use_id);
        if (card) card.live(ev);
        break;
      }
      case 'error': this.endCards('interrupted'); this.error(explain(new ApiError(0, ev.error && ev.error.type, (ev.error && ev.error.message) || 'The turn failed.'))); break;
      default: break;
    }
  }

  start(block, index = this.blocks.size) {
    const st = { block, el: null, text: '', json: '' };
    this.blocks.set(index, st);
    this.current = index;
    switch (block.type) {
      case 'text':
        st.text = block.text || '';
        st.el = h('div', { class: 'text md' });
        this.render(st);
        this.body.append(st.el);
        break;
      case 'server_tool_use':
      case 'tool_use': {
        const card = codeCard(block, this.opts);
        this.cards.set(block.id, card);
        st.el = card.el;
        if (block.input && Object.keys(block.input).length) card.setInput(block.input);
        this.body.append(card.el);
        break;
      }
      case 'zylon-timing': {
        // How long a code execution ran, as the server timed it: a stored
        // or replayed card shows it, a live card keeps its own clock.
        const card = this.cards.get(block.tool_use_id);
        if (card && typeof block.duration_ms === 'number') card.setDuration(block.duration_ms);
        break;
      }
      case 'zylon-resource':
        this.resources++;
        st.el = resourceCard(block.resource || {});
        this.body.append(st.el);
        break;
      case 'image':
        st.el = h('p', { class: 'meta' }, '[image]');
        this.body.append(st.el);
        break;
      case 'container_upload':
        st.el = h('p', { class: 'meta attached-file' }, `Attached file: ${decodeFileID(block.file_id)}`);
        this.body.append(st.el);
        break;
      default:
        if (/_tool_result(_error)?$/.test(block.type)) {
          let card = this.cards.get(block.tool_use_id);
          if (!card) {
            card = codeCard({ id: block.tool_use_id, name: block.type.replace(/_tool_result(_error)?$/, '') }, this.opts);
            this.body.append(card.el);
          }
          card.setResult(block);
          this.codeRuns++;
          st.el = card.el;
        }
    }
  }

  /** render draws a text block's Markdown. */
  render(st) {
    st.pending = false;
    replace(st.el, renderMarkdown(st.text));
  }

  delta(index, d) {
    const st = this.blocks.get(index);
    if (!st || !d) return;
    if (d.type === 'text_delta') {
      st.text += d.text;
      // Rendered at most once a frame while it streams.
      if (!st.pending) { st.pending = true; requestAnimationFrame(() => { if (st.pending) this.render(st); }); }
    } else if (d.type === 'input_json_delta') {
      st.json += d.partial_json;
      const card = this.cards.get(st.block.id);
      if (card) card.setPartial(st.json);
    }
  }

  stop(index = this.current) {
    const st = this.blocks.get(index);
    if (!st) return;
    if (st.block.type === 'text') this.render(st);
    if (st.json) {
      try { this.cards.get(st.block.id).setInput(JSON.parse(st.json)); } catch { /* keep the partial text */ }
    }
    // A command starts running once its input is complete.
    const card = this.cards.get(st.block.id);
    if (card && this.opts.live && !this.opts.replay) card.begin();
  }

  error(message) {
    this.failed = true;
    this.li.append(h('p', { class: 'turn-error', role: 'alert' }, message));
  }

  /** stopped shows that someone stopped the turn: an ending, not a failure. */
  stopped() {
    if (this.halted) return;
    this.halted = true;
    this.endCards('stopped');
    this.li.append(h('p', { class: 'turn-stopped', role: 'status' }, 'Stopped.'));
  }

  /** endCards marks the commands still shown as running as ended. */
  endCards(label) {
    for (const card of this.cards.values()) card.end(label);
  }

  note(message) {
    this.li.append(h('p', { class: 'turn-note', role: 'status' }, message));
  }
}

// pythonHeredoc is how a python block runs through bash_code_execution
// (the runner model, infra/llm/runner): shown as the python it runs.
const pythonHeredoc = /^python3 - <<'THREADBOX_PY_EOF'\n([\s\S]*)\nTHREADBOX_PY_EOF\s*$/;

// COMMAND_LIMIT is how long a command may run when its call names no
// timeout: the sandbox tools' default (app/tools DefaultTimeout).
const COMMAND_LIMIT = 60;

/** limitText renders a time limit in seconds: 60 s, 5 min, 1 h 30 min. */
function limitText(s) {
  if (s < 120) return `${+s.toFixed(1)} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${Math.floor(s / 3600)} h${s % 3600 >= 60 ? ` ${Math.round((s % 3600) / 60)} min` : ''}`;
}

/** clock renders a duration in milliseconds: 4 s, 12.5 s, 3 min 07 s. */
function clock(ms, exact = false) {
  const s = ms / 1000;
  if (s < 60) return exact && s < 10 ? `${s.toFixed(1)} s` : `${Math.floor(s)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${String(Math.floor(s % 60)).padStart(2, '0')} s`;
}

/**
 * codeCard is a code execution: its command (highlighted, with Copy), then
 * its outputs. While it runs (opts.live) its clock ticks every second,
 * output or not; once it ended the status says how long it ran. The
 * clock starts when the command's input is complete (begin), or, for a
 * turn replayed on reattach, from the times its output events carry.
 */
function codeCard(block, opts = {}) {
  const kind = block.name === 'text_editor_code_execution' ? 'file editor' : block.name === 'code_execution' ? 'python' : 'bash';
  const badge = h('span', { class: 'badge' }, kind);
  const status = h('span', { class: 'exec-status', role: 'status' }, 'running…');
  // The time limit shows from the start, so a command cut at it is no surprise.
  const limit = h('span', { class: 'exec-limit meta', hidden: true });
  const code = h('code', {}, '');
  const command = h('pre', { class: 'command', tabindex: '0', 'aria-label': 'Command' }, code);
  const outputs = h('div', { class: 'outputs' });
  const el = h('article', { class: 'exec running', 'aria-label': `Code execution (${kind})`, 'data-tool-use-id': block.id || '' },
    h('header', {}, badge, status, limit),
    h('div', { class: 'label' }, 'Command'),
    withCopy(command, () => code.textContent, 'command'),
    outputs);
  let t0 = 0; // when the command started (performance.now()), 0 while unknown
  let timer = 0;
  const tick = () => {
    if (!el.isConnected && timer) { clearInterval(timer); timer = 0; return; }
    if (t0) status.textContent = `running… ${clock(performance.now() - t0)}`;
  };
  const startClock = () => {
    if (!opts.live || timer || !el.classList.contains('running')) return;
    timer = setInterval(tick, 1000);
    tick();
  };
  const took = () => (t0 ? ` · ${clock(performance.now() - t0, true)}` : '');
  const stopClock = () => { if (timer) { clearInterval(timer); timer = 0; } };
  return {
    el,
    begin() { if (!t0) t0 = performance.now(); startClock(); },
    setPartial(json) { code.textContent = json; },
    // setDuration adds the time the server measured to a card that ended
    // without the page's own clock (a stored turn's, after a reload).
    setDuration(ms) {
      if (t0 || el.classList.contains('running') || el.classList.contains('failed')) return;
      if (!/ · [\d.]+ s$| · \d+ min \d+ s$/.test(status.textContent)) status.textContent += ` · ${clock(ms, true)}`;
    },
    // live shows output while the command runs; the result replaces it.
    // The live box follows its end while the reader is there.
    live(o) {
      if (opts.live && typeof o.elapsed_ms === 'number') {
        const since = performance.now() - o.elapsed_ms;
        if (!t0 || since < t0) t0 = since;
        startClock();
      }
      let pre = outputs.querySelector(`pre.live.${o.stream}`);
      if (!pre) {
        pre = h('pre', { class: `live ${o.stream}`, tabindex: '0', 'aria-label': `${o.stream} so far` }, h('code', {}, ''));
        outputs.append(pre);
      }
      const atEnd = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
      pre.firstChild.textContent += o.text;
      if (atEnd) pre.scrollTop = pre.scrollHeight;
      tick();
    },
    // end marks a command that never got its result (stopped, or its turn
    // failed), keeping the output shown so far.
    end(label) {
      if (!el.classList.contains('running')) return;
      el.classList.remove('running');
      el.classList.add('stopped');
      status.textContent = label + took();
      stopClock();
    },
    setInput(input) {
      let cmd = input.command || input.code || '';
      let lang = block.name === 'code_execution' ? 'python' : 'bash';
      if (block.name === 'text_editor_code_execution') { cmd = `${input.command} ${input.path || ''}`.trim(); lang = ''; }
      const py = pythonHeredoc.exec(cmd);
      if (py) {
        cmd = py[1];
        lang = 'python';
        badge.textContent = 'python';
        el.setAttribute('aria-label', 'Code execution (python)');
      }
      if (!cmd) { cmd = JSON.stringify(input, null, 2); lang = 'json'; }
      highlightCode(code, cmd, lang);
      if (kind === 'bash' && input.command) {
        const secs = typeof input.timeout === 'number' ? input.timeout : COMMAND_LIMIT;
        limit.hidden = false;
        limit.textContent = secs > 0 ? `time limit ${limitText(secs)}` : 'no time limit';
      }
    },
    setResult(res) {
      el.classList.remove('running');
      const time = took();
      stopClock();
      const c = res.content || {};
      if (res.type.endsWith('_error') || c.type && c.type.endsWith('_error') || c.error_code || res.error_code) {
        const errCode = c.error_code || res.error_code || 'error';
        const why = (c.detail && c.detail.explanation) || (res.detail && res.detail.explanation) || '';
        el.classList.add('failed');
        status.textContent = 'could not run' + time;
        replace(outputs, h('p', { class: 'turn-error' }, `Could not run (${errCode})${why ? ': ' + sentence(why) : '.'}`));
        return;
      }
      if (c.type === 'bash_code_execution_result') {
        const rc = c.return_code;
        // A command its turn's Stop cut short keeps its output so far.
        const stopped = rc === 124 && /Command stopped\.$/.test(c.stderr || '');
        const cut = /Command timed out after ([\d.]+)s\.\s*$/.exec(c.stderr || '');
        el.classList.add(stopped ? 'stopped' : rc === 0 ? 'ok' : 'nonzero');
        status.textContent = stopped ? 'stopped' + time : cut ? `cut at its time limit (${limitText(+cut[1])})` : `exit code ${rc}${time}`;
        replace(outputs,
          c.stdout ? output('stdout', c.stdout) : null,
          c.stderr ? output('stderr', c.stderr) : null,
          !c.stdout && !c.stderr ? h('p', { class: 'meta' }, 'No output.') : null,
          h('p', { class: 'exit-code' }, `Exit code: ${rc}`));
        return;
      }
      status.textContent = 'done' + time;
      el.classList.add('ok');
      if (typeof c.content === 'string') replace(outputs, output('file', c.content));
      else if (Array.isArray(c.lines)) replace(outputs, output('changes', c.lines.join('\n')));
      else replace(outputs, h('p', { class: 'meta' }, c.is_file_update ? 'File updated.' : c.type === 'text_editor_code_execution_create_result' ? 'File created.' : 'Done.'));
    },
  };
}

/** output shows one stream of a run, collapsed when long. */
function output(name, text) {
  const lines = text.replace(/\n$/, '').split('\n').length;
  const long = lines > LONG_LINES || text.length > LONG_CHARS;
  const summary = h('summary', {}, `${name}${long ? ` — ${lines} lines, collapsed (show)` : ''}`);
  return h('details', { class: 'output ' + name, open: !long },
    summary,
    withCopy(h('pre', { tabindex: '0', 'aria-label': name }, h('code', {}, text)), text, name));
}
