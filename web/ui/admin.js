// admin.js: the org admin page: feature switches that take effect at
// once, users management, the org's usage (a chart of the last 30 days and
// a table per user), the egress allowlist and ledger, and the audit log.

import { h, append, replace, formatTime, ask } from './dom.js';
import { api, explain, featureLabel } from './api.js';
import { notify } from './notice.js';

const SWITCHES = [
  { id: 'f-code', feature: 'codeExecution', get: (p) => p.codeExecution.enabled, patch: (v) => ({ codeExecution: { enabled: v } }) },
  { id: 'f-uploads', feature: 'uploads', get: (p) => p.uploads.enabled, patch: (v) => ({ uploads: { enabled: v } }) },
  { id: 'f-generated', feature: 'downloads.generated', get: (p) => p.downloads.generated, patch: (v) => ({ downloads: { generated: v } }) },
  { id: 'f-uploaded', feature: 'downloads.uploaded', get: (p) => p.downloads.uploaded, patch: (v) => ({ downloads: { uploaded: v } }) },
  { id: 'f-egress', feature: 'egress', get: (p) => p.egress.enabled, patch: (v) => ({ egress: { enabled: v } }) },
];

/** renderAdmin shows the admin page in main. ctx: {me, onPolicy(p)}. */
export async function renderAdmin(main, ctx) {
  const status = h('p', { class: 'saved', role: 'status', 'aria-live': 'polite' });
  const featureBox = h('div', { class: 'switches' });
  const users = h('tbody');
  const audit = h('tbody');
  const ledger = h('tbody');
  const ledgerFilter = h('select', { id: 'egress-filter', onchange: () => loadLedger(ledger, ledgerFilter.value) },
    h('option', { value: '' }, 'All connections'), h('option', { value: 'false' }, 'Refused only'), h('option', { value: 'true' }, 'Allowed only'));
  const chart = h('div', { id: 'usage-chart', class: 'usage-chart', role: 'img', 'aria-label': 'CPU seconds per day' });
  const usage = h('tbody');
  const usageKey = h('th', { scope: 'col' }, 'User');
  const usageBy = h('select', { id: 'usage-by', onchange: () => loadUsage(chart, usage, usageBy.value, usageKey) },
    h('option', { value: 'user' }, 'Per user'), h('option', { value: 'thread' }, 'Per thread'),
    h('option', { value: 'container' }, 'Per container'));
  const reload = () => loadUsage(chart, usage, usageBy.value, usageKey);
  const page = h('div', { class: 'admin' },
    h('h1', {}, 'Organization admin'),
    h('section', { 'aria-labelledby': 'features-h', class: 'panel' },
      h('h2', { id: 'features-h' }, 'Features'),
      h('p', { class: 'hint' }, 'Changes take effect immediately for everyone in the organization.'),
      featureBox, status),
    h('section', { 'aria-labelledby': 'users-h', class: 'panel' },
      h('h2', { id: 'users-h' }, 'Users'),
      newUserForm(users, ctx),
      h('div', { class: 'table-wrap', role: 'region', 'aria-label': 'Users', tabindex: '0' },
        h('table', { id: 'users' }, h('thead', {}, h('tr', {},
          h('th', { scope: 'col' }, 'Email'), h('th', { scope: 'col' }, 'Role'), h('th', { scope: 'col' }, 'Active'),
          h('th', { scope: 'col' }, 'Created'), h('th', { scope: 'col' }, 'Password'))), users))),
    h('section', { 'aria-labelledby': 'usage-h', class: 'panel' },
      h('div', { class: 'side-head' }, h('h2', { id: 'usage-h' }, 'Usage, last 30 days'),
        h('button', { type: 'button', onclick: reload }, 'Refresh')),
      h('p', { class: 'hint' }, 'Command CPU seconds per day (UTC); commands, their wall and CPU time, sandbox time and model tokens per user, thread or container below.'),
      chart,
      h('label', {}, 'Rows ', usageBy),
      h('div', { class: 'table-wrap', role: 'region', 'aria-label': 'Usage table', tabindex: '0' },
        h('table', { id: 'usage' }, h('thead', {}, h('tr', {},
          usageKey, h('th', { scope: 'col' }, 'Commands'), h('th', { scope: 'col' }, 'Wall s'),
          h('th', { scope: 'col' }, 'CPU s'), h('th', { scope: 'col', title: 'How long sandboxes ran, busy or idle' }, 'Sandbox s'),
          h('th', { scope: 'col', title: "CPU time of the sandboxes' control groups" }, 'Sandbox CPU s'),
          h('th', { scope: 'col' }, 'Input tokens'), h('th', { scope: 'col' }, 'Output tokens'))), usage))),
    h('section', { 'aria-labelledby': 'egress-h', class: 'panel' },
      h('div', { class: 'side-head' }, h('h2', { id: 'egress-h' }, 'Egress ledger'),
        h('button', { type: 'button', onclick: () => loadLedger(ledger, ledgerFilter.value) }, 'Refresh')),
      h('p', { class: 'hint' }, 'Every connection a sandbox asked the egress proxy for, newest first (the last 50).'),
      h('label', {}, 'Show ', ledgerFilter),
      h('div', { class: 'table-wrap', role: 'region', 'aria-label': 'Egress ledger', tabindex: '0' },
        h('table', { id: 'egress-ledger' }, h('thead', {}, h('tr', {},
          h('th', { scope: 'col' }, 'When'), h('th', { scope: 'col' }, 'Host'), h('th', { scope: 'col' }, 'Verdict'),
          h('th', { scope: 'col' }, 'Rule'), h('th', { scope: 'col' }, 'Thread'), h('th', { scope: 'col' }, 'Bytes down'))), ledger))),
    h('section', { 'aria-labelledby': 'audit-h', class: 'panel' },
      h('div', { class: 'side-head' }, h('h2', { id: 'audit-h' }, 'Audit log'),
        h('button', { type: 'button', id: 'audit-refresh', onclick: () => loadAudit(audit) }, 'Refresh')),
      h('div', { class: 'table-wrap', role: 'region', 'aria-label': 'Audit log', tabindex: '0' },
        h('table', { id: 'audit' }, h('thead', {}, h('tr', {},
          h('th', { scope: 'col' }, 'When'), h('th', { scope: 'col' }, 'Action'), h('th', { scope: 'col' }, 'Actor'),
          h('th', { scope: 'col' }, 'Target'), h('th', { scope: 'col' }, 'Change'))), audit))));
  // Members may read the policy but not the users: both are fetched before
  // the page shows, so a member meets the server's refusal, not the page.
  const [policy, list] = await Promise.all([api('GET', '/org/features'), api('GET', '/org/users')]);
  replace(main, page);
  renderSwitches(featureBox, policy, status, ctx, audit);
  replace(users, list.data.map((u) => userRow(u, users, ctx)));
  await Promise.all([loadAudit(audit), reload(), loadLedger(ledger, '')]);
}

