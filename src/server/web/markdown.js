// A small Markdown subset for model output, written to be safe: the text is HTML-escaped first,
// and only then are the few constructs below turned into tags this file writes itself, so
// nothing the model says ever becomes markup of its own. Links stay text (the URL is shown,
// never followed). Covered: fenced code blocks (also an unterminated one while it streams),
// headings, bullet and numbered lists, block quotes, rules, paragraphs; inline code, bold,
// italics, strike-through.
"use strict";

const Markdown = (() => {
  function escapeHtml(s) {
    return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }

  // Inline constructs on already-escaped text. Code spans first, so nothing inside them changes.
  function inline(escaped) {
    const parts = escaped.split(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/);
    let out = "";
    for (let i = 0; i < parts.length; i++) {
      if (i % 3 === 0) out += emphasis(parts[i]);
      else if (i % 3 === 2) out += "<code>" + parts[i] + "</code>";
    }
    return out;
  }

  function emphasis(s) {
    return s
      .replace(/\[([^\]\n]+)\]\(([^)\s]+)\)/g, '$1 <span class="md-url">($2)</span>')
      .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, "<strong>$1</strong>")
      .replace(/__(?=\S)([\s\S]*?\S)__/g, "<strong>$1</strong>")
      .replace(/(^|[^*\w])\*(?=[^\s*])([^*\n]*?[^\s*])\*(?![*\w])/g, "$1<em>$2</em>")
      .replace(/(^|[^_\w])_(?=[^\s_])([^_\n]*?[^\s_])_(?![_\w])/g, "$1<em>$2</em>")
      .replace(/~~(?=\S)([\s\S]*?\S)~~/g, "<del>$1</del>");
  }

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
  const BULLET = /^(\s*)[-*+]\s+(.*)$/;
  const NUMBERED = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;
  const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
  const QUOTE = /^ {0,3}>\s?(.*)$/;

  // Markdown text -> HTML (a string built only from escaped text and the tags above).
  function render(src) {
    const lines = String(src).replace(/\r\n?/g, "\n").split("\n");
    let html = "";
    let para = [];
    const flush = () => {
      if (para.length) html += "<p>" + para.map((l) => inline(escapeHtml(l))).join("<br>") + "</p>";
      para = [];
    };
    for (let i = 0; i < lines.length; ) {
      const line = lines[i];
      let m;
      if ((m = FENCE.exec(line))) {
        flush();
        const fence = m[1];
        const lang = m[2] || "";
        const body = [];
        i++;
        while (i < lines.length && !(lines[i].trim().startsWith(fence[0].repeat(fence.length)) &&
                                     lines[i].trim().replace(new RegExp("\\" + fence[0], "g"), "") === "")) {
          body.push(lines[i]);
          i++;
        }
        i++;  // the closing fence (or past the end while it streams)
        html += '<div class="md-code"><div class="md-code-bar"><span>' + escapeHtml(lang || "code") +
                '</span><button type="button" class="md-copy" title="Copy code">Copy</button></div>' +
                "<pre><code>" + escapeHtml(body.join("\n")) + "</code></pre></div>";
        continue;
      }
      if (line.trim() === "") { flush(); i++; continue; }
      if ((m = HEADING.exec(line))) {
        flush();
        const level = Math.min(6, m[1].length + 2);  // # -> h3: a reply is not a page
        html += `<h${level}>` + inline(escapeHtml(m[2])) + `</h${level}>`;
        i++;
        continue;
      }
      if (RULE.test(line)) { flush(); html += "<hr>"; i++; continue; }
      if (QUOTE.test(line)) {
        flush();
        const body = [];
        while (i < lines.length && (m = QUOTE.exec(lines[i]))) { body.push(m[1]); i++; }
        html += "<blockquote>" + render(body.join("\n")) + "</blockquote>";
        continue;
      }
      if (BULLET.test(line) || NUMBERED.test(line)) {
        flush();
        const r = list(lines, i);
        html += r.html;
        i = r.next;
        continue;
      }
      para.push(line);
      i++;
    }
    flush();
    return html;
  }

  // A list from lines[i]: items at its indentation, deeper-indented lines as a nested block.
  function list(lines, i) {
    const first = BULLET.exec(lines[i]) || NUMBERED.exec(lines[i]);
    const indent = first[1].length;
    const ordered = !BULLET.test(lines[i]);
    const tag = ordered ? "ol" : "ul";
    const start = ordered ? parseInt(first[2], 10) : 1;
    let html = ordered && start !== 1 ? `<ol start="${start}">` : `<${tag}>`;
    while (i < lines.length) {
      const m = ordered ? NUMBERED.exec(lines[i]) : BULLET.exec(lines[i]);
      if (!m || m[1].length !== indent) break;
      const body = [ordered ? m[3] : m[2]];
      i++;
      // Continuation lines: indented deeper than the marker (a nested list or a wrapped line).
      while (i < lines.length && lines[i].trim() !== "" && lines[i].search(/\S/) > indent) {
        body.push(lines[i].slice(indent + 2));
        i++;
      }
      const inner = body.length > 1 ? render(body.join("\n")) : inline(escapeHtml(body[0]));
      html += "<li>" + inner.replace(/^<p>([\s\S]*?)<\/p>/, "$1") + "</li>";
      if (i < lines.length && lines[i].trim() === "" && i + 1 < lines.length &&
          (BULLET.test(lines[i + 1]) || NUMBERED.test(lines[i + 1])) &&
          lines[i + 1].search(/\S/) === indent) i++;  // a loose list: one blank line between items
    }
    return { html: html + `</${tag}>`, next: i };
  }

  return { render, escapeHtml };
})();
