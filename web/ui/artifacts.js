// artifacts.js: cards for generated files (zylon-resource blocks and a
// project's artifacts) with inline previews, and download buttons.

import { h, append, replace, humanSize } from './dom.js';
import { api, fetchBlob, fetchText, fetchRange, explain } from './api.js';
import { notify } from './notice.js';

const PREVIEW_TEXT_BYTES = 64 * 1024;
const CSV_ROWS = 50;
const CSV_CHUNK = 64 * 1024;

/**
 * downloadButton returns a button that downloads url as name, showing a
 * refusal (or any error) next to it and in the page's notice. The file is
 * not fetched into the page: the server checks the download and answers
 * with a one-minute URL for it (POST /download-url), which a plain link
 * opens, so the browser saves it to disk as it arrives, however large.
 */
export function downloadButton(url, name, label = 'Download') {
  const status = h('span', { class: 'inline-error', role: 'status' });
  const btn = h('button', {
    type: 'button', class: 'download', 'aria-label': `${label} ${name}`,
    onclick: async () => {
      btn.disabled = true;
      status.textContent = '';
      try {
        const t = await api('POST', '/download-url', { url });
        const a = h('a', { href: t.url, download: name, hidden: true });
        document.body.append(a);
        a.click();
        a.remove();
      } catch (err) {
        status.textContent = explain(err);
        notify(explain(err));
      } finally {
        btn.disabled = false;
      }
    },
  }, label);
  return h('span', { class: 'download-wrap' }, btn, status);
}

/** resourceCard renders a zylon-resource (or artifact) with its preview. */
export function resourceCard(r) {
  const name = r.name || (r.path || '').split('/').pop() || 'file';
  const meta = h('p', { class: 'meta' }, [r.mime_type || 'application/octet-stream', humanSize(r.size_bytes)].filter(Boolean).join(' · '));
  if (r.version > 1) append(meta, [` · version ${r.version}`]);
  const preview = h('div', { class: 'preview' });
  const card = h('figure', { class: 'artifact', 'data-artifact-id': r.artifact_id || r.id || '', 'data-name': name },
    preview,
    h('figcaption', {},
      h('strong', { class: 'name' }, name),
      meta,
      r.path ? h('p', { class: 'path' }, h('code', {}, r.path)) : null,
      downloadButton(r.download_url, name)));
  fillPreview(preview, r, name);
  return card;
}

/**
 * previewInto shows a file in el: an image, a CSV file as a paged table, text as
 * text, HTML and SVG live in a sandboxed frame, a PDF in the browser's viewer, anything else as its type's badge. r: {mime_type, download_url
 * or preview_url}.
 */
export function previewInto(el, r, name) {
  return fillPreview(el, r, name);
}

/**
 * withDisposition returns url asking for disposition d in place of the one
 * it may carry: an artifact's preview_url asks for inline already, and the
 * server reads the first disposition it is given.
 */
function withDisposition(url, d) {
  const u = new URL(url, location.origin);
  u.searchParams.set('disposition', d);
  return u.pathname + u.search;
}

/**
 * framed loads url into frame with disposition d once the frame comes
 * near the view. Its ticket is valid for a minute, so it is asked for
 * then: a frame loaded lazily from a ticket asked for when the card was
 * drawn (a card far up a thread read for a while) met an expired ticket.
 */
async function framed(frame, url, d) {
  await new Promise((resolve) => {
    const seen = new IntersectionObserver((entries) => {
      if (!entries.some((e) => e.isIntersecting)) return;
      seen.disconnect();
      resolve();
    }, { rootMargin: '200px 0px' });
    seen.observe(frame);
  });
  const t = await api('POST', '/download-url', { url: withDisposition(url, d) });
  frame.src = t.url;
}

/**
 * liveFrame shows an HTML or SVG file live in el. A sandboxed frame that
 * runs scripts may still navigate itself (a script setting location, a
 * link, a meta refresh): no sandbox flag or CSP directive Chromium
 * honours forbids it, and an opaque origin gets no navigate event to
 * cancel. The page's CSP lets the frame reach only this origin; past
 * that, the frame's first load is the file and any later load is the
 * frame leaving it, so the file is put back in a fresh frame (with a
 * fresh ticket). A file that leaves again gets a note and a button that
 * shows it once more, not a reload loop.
 */