async function loadLedger(tbody, allowed) {
  try {
    const res = await api('GET', '/org/egress?limit=50' + (allowed ? `&allowed=${allowed}` : ''));
    replace(tbody, res.data.length ? null : h('tr', {}, h('td', { colspan: '6' }, 'Nothing yet.')));
    for (const r of res.data) {
      append(tbody, [h('tr', {}, h('td', {}, formatTime(r.at)), h('td', {}, h('code', {}, `${r.host}:${r.port}`)),
        h('td', { title: r.reason }, r.allowed ? 'allowed' : 'refused'), h('td', {}, h('code', {}, r.rule)),
        h('td', {}, h('code', {}, r.thread_id || '—')), h('td', {}, String(r.bytes_down)))]);
    }
  } catch (err) {
    replace(tbody, h('tr', {}, h('td', { colspan: '6', class: 'inline-error' }, explain(err))));
  }
}

/** day formats a Date as its UTC calendar date, YYYY-MM-DD. */
function day(d) { return d.toISOString().slice(0, 10); }

/** usageLabel names a usage row of a grouping for the table's first column. */
function usageLabel(by, r) {
  switch (by) {
    case 'thread': return r.thread_id ? `${r.title || '(deleted thread)'} — ${r.email || r.user_id}` : 'Outside threads';
    case 'container': return r.container_id ? `${r.container || '(deleted container)'}${r.thread_id ? ' (thread)' : ''} — ${r.email || r.user_id}` : 'Outside containers';
    default: return r.email || r.user_id;
  }
}

const usageHeads = { user: 'User', thread: 'Thread', container: 'Container' };

/**
 * loadUsage fills the chart (CPU seconds per day) and the table of usage
 * per user, thread or container (by), naming its first column in key.
 */
