// app.js: threadbox's web frontend: sign-in, the projects and threads
// sidebar, and the router between the chat and admin pages.

import { h, replace, ask } from './dom.js';
import { api, login, logout, restore, session, onSessionExpired, explain } from './api.js';
import { renderThread } from './chat.js';
import { renderAdmin } from './admin.js';
import { notify, dismiss } from './notice.js';

const THREAD_PAGE = 50;

const state = {
  me: null,
  projects: [],
  open: new Set(), // expanded project ids
  threads: new Map(), // project id -> {items, hasMore}
  currentThread: null,
  policy: null, // the org policy, last read
};

const $ = (id) => document.getElementById(id);
const main = $('main');
const sidebar = $('sidebar');
const narrow = window.matchMedia('(max-width: 899px)');

/** focusPageNext asks the next route to put the focus on the page's heading. */
let focusPageNext = false;

/**
 * routes counts the routes begun: a route whose page comes back after a
 * later one began is stale, and must not replace the page the later one
 * showed (nor abort what that page does, a turn it sent).
 */
let routes = 0;

/**
 * navigate shows the page of hash. With focus, the new page's heading
 * takes the focus once it is drawn: for a page reached after the one the
 * focus was on went away (a deleted thread), so that the keyboard and a
 * screen reader carry on from the new page rather than from the start of
 * the document.
 */
function navigate(hash, { focus = false } = {}) {
  focusPageNext = focus;
  if (location.hash === hash) route();
  else location.hash = hash;
}

/** features returns the org policy (fresh), which every member may read. */
async function features() {
  if (!state.me) return null;
  try { state.policy = await api('GET', '/org/features'); } catch { /* keep the last one */ }
  return state.policy;
}

function showSignedIn(on) {
  $('topnav').hidden = !on;
  $('logout').hidden = !on;
  $('menu').hidden = !on;
  sidebar.hidden = !on || (narrow.matches && $('menu').getAttribute('aria-expanded') !== 'true');
  $('nav-admin').hidden = !(on && state.me && state.me.role === 'admin');
  $('who').textContent = on && state.me ? `${state.me.email || state.me.user_id} (${state.me.role})` : '';
  document.body.classList.toggle('signed-in', on);
  if (!on) {
    document.body.classList.remove('thread-open');
    $('skip-message').hidden = true;
  }
}

function setMenu(open) {
  $('menu').setAttribute('aria-expanded', String(open));
  sidebar.hidden = narrow.matches ? !open : false;
}

function renderLogin(message = '', kind = 'error') {
  state.me = null;
  showSignedIn(false);
  // Nothing of the last user's sidebar (their search, the projects they
  // opened) stays for whoever signs in next.
  sidebarList = null;
  searchAgain = () => {};
  replace(sidebar);
  state.projects = [];
  state.open.clear();
  state.threads.clear();
  document.title = 'Sign in — threadbox';
  const err = h('p', { class: 'login-error', role: 'alert', id: 'login-error' }, message);
  if (kind === 'info') err.classList.add('info');
  const email = h('input', { type: 'email', id: 'email', name: 'email', autocomplete: 'username', required: true });
  const pw = h('input', { type: 'password', id: 'password', name: 'password', autocomplete: 'current-password', required: true });
  const btn = h('button', { type: 'submit', class: 'primary', id: 'login' }, 'Sign in');
  const form = h('form', { class: 'login', 'aria-labelledby': 'login-h' },
    h('h1', { id: 'login-h' }, 'Sign in to threadbox'),
    h('label', { for: 'email' }, 'Email'), email,
    h('label', { for: 'password' }, 'Password'), pw,
    err, btn);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    btn.disabled = true;
    err.textContent = '';
    err.classList.remove('info');
    try {
      await login(email.value.trim(), pw.value);
      dismiss();
      if (!location.hash || location.hash === '#/login') location.hash = '#/';
      await start();
    } catch (ex) {
      err.textContent = ex.status === 401 ? 'Wrong email or password.' : explain(ex);
      pw.focus();
    } finally {
      btn.disabled = false;
    }
  });
  replace(main, h('div', { class: 'login-wrap' }, form));
  email.focus();
}