async function liveFrame(el, url, name, restore) {
  const frame = h('iframe', {
    sandbox: 'allow-scripts', referrerpolicy: 'no-referrer',
    title: `Live preview of ${name}`, class: 'live-preview',
  });
  replace(el, frame);
  await framed(frame, url, 'preview');
  // The frame's about:blank load came when it was inserted, before src.
  let loads = 0;
  frame.addEventListener('load', () => {
    if (++loads === 1 || !frame.isConnected) return;
    if (restore) {
      liveFrame(el, url, name, false).catch((err) => replace(el, h('p', { class: 'inline-error', role: 'status' }, `No preview: ${explain(err)}`)));
      return;
    }
    replace(el, h('p', { class: 'preview-left', role: 'status' },
      `The preview of ${name} tried to open another page, which a preview may not do. `,
      h('button', { type: 'button', class: 'small', onclick: () => liveFrame(el, url, name, true).catch((err) => notify(explain(err))) }, 'Show the preview again')));
  });
}

async function fillPreview(el, r, name) {
  const mime = (r.mime_type || '').split(';')[0].trim().toLowerCase();
  const url = r.preview_url || r.download_url;
  if (!url) return;
  try {
    if (mime === 'text/html' || mime === 'image/svg+xml') {
      // Shown live, as chat apps show such artifacts: in a frame sandboxed
      // to scripts in an opaque origin (no same-origin access, no top
      // navigation, forms or popups), from a one-minute ticket URL the
      // server sends under a CSP that loads nothing from the network.
      await liveFrame(el, url, name, true);
    } else if (mime === 'application/pdf') {
      // The browser's own viewer shows it (where it has one), from a
      // one-minute ticket URL served inline under the server's sandboxing
      // CSP; the page's CSP allows same-origin frames only.
      const frame = h('iframe', { title: `Preview of ${name}`, class: 'pdf-preview' });
      replace(el, frame);
      await framed(frame, url, 'inline');
    } else if (mime.startsWith('image/') && mime !== 'image/svg+xml') {
      const blob = await fetchBlob(url);
      const img = h('img', { alt: `Preview of ${name}`, src: URL.createObjectURL(blob), class: 'image-preview' });
      replace(el, img);
    } else if (mime === 'text/csv' || /\.csv$/i.test(name)) {
      replace(el, await csvViewer(url, name));
    } else if (mime.startsWith('text/') || mime === 'application/json') {
      const text = await fetchText(url, PREVIEW_TEXT_BYTES + 1);
      const cut = text.length > PREVIEW_TEXT_BYTES;
      replace(el, h('pre', { class: 'text-preview', tabindex: '0', 'aria-label': `Preview of ${name}` },
        text.slice(0, PREVIEW_TEXT_BYTES) + (cut ? '\n…' : '')));
    } else {
      el.classList.add('file-icon');
      replace(el, h('span', { 'aria-hidden': 'true' }, (name.split('.').pop() || 'file').slice(0, 5).toUpperCase()));
    }
  } catch (err) {
    replace(el, h('p', { class: 'inline-error', role: 'status' }, `No preview: ${explain(err)}`));
  }
}

/** parseCSV splits CSV text into rows (quotes and escaped quotes handled). */
export function parseCSV(text) {
  return parseRows(text, true).rows;
}

/**
 * parseRows splits CSV text into rows. Unless final, text may end inside
 * a row (a chunk of a larger file): that row is left out and returned as
 * rest, to be parsed with the next chunk.
 */
function parseRows(text, final) {
  const rows = [];
  let row = [];
  let field = '';
  let quoted = false;
  let end = 0; // where the last complete row ended
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i++; }
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') { row.push(field); field = ''; }
    else if (c === '\n' || c === '\r') {
      if (c === '\r' && i + 1 === text.length && !final) break; // its \n may come next
      if (c === '\r' && text[i + 1] === '\n') i++;
      row.push(field); rows.push(row); row = []; field = '';
      end = i + 1;
    } else field += c;
  }
  if (!final) return { rows, rest: text.slice(end) };
  if (field !== '' || row.length) { row.push(field); rows.push(row); }
  return { rows, rest: '' };
}

/**
 * csvViewer shows a CSV file as a table a page of 50 rows at a time. The
 * file is read in 64 KB ranges as the pages need them, however large it
 * is; the rows read so far can be sorted by a column (its header's button:
 * ascending, then descending; numbers as numbers) and filtered by text.
 */