async function loadUsage(chart, tbody, by, key) {
  const to = new Date();
  const from = new Date(to.getTime() - 29 * 86400000);
  const span = `from=${day(from)}&to=${day(to)}`;
  key.textContent = usageHeads[by];
  try {
    const [byDay, byUser] = await Promise.all([api('GET', `/org/usage?${span}&group_by=day`), api('GET', `/org/usage?${span}&group_by=${by}`)]);
    const cpu = new Map(byDay.data.map((r) => [r.day, r.cpu_seconds]));
    const days = [];
    for (let t = from.getTime(); day(new Date(t)) <= day(to); t += 86400000) days.push(day(new Date(t)));
    const top = Math.max(1, ...days.map((d) => cpu.get(d) || 0));
    replace(chart, days.map((d) => {
      const v = cpu.get(d) || 0;
      // Set through the CSSOM: the page's CSP refuses style attributes.
      const fill = h('span');
      fill.style.height = `${Math.round((v / top) * 100)}%`;
      return h('div', { class: 'bar', 'data-day': d, title: `${d}: ${v.toFixed(1)} CPU s` }, fill);
    }));
    chart.setAttribute('aria-label', `CPU seconds per day, ${days[0]} to ${days[days.length - 1]}; at most ${top.toFixed(1)}`);
    replace(tbody, byUser.data.length ? null : h('tr', {}, h('td', { colspan: '8' }, 'Nothing yet.')));
    for (const r of byUser.data) {
      append(tbody, [h('tr', { 'data-user-id': r.user_id, 'data-thread-id': r.thread_id || '', 'data-container-id': r.container_id || '' },
        h('td', {}, usageLabel(by, r)), h('td', {}, r.commands),
        h('td', {}, r.wall_seconds.toFixed(1)), h('td', {}, r.cpu_seconds.toFixed(1)), h('td', {}, r.sandbox_seconds.toFixed(0)),
        h('td', {}, r.sandbox_cpu_seconds.toFixed(1)), h('td', {}, r.input_tokens), h('td', {}, r.output_tokens))]);
    }
  } catch (err) {
    replace(chart);
    replace(tbody, h('tr', {}, h('td', { colspan: '8', class: 'inline-error' }, explain(err))));
  }
}

function renderSwitches(box, policy, status, ctx, audit) {
  const apply = async (patch, what) => {
    status.textContent = 'Saving…';
    // The switches are drawn again: the one in use keeps the focus.
    const focused = document.activeElement && box.contains(document.activeElement) ? document.activeElement.id : '';
    const refocus = () => { const el = focused && document.getElementById(focused); if (el) el.focus(); };
    try {
      const p = await api('PATCH', '/org/features', patch);
      ctx.onPolicy(p);
      renderSwitches(box, p, status, ctx, audit);
      refocus();
      status.textContent = `Saved: ${what}.`;
      loadAudit(audit);
    } catch (err) {
      status.textContent = '';
      notify(explain(err));
      renderSwitches(box, policy, status, ctx, audit);
      refocus();
    }
  };
  const rows = SWITCHES.map((s) => {
    const on = s.get(policy);
    const input = h('input', {
      type: 'checkbox', id: s.id, role: 'switch', checked: on, 'data-feature': s.feature,
      onchange: (e) => apply(s.patch(e.target.checked), `${featureLabel(s.feature)} ${e.target.checked ? 'on' : 'off'}`),
    });
    return h('div', { class: 'switch-row' }, input,
      h('label', { for: s.id }, featureLabel(s.feature).replace(/^./, (c) => c.toUpperCase()),
        h('span', { class: 'meta' }, ` (${s.feature}) — ${on ? 'on' : 'off'}`)));
  });
  const mb = h('input', { type: 'number', id: 'f-maxbytes', min: '1', step: '1', value: String(Math.round(policy.uploads.maxBytes / (1 << 20))) });
  const size = h('form', { class: 'row size-limit', onsubmit: (e) => {
    e.preventDefault();
    const n = Number(mb.value);
    if (!(n > 0)) { notify('The upload limit must be a positive number of MiB.'); return; }
    apply({ uploads: { maxBytes: Math.round(n * (1 << 20)) } }, `upload limit ${n} MiB`);
  } },
  h('label', { for: 'f-maxbytes' }, 'Largest upload (MiB)'), mb, h('button', { type: 'submit' }, 'Save limit'));
  const allow = h('textarea', { id: 'f-egress-allow', rows: '4', spellcheck: 'false', placeholder: 'pypi.org\n*.githubusercontent.com\ngit.example.com:443' });
  allow.value = policy.egress.allow.join('\n');
  const hosts = h('form', { class: 'egress-allow', onsubmit: (e) => {
    e.preventDefault();
    const list = allow.value.split(/[\s,]+/).filter(Boolean);
    apply({ egress: { allow: list } }, `egress allowlist (${list.length} ${list.length === 1 ? 'pattern' : 'patterns'})`);
  } },
  h('label', { for: 'f-egress-allow' }, 'Hosts sandboxes may reach when egress is on, one a line (a host, *.suffix or an address, with an optional :port)'),
  allow, h('button', { type: 'submit' }, 'Save allowlist'));
  replace(box, rows, size, hosts);
}