/** manages reports whether the signed-in user may rename and delete p. */
function manages(p) {
  return !!state.me && (state.me.role === 'admin' || p.owner_id === state.me.user_id);
}

/** start loads the signed-in user and shows the page the hash names. */
async function start() {
  // A reload or a new tab has no access token yet: the refresh cookie, when
  // the browser has one, gives it one.
  if (!session.get()) {
    try { await restore(); } catch (err) { renderLogin(explain(err)); return; }
    if (!session.get()) { renderLogin(); return; }
  }
  try {
    state.me = await api('GET', '/me');
  } catch (err) {
    if (session.get()) renderLogin(explain(err));
    return;
  }
  showSignedIn(true);
  await loadProjects();
  await route();
}

async function route() {
  if (!state.me) return;
  const mine = ++routes;
  const current = () => mine === routes;
  const focusPage = focusPageNext;
  focusPageNext = false;
  const hash = location.hash || '#/';
  document.querySelectorAll('#topnav a').forEach((a) => a.removeAttribute('aria-current'));
  const inThread = hash.startsWith('#/thread/');
  // A thread page fills the window, its messages scrolling in their own
  // region (styles.css); the skip link to its message box is offered.
  document.body.classList.toggle('thread-open', inThread);
  $('skip-message').hidden = !inThread;
  try {
    if (inThread) {
      $('nav-chat').setAttribute('aria-current', 'page');
      const id = decodeURIComponent(hash.slice('#/thread/'.length));
      state.currentThread = id;
      // Nothing of the previous thread stays clickable while this one loads.
      replace(main, h('p', { class: 'loading', role: 'status' }, 'Loading the thread…'));
      const th = await renderThread(main, id, { me: state.me, navigate, refresh: loadProjects, features, current });
      if (!th) return; // a later route showed its page
      state.currentProject = th.project_id;
      if (!state.open.has(th.project_id)) { state.open.add(th.project_id); await loadThreads(th.project_id); }
      renderSidebar();
      if (narrow.matches) setMenu(false);
      document.title = `${th.title} — threadbox`;
    } else if (hash === '#/admin') {
      $('nav-admin').setAttribute('aria-current', 'page');
      state.currentThread = null;
      state.currentProject = null;
      renderSidebar();
      document.title = 'Admin — threadbox';
      await renderAdmin(main, { me: state.me, onPolicy: (p) => { state.policy = p; } });
    } else {
      $('nav-chat').setAttribute('aria-current', 'page');
      state.currentThread = null;
      state.currentProject = null;
      renderSidebar();
      document.title = 'threadbox';
      renderHome();
    }
    if (focusPage) {
      const heading = main.querySelector('h1');
      if (heading) { heading.setAttribute('tabindex', '-1'); heading.focus(); }
    }
  } catch (err) {
    // A session that ended meanwhile left the sign-in form in its place,
    // and a later route its own page.
    if (!state.me || !current()) return;
    replace(main, h('div', { class: 'panel' }, h('h1', {}, 'Something went wrong'), h('p', { class: 'inline-error', role: 'alert' }, explain(err))));
  }
}

/** onHome reports whether the home page is shown. */
function onHome() {
  return !!state.me && !location.hash.startsWith('#/thread/') && location.hash !== '#/admin' && !!main.querySelector('.home');
}

/** renderHome draws the welcome page; it is drawn again as the projects
 * change, so what it says stays true. */
function renderHome() {
  const n = state.projects.length;
  const threads = [...state.threads.values()].reduce((sum, t) => sum + t.items.length, 0);
  replace(main, h('div', { class: 'home panel' },
    h('h1', {}, 'Welcome'),
    h('p', { class: 'home-next' }, !n ? 'Create a project in the sidebar to start your first thread.'
      : threads ? 'Pick a thread in the sidebar, or start a new one in a project.'
        : 'Start a thread in your project: press "+ New thread" under its name in the sidebar.'),
    h('p', { class: 'hint' }, 'Messages run their fenced ```python and ```bash blocks in the thread\'s own sandbox. Files you upload land in /mnt/user-data/uploads/; files your code writes to /mnt/user-data/outputs/ become artifacts of the project.')));
}

