// artifacts.js: cards for generated files (zylon-resource blocks and a
// project's artifacts) with inline previews, and download buttons.

import { h, append, replace, humanSize } from './dom.js';
import { api, fetchBlob, fetchText, explain } from './api.js';
import { notify } from './notice.js';

const PREVIEW_TEXT_BYTES = 64 * 1024;
const CSV_ROWS = 50;

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
 * previewInto shows a file in el: an image, a CSV file as a table, text as
 * text, a PDF in the browser's viewer, anything else as its type's badge. r: {mime_type, download_url
 * or preview_url}.
 */
export function previewInto(el, r, name) {
  return fillPreview(el, r, name);
}

async function fillPreview(el, r, name) {
  const mime = (r.mime_type || '').split(';')[0].trim().toLowerCase();
  const url = r.preview_url || r.download_url;
  if (!url) return;
  try {
    if (mime === 'application/pdf') {
      // The browser's own viewer shows it (where it has one), from a
      // one-minute ticket URL served inline under the server's sandboxing
      // CSP; the page's CSP allows same-origin frames only.
      const t = await api('POST', '/download-url', { url: url + (url.includes('?') ? '&' : '?') + 'disposition=inline' });
      replace(el, h('iframe', { src: t.url, title: `Preview of ${name}`, class: 'pdf-preview', loading: 'lazy' }));
    } else if (mime.startsWith('image/') && mime !== 'image/svg+xml') {
      const blob = await fetchBlob(url);
      const img = h('img', { alt: `Preview of ${name}`, src: URL.createObjectURL(blob), class: 'image-preview' });
      replace(el, img);
    } else if (mime === 'text/csv' || /\.csv$/i.test(name)) {
      const text = await fetchText(url, PREVIEW_TEXT_BYTES);
      replace(el, csvTable(text.slice(0, PREVIEW_TEXT_BYTES), name));
    } else if (mime.startsWith('text/') || mime === 'application/json' || mime === 'image/svg+xml') {
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
  const rows = [];
  let row = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i++; }
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') { row.push(field); field = ''; }
    else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') i++;
      row.push(field); rows.push(row); row = []; field = '';
    } else field += c;
  }
  if (field !== '' || row.length) { row.push(field); rows.push(row); }
  return rows;
}

/** csvTable renders the first rows of a CSV file as a table. */
export function csvTable(text, name) {
  const rows = parseCSV(text);
  if (rows.length === 0) return h('p', {}, 'Empty file.');
  const [head, ...body] = rows;
  const shown = body.slice(0, CSV_ROWS);
  return h('div', { class: 'table-wrap', tabindex: '0', role: 'region', 'aria-label': `Table preview of ${name}` },
    h('table', { class: 'csv' },
      h('caption', {}, body.length > CSV_ROWS ? `${name}: first ${CSV_ROWS} of ${body.length} rows` : name),
      h('thead', {}, h('tr', {}, head.map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, shown.map((r) => h('tr', {}, r.map((c) => h('td', {}, c)))))));
}
