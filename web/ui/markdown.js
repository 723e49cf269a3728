// markdown.js renders message text as Markdown (CommonMark with GitHub's
// tables, task lists and strikethrough) into sanitized elements: marked
// parses, DOMPurify cleans what it made (scripts, event handlers,
// javascript: links and the like never reach the page), highlight.js
// colours fenced code, and every code block gets a copy button. The
// modules are vendored (scripts/ui-vendor.sh); the page's CSP is unchanged.
import { marked } from './vendor/marked.js';
import DOMPurify from './vendor/purify.js';
import hljs from './vendor/highlight.js';
import { h } from './dom.js';

marked.setOptions({ gfm: true, breaks: false });
// Raw HTML in a message is shown as the text it is, as chat apps do: it
// never reaches the HTML parser (even an inert one reports what it refuses),
// and Markdown covers what a message needs. A task list's box is marked
// with a span that renderMarkdown turns into a read-only checkbox after
// sanitizing (form controls never pass the sanitizer).
marked.use({ renderer: {
  html({ text }) { return escapeHTML(text); },
  checkbox({ checked }) { return `<span class="task-box${checked ? ' done' : ''}"></span> `; },
} });

function escapeHTML(s) {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}

/**
 * renderMarkdown returns a fragment of sanitized elements for text.
 */
export function renderMarkdown(text) {
  const html = marked.parse(text || '', { async: false });
  const frag = DOMPurify.sanitize(html, {
    RETURN_DOM_FRAGMENT: true,
    FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'img'],
    FORBID_ATTR: ['style'],
    ALLOW_DATA_ATTR: false,
  });
  for (const a of frag.querySelectorAll('a[href]')) {
    // Links leave the app in a new tab that cannot reach back into it.
    a.setAttribute('target', '_blank');
    a.setAttribute('rel', 'noopener noreferrer');
  }
  for (const img of frag.querySelectorAll('img')) {
    // A model's or user's image link could fetch from anywhere (and the
    // CSP would refuse it anyway): shown as its text instead.
    img.replaceWith(document.createTextNode(img.getAttribute('alt') || '[image]'));
  }
  for (const box of frag.querySelectorAll('span.task-box')) {
    const done = box.classList.contains('done');
    box.replaceWith(h('input', { type: 'checkbox', class: 'task', disabled: true, checked: done, 'aria-label': done ? 'Done' : 'Not done' }));
  }
  for (const table of frag.querySelectorAll('table')) {
    // A table wider than the message scrolls sideways, from the keyboard
    // too, as the CSV viewer's does.
    const spot = document.createComment('');
    table.replaceWith(spot);
    spot.replaceWith(h('div', { class: 'table-wrap', tabindex: '0', role: 'region', 'aria-label': 'Table' }, table));
  }
  for (const li of frag.querySelectorAll('li')) {
    if (li.querySelector(':scope > input.task, :scope > p > input.task')) li.classList.add('task-item');
  }
  for (const code of frag.querySelectorAll('pre > code')) {
    const lang = [...code.classList].find((c) => c.startsWith('language-'));
    if (lang && hljs.getLanguage(lang.slice('language-'.length))) hljs.highlightElement(code);
    const pre = code.parentElement;
    // A long line scrolls sideways: the keyboard reaches it too.
    pre.setAttribute('tabindex', '0');
    pre.setAttribute('aria-label', lang ? `${lang.slice('language-'.length)} code` : 'Code');
    const spot = document.createComment('');
    pre.replaceWith(spot);
    spot.replaceWith(withCopy(pre, code.textContent, lang ? lang.slice('language-'.length) : 'code'));
  }
  return frag;
}

/**
 * highlightCode puts text in the code element, coloured as lang (python,
 * bash, …) when highlight.js knows it.
 */
export function highlightCode(code, text, lang) {
  code.textContent = text;
  code.className = '';
  delete code.dataset.highlighted;
  if (lang && hljs.getLanguage(lang)) {
    code.classList.add('language-' + lang);
    hljs.highlightElement(code);
  }
}

/**
 * copyButton returns a button (with its status) that copies the text
 * text() returns, or text itself when it is a string.
 */
export function copyButton(text, what, label = 'Copy') {
  const status = h('span', { class: 'copy-status', role: 'status' });
  const btn = h('button', { type: 'button', class: 'copy small', 'aria-label': `Copy ${what}` }, label);
  btn.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(typeof text === 'function' ? text() : text);
      status.textContent = 'Copied';
    } catch {
      status.textContent = 'Copy failed';
    }
    setTimeout(() => { status.textContent = ''; }, 2000);
  });
  return [btn, status];
}

/**
 * withCopy wraps a pre element with a button that copies text (a string,
 * or a function returning it).
 */
export function withCopy(pre, text, what) {
  return h('div', { class: 'code-wrap' }, h('div', { class: 'code-tools' }, copyButton(text, what)), pre);
}