async function loadProjects() {
  try {
    const res = await api('GET', '/project');
    state.projects = res.data;
    await Promise.all([...state.open].filter((id) => res.data.some((p) => p.id === id)).map(loadThreads));
  } catch (err) {
    notify(explain(err));
  }
  renderSidebar();
  searchAgain(); // a thread renamed or deleted shows so in the results
  if (onHome()) renderHome();
}

async function loadThreads(projectID, more = false) {
  const prev = state.threads.get(projectID);
  let q = `/thread?project_id=${encodeURIComponent(projectID)}&limit=${THREAD_PAGE}`;
  if (more && prev && prev.items.length) q += '&before=' + encodeURIComponent(prev.items[prev.items.length - 1].id);
  const res = await api('GET', q);
  const items = more && prev ? prev.items.concat(res.data) : res.data;
  state.threads.set(projectID, { items, hasMore: res.has_more });
}

let sidebarList = null;
/** searchAgain runs the sidebar's search again while it shows results. */
let searchAgain = () => {};

/** renderSidebar draws the project list; the new-project form stays put,
 * so what the user is typing there survives a refresh. */
function renderSidebar() {
  if (!sidebarList) {
    const name = h('input', { id: 'new-project', name: 'name', required: true, autocomplete: 'off', placeholder: 'Project name' });
    const create = h('form', { class: 'new-project' },
      h('label', { for: 'new-project' }, 'New project'),
      h('div', { class: 'row' }, name, h('button', { type: 'submit' }, 'Create')));
    create.addEventListener('submit', async (e) => {
      e.preventDefault();
      try {
        const p = await api('POST', '/project', { name: name.value.trim() });
        name.value = '';
        state.open.add(p.id);
        await loadProjects();
        const b = sidebar.querySelector(`[data-project-id="${p.id}"] .new-thread`);
        if (b) b.focus();
      } catch (err) { notify(explain(err)); }
    });
    sidebarList = h('div', { class: 'project-list' });
    replace(sidebar, searchBox(), h('h2', { class: 'side-title' }, 'Projects'), create, sidebarList);
  }
  replace(sidebarList, state.projects.length
    ? h('ul', { class: 'projects' }, state.projects.map(projectItem))
    : h('p', { class: 'empty' }, 'No projects yet.'));
}

/**
 * searchBox is the sidebar's thread search: titles and message text of
 * every thread of the user (GET /thread?q=), as they type (or on Enter);
 * the results link to the threads, each with the text around the match.
 * Clearing the field (Escape does) hides them.
 */
function searchBox() {
  const input = h('input', { type: 'search', id: 'thread-search', name: 'q', autocomplete: 'off', maxlength: '200', placeholder: 'Titles and messages' });
  const status = h('p', { class: 'meta search-status', role: 'status', id: 'search-status' });
  const results = h('ul', { class: 'search-results', 'aria-label': 'Threads found', hidden: true });
  const form = h('form', { class: 'thread-search', role: 'search', 'aria-label': 'Search threads' },
    h('label', { for: 'thread-search' }, 'Search threads'),
    h('div', { class: 'row' }, input, h('button', { type: 'submit' }, 'Search')),
    status, results);
  let seq = 0;
  let timer = 0;
  const run = async () => {
    clearTimeout(timer);
    const q = input.value.trim();
    const mine = ++seq;
    if (!q) { results.hidden = true; replace(results); status.textContent = ''; return; }
    try {
      const res = await api('GET', '/thread?limit=20&q=' + encodeURIComponent(q));
      if (mine !== seq) return; // a later search answered first, or will
      replace(results, res.data.map((t) => h('li', {},
        h('a', { href: '#/thread/' + t.id, 'data-thread-id': t.id },
          h('span', { class: 'found-title' }, marked(t.title || 'Untitled', q)),
          t.match && t.match.snippet ? h('span', { class: 'snippet' }, marked(t.match.snippet, q)) : null))));
      results.hidden = res.data.length === 0;
      const n = res.data.length;
      status.textContent = n === 0 ? `No thread matches "${q}".` : `${n}${res.has_more ? '+' : ''} thread${n === 1 ? '' : 's'} found.`;
    } catch (err) {
      if (mine === seq) status.textContent = explain(err);
    }
  };
  searchAgain = () => { if (input.value.trim()) run(); };
  form.addEventListener('submit', (e) => { e.preventDefault(); run(); });
  input.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(run, 300); });
  return form;
}