export async function csvViewer(url, name) {
  const dec = new TextDecoder();
  let loaded = 0;
  let total = null;
  let done = false;
  let rest = '';
  let head = null;
  const rows = [];
  let page = 0;
  let sortCol = -1;
  let sortDir = 1;
  let filter = '';
  const more = async () => {
    if (done) return;
    const got = await fetchRange(url, loaded, loaded + CSV_CHUNK - 1);
    if (got.total !== null) total = got.total;
    loaded += got.bytes.length;
    done = got.bytes.length === 0 || (total !== null && loaded >= total);
    const parsed = parseRows(rest + dec.decode(got.bytes, { stream: !done }), done);
    rest = parsed.rest;
    if (!head && parsed.rows.length) head = parsed.rows.shift();
    rows.push(...parsed.rows);
  };
  await more();
  if (!head) return h('p', {}, 'Empty file.');

  const status = h('p', { class: 'meta csv-status', role: 'status' });
  const search = h('input', { type: 'search', class: 'csv-filter', placeholder: 'Filter rows', 'aria-label': `Filter the rows of ${name}` });
  const prev = h('button', { type: 'button', class: 'small csv-prev' }, 'Previous rows');
  const next = h('button', { type: 'button', class: 'small csv-next' }, 'Next rows');
  const headCells = head.map((c, i) => h('th', { scope: 'col' },
    h('button', { type: 'button', class: 'sort', 'aria-label': `Sort by ${c || 'column ' + (i + 1)}`, onclick: () => {
      sortDir = sortCol === i ? -sortDir : 1;
      sortCol = i;
      page = 0;
      draw();
    } }, c)));
  const body = h('tbody');
  const numeric = (v) => v.trim() !== '' && !isNaN(Number(v));
  const shown = () => {
    let r = filter ? rows.filter((row) => row.some((c) => c.toLowerCase().includes(filter))) : rows;
    if (sortCol >= 0) {
      const nums = r.every((row) => !row[sortCol] || numeric(row[sortCol]));
      r = [...r].sort((a, b) => {
        const x = a[sortCol] || '';
        const y = b[sortCol] || '';
        return sortDir * (nums ? (Number(x) || 0) - (Number(y) || 0) : x.localeCompare(y));
      });
    }
    return r;
  };
  const draw = () => {
    const r = shown();
    const last = Math.max(0, Math.ceil(r.length / CSV_ROWS) - 1);
    if (done) page = Math.min(page, last);
    const from = page * CSV_ROWS;
    replace(body, r.slice(from, from + CSV_ROWS).map((row) => h('tr', {}, head.map((_, i) => h('td', {}, row[i] || '')))));
    headCells.forEach((th, i) => { if (i === sortCol) th.setAttribute('aria-sort', sortDir > 0 ? 'ascending' : 'descending'); else th.removeAttribute('aria-sort'); });
    const to = Math.min(from + CSV_ROWS, r.length);
    const of = `${r.length}${done ? '' : '+'}`;
    status.textContent = (r.length ? `Rows ${from + 1}–${to} of ${of}` : 'No rows') + (filter ? ` matching "${filter}"` : '') +
      (!done && (filter || sortCol >= 0) ? ' (among the rows read so far)' : '');
    prev.disabled = page === 0;
    next.disabled = done && to >= r.length;
  };
  prev.addEventListener('click', () => { page = Math.max(0, page - 1); draw(); });
  next.addEventListener('click', async () => {
    next.disabled = true;
    try {
      // Read on until the next page is whole (or the file ends).
      while (!done && shown().length < (page + 2) * CSV_ROWS) await more();
      if (shown().length > (page + 1) * CSV_ROWS) page++;
    } catch (err) {
      notify(explain(err));
    }
    draw();
  });
  search.addEventListener('input', () => { filter = search.value.trim().toLowerCase(); page = 0; draw(); });
  draw();
  return h('div', { class: 'csv-viewer' },
    h('div', { class: 'csv-tools' }, search, prev, next),
    status,
    h('div', { class: 'table-wrap', tabindex: '0', role: 'region', 'aria-label': `Table of ${name}` },
      h('table', { class: 'csv' }, h('caption', {}, name), h('thead', {}, h('tr', {}, headCells)), body)));
}