function newUserForm(users, ctx) {
  const email = h('input', { type: 'email', id: 'nu-email', required: true, autocomplete: 'off' });
  const role = h('select', { id: 'nu-role' }, h('option', { value: 'member' }, 'member'), h('option', { value: 'admin' }, 'admin'));
  const pw = h('input', { type: 'password', id: 'nu-password', autocomplete: 'new-password', minlength: '8' });
  const form = h('form', { class: 'new-user', 'aria-label': 'Add a user' },
    h('span', { class: 'field' }, h('label', { for: 'nu-email' }, 'Email'), email),
    h('span', { class: 'field' }, h('label', { for: 'nu-role' }, 'Role'), role),
    h('span', { class: 'field' }, h('label', { for: 'nu-password' }, 'Password (optional)'), pw),
    h('button', { type: 'submit', class: 'primary' }, 'Add user'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const body = { email: email.value.trim(), role: role.value };
    if (pw.value) body.password = pw.value;
    try {
      await api('POST', '/org/users', body);
      form.reset();
      notify(body.password ? `Added ${body.email}.` : `Added ${body.email}. They cannot sign in until you set a password for them (Set… in their row).`, 'info');
      loadUsers(users, ctx);
    } catch (err) { notify(explain(err)); }
  });
  return form;
}

async function loadUsers(tbody, ctx) {
  try {
    const res = await api('GET', '/org/users');
    replace(tbody, res.data.map((u) => userRow(u, tbody, ctx)));
  } catch (err) {
    replace(tbody, h('tr', {}, h('td', { colspan: '5', class: 'inline-error' }, explain(err))));
  }
}

function userRow(u, tbody, ctx) {
  const patch = async (body) => {
    try { await api('PATCH', '/org/users/' + encodeURIComponent(u.id), body); } catch (err) { notify(explain(err)); }
    loadUsers(tbody, ctx);
  };
  const rid = 'role-' + u.id;
  const aid = 'active-' + u.id;
  const role = h('select', { id: rid, 'aria-label': `Role of ${u.email}`, onchange: (e) => patch({ role: e.target.value }) },
    ['member', 'admin'].map((r) => h('option', { value: r, selected: r === u.role }, r)));
  const active = h('input', { type: 'checkbox', id: aid, 'aria-label': `${u.email} may sign in`, checked: !u.disabled, onchange: (e) => patch({ disabled: !e.target.checked }) });
  const self = ctx && ctx.me && ctx.me.user_id === u.id;
  const setPw = h('button', { type: 'button', 'aria-label': `Set password of ${u.email}`, onclick: async () => {
    const v = await ask({
      title: `Set password of ${u.email}`, label: 'New password', ok: 'Set password', type: 'password',
      text: self
        ? 'Your other sessions will be signed out; this one and your API tokens stay.'
        : `${u.email} will be signed out everywhere and their API tokens revoked.`,
    });
    if (v) patch({ password: v });
  } }, 'Set…');
  const pwCell = h('td', {}, setPw, u.has_password ? null : h('span', { class: 'meta no-password' }, ' No password: cannot sign in until one is set.'));
  return h('tr', { 'data-user-id': u.id }, h('td', {}, u.email), h('td', {}, role), h('td', {}, active),
    h('td', {}, formatTime(u.created_at)), pwCell);
}

async function loadAudit(tbody) {
  try {
    const res = await api('GET', '/org/audit?limit=50');
    replace(tbody, res.data.length ? null : h('tr', {}, h('td', { colspan: '5' }, 'Nothing yet.')));
    // People are shown by email; an id is shown only when no user has it.
    const who = (email, id) => (email ? email : h('code', {}, id || '—'));
    for (const e of res.data) {
      append(tbody, [h('tr', {}, h('td', {}, formatTime(e.at)), h('td', {}, e.action), h('td', { class: 'actor' }, who(e.actor_email, e.actor_id)),
        h('td', { class: 'target' }, who(e.target_email, e.target)),
        h('td', {}, h('code', { class: 'diff' }, diff(e.before, e.after))))]);
    }
  } catch (err) {
    replace(tbody, h('tr', {}, h('td', { colspan: '5', class: 'inline-error' }, explain(err))));
  }
}

/** diff lists the leaves that changed between two JSON objects. */
function diff(before, after, prefix = '') {
  if (!before || !after || typeof before !== 'object') return JSON.stringify(after);
  const out = [];
  for (const k of Object.keys(after)) {
    const a = after[k];
    const b = before[k];
    if (a && typeof a === 'object') { const d = diff(b || {}, a, prefix + k + '.'); if (d) out.push(d); }
    else if (a !== b) out.push(`${prefix}${k}: ${JSON.stringify(b)} → ${JSON.stringify(a)}`);
  }
  return out.join(', ');
}