/** marked returns text as nodes with every match of q in a <mark>. */
function marked(text, q) {
  const lower = text.toLowerCase();
  const needle = q.toLowerCase();
  if (lower.length !== text.length || !needle) return [text];
  const out = [];
  let at = 0;
  for (let i = lower.indexOf(needle); i >= 0; i = lower.indexOf(needle, i + needle.length)) {
    if (i > at) out.push(text.slice(at, i));
    out.push(h('mark', {}, text.slice(i, i + needle.length)));
    at = i + needle.length;
  }
  if (at < text.length) out.push(text.slice(at));
  return out;
}

function projectItem(p) {
  const open = state.open.has(p.id);
  const threads = state.threads.get(p.id) || { items: [], hasMore: false };
  const listID = 'threads-' + p.id;
  const toggle = h('button', {
    type: 'button', class: 'project-name', 'aria-expanded': String(open), 'aria-controls': listID,
    onclick: async () => {
      if (state.open.has(p.id)) state.open.delete(p.id);
      else { state.open.add(p.id); try { await loadThreads(p.id); } catch (err) { notify(explain(err)); } }
      renderSidebar();
      const again = sidebar.querySelector(`[data-project-id="${p.id}"] .project-name`);
      if (again) again.focus();
    },
    // A long name is cut with an ellipsis on one line (styles.css); the
    // title shows it whole.
    title: p.name,
  }, h('span', { class: 'caret', 'aria-hidden': 'true' }, open ? '▾' : '▸'), h('span', { class: 'project-label' }, p.name));
  const rename = h('button', { type: 'button', class: 'small', 'aria-label': `Rename project ${p.name}`, onclick: async () => {
    const v = await ask({ title: 'Rename project', label: 'Project name', value: p.name, ok: 'Rename' });
    if (!v) return;
    try { await api('PATCH', '/project/' + p.id, { name: v }); await loadProjects(); } catch (err) { notify(explain(err)); }
  } }, 'Rename');
  const del = h('button', { type: 'button', class: 'small danger', 'aria-label': `Delete project ${p.name}`, onclick: async () => {
    const yes = await ask({ title: 'Delete project?', text: `"${p.name}", its threads and their files will be deleted.`, ok: 'Delete' });
    if (!yes) return;
    try {
      await api('DELETE', '/project/' + p.id);
      state.open.delete(p.id);
      state.threads.delete(p.id);
      const cur = state.currentThread;
      await loadProjects();
      if (cur && !state.projects.some((x) => (state.threads.get(x.id) || { items: [] }).items.some((t) => t.id === cur))) navigate('#/');
    } catch (err) { notify(explain(err)); }
  } }, 'Delete');
  const newThreadButton = h('button', { type: 'button', class: 'new-thread small', 'aria-label': `New thread in ${p.name}`,
    'aria-keyshortcuts': 'Control+Shift+O', onclick: () => newThread(p) }, '+ New thread');
  return h('li', { class: 'project', 'data-project-id': p.id },
    // Only the project's owner and org admins may rename or delete it (the
    // API enforces it; the buttons are not offered to anyone else).
    h('div', { class: 'project-head' }, toggle, manages(p) ? h('span', { class: 'project-actions' }, rename, del) : null),
    open ? h('div', { class: 'project-body' },
      h('ul', { class: 'threads', id: listID, 'aria-label': `Threads of ${p.name}` },
        threads.items.map((t) => h('li', {}, h('a', {
          href: '#/thread/' + t.id, 'data-thread-id': t.id, 'aria-current': t.id === state.currentThread ? 'page' : null,
        }, t.title || 'Untitled')))),
      threads.hasMore ? h('button', { type: 'button', class: 'small', onclick: async () => {
        try { await loadThreads(p.id, true); renderSidebar(); } catch (err) { notify(explain(err)); }
      } }, 'More threads') : null,
      newThreadButton) : null);
}

/** The key theme.js reads the user's theme choice from. */
const THEME_KEY = 'threadbox-theme';

/** themeMenu wires the top bar's theme menu: system, light or dark. */
function themeMenu() {
  const pick = $('theme');
  pick.value = document.documentElement.getAttribute('data-theme-choice') || 'system';
  pick.addEventListener('change', () => {
    try {
      if (pick.value === 'system') localStorage.removeItem(THEME_KEY);
      else localStorage.setItem(THEME_KEY, pick.value);
    } catch { /* storage off: the choice lasts for this page */ }
    document.documentElement.setAttribute('data-theme-choice', pick.value);
    document.dispatchEvent(new Event('threadbox:theme'));
  });
  // Another tab's choice shows here too.
  window.addEventListener('storage', (e) => {
    if (e.key === THEME_KEY || e.key === null) pick.value = document.documentElement.getAttribute('data-theme-choice') || 'system';
  });
}

/**
 * skipLinks moves the focus to the skip links' targets without touching
 * the location (the hash is the page's route).
 */
function skipLinks() {
  for (const [link, target] of [['skip-main', 'main'], ['skip-message', 'message']]) {
    $(link).addEventListener('click', (e) => {
      e.preventDefault();
      const el = $(target);
      if (el) { el.focus(); el.scrollIntoView({ block: 'nearest' }); }
    });
  }
}

/**
 * newThread asks for a title and opens a new thread in project p.
 */
async function newThread(p) {
  const title = await ask({ title: `New thread in ${p.name}`, label: 'Thread title', value: 'New thread', ok: 'Create' });
  if (!title) return;
  try {
    const t = await api('POST', '/thread', { project_id: p.id, title });
    state.open.add(p.id);
    await loadThreads(p.id);
    navigate('#/thread/' + t.id);
  } catch (err) { notify(explain(err)); }
}

/**
 * shortcuts are the page's keyboard shortcuts, as in ChatGPT:
 * Ctrl+Shift+O (⌘⇧O) starts a new thread in the project of the thread
 * shown (else the first project), Shift+Escape focuses the message box.
 */
function shortcuts() {
  document.addEventListener('keydown', (e) => {
    if (!state.me || document.querySelector('dialog[open]')) return;
    if ((e.ctrlKey || e.metaKey) && e.shiftKey && !e.altKey && e.key.toLowerCase() === 'o') {
      const p = state.projects.find((x) => x.id === state.currentProject) || state.projects[0];
      if (!p) return;
      e.preventDefault();
      newThread(p);
    } else if (e.key === 'Escape' && e.shiftKey && !e.ctrlKey && !e.metaKey) {
      const box = $('message');
      if (box) { e.preventDefault(); box.focus(); }
    }
  });
}

function boot() {
  themeMenu();
  skipLinks();
  shortcuts();
  onSessionExpired((message) => {
    state.me = null;
    // A dialog still open (a terminal view, a question) is modal: it would
    // stand over the sign-in form and keep the user from it.
    for (const dlg of document.querySelectorAll('dialog[open]')) dlg.close();
    renderLogin(message);
  });
  $('logout').addEventListener('click', async () => {
    await logout();
    dismiss();
    location.hash = '#/';
    renderLogin('You have signed out.', 'info');
  });
  $('notice-close').addEventListener('click', dismiss);
  $('menu').addEventListener('click', () => setMenu($('menu').getAttribute('aria-expanded') !== 'true'));
  narrow.addEventListener('change', () => { if (state.me) setMenu(false); });
  window.addEventListener('hashchange', () => { dismiss(); route(); });
  start();
}

boot();
